#!/usr/bin/python3
"""The digits data and CNN of hodugaki train's tests (tests/distributed/train_test.sh).

Writes into OUT_DIR:
  digits.npz        x: f32 [1797, 1, 8, 8] (sklearn's load_digits scaled to [0, 1]),
                    labels: i64 [1797]
  digits_cnn.onnx   the CNN of python/tests/torch_models.py (and bench/train_step) with its loss: inputs x [batch, 1, 8, 8]
                    and labels [batch], output "loss" (mean cross entropy), exported in
                    training mode with a dynamic batch (PyTorch's initial weights, seed 0)
With --torch-steps S --batch B --lr LR --momentum M it also writes torch_reference.npz:
PyTorch 1.13's losses of S SGD steps over the batches in file order (no shuffling:
step k reads rows [k·B, (k+1)·B) modulo whole batches), and the final weights.
"""
import argparse
import os
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    # the CNN of the hodu.torch tests and bench/torch_bench.py (one definition, one set of weights)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
    from torch_models import CNN as DigitsCNN
except ImportError as e:  # the test skips (77) saying why
    print(f"skipped: {e} (Debian's python3-torch and python3-sklearn make the digits model)")
    sys.exit(77)


class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, labels):
        return F.cross_entropy(self.model(x), labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--torch-steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    np.savez(os.path.join(args.out_dir, "digits.npz"), x=x, labels=labels)

    torch.manual_seed(0)
    model = DigitsCNN()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.onnx.export(WithLoss(model), (torch.from_numpy(x[:4]), torch.from_numpy(labels[:4])),
                      os.path.join(args.out_dir, "digits_cnn.onnx"), input_names=["x", "labels"],
                      output_names=["loss"], opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"x": {0: "batch"}, "labels": {0: "batch"}})
    if args.torch_steps:
        torch.set_num_threads(1)
        model.load_state_dict(state)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        per_epoch = len(x) // args.batch
        losses = []
        for k in range(args.torch_steps):
            b = k % per_epoch
            xb = torch.from_numpy(x[b * args.batch:(b + 1) * args.batch])
            yb = torch.from_numpy(labels[b * args.batch:(b + 1) * args.batch])
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        out = {"losses": np.array(losses, np.float64)}
        out.update({"model." + k: v.detach().numpy() for k, v in model.state_dict().items()})
        np.savez(os.path.join(args.out_dir, "torch_reference.npz"), **out)


if __name__ == "__main__":
    main()
