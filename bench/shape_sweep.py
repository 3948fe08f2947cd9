#!/usr/bin/env python3
"""hodu against ONNX Runtime on a sweep of input shapes: one run per step, a dim growing by one
each step (a decoder fed its key/value cache a token at a time, text or audio of every length).
Each engine runs the whole sweep in its own process; the table gives the median and the slowest
step, the total, and the peak resident memory.

  /usr/bin/python3 bench/shape_sweep.py MODEL --input ids=1x1 --input past=4x2x1x4x{n}x64 \\
      --range 20 84 [--threads 1] [--hodu-python build/python]

`{n}` in a shape is the step's value; inputs are random (integers in [0, 100) for integer
inputs), the same files for both engines.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HODU_CHILD = r'''
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import hodu
s = hodu.InferenceSession(sys.argv[2], threads=int(sys.argv[3]))
ms = []
for step in json.load(open(sys.argv[4])):
    feeds = {k: np.load(v) for k, v in step.items()}
    t0 = time.perf_counter()
    s.run(None, feeds)
    ms.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"engine": "hodu", "step_ms": ms, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--input", action="append", required=True, help="NAME=DxDx{n}x...; repeatable")
    ap.add_argument("--range", nargs=2, type=int, required=True, metavar=("FIRST", "END"), help="n from FIRST to END-1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hodu-python", default=os.path.join(ROOT, "build", "python"))
    a = ap.parse_args()
    m = onnx.load(a.model, load_external_data=False)
    dtypes = {i.name: onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[i.type.tensor_type.elem_type] for i in m.graph.input}
    specs = []
    for s in a.input:
        name, _, shape = s.partition("=")
        if name not in dtypes:
            sys.exit(f"error: --input {s}: the model has no input '{name}'")
        specs.append((name, shape))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        steps = []
        for n in range(*a.range):
            step = {}
            for name, shape in specs:
                dims = [int(d) for d in shape.replace("{n}", str(n)).split("x")]
                dt = dtypes[name]
                arr = rng.integers(0, 100, dims).astype(dt) if np.issubdtype(dt, np.integer) else \
                    rng.standard_normal(dims).astype(dt)
                path = os.path.join(tmp, f"{name.replace('/', '_').replace(':', '_')}_{n}.npy")
                np.save(path, arr)
                step[name] = path
            steps.append(step)
        steps_file = os.path.join(tmp, "steps.json")
        json.dump(steps, open(steps_file, "w"))
        runs = {}
        runs["hodu"] = json.loads(subprocess.run(
            [sys.executable, "-c", HODU_CHILD, a.hodu_python, a.model, str(a.threads), steps_file],
            check=True, capture_output=True, text=True).stdout)
        runs["ort"] = json.loads(subprocess.run(
            ["node", os.path.join(ROOT, "bench", "ort_sweep.js"), a.model, steps_file, "--threads", str(a.threads)],
            check=True, capture_output=True, text=True).stdout)
    print(f"{os.path.basename(a.model)}: {len(steps)} steps, n = {a.range[0]}..{a.range[1] - 1}, {a.threads} thread(s)")
    print(f"{'engine':12} {'median ms':>10} {'max ms':>9} {'total ms':>10} {'peak MB':>9}")
    for eng, r in runs.items():
        ms = r["step_ms"]
        print(f"{eng:12} {np.median(ms):10.2f} {max(ms):9.1f} {sum(ms):10.1f} {r['peak_rss_mb']:9.0f}")
    h, o = runs["hodu"]["step_ms"], runs["ort"]["step_ms"]
    print(f"hodu/ort: median {np.median(h) / np.median(o):.2f}, total {sum(h) / sum(o):.2f}")


if __name__ == "__main__":
    main()
