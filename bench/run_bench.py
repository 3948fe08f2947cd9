#!/usr/bin/python3
"""hodu against ONNX Runtime 1.30 on the model zoo, in one run, interleaved.

For each model and thread count: the same seeded inputs, `hodu bench --json`
and `node bench/ort_bench.js` alternately (--rounds times each, the median of
the medians kept), then the outputs of both compared (relative L2 error).
Absolute times on a shared machine are noise; the ratio in one run is the figure.

usage: /usr/bin/python3 bench/run_bench.py [--hodu build/bin/hodu] [--threads 1 2]
           [--engine E [E ...]] [--iters 5] [--warmup 1] [--rounds 2] [--tol 1e-4] [MODEL.onnx ...]

--engine cpu native: one row per hodu engine, all timed in the same interleaved
rounds (native: the model compiled once by `hodu build` to a default-mode .so,
whose load and peak memory are then those of loading the library; the build time
is printed beside the model).

Each call times at least --min-ms of runs (more iterations for fast models than
--iters: 10 runs of a 2 ms model are 20 ms, all noise on a shared machine).
"""
import math
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ort"))
from compare_models import make_inputs, rel_l2, sanitize  # noqa: E402


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", default=os.path.join(ROOT, "build", "bin", "hodu"))
    ap.add_argument("--engine", nargs="+", default=[""], help="hodu engine(s); several: side by side")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--min-ms", type=float, default=500, help="timed runs per call: at least this many ms")
    ap.add_argument("--json", default="", help="also write all results here")
    ap.add_argument("models", nargs="*")
    args = ap.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(HERE, "models", "*.onnx")))
    if not models:
        print("no models: run /usr/bin/python3 bench/export_zoo.py first")
        return 1
    ort_js = os.path.join(HERE, "ort_bench.js")
    rows, failures = [], 0
    engines = args.engine
    hdr = (f"{'model':20s} {'engine':>7s} {'thr':>3s} {'hodu ms':>9s} {'ort ms':>9s} {'hodu/ort':>8s} "
           f"{'min h/o':>7s} {'hodu load':>9s} {'ort load':>9s} {'hodu MB':>8s} {'ort MB':>7s} {'rel-L2':>9s}")
    print(hdr)
    print("-" * len(hdr))
    for model in models:
        name = os.path.splitext(os.path.basename(model))[0]
        with tempfile.TemporaryDirectory() as tmp:
            feeds, outputs = make_inputs(model, tmp, 0)
            # Outputs of each, once, for the comparison.
            ort_out = os.path.join(tmp, "ort")
            run_json(["node", ort_js, model, "--threads", "2", "--warmup", "0", "--iters", "1", "--out", ort_out] +
                     [f"{n}={p}" for n, p in feeds])
            # What each engine row runs: the model, or for native the library built from it once.
            target = {e: (model, ["--engine", e] if e else []) for e in engines}
            if "native" in engines:
                lib = os.path.join(tmp, "model.so")
                t0 = time.time()
                subprocess.run([args.hodu, "build", model, "-o", lib, "-q"], capture_output=True, check=True)
                print(f"{name}: hodu build -> .so in {time.time() - t0:.1f} s", flush=True)
                target["native"] = (lib, [])
            errs = {}
            for e in engines:
                hodu_out = os.path.join(tmp, "hodu-" + (e or "default"))
                subprocess.run([args.hodu, "run", target[e][0], "-f", "npy", "-o", hodu_out, "--threads", "2"] +
                               target[e][1] +
                               sum([["-i", f"{n}={p}"] for n, p in feeds], []), capture_output=True, check=True)
                errs[e] = max(rel_l2(np.load(os.path.join(hodu_out, sanitize(o) + ".npy")),
                                     np.load(os.path.join(ort_out, sanitize(o) + ".npy"))) for o in outputs)
                if not errs[e] <= args.tol:
                    failures += 1
            for t in args.threads:
                hodu_runs, ort_runs = {e: [] for e in engines}, []
                probe = run_json([args.hodu, "bench", target[engines[0]][0], "--json", "--threads", str(t), "--iters",
                                  "3", "--warmup", "1"] + target[engines[0]][1] +
                                 sum([["-i", f"{n}={p}"] for n, p in feeds], []))
                iters = max(args.iters, math.ceil(args.min_ms / max(probe["median_ms"], 1e-3)))
                for _ in range(args.rounds):
                    for e in engines:
                        hodu_runs[e].append(run_json(
                            [args.hodu, "bench", target[e][0], "--json", "--threads", str(t), "--iters", str(iters),
                             "--warmup", str(args.warmup)] + target[e][1] +
                            sum([["-i", f"{n}={p}"] for n, p in feeds], [])))
                    ort_runs.append(run_json(
                        ["node", ort_js, model, "--threads", str(t), "--iters", str(iters), "--warmup",
                         str(args.warmup)] + [f"{n}={p}" for n, p in feeds]))
                o = statistics.median(r["median_ms"] for r in ort_runs)
                for e in engines:
                    h = statistics.median(r["median_ms"] for r in hodu_runs[e])
                    err = errs[e]
                    row = {"model": name, "engine": e or "default", "threads": t, "hodu_ms": h, "ort_ms": o,
                           "ratio": h / o,
                           # The fastest run of each: the least disturbed by other load on a shared machine.
                           "min_ratio": min(r["min_ms"] for r in hodu_runs[e]) / min(r["min_ms"] for r in ort_runs),
                           "hodu_load_ms": statistics.median(r["load_ms"] + r["first_run_ms"] for r in hodu_runs[e]),
                           "ort_load_ms": statistics.median(r["load_ms"] + r["first_run_ms"] for r in ort_runs),
                           "hodu_rss_mb": max(r["peak_rss_mb"] for r in hodu_runs[e]),
                           "ort_rss_mb": max(r["peak_rss_mb"] for r in ort_runs), "rel_l2": err}
                    rows.append(row)
                    print(f"{name:20s} {row['engine']:>7s} {t:3d} {h:9.1f} {o:9.1f} {h / o:8.2f} "
                          f"{row['min_ratio']:7.2f} {row['hodu_load_ms']:9.0f} {row['ort_load_ms']:9.0f} {row['hodu_rss_mb']:8.0f} "
                          f"{row['ort_rss_mb']:7.0f} {err:9.2e}{'' if err <= args.tol else '  MISMATCH'}", flush=True)
    if rows:
        for e in engines:
            for t in args.threads:
                ratios = [r["ratio"] for r in rows if r["threads"] == t and r["engine"] == (e or "default")]
                gm = float(np.exp(np.mean(np.log(ratios))))
                mins = [r["min_ratio"] for r in rows if r["threads"] == t and r["engine"] == (e or "default")]
                gm_min = float(np.exp(np.mean(np.log(mins))))
                print(f"geometric mean hodu ({e or 'default'})/ort at {t} thread(s): {gm:.2f} (of the fastest runs: {gm_min:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("load = load + first run (ms); MB = peak RSS of the process; min h/o = fastest hodu run / fastest ORT run")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
