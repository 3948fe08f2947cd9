#!/usr/bin/env python3
"""Reference numbers for hodu's training-step graphs (passes/autodiff.h), from
PyTorch 1.13 (Debian's python3-torch): a small MLP with an MSE loss trained a
few steps by each optimizer configuration, with a learning rate that changes
every step (a scheduler). Writes one .npz: the initial weights, the batches,
the learning rates, and per configuration the loss of every step and the
params and optimizer state after the last step.

Usage: torch_training_reference.py OUT.npz
Read by src/passes/training_step_test.cc, which runs the same steps as one
hodu graph per step and compares.
"""
import sys

import numpy as np
import torch

STEPS = 6
torch.manual_seed(0)
np.random.seed(0)

# (name, optimizer factory)
CONFIGS = [
    ("sgd", lambda p: torch.optim.SGD(p, lr=1.0)),
    ("sgd_momentum", lambda p: torch.optim.SGD(p, lr=1.0, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov", lambda p: torch.optim.SGD(p, lr=1.0, momentum=0.8, nesterov=True, weight_decay=0.02)),
    ("sgd_maximize", lambda p: torch.optim.SGD(p, lr=1.0, momentum=0.5, maximize=True)),
    ("adam", lambda p: torch.optim.Adam(p, lr=1.0, betas=(0.85, 0.99), eps=1e-6, weight_decay=0.01)),
    ("adam_amsgrad", lambda p: torch.optim.Adam(p, lr=1.0, amsgrad=True)),
    ("adamw", lambda p: torch.optim.AdamW(p, lr=1.0, betas=(0.9, 0.95), weight_decay=0.1)),
]
# Learning rates per step, by family (Adam's steps are larger).
LR_SGD = [0.1 * 0.8 ** k for k in range(STEPS)]
LR_ADAM = [0.01 * 0.8 ** k for k in range(STEPS)]


def main(out):
    w1 = torch.randn(8, 4) * 0.5
    b1 = torch.randn(8) * 0.1
    w2 = torch.randn(3, 8) * 0.5
    b2 = torch.randn(3) * 0.1
    xs = [torch.randn(5, 4) for _ in range(STEPS)]
    ts = [torch.randn(5, 3) for _ in range(STEPS)]
    data = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
    for k in range(STEPS):
        data[f"x{k}"] = xs[k]
        data[f"t{k}"] = ts[k]
    data["lr_sgd"] = torch.tensor(LR_SGD)
    data["lr_adam"] = torch.tensor(LR_ADAM)
    for name, make in CONFIGS:
        params = [t.clone().requires_grad_(True) for t in (w1, b1, w2, b2)]
        opt = make(params)
        lrs = LR_SGD if name.startswith("sgd") else LR_ADAM
        losses = []
        for k in range(STEPS):
            for group in opt.param_groups:
                group["lr"] = lrs[k]
            opt.zero_grad()
            h = torch.relu(xs[k] @ params[0].t() + params[1])
            y = h @ params[2].t() + params[3]
            loss = ((y - ts[k]) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        data[f"{name}.losses"] = torch.tensor(losses)
        for pname, p in zip(("w1", "b1", "w2", "b2"), params):
            data[f"{name}.{pname}"] = p.detach()
            state = opt.state[p]
            for key in ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                if key in state and state[key] is not None:
                    data[f"{name}.{pname}.{key}"] = state[key]
    np.savez(out, **{k: v.numpy().astype(np.float32) for k, v in data.items()})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: torch_training_reference.py OUT.npz")
    main(sys.argv[1])
