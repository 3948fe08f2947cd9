#!/usr/bin/env python3
"""Exports every model of the ONNX backend test data through hodu and checks
the exports the way a user of another tool would:

1. `hodu convert model.onnx -o export.onnx` succeeds;
2. `onnx.checker.check_model(full_check=True)` accepts the export when its
   opset is within the checker's range (Debian's python3-onnx 1.12: opset 17);
3. ONNX Runtime 1.30 loads the export and gives the same outputs as on the
   original model, for every case where it runs the original at all.

usage: check_onnx_export.py --hodu BIN [--root ONNX_TESTS] [--filter GLOB] [--jobs N]
Exit 0 when every check passes, 1 otherwise, 77 when ONNX Runtime
(tests/ort/node_modules) is not installed.
"""
import argparse
import concurrent.futures
import fnmatch
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
ORT_DIR = os.path.join(SOURCE, "tests", "ort")
SUITES = ("node", "simple", "pytorch-converted", "pytorch-operator")
# The newest version of each domain the installed checker knows.
CHECKER_MAX = {}
for _s in onnx.defs.get_all_schemas_with_history():
    _d = _s.domain or "ai.onnx"
    CHECKER_MAX[_d] = max(CHECKER_MAX.get(_d, 0), _s.since_version)
CHECKER_MAX_OPSET = CHECKER_MAX["ai.onnx"]
# Models hodu refuses to export, with the reason it gives; anything else that
# fails to export is a failure.
KNOWN_EXPORT_LIMITS = {}
# Exports the checker rejects because of bugs in Debian's onnx 1.12 that newer
# onnx fixed; ONNX Runtime's own check still runs on them below.
KNOWN_CHECKER_BUGS = {
    "node/test_averagepool_2d_ceil_last_window_starts_on_pad":
        "onnx 1.12 pool shape inference keeps a ceil_mode window that starts in the padding (fixed in onnx 1.16)",
    "node/test_maxpool_2d_ceil_output_size_reduce_by_one":
        "onnx 1.12 pool shape inference keeps a ceil_mode window that starts in the padding (fixed in onnx 1.16)",
}
ORT_NODE_ELEM_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13}
ORT_TYPES = {np.float32, np.float64, np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32,
             np.uint64, np.bool_, np.float16}


def cases(root, pattern):
    for suite in SUITES:
        for d in sorted(glob.glob(os.path.join(root, suite, "*"))):
            name = f"{suite}/{os.path.basename(d)}"
            if os.path.exists(os.path.join(d, "model.onnx")) and fnmatch.fnmatch(name, pattern):
                yield name, d


def convert(hodu, case_dir, out):
    p = subprocess.run([hodu, "convert", os.path.join(case_dir, "model.onnx"), "-o", out],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]


def feeds_as_npy(model_path, case_dir, out_dir):
    """The first data set's inputs as .npy files, or None when ORT-node cannot take them."""
    data = os.path.join(case_dir, "test_data_set_0")
    model = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    # onnxruntime-node returns only these element types (int4/int2/float8 outputs crash its binding).
    for o in model.graph.output:
        if o.type.WhichOneof("value") != "tensor_type" or o.type.tensor_type.elem_type not in ORT_NODE_ELEM_TYPES:
            return None
    feeds = {}
    for k, name in enumerate(names):
        pb = os.path.join(data, f"input_{k}.pb")
        if not os.path.exists(pb):
            return None
        t = onnx.TensorProto()
        with open(pb, "rb") as f:
            t.ParseFromString(f.read())
        if t.data_type == 0:  # a SequenceProto or OptionalProto, which ORT-node cannot feed
            return None
        try:
            a = numpy_helper.to_array(t)
        except Exception:
            return None
        if a.dtype.type not in ORT_TYPES:
            return None
        path = os.path.join(out_dir, f"in_{k}.npy")
        np.save(path, np.ascontiguousarray(a))
        feeds[name] = path
    return feeds


def same(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
    return bool(np.array_equal(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--root", default=os.environ.get("HODU_ONNX_TESTS", os.path.join(SOURCE, "..", "shared",
                                                                                       "onnx-tests")))
    ap.add_argument("--filter", default="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        print("skipped: ONNX Runtime is not installed (npm install --ignore-scripts in tests/ort)")
        return 77

    work = tempfile.mkdtemp(prefix="hodu-export-")
    all_cases = list(cases(args.root, args.filter))
    failures = []
    refused = []  # known limits, refused with a clear error
    exported = {}

    def do_convert(item):
        name, d = item
        out = os.path.join(work, name.replace("/", "__"))
        os.makedirs(out, exist_ok=True)
        rc, msg = convert(args.hodu, d, os.path.join(out, "export.onnx"))
        return name, d, out, rc, msg

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for name, d, out, rc, msg in pool.map(do_convert, all_cases):
            if rc != 0 and name in KNOWN_EXPORT_LIMITS:
                refused.append(name)
            elif rc != 0:
                failures.append(f"{name}: hodu convert failed: {msg[0]}")
            else:
                exported[name] = (d, out)

    checked = beyond_checker = 0
    jobs = []
    for name, (d, out) in exported.items():
        path = os.path.join(out, "export.onnx")
        m = onnx.load(path)
        opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
        checkable = all(o.version <= CHECKER_MAX.get(o.domain or "ai.onnx", 0) for o in m.opset_import)
        if name in KNOWN_CHECKER_BUGS:
            beyond_checker += 1
        elif checkable:
            try:
                onnx.checker.check_model(m, full_check=True)
                checked += 1
            except Exception as e:  # the checker raises several exception types
                failures.append(f"{name}: onnx.checker rejects the export (opset {opset}): "
                                f"{str(e).strip().splitlines()[0]}")
        else:
            beyond_checker += 1
        feeds = feeds_as_npy(os.path.join(d, "model.onnx"), d, out)
        if feeds is None:
            continue
        jobs.append({"id": name + "#original", "model": os.path.join(d, "model.onnx"), "feeds": feeds,
                     "out_dir": os.path.join(out, "ort_original")})
        jobs.append({"id": name + "#export", "model": path, "feeds": feeds, "out_dir": os.path.join(out, "ort_export")})

    # A few hundred sessions per node process keeps its memory bounded.
    results = {}
    for start in range(0, len(jobs), 200):
        jobs_path = os.path.join(work, f"jobs_{start}.json")
        results_path = os.path.join(work, f"results_{start}.json")
        with open(jobs_path, "w") as f:
            json.dump(jobs[start:start + 200], f)
        subprocess.run(["node", os.path.join(ORT_DIR, "ort_batch.js"), jobs_path, results_path], check=True)
        with open(results_path) as f:
            results.update(json.load(f))

    ort_same = ort_refuses_original = 0
    for job in jobs[::2]:
        name = job["id"].split("#")[0]
        orig, exp = results[name + "#original"], results[name + "#export"]
        if not orig["ok"]:
            ort_refuses_original += 1
            if args.v:
                print(f"  ORT cannot run the original {name}: {orig['error'][:120]}")
            continue
        if not exp["ok"]:
            failures.append(f"{name}: ONNX Runtime runs the original but not the export: {exp['error'][:300]}")
            continue
        bad = [o for o, p in orig["outputs"].items()
               if o not in exp["outputs"] or not same(np.load(p), np.load(exp["outputs"][o]))]
        if bad:
            failures.append(f"{name}: ONNX Runtime gives different outputs on the export: {', '.join(bad)}")
        else:
            ort_same += 1

    for f in failures:
        print("FAIL", f)
    print(f"export check: {len(all_cases)} models, {len(exported)} exported ({len(refused)} refused as known "
          f"limits: {', '.join(refused) or '-'}), checker passed {checked} "
          f"({beyond_checker} not checkable: newer than the checker's opsets {CHECKER_MAX_OPSET}/ml {CHECKER_MAX.get('ai.onnx.ml')} or a known checker bug), ORT same outputs {ort_same} "
          f"(ORT cannot run {ort_refuses_original} originals; {len(exported) - len(jobs) // 2} with inputs "
          f"onnxruntime-node cannot feed), {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
