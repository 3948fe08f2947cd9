#!/usr/bin/env python3
"""Builds ONNX backend test cases with `hodu build` into shared libraries, runs
them with `hodu run CASE.so` (the native engine) and compares with the
expected outputs (rtol 1e-3, atol 1e-5; exact for ints and bools).

usage: conformance_aot.py --hodu BIN [--root DIR] [--filter GLOB] [--every N] [--jobs N]
                          [--min-pass N] [--min-cases N] [-O N] [-v]

A case whose model uses an op the C compiler does not support counts as
"unsupported" (the build must then fail with a clear Unsupported error naming
the op); every other case must pass. Exit 0 when none failed and at least
--min-pass passed.
"""
import argparse
import concurrent.futures
import fnmatch
import glob
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def sanitize(name):
    s = "".join(c if c.isalnum() or c in "._-" else "_" for c in (name or "output"))
    return "_" if s in (".", "..") else s


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    try:
        return numpy_helper.to_array(t)
    except (KeyError, ValueError, TypeError):  # dtypes this numpy/onnx cannot express (float4, ...)
        return None


def expected_failures():
    path = os.path.join(HERE, "expected_failures.txt")
    out = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                out[name] = reason.strip()
    return out


def run_case(case, args, xfail):
    """Builds and runs one case; returns (status, message) with status one of
    passed, failed, expected, unsupported, or None when the folder is no case."""
    name = os.path.basename(case)
    model = os.path.join(case, "model.onnx")
    data = os.path.join(case, "test_data_set_0")
    if not os.path.exists(model) or not os.path.isdir(data):
        return None, ""

    def failure(msg):
        return ("expected", msg) if name in xfail else ("failed", msg)

    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "case.so")
        m = onnx.load(model, load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        ins = [i.name for i in m.graph.input if i.name not in inits]
        outs = [o.name for o in m.graph.output]
        shapes, feeds = [], []
        for k, nm in enumerate(ins):
            p = os.path.join(data, f"input_{k}.pb")
            if not os.path.exists(p):
                continue
            arr = load_pb(p)
            if arr is None:
                return "unsupported", "test data of a dtype numpy cannot read"
            shapes += ["--shape", f"{nm}={'x'.join(str(d) for d in arr.shape)}"] if arr.ndim else []
            feeds += ["-i", f"{nm}={p}"]
        # One kernel thread per case: --jobs runs cases side by side.
        env = dict(os.environ, HODU_NUM_THREADS="1")
        r = subprocess.run([args.hodu, "build", model, "-o", lib, "-q", f"-O{args.opt}"] + shapes,
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            msg = r.stderr.strip()
            # A generator refusal (clear error) is "unsupported"; a C compiler failure or crash is a bug.
            if msg.startswith("error: ") and "the C compiler failed" not in msg and "internal" not in msg \
                    and r.returncode == 1:
                return "unsupported", msg.splitlines()[0][:200]
            return failure("build: " + msg[:600])
        od = os.path.join(tmp, "out")
        r = subprocess.run([args.hodu, "run", lib, "--threads", "1", "-f", "npy", "-o", od] + feeds,
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return failure("run: " + r.stderr.strip()[-300:])
        for k, nm in enumerate(outs):
            p = os.path.join(data, f"output_{k}.pb")
            if not os.path.exists(p):
                continue
            want = load_pb(p)
            if want is None:
                return failure("expected output of a dtype numpy cannot read")
            got = np.load(os.path.join(od, sanitize(nm) + ".npy"))
            problem = None
            if got.shape != want.shape:
                problem = f"output {nm}: shape {got.shape} != {want.shape}"
            elif got.dtype != want.dtype:
                problem = f"output {nm}: dtype {got.dtype} != {want.dtype}"
            elif np.issubdtype(want.dtype, np.floating):
                if not np.allclose(got, want, rtol=1e-3, atol=1e-5, equal_nan=True):
                    err = np.max(np.abs(got.astype(np.float64) - want))
                    problem = f"output {nm}: max abs error {err:.3g}"
            elif not np.array_equal(got, want):
                problem = f"output {nm}: values differ"
            if problem:
                return failure(problem)
    if name in xfail:
        print(f"note: {name} is listed as an expected failure but passes", flush=True)
    return "passed", ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--root", default=os.path.join(HERE, "..", "..", "..", "shared", "onnx-tests", "node"))
    ap.add_argument("--filter", default="*")
    ap.add_argument("--every", type=int, default=1,
                    help="run every Nth case of the sorted list (ctest: a fixed sample; 1 = all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases built and run side by side")
    ap.add_argument("--min-pass", type=int, default=0)
    ap.add_argument("--min-cases", type=int, default=0, help="fail when fewer cases are found")
    ap.add_argument("-O", dest="opt", default="2")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        print(f"error: ONNX backend test folder '{args.root}' not found (--root)")
        return 1
    xfail = expected_failures()
    cases = sorted(d for d in glob.glob(os.path.join(args.root, "test_*")) if os.path.isdir(d))
    cases = [c for c in cases if fnmatch.fnmatch(os.path.basename(c), args.filter)]
    if len(cases) < args.min_cases:
        print(f"error: found {len(cases)} cases under {args.root}, expected at least {args.min_cases}")
        return 1
    cases = cases[::max(1, args.every)]
    results = {"passed": [], "failed": [], "expected": [], "unsupported": []}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for case, (status, msg) in zip(cases, pool.map(lambda c: run_case(c, args, xfail), cases)):
            name = os.path.basename(case)
            if status is None:
                continue
            results[status].append((name, msg))
            if args.verbose:
                print(name, "ok" if status == "passed" else status, flush=True)
    secs = time.time() - t0
    passed, failed, expected, unsupported = (results[k] for k in ("passed", "failed", "expected", "unsupported"))
    if args.verbose:
        for n, msg in unsupported:
            print(f"unsupported {n}: {msg}")
    for n, msg in failed:
        print(f"FAIL {n}: {msg}")
    sample = f", 1 in {args.every} of the sorted list" if args.every > 1 else ""
    print(f"aot conformance: {len(passed)} passed, {len(failed)} failed, {len(expected)} expected failures, "
          f"{len(unsupported)} unsupported (of {len(cases)} cases{sample}) in {secs:.0f} s")
    if len(passed) < args.min_pass:
        print(f"error: fewer than {args.min_pass} cases passed")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
