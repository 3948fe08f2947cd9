#!/usr/bin/env python3
"""Runs models with hodu and with ONNX Runtime 1.30 on the same seeded inputs
and compares every output (relative L2 error).

usage: compare_models.py --hodu BIN [--engine NAME] [--tol 1e-4] MODEL.onnx ...
Exit code 0 when every output matches, 1 otherwise, 77 when ONNX Runtime
(tests/ort/node_modules) is not installed.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ONNX_TO_NUMPY = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
                 10: np.float16, 11: np.float64}


def sanitize(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def make_inputs(model_path, out_dir, seed):
    model = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        dtype = ONNX_TO_NUMPY[tt.elem_type]
        if np.issubdtype(dtype, np.floating):
            x = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            x = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            x = rng.integers(0, 10, shape).astype(dtype)
        path = os.path.join(out_dir, sanitize(inp.name) + ".npy")
        np.save(path, x)
        feeds.append((inp.name, path))
    return feeds, [o.name for o in model.graph.output]


def rel_l2(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    # NaN and infinities must sit at the same places with the same values (a fully masked
    # softmax row is NaN in ONNX Runtime and torch); the norm is then taken over the rest.
    special = ~np.isfinite(b)
    if a.shape != b.shape or not np.array_equal(special, ~np.isfinite(a)):
        return float("inf")
    if special.any():
        if not np.array_equal(a[special], b[special], equal_nan=True):
            return float("inf")
        a, b = a[~special], b[~special]
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (den if den > 0 else 1.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--engine", default="")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        print("SKIP: ONNX Runtime is not installed (cd tests/ort && npm install --ignore-scripts)")
        return 77
    failures = 0
    print(f"{'model':40s} {'output':24s} {'rel-L2':>10s} {'hodu s':>8s} {'ort s':>8s}  result")
    for model in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            feeds, outputs = make_inputs(model, tmp, args.seed)
            ort_dir, hodu_dir = os.path.join(tmp, "ort"), os.path.join(tmp, "hodu")
            t0 = time.time()
            r = subprocess.run(["node", os.path.join(HERE, "ort_run.js"), model, ort_dir, "--threads",
                                str(args.threads)] + [f"{n}={p}" for n, p in feeds], capture_output=True, text=True)
            t_ort = time.time() - t0
            if r.returncode != 0:
                print(f"{os.path.basename(model):40s} ORT failed: {r.stderr.strip()[:200]}")
                failures += 1
                continue
            cmd = [args.hodu, "run", model, "-f", "npy", "-o", hodu_dir, "--threads", str(args.threads)]
            if args.engine:
                cmd += ["--engine", args.engine]
            for n, p in feeds:
                cmd += ["-i", f"{n}={p}"]
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True)
            t_hodu = time.time() - t0
            if r.returncode != 0:
                print(f"{os.path.basename(model):40s} hodu failed: {r.stderr.strip()[:300]}")
                failures += 1
                continue
            for name in outputs:
                a = np.load(os.path.join(hodu_dir, sanitize(name) + ".npy"))
                b = np.load(os.path.join(ort_dir, sanitize(name) + ".npy"))
                if a.shape != b.shape or a.dtype != b.dtype:
                    err, ok = float("inf"), False
                else:
                    err = rel_l2(a, b) if np.issubdtype(b.dtype, np.floating) else float(np.any(a != b))
                    ok = err <= args.tol
                failures += 0 if ok else 1
                print(f"{os.path.basename(model):40s} {name[:24]:24s} {err:10.2e} {t_hodu:8.2f} {t_ort:8.2f}  "
                      f"{'ok' if ok else 'MISMATCH'}")
    print(f"{len(args.models)} models, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
