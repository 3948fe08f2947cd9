#!/usr/bin/env python3
"""Builds ONNX backend test cases with `hodu build` into shared libraries, runs them with
`hodu run CASE.so` (the native engine) and compares with the expected outputs (rtol 1e-3,
atol 1e-5, NaN equal; exact for integers, bools and strings).

usage: conformance_aot.py --hodu BIN [--root DIR] [--filter GLOB[,GLOB...]] [--every N] [--jobs N]
                          [--modes default,standalone] [--min-pass N] [--min-cases N]
                          [--expected FILE] [--list-failures] [-O N] [-v]

Inputs go to the library as the test's own .pb files and outputs come back as .hdt, both
read by hodu, so every ONNX dtype is checked (float8, bfloat16, int4, ... are decoded here,
not by numpy). A case counts as "unsupported" when `hodu build` refuses it with a clear
error (the message names the op and node); "expected" when it fails and is listed in the
expected-failures file with its reason; every other case must pass. Each case is built and
run once per mode (default: libhodu_kernels; standalone: portable C only). Exit 0 when none
failed and at least --min-pass passed in every mode.
"""
import argparse
import concurrent.futures
import fnmatch
import glob
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- tensors of every ONNX dtype -------------------------------------------------------

INT_TYPES = {2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 12: np.uint32,
             13: np.uint64}
FLOAT8 = {17: "f8e4m3fn", 18: "f8e4m3fnuz", 19: "f8e5m2", 20: "f8e5m2fnuz", 24: "f8e8m0"}
HDT_CODES = {"f32": 1, "u8": 2, "i8": 3, "u16": 4, "i16": 5, "i32": 6, "i64": 7, "string": 8, "bool": 9, "f16": 10,
             "f64": 11, "u32": 12, "u64": 13, "c64": 14, "c128": 15, "bf16": 16, "f8e4m3fn": 17, "f8e4m3fnuz": 18,
             "f8e5m2": 19, "f8e5m2fnuz": 20, "u4": 21, "i4": 22, "f4e2m1": 23, "f8e8m0": 24, "u2": 25, "i2": 26}


def float8_values(code):
    """float64 value of each of the 256 bit patterns of a float8 type."""
    out = np.zeros(256)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        if code == 24:  # e8m0: exponent only
            out[b] = np.nan if b == 0xFF else 2.0 ** (b - 127)
            continue
        e_bits, m_bits = (4, 3) if code in (17, 18) else (5, 2)
        bias = {17: 7, 18: 8, 19: 15, 20: 16}[code]
        e, m = (b >> m_bits) & ((1 << e_bits) - 1), b & ((1 << m_bits) - 1)
        if code in (18, 20) and b == 0x80:
            out[b] = np.nan
            continue
        if code == 17 and (b & 0x7F) == 0x7F:
            out[b] = np.nan
            continue
        if code == 19 and e == 31:
            out[b] = s * np.inf if m == 0 else np.nan
            continue
        if e == 0:
            out[b] = s * m * 2.0 ** (1 - bias - m_bits)
        else:
            out[b] = s * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)
    return out


FLOAT8_TABLES = {c: float8_values(c) for c in FLOAT8}
FLOAT4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def decode(code, dims, raw, typed=None):
    """(values as a numpy array: float64 for floats, int64 for ints, bool, object for strings) of
    `raw` little-endian bytes (or the TensorProto's typed field values when no raw bytes)."""
    n = int(np.prod(dims)) if dims else 1
    if code == 8:
        return np.array(typed, dtype=object).reshape(dims)
    if raw is None:
        vals = list(typed)
        if code in (1, 11):
            return np.array(vals, np.float64).reshape(dims)
        if code in (10, 16) or code in FLOAT8:  # bit patterns in int32_data
            raw = np.array(vals, np.uint16 if code in (10, 16) else np.uint8).tobytes()
        elif code in (21, 22, 23, 25, 26):
            raw = np.array(vals, np.uint8).tobytes()
        elif code == 9:
            return np.array(vals, bool).reshape(dims)
        else:
            return np.array(vals, np.int64).reshape(dims)
    b = np.frombuffer(raw, np.uint8)
    if code == 1:
        return np.frombuffer(raw, "<f4").astype(np.float64).reshape(dims)
    if code == 11:
        return np.frombuffer(raw, "<f8").reshape(dims)
    if code == 10:
        return np.frombuffer(raw, "<f2").astype(np.float64).reshape(dims)
    if code == 16:
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(dims)
    if code in FLOAT8:
        return FLOAT8_TABLES[code][b[:n]].reshape(dims)
    if code == 9:
        return (b[:n] != 0).reshape(dims)
    if code in INT_TYPES:
        return np.frombuffer(raw, INT_TYPES[code]).astype(np.int64 if code != 13 else np.uint64).reshape(dims)
    if code in (21, 22, 23):  # 4-bit, two per byte, low nibble first
        v = np.stack([b & 0xF, b >> 4], axis=1).ravel()[:n]
        if code == 23:
            return FLOAT4[v].reshape(dims)
        v = v.astype(np.int64)
        return (np.where(v >= 8, v - 16, v) if code == 22 else v).reshape(dims)
    if code in (25, 26):  # 2-bit, four per byte, lowest bits first
        v = np.stack([(b >> s) & 3 for s in (0, 2, 4, 6)], axis=1).ravel()[:n].astype(np.int64)
        return (np.where(v >= 2, v - 4, v) if code == 26 else v).reshape(dims)
    raise ValueError(f"dtype code {code}")


def read_pb(path):
    """(dtype code, dims, values) of an ONNX TensorProto file; None for a sequence/optional."""
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    code, dims = t.data_type, list(t.dims)
    if code == 0:
        return None
    if t.HasField("raw_data"):
        return code, dims, decode(code, dims, t.raw_data)
    typed = {1: t.float_data, 11: t.double_data, 7: t.int64_data, 13: t.uint64_data, 12: t.uint64_data,
             8: [s.decode("utf-8", "replace") for s in t.string_data]}.get(code, t.int32_data)
    return code, dims, decode(code, dims, None, typed)


def read_hdt(path):
    """{name: (dtype code, dims, values)} of a .hdt file (hodu's tensor file)."""
    data = open(path, "rb").read()
    assert data[:4] == b"HDT1", path
    count, data_offset = struct.unpack_from("<QQ", data, 8)
    at, out = 24, {}
    for _ in range(count):
        (nlen,) = struct.unpack_from("<I", data, at)
        name = data[at + 4:at + 4 + nlen].decode()
        at += 4 + nlen
        dlen = data[at]
        dtype = data[at + 1:at + 1 + dlen].decode()
        at += 1 + dlen
        (rank,) = struct.unpack_from("<I", data, at)
        dims = list(struct.unpack_from(f"<{rank}q", data, at + 4))
        at += 4 + 8 * rank
        off, size = struct.unpack_from("<QQ", data, at)
        at += 16
        raw = data[data_offset + off:data_offset + off + size]
        code = HDT_CODES[dtype]
        if code == 8:
            vals, p = [], 0
            while p < len(raw):
                (ln,) = struct.unpack_from("<Q", raw, p)
                vals.append(raw[p + 8:p + 8 + ln].decode("utf-8", "replace"))
                p += 8 + ln
            out[name] = (code, dims, np.array(vals, dtype=object).reshape(dims))
        else:
            out[name] = (code, dims, decode(code, dims, raw))
    return out


def sanitize(name):
    s = "".join(c if c.isalnum() or c in "._-" else "_" for c in (name or "output"))
    return "_" if s in (".", "..") else s


def compare(name, got, want):
    gcode, gdims, g = got
    wcode, wdims, w = want
    if gcode != wcode:
        return f"output {name}: dtype code {gcode} != {wcode}"
    if list(gdims) != list(wdims):
        return f"output {name}: shape {gdims} != {wdims}"
    if g.dtype == np.float64:
        if not np.allclose(g, w, rtol=1e-3, atol=1e-5, equal_nan=True):
            bad = ~np.isclose(g, w, rtol=1e-3, atol=1e-5, equal_nan=True)
            err = np.max(np.abs(np.where(bad, g - w, 0)))
            return f"output {name}: {int(bad.sum())} of {g.size} values differ, max abs error {err:.3g}"
        return None
    if not np.array_equal(g, w):
        return f"output {name}: {int(np.sum(g != w))} of {g.size} values differ"
    return None


# ---- cases ----------------------------------------------------------------------------

def read_list(path):
    out = {}
    if path and os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                out[name] = reason.strip()
    return out


def run_case(case, mode, args, xfail):
    """Builds and runs one case in one mode; (status, message) with status passed, failed,
    expected or unsupported, or None when the folder is no case."""
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
        for v in list(m.graph.input) + list(m.graph.output):
            if v.name not in inits and not v.type.HasField("tensor_type"):
                return "unsupported", f"'{v.name}' is a sequence, map or optional (compiled code takes tensors)"
        shapes, feeds = [], []
        for k, nm in enumerate(ins):
            p = os.path.join(data, f"input_{k}.pb")
            if not os.path.exists(p):
                continue
            t = read_pb(p)
            if t is None:
                return "unsupported", "a sequence or optional input (compiled code takes tensors)"
            if t[1]:
                shapes += ["--shape", f"{nm}={'x'.join(str(d) for d in t[1])}"]
            feeds += ["-i", f"{nm}={p}"]
        # One kernel thread per case: --jobs runs cases side by side.
        env = dict(os.environ, HODU_NUM_THREADS="1")
        flags = ["--standalone"] if mode == "standalone" else []
        r = subprocess.run([args.hodu, "build", model, "-o", lib, "-q", f"-O{args.opt}"] + flags + shapes,
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            msg = r.stderr.strip()
            # A generator refusal (clear error) is "unsupported"; a C compiler failure or crash is a bug.
            if msg.startswith("error: ") and "the C compiler failed" not in msg and "internal" not in msg \
                    and r.returncode == 1:
                return ("expected", msg.splitlines()[0][:200]) if name in xfail else \
                    ("unsupported", msg.splitlines()[0][:200])
            return failure("build: " + msg[:600])
        od = os.path.join(tmp, "out")
        r = subprocess.run([args.hodu, "run", lib, "--threads", "1", "-f", "hdt", "-o", od] + feeds,
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return failure("run: " + r.stderr.strip()[-300:])
        for k, nm in enumerate(outs):
            p = os.path.join(data, f"output_{k}.pb")
            if not os.path.exists(p):
                continue
            want = read_pb(p)
            got_file = os.path.join(od, sanitize(nm) + ".hdt")
            if want is None or not os.path.exists(got_file):
                return failure(f"output {nm}: not a tensor or not written")
            got = read_hdt(got_file)
            if len(got) != 1:
                return failure(f"output {nm}: {len(got)} tensors in its file")
            problem = compare(nm, next(iter(got.values())), want)
            if problem:
                return failure(problem)
    if name in xfail:
        print(f"note: {name} is listed as an expected failure but passes ({mode})", flush=True)
    return "passed", ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--root", default=os.path.join(HERE, "..", "..", "..", "shared", "onnx-tests", "node"))
    ap.add_argument("--filter", default="*", help="glob of case names; several separated by commas")
    ap.add_argument("--every", type=int, default=1,
                    help="run every Nth case of the sorted list (ctest: a fixed sample; 1 = all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases built and run side by side")
    ap.add_argument("--modes", default="default,standalone", help="comma-separated: default, standalone")
    ap.add_argument("--min-pass", type=int, default=0, help="fail when fewer cases pass in a mode")
    ap.add_argument("--min-cases", type=int, default=0, help="fail when fewer cases are found")
    ap.add_argument("--expected", default=os.path.join(HERE, "expected_failures.txt"),
                    help="expected failures: one 'case reason' a line")
    ap.add_argument("--list-failures", action="store_true", help="print failures and refusals as list lines")
    ap.add_argument("-O", dest="opt", default="2")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        print(f"error: ONNX backend test folder '{args.root}' not found (--root)")
        return 1
    xfail = read_list(args.expected)
    cases = sorted(d for d in glob.glob(os.path.join(args.root, "test_*")) if os.path.isdir(d))
    globs = [g for g in args.filter.split(",") if g]
    cases = [c for c in cases if any(fnmatch.fnmatch(os.path.basename(c), g) for g in globs)]
    if len(cases) < args.min_cases:
        print(f"error: found {len(cases)} cases under {args.root}, expected at least {args.min_cases}")
        return 1
    cases = cases[::max(1, args.every)]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ("default", "standalone"):
            print(f"error: --modes: unknown mode '{m}' (default, standalone)")
            return 1
    jobs = [(c, m) for c in cases for m in modes]
    results = {m: {"passed": [], "failed": [], "expected": [], "unsupported": []} for m in modes}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        def guarded(job):
            try:
                return run_case(job[0], job[1], args, xfail)
            except Exception as e:  # a harness problem with one case is that case's failure
                return "failed", f"harness: {type(e).__name__}: {e}"

        for (case, mode), (status, msg) in zip(jobs, pool.map(guarded, jobs)):
            name = os.path.basename(case)
            if status is None:
                continue
            results[mode][status].append((name, msg))
            if args.verbose:
                print(f"{name} [{mode}] {'ok' if status == 'passed' else status + ': ' + msg[:200]}", flush=True)
    secs = time.time() - t0
    rc = 0
    sample = f", 1 in {args.every} of the sorted list" if args.every > 1 else ""
    for mode in modes:
        r = results[mode]
        for n, msg in r["failed"]:
            print(f"FAIL {n} [{mode}]: {msg}")
        if args.list_failures:
            for kind in ("failed", "unsupported", "expected"):
                for n, msg in r[kind]:
                    print(f"{kind} {mode} {n} {msg}")
        total = sum(len(v) for v in r.values())
        print(f"aot conformance [{mode}]: {len(r['passed'])} passed, {len(r['failed'])} failed, "
              f"{len(r['expected'])} expected failures, {len(r['unsupported'])} unsupported "
              f"(of {total} cases{sample})")
        if r["failed"]:
            rc = 1
        if len(r["passed"]) < args.min_pass:
            print(f"error: fewer than {args.min_pass} cases passed [{mode}]")
            rc = 1
    print(f"aot conformance: {len(cases)} cases x {len(modes)} modes in {secs:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
