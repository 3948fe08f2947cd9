#!/usr/bin/env python3
"""A training step of the example models (examples/train/models.h) on hodu — eager, and
captured as one graph on the cpu engine (hodu::TrainingStep) — beside PyTorch 1.13 on CPU.

Runs are interleaved (hodu eager, hodu captured, PyTorch, then again) with the same thread
count, batch shapes (CNN: 32 digits images 1x8x8; transformer: 64 sequences of 12 tokens),
loss and optimizer (cross-entropy, Adam). Prints each one's median ms per step and the
ratios to PyTorch. Absolute times on a shared machine are noise; the ratios in one run are
the figure.

Usage: bench/train_bench.py [--build build] [--threads 2] [--steps 40] [--rounds 3] [--models cnn,transformer]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default="build", help="hodu build folder (holds bin/train_bench)")
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--models", default="cnn,transformer")
args = parser.parse_args()

binary = os.path.join(args.build, "bin", "train_bench")
if not os.path.exists(binary):
    sys.exit(f"error: {binary} not found (ninja -C {args.build} train_bench)")
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(f"error: PyTorch is needed; {sys.executable} has none (run with Debian's /usr/bin/python3, or apt-get install python3-torch)")
torch.set_num_threads(args.threads)


class DigitsNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.drop = torch.nn.Dropout(0.25)
        self.fc1 = torch.nn.Linear(512, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc2(F.relu(self.fc1(self.drop(h.flatten(1)))))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        self.ln1 = torch.nn.LayerNorm(32)
        self.ff1 = torch.nn.Linear(32, 128)
        self.ff2 = torch.nn.Linear(128, 32)
        self.ln2 = torch.nn.LayerNorm(32)

    def forward(self, x):
        h = self.ln1(x + self.attn(x, x, x, need_weights=True)[0])
        return self.ln2(h + self.ff2(F.gelu(self.ff1(h))))


class Reverser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 32)
        self.position = torch.nn.Parameter(torch.randn(12, 32) * 0.1)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(32, 10)

    def forward(self, t):
        return self.head(self.blocks(self.embed(t) + self.position))


def torch_run(model):
    torch.manual_seed(0)
    net = DigitsNet() if model == "cnn" else Reverser()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    total = args.steps + args.warmup
    if model == "cnn":
        batches = [(torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))) for _ in range(total)]
    else:
        batches = []
        for _ in range(total):
            t = torch.randint(0, 10, (64, 12))
            batches.append((t, t.flip(1)))
    ms = []
    for i, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = net(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()
        if i >= args.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def hodu_run(model, mode):
    cmd = [binary, "--model", model, "--mode", mode, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--threads", str(args.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout)["ms_per_step"]


print(f"training step, {args.threads} threads, {args.steps} steps x {args.rounds} rounds (median ms per step)")
print(f"{'model':<12} {'hodu eager':>11} {'hodu captured':>14} {'PyTorch':>9} {'eager/torch':>12} {'captured/torch':>15}")
for model in args.models.split(","):
    runs = {"eager": [], "captured": [], "torch": []}
    for _ in range(args.rounds):
        runs["eager"] += hodu_run(model, "eager")
        runs["captured"] += hodu_run(model, "captured")
        runs["torch"] += torch_run(model)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{model:<12} {med['eager']:>11.3f} {med['captured']:>14.3f} {med['torch']:>9.3f} "
          f"{med['eager'] / med['torch']:>12.2f} {med['captured'] / med['torch']:>15.2f}")
