#!/usr/bin/python3
"""`hodugaki train` at -np 1 and -np 2 on this host, interleaved, with the same global batch.

Models: the digits CNN of tests/distributed/make_digits.py (14k params, sklearn's
digits) and an MLP 784-2048-2048-10 (5.8M params, 23 MB of gradients, random data),
both exported by Debian's torch with their mean cross-entropy loss. For each model every
configuration runs once per round, round after round (so a load change hits them all):

  np1            one process, the global batch, the default threads (physical cores)
  np1-1-thread   the same at one kernel thread
  np2            2 ranks of half the batch, gradient buckets all-reduced while the backward goes on
  np2-no-overlap the same buckets all-reduced after the whole backward
  np2-one-bucket every gradient in one bucket (nothing to overlap)

Prints the median over the rounds of each configuration's ms per step (the tool's own
"done:" line: forward+backward, all-reduce, update), and of how much of the all-reduce time
the main thread did not wait for ("hidden"). On a machine shared with other work, compare
the rows of one run only.

usage: /usr/bin/python3 bench/train_mpi/run.py [--hodugaki build/bin/hodugaki] [--rounds 3]
           [--steps 200] [--models cnn mlp]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def make_mlp(out_dir):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(784, 2048), nn.Linear(2048, 2048), nn.Linear(2048, 10)

        def forward(self, x, labels):
            return F.cross_entropy(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), labels)

    torch.manual_seed(0)
    m = MLP()
    x = torch.rand(4096, 784)
    labels = torch.randint(0, 10, (4096,))
    path = os.path.join(out_dir, "mlp.onnx")
    torch.onnx.export(m, (x[:8], labels[:8]), path, input_names=["x", "labels"], output_names=["loss"],
                      dynamic_axes={"x": {0: "batch"}, "labels": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    data = os.path.join(out_dir, "mlp.npz")
    np.savez(data, x=x.numpy(), labels=labels.numpy())
    return path, data


DONE = re.compile(r"done: \d+ steps in [\d.]+ s, ([\d.]+) ms/step \(forward\+backward ([\d.]+)"
                  r"(?:, all-reduce ([\d.]+) of which ([\d.]+) exposed)?")
BUCKETS = re.compile(r"(\d+) gradient buckets?")


def run(gaki, model, data, cfg, batch, steps, bucket_mb):
    np_, extra = {"np1": (1, []), "np1-1-thread": (1, ["--threads", "1"]), "np2": (2, []), "np2-no-overlap": (2, ["--no-overlap"]),
                  "np2-one-bucket": (2, ["--bucket-mb", "0"])}[cfg]
    cmd = [gaki, "train", model, "--loss", "loss", "--data", data, "--batch", str(batch // np_), "--steps",
           str(steps), "--lr", "0.01", "--momentum", "0.9", "--log-every", str(steps), "-o", os.path.join(tempfile.gettempdir(), "train_mpi_bench.onnx")]
    if "--bucket-mb" not in extra:
        cmd += ["--bucket-mb", str(bucket_mb)]
    cmd += extra
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_)] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    m = DONE.search(out.stdout)
    buckets = int(BUCKETS.search(out.stdout).group(1))
    step, compute = float(m.group(1)), float(m.group(2))
    reduce, exposed = (float(m.group(3)), float(m.group(4))) if m.group(3) else (0.0, 0.0)
    return step, compute, reduce, exposed, buckets


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hodugaki", default=os.path.join(SRC, "build/bin/hodugaki"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--models", nargs="+", default=["cnn", "mlp"])
    a = p.parse_args()
    gaki = os.path.abspath(a.hodugaki)
    tmp = tempfile.mkdtemp()
    models = {}
    if "cnn" in a.models:
        subprocess.run([sys.executable, os.path.join(SRC, "tests/distributed/make_digits.py"), tmp], check=True,
                       capture_output=True)
        models["digits CNN, global batch 64"] = (os.path.join(tmp, "digits_cnn.onnx"), os.path.join(tmp, "digits.npz"),
                                                 64, a.steps, 0.02)
    if "mlp" in a.models:
        model, data = make_mlp(tmp)
        models["MLP 784-2048-2048-10, global batch 128"] = (model, data, 128, max(a.steps // 10, 10), 4)
    cfgs = ["np1", "np1-1-thread", "np2", "np2-no-overlap", "np2-one-bucket"]
    for name, (model, data, batch, steps, bucket_mb) in models.items():
        results = {c: [] for c in cfgs}
        for _ in range(a.rounds):
            for c in cfgs:
                results[c].append(run(gaki, model, data, c, batch, steps, bucket_mb))
        print(f"\n{name}, {steps} steps, {a.rounds} rounds interleaved, buckets of {bucket_mb} MB (medians)")
        print(f"{'config':16} {'buckets':>7} {'ms/step':>9} {'fwd+bwd':>9} {'all-reduce':>10} {'exposed':>8} {'hidden':>7}")
        for c in cfgs:
            r = results[c]
            med = [statistics.median(x[i] for x in r) for i in range(4)]
            hidden = f"{max(0.0, 100 * (1 - med[3] / med[2])):.0f}%" if med[2] > 0 else "-"
            print(f"{c:16} {r[0][4]:7d} {med[0]:9.2f} {med[1]:9.2f} {med[2]:10.2f} {med[3]:8.2f} {hidden:>7}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
