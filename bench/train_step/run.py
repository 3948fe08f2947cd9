#!/usr/bin/python3
"""A training step (forward + backward + optimizer update) of hodu against PyTorch 1.13,
in one run, interleaved.

For each model: the module is exported to ONNX with its loss (torch.onnx.export), the
batches written to an .npz, then `train_step_bench` (hodu: passes::build_training_step run
as one planned graph on the cpu engine, params and optimizer state updated in place) and
PyTorch's eager step (zero_grad, forward, backward, optimizer.step) run alternately,
--rounds times each, from the same initial weights on the same batches. Prints the median
step time of each (wall, and process CPU time: at 1 thread on a machine others load, what
the step cost the process), their ratios, and the largest relative difference between the
losses of the two over the steps of the first round (both start from the same weights).

usage: /usr/bin/python3 bench/train_step/run.py [--bench build/bin/train_step_bench]
           [--models cnn mlp] [--optimizer sgd|adam|adamw] [--threads 2] [--steps 30] [--rounds 3]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# the digits CNN of issue 21, shared with the hodu.torch tests and tests/distributed/make_digits.py
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
from torch_models import CNN as DigitsCNN  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))))


class Block(nn.Module):
    """A pre-norm transformer block written out (as a capture of hodu's own modules looks)."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = lambda t: t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class Transformer(nn.Module):
    """A small transformer classifying token sequences (issue 21's synthetic sequence task's size)."""

    def __init__(self, vocab=32, seq=16, d=64, heads=4, ff=128, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList([Block(d, heads, ff) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


def resnet18():
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


# name: (module, input shape after the batch dim, input kind, classes)
MODELS = {"cnn": (DigitsCNN, (1, 8, 8), "float", 10), "mlp": (MLP, (1, 8, 8), "float", 10),
          "transformer": (Transformer, (16,), "tokens", 10), "resnet18": (resnet18, (3, 32, 32), "float", 10)}


class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, labels):
        return F.cross_entropy(self.model(x), labels)


def make_optimizer(name, params, lr, momentum):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr)


def torch_steps(model_cls, state, batches, args, steps):
    torch.manual_seed(0)
    model = model_cls()
    model.load_state_dict(state)
    opt = make_optimizer(args.optimizer, model.parameters(), args.lr, args.momentum)
    losses, times, cpu = [], [], []
    for k in range(steps):
        x, y = batches[k % len(batches)]
        c0, t0 = time.process_time(), time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        losses.append(loss.item())
    return losses, times, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "train_step_bench"))
    ap.add_argument("--models", nargs="+", default=["cnn", "mlp", "transformer"], choices=sorted(MODELS))
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", default="", help="write the models and batches here (and keep them)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"training step, batch {args.batch}, {args.optimizer}, {args.threads} threads, "
          f"{args.rounds} rounds of {args.steps} steps (+{args.warmup} warm-up)")
    for name in args.models:
        cls, shape, kind, classes = MODELS[name]
        torch.manual_seed(0)
        model = cls()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        g = torch.Generator().manual_seed(1)
        nb = 8
        def make_x():
            if kind == "tokens":
                return torch.randint(0, 32, (args.batch, *shape), generator=g)
            return torch.randn(args.batch, *shape, generator=g)
        batches = [(make_x(), torch.randint(0, classes, (args.batch,), generator=g)) for _ in range(nb)]
        with tempfile.TemporaryDirectory() as scratch:
            tmp = args.keep or scratch
            os.makedirs(tmp, exist_ok=True)
            onnx_path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(WithLoss(model), batches[0], onnx_path, input_names=["x", "labels"],
                              output_names=["loss"], opset_version=17, do_constant_folding=False,
                              # In training mode: in eval mode the exporter merges params of equal
                              # values (LayerNorm's ones) into one initializer read through Identity nodes.
                              training=torch.onnx.TrainingMode.TRAINING,
                              dynamic_axes={"x": {0: "batch"}, "labels": {0: "batch"}})
            # The batches in the order both sides read them: warm-up steps first.
            order = [batches[k % nb] for k in range(args.warmup + args.steps)]
            data = {}
            for k, (x, y) in enumerate(order):
                data[f"x.{k}"] = x.numpy()
                data[f"labels.{k}"] = y.numpy()
            data_path = os.path.join(tmp, "batches.npz")
            np.savez(data_path, **data)
            cmd = [args.bench, onnx_path, "--loss", "loss", "--data", data_path, "--optimizer", args.optimizer,
                   "--lr", str(args.lr), "--momentum", str(args.momentum), "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--threads", str(args.threads), "--json"]
            hodu_ms, torch_ms, hodu_cpu, torch_cpu, diff = [], [], [], [], None
            for r in range(args.rounds):
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"{name}: train_step_bench failed: {out.stderr.strip()[-800:]}")
                h = json.loads(out.stdout.strip().splitlines()[-1])
                hodu_ms.append(h["median_ms"])
                hodu_cpu.append(h["cpu_ms"])
                losses, times, cpu = torch_steps(cls, state, order, args, args.warmup + args.steps)
                torch_ms.append(statistics.median(times[args.warmup:]))
                torch_cpu.append(statistics.median(cpu[args.warmup:]))
                if diff is None:
                    diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(h["losses"], losses))
            hm, tm = statistics.median(hodu_ms), statistics.median(torch_ms)
            hc, tc = statistics.median(hodu_cpu), statistics.median(torch_cpu)
            print(f"{name:11s} wall: hodu {hm:8.3f} ms  torch {tm:8.3f} ms  ratio {hm / tm:5.2f} | "
                  f"process CPU: hodu {hc:8.3f} ms  torch {tc:8.3f} ms  ratio {hc / tc:5.2f} | "
                  f"loss max rel diff {diff:.2e} over {args.warmup + args.steps} steps")


if __name__ == "__main__":
    main()
