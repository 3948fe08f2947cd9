#!/usr/bin/python3
"""Dynamic shapes end to end: torch exports with dynamic axes (export_dynamic.py) built
by `hodu build` without --dim/--shape, in default mode, with --kernels portable and with
--standalone; each library run at several sizes through the native engine and compared
with ONNX Runtime 1.30 and the reference interpreter (rel-L2 <= 1e-4); sizes the model
cannot take, and inputs that disagree on a dim, must fail with a clear error.

usage: dynamic_shapes.py --hodu BIN [--keep DIR]   (exit 77: torch or ONNX Runtime missing)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_DIR = os.path.join(HERE, "..", "ort")

# model -> list of feeds: {input: (shape, kind)}; kind "f" float, "i" token ids, "m" padding mask.
SIZES = {
    "cnn": [{"x": ((1, 3, 32, 32), "f")}, {"x": ((4, 3, 45, 29), "f")}, {"x": ((2, 3, 9, 16), "f")}],
    "encoder": [{"ids": ((1, 7), "i"), "mask": ((1, 7), "m")}, {"ids": ((3, 33), "i"), "mask": ((3, 33), "m")},
                {"ids": ((2, 128), "i"), "mask": ((2, 128), "m")}],
    "decoder": [{"ids": ((1, 1), "i")}, {"ids": ((1, 7), "i")}, {"ids": ((4, 64), "i")}],
    "audio": [{"wav": ((1, 400), "f")}, {"wav": ((3, 1601), "f")}],
}


def rel_l2(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (den if den > 0 else 1.0))


def write_feeds(tmp, tag, feeds, rng):
    out = []
    for name, (shape, kind) in feeds.items():
        if kind == "f":
            x = rng.standard_normal(shape).astype(np.float32)
        elif kind == "i":
            x = rng.integers(0, 1000, shape).astype(np.int64)
        else:
            x = np.ones(shape, np.int64)
            x[-1, shape[1] // 2:] = 0
        path = os.path.join(tmp, f"{tag}_{name}.npy")
        np.save(path, x)
        out.append((name, path))
    return out


def run_hodu(hodu, model, feeds, out_dir, engine=None):
    cmd = [hodu, "run", model, "-f", "npy", "-o", out_dir, "--threads", "2"]
    if engine:
        cmd += ["--engine", engine]
    for n, p in feeds:
        cmd += ["-i", f"{n}={p}"]
    return subprocess.run(cmd, capture_output=True, text=True)


def outputs(out_dir):
    return {f[:-4]: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir)) if f.endswith(".npy")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--keep", help="work in this folder (kept) instead of a temporary one")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: torch is missing")
        return 77
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        print("SKIP: ONNX Runtime is not installed (tests/ort)")
        return 77
    tmp_obj = None if args.keep else tempfile.TemporaryDirectory(prefix="hodu-dyn-")
    tmp = args.keep or tmp_obj.name
    os.makedirs(tmp, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "export_dynamic.py"), tmp], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rng = np.random.default_rng(0)
    failures = checks = 0

    def fail(msg):
        nonlocal failures
        failures += 1
        print("FAIL " + msg, flush=True)

    for model, sizes in SIZES.items():
        onnx_path = os.path.join(tmp, model + ".onnx")
        libs = {}
        for mode, flags in [("default", []), ("portable", ["--kernels", "portable"]), ("standalone", ["--standalone"])]:
            lib = os.path.join(tmp, f"{model}_{mode}.so")
            r = subprocess.run([args.hodu, "build", onnx_path, "-o", lib, "-q"] + flags, capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"{model} {mode}: build: {r.stderr.strip()[:500]}")
                continue
            header = open(os.path.join(tmp, "model.h")).read()
            if "NUM_DIMS 0" in header:
                fail(f"{model} {mode}: model.h reports no free dims")
            libs[mode] = lib
        for k, feeds in enumerate(sizes):
            tag = f"{model}{k}"
            paths = write_feeds(tmp, tag, feeds, rng)
            ort_out = os.path.join(tmp, tag + "_ort")
            r = subprocess.run(["node", os.path.join(ORT_DIR, "ort_run.js"), onnx_path, ort_out, "--threads", "2"] +
                               [f"{n}={p}" for n, p in paths], capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"{tag}: ONNX Runtime: {r.stderr.strip()[:300]}")
                continue
            want = outputs(ort_out)
            ref_out = os.path.join(tmp, tag + "_interp")
            r = run_hodu(args.hodu, onnx_path, paths, ref_out, "interp")
            interp = outputs(ref_out) if r.returncode == 0 else {}
            for mode, lib in libs.items():
                out_dir = os.path.join(tmp, f"{tag}_{mode}")
                r = run_hodu(args.hodu, lib, paths, out_dir)
                if r.returncode != 0:
                    fail(f"{tag} {mode}: run: {r.stderr.strip()[-400:]}")
                    continue
                got = outputs(out_dir)
                for name, b in want.items():
                    a = got.get(name)
                    checks += 1
                    if a is None or a.shape != b.shape:
                        fail(f"{tag} {mode} {name}: shape {None if a is None else a.shape} != ORT's {b.shape}")
                        continue
                    err = rel_l2(a, b)
                    err_i = rel_l2(a, interp[name]) if name in interp else float("nan")
                    ok = err <= 1e-4 and (name not in interp or err_i <= 1e-4)
                    print(f"{tag:10s} {mode:10s} {name:8s} {str(b.shape):18s} rel-L2 vs ORT {err:.2e}, "
                          f"vs interpreter {err_i:.2e}  {'ok' if ok else 'MISMATCH'}", flush=True)
                    if not ok:
                        fail(f"{tag} {mode} {name}: rel-L2 {err:.2e} (ORT), {err_i:.2e} (interpreter)")

    # Sizes a library cannot take: clear errors, not crashes.
    errors = [
        ("decoder", {"ids": ((1, 65), "i")}, "do not broadcast"),  # the causal mask has 64 rows
        ("encoder", {"ids": ((2, 5), "i"), "mask": ((3, 5), "m")}, "binds 'batch' to 2"),
        ("cnn", {"x": ((1, 3, 2, 2), "f")}, "smaller than the window"),
        ("cnn", {"x": ((1, 4, 8, 8), "f")}, "dim 1 is 4 but the model expects 3"),
    ]
    for model, feeds, want in errors:
        lib = os.path.join(tmp, f"{model}_default.so")
        if not os.path.exists(lib):
            continue
        paths = write_feeds(tmp, model + "_bad", feeds, rng)
        r = run_hodu(args.hodu, lib, paths, os.path.join(tmp, model + "_bad_out"))
        checks += 1
        msg = r.stderr.strip()
        if r.returncode == 0 or want not in msg or not msg.startswith("error: "):
            fail(f"{model} with {feeds}: expected an error naming '{want}', got exit {r.returncode}: {msg[:300]}")
        else:
            print(f"{model:10s} bad sizes -> {msg.splitlines()[0][:160]}", flush=True)
    print(f"dynamic shapes: {checks} checks, {failures} failures")
    return 1 if failures or checks == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
