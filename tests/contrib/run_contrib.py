#!/usr/bin/env python3
"""ONNX Runtime contrib ops (com.microsoft) on every hodu engine vs ONNX Runtime 1.30.

Builds the small models of contrib_cases.py, runs each with ONNX Runtime (the
oracle, tests/ort) and with hodu: the interpreter, the cpu engine at -O0..-O3,
a `hodu build` library (default kernels and --standalone) and the Python
InferenceSession. Float outputs must be within relative L2 `rel` (1e-4: other
summation orders) of ORT's; quantized outputs within `quanta` (1: the lowering
rounds DequantizeLinear -> float op -> QuantizeLinear where ORT uses tables or
integer sums, docs/import.md), integer outputs exactly. Then the error cases:
hodu must refuse them with an `error:` naming the op, its domain and what is
missing. Exits 1 on any failure, 77 when ONNX Runtime is not installed.

usage: run_contrib.py --hodu build/bin/hodu [--python-dir build/python]
                      [--engines interp,O0,O1,O2,O3,so,standalone,py] [--work DIR] [--jobs 2] [CASE_ID ...]
"""
import argparse
import concurrent.futures as cf
import json
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import contrib_cases  # noqa: E402

ORT_DIR = os.path.join(os.path.dirname(HERE), "ort")
ENGINES = ["interp", "O0", "O1", "O2", "O3", "so", "standalone", "py"]


def sanitize(name):
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)


def write_case(case, work):
    d = os.path.join(work, case["id"])
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(case["model"], path)
    feeds = []
    for name, arr in case["feeds"].items():
        p = os.path.join(d, "inputs", sanitize(name) + ".npy")
        np.save(p, arr)
        feeds.append((name, p))
    return d, path, feeds


def run_ort(jobs, work):
    jobs_file, results_file = os.path.join(work, "ort_jobs.json"), os.path.join(work, "ort_results.json")
    with open(jobs_file, "w") as f:
        json.dump(jobs, f)
    r = subprocess.run(["node", os.path.join(ORT_DIR, "ort_batch.js"), jobs_file, results_file],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"error: ONNX Runtime batch failed: {r.stderr.strip()[-800:]}")
    with open(results_file) as f:
        return json.load(f)


def run(cmd, timeout=300):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s"
    return r.returncode, (r.stderr or "").strip()


def hodu_engine(args, engine, model_path, feeds, out_dir):
    """(ok, message, repro)."""
    hodu = args.hodu
    inputs = ",".join(f"{n}={p}" for n, p in feeds)
    target = model_path
    pre = ""
    if engine in ("so", "standalone"):
        target = os.path.join(out_dir + "_lib", "model.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        bcmd = [hodu, "build", model_path, "-o", target, "-q"]
        if engine == "standalone":
            bcmd.append("--standalone")
        for n, p in feeds:
            shape = np.load(p).shape
            if shape:
                bcmd += ["--shape", f"{n}={'x'.join(map(str, shape))}"]
        pre = " ".join(map(shlex.quote, bcmd)) + " && "
        rc, err = run(bcmd)
        if rc != 0:
            return False, f"hodu build: {err.splitlines()[-1] if err else f'exit {rc}'}", pre
    if engine == "py":
        cmd = [sys.executable, os.path.join(os.path.dirname(HERE), "wild", "py_run.py"), model_path, out_dir,
               "--threads", "1"] + [f"{n}={p}" for n, p in feeds]
    else:
        cmd = [hodu, "run", target, "-I", inputs, "-f", "npy", "-o", out_dir, "--threads", "1"]
        if engine == "interp":
            cmd += ["--engine", "interp"]
        elif engine.startswith("O"):
            cmd += ["--engine", "cpu", "-O", engine[1]]
    repro = pre + " ".join(map(shlex.quote, cmd))
    rc, err = run(cmd)
    if rc != 0:
        return False, (err.splitlines()[-1] if err else f"exit {rc}"), repro
    return True, "", repro


def compare(case, name, got, ref):
    if got.shape != ref.shape:
        return f"{name}: shape {list(got.shape)} vs ORT {list(ref.shape)}"
    if got.dtype != ref.dtype:
        return f"{name}: dtype {got.dtype} vs ORT {ref.dtype}"
    if ref.size == 0:
        return None
    if np.issubdtype(ref.dtype, np.floating):
        a, b = got.astype(np.float64), ref.astype(np.float64)
        if np.any(np.isnan(a) != np.isnan(b)):
            return f"{name}: NaN positions differ"
        den = np.linalg.norm(b)
        rel = float(np.linalg.norm(a - b) / den) if den > 0 else float(np.linalg.norm(a - b))
        allowed = case.get("rel", 1e-4)
        if rel > allowed:
            return f"{name}: rel L2 {rel:.3g} > {allowed:g} (max abs {float(np.max(np.abs(a - b))):.3g})"
        return None
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    allowed = case.get("quanta", 0)
    if diff.max() > allowed:
        return f"{name}: {int(np.count_nonzero(diff > allowed))} of {ref.size} values differ by more than " \
               f"{allowed} (max {int(diff.max())})"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--python-dir")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--work")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("ids", nargs="*")
    args = ap.parse_args()
    args.hodu = os.path.abspath(args.hodu)
    engines = args.engines.split(",")
    for e in engines:
        if e not in ENGINES:
            raise SystemExit(f"error: unknown engine '{e}' (known: {', '.join(ENGINES)})")
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        print("skipped: ONNX Runtime (tests/ort/node_modules) is not installed; run scripts/setup.sh")
        return 77
    if "py" in engines:
        pydir = args.python_dir or os.path.join(os.path.dirname(os.path.dirname(args.hodu)), "python")
        if not os.path.isdir(os.path.join(pydir, "hodu")):
            raise SystemExit(f"error: hodu's Python package is not built in {pydir} (ninja hodu_python)")
        os.environ["PYTHONPATH"] = pydir + os.pathsep + os.environ.get("PYTHONPATH", "")

    cases = contrib_cases.cases()
    errors = contrib_cases.error_cases()
    if args.ids:
        known = {c["id"] for c in cases + errors}
        for i in args.ids:
            if i not in known:
                raise SystemExit(f"error: no case '{i}'")
        cases = [c for c in cases if c["id"] in args.ids]
        errors = [c for c in errors if c["id"] in args.ids]

    work = args.work or tempfile.mkdtemp(prefix="hodu-contrib-")
    written = {c["id"]: write_case(c, work) for c in cases + errors}
    jobs = [dict(id=c["id"], model=written[c["id"]][1], feeds=dict(written[c["id"]][2]),
                 out_dir=os.path.join(written[c["id"]][0], "ort")) for c in cases if "numpy_ref" not in c]
    ort = run_ort(jobs, work) if jobs else {}
    # An op ONNX Runtime implements on CUDA only (BiasAdd) is checked against its definition.
    for c in cases:
        if "numpy_ref" in c:
            ref_dir = os.path.join(written[c["id"]][0], "ref")
            os.makedirs(ref_dir, exist_ok=True)
            outs = {}
            for name, arr in c["numpy_ref"].items():
                outs[name] = os.path.join(ref_dir, sanitize(name) + ".npy")
                np.save(outs[name], arr)
            ort[c["id"]] = {"ok": True, "outputs": outs}

    failures = []
    tasks = []
    for c in cases:
        res = ort[c["id"]]
        if not res["ok"]:
            failures.append(f"{c['id']}: ONNX Runtime refused the model: {res['error']}")
            continue
        for e in engines:
            tasks.append((c, e))

    refused = set()  # (case, engine) refused as the case expects
    off = {}  # quantized outputs: values one quantum from ORT's on the first engine

    def do(task):
        c, e = task
        d, path, feeds = written[c["id"]]
        out_dir = os.path.join(d, e)
        ok, msg, repro = hodu_engine(args, e, path, feeds, out_dir)
        expected = c.get("refused", {}).get(e)
        if expected:  # this engine must refuse the model clearly
            if ok or expected not in msg:
                return f"{c['id']} [{e}]: expected a refusal containing '{expected}', got " \
                       f"{'success' if ok else repr(msg)}\n    repro: {repro}"
            refused.add((c["id"], e))
            return None
        if not ok:
            return f"{c['id']} [{e}]: {msg}\n    repro: {repro}"
        problems = []
        for name, ref_file in ort[c["id"]]["outputs"].items():
            got_file = os.path.join(out_dir, os.path.basename(ref_file))
            if not os.path.isfile(got_file):
                problems.append(f"{name}: not written")
                continue
            p = compare(c, name, np.load(got_file), np.load(ref_file))
            if p:
                problems.append(p)
        if problems:
            return f"{c['id']} [{e}]: WRONG {'; '.join(problems)}\n    repro: {repro}"
        if e == engines[0]:
            for name, ref_file in ort[c["id"]]["outputs"].items():
                ref = np.load(ref_file)
                if not np.issubdtype(ref.dtype, np.floating) and c.get("quanta"):
                    got = np.load(os.path.join(out_dir, os.path.basename(ref_file)))
                    off[c["id"]] = (int(np.count_nonzero(got != ref)), ref.size)
        return None

    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(do, tasks))
    per_case = {}
    for (c, e), r in zip(tasks, results):
        per_case.setdefault(c["id"], []).append((e, r))
        if r:
            failures.append(r)
    width = max([len(c["id"]) for c in cases] + [10])
    print(f"{'case':<{width}}  " + " ".join(f"{e:>10}" for e in engines))
    for c in cases:
        cells = dict(per_case.get(c["id"], []))
        print(f"{c['id']:<{width}}  " + " ".join(
            f"{('refused' if (c['id'], e) in refused else 'ok' if cells[e] is None else 'FAIL') if e in cells else '-':>10}"
            for e in engines))

    if off:
        print(f"\nquantized outputs one quantum from ONNX Runtime's on {engines[0]} (the rest equal):")
        for cid, (n, total) in off.items():
            print(f"  {cid:<{width}}  {n} of {total}")
    for c in errors:
        d, path, feeds = written[c["id"]]
        inputs = ",".join(f"{n}={p}" for n, p in feeds)
        for cmd in ([args.hodu, "run", path, "-I", inputs, "--engine", "interp"],
                    [args.hodu, "run", path, "-I", inputs],
                    [args.hodu, "build", path, "-o", os.path.join(d, "x.so"), "-q"]):
            rc, err = run(cmd)
            lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
            msg = lines[-1] if lines else ""
            missing = [w for w in c["expect"] if w not in msg]
            if rc != 1 or not lines or missing:
                failures.append(f"{c['id']}: expected exit 1 with an error naming {c['expect']}, got exit {rc}: "
                                f"{err[-400:]!r}\n    repro: {' '.join(map(shlex.quote, cmd))}")
        print(f"{c['id']:<{width}}  refused as expected" if not any(f.startswith(c["id"] + ":") for f in failures)
              else f"{c['id']:<{width}}  FAIL")

    if failures:
        print(f"\n{len(failures)} failure(s):")
        for f in failures:
            print("  " + f)
        print(f"(models and outputs kept in {work})")
        return 1
    print(f"\nall {len(cases)} cases on {len(engines)} engines match ONNX Runtime"
          f"{f' ({len(refused)} runs refused clearly, as their cases expect)' if refused else ''}; "
          f"{len(errors)} error cases refused clearly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
