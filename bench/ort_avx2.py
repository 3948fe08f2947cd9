#!/usr/bin/python3
"""Makes a copy of the benchmark harness whose ONNX Runtime runs its AVX2 kernels on an AVX-512
CPU, so that `hodu bench --max-isa avx2` can be set beside ORT's AVX2 code on one machine: what
a user with an AVX2-only CPU sees. ONNX Runtime has no ISA cap of its own; MLAS picks its
kernels once from CPUID (MLAS_PLATFORM's constructor). This copies tests/ort and bench's
harness into OUT and, in the copy of libonnxruntime.so (1.30.0, linux x64), turns the branch
that skips MLAS's AVX-512 kernels when CPUID lacks AVX512F into an unconditional one:

    test $0x10000,%r10d ; je +0x0e ; mov %r8,%rax ; not %rax ; test $0xe0,%al
    (the AVX512F bit of CPUID leaf 7 EBX)   ->   jmp +0x0e

and, unless --avx-vnni, the branch that takes MLAS's AVX-VNNI int8 kernels (Intel CPUs since
2021 have AVX-VNNI beside AVX-512; AVX2-only CPUs such as AMD's Zen 2/3 have neither):

    mov $7,%eax ; mov $1,%ecx ; cpuid ; test $0x10,%al ; je +0x38
    (the AVX-VNNI bit of CPUID leaf 7 sub-leaf 1 EAX)   ->   jmp +0x38

Without it, on such a CPU the copy's quantized models ran 2x faster than on an AVX2-only one
(contrib_resnet18_qoperator: 10 ms against hodu's 28 at `--max-isa avx2`, which runs no VNNI).
With --avx-vnni the copy is an AVX2 + AVX-VNNI CPU (Alder Lake, Sierra Forest): set it beside
`--max-isa avx2_vnni`.

Nothing is downloaded; the original under tests/ort is not touched.
usage: /usr/bin/python3 bench/ort_avx2.py [--avx-vnni] [OUT]   (default /tmp/ort-avx2)
then:  /usr/bin/python3 OUT/bench/run_bench.py --hodu build/bin/hodu --max-isa avx2 MODELS
"""
import argparse
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.path.join("node_modules", "onnxruntime-node", "bin", "napi-v6", "linux", "x64", "libonnxruntime.so.1")
# test $0x10000,%r10d; je +0x0e; mov %r8,%rax; not %rax; test $0xe0,%al
PATTERN = bytes.fromhex("41f7c200000100740e4c89c048f7d0a8e0")
JE_AT = 7  # offset of the je (0x74) in PATTERN
# mov $7,%eax; mov $1,%ecx; cpuid; test $0x10,%al; je +0x38
VNNI_PATTERN = bytes.fromhex("b807000000b9010000000fa2a8107438")
VNNI_JE_AT = 14


def patch_branch(data, pattern, je_at, what, lib):
    """Turns the je at pattern + je_at into a jmp; the pattern must occur exactly once."""
    at = data.find(pattern)
    if at < 0 or data.find(pattern, at + 1) >= 0:
        sys.exit(f"ort_avx2: MLAS's {what} check not found exactly once in {lib} (another onnxruntime-node than 1.30.0?)")
    data[at + je_at] = 0xEB  # je -> jmp
    return at + je_at


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default="/tmp/ort-avx2")
    ap.add_argument("--avx-vnni", action="store_true", help="keep MLAS's AVX-VNNI int8 kernels (an AVX2 + AVX-VNNI CPU)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    src_ort = os.path.join(ROOT, "tests", "ort")
    if not os.path.isfile(os.path.join(src_ort, LIB)):
        sys.exit("ort_avx2: no onnxruntime-node under tests/ort: run scripts/setup.sh first")
    os.makedirs(os.path.join(out, "bench"), exist_ok=True)
    for f in ("run_bench.py", "ort_bench.js"):
        shutil.copy2(os.path.join(HERE, f), os.path.join(out, "bench", f))
    dst_ort = os.path.join(out, "tests", "ort")
    if os.path.isdir(dst_ort):
        shutil.rmtree(dst_ort)
    shutil.copytree(src_ort, dst_ort, symlinks=False)
    lib = os.path.join(dst_ort, LIB)
    data = bytearray(open(lib, "rb").read())
    at = [patch_branch(data, PATTERN, JE_AT, "AVX512F", lib)]
    if not args.avx_vnni:
        at.append(patch_branch(data, VNNI_PATTERN, VNNI_JE_AT, "AVX-VNNI", lib))
    with open(lib, "wb") as f:
        f.write(data)
    kind = "AVX2 + AVX-VNNI" if args.avx_vnni else "AVX2 (no AVX-VNNI)"
    where = ", ".join(f"0x{a:x}" for a in at)
    print(f"ort_avx2: {out}: ONNX Runtime there runs MLAS's {kind} kernels (patched at {where})")
    cap = "avx2_vnni" if args.avx_vnni else "avx2"
    print(f"  /usr/bin/python3 {out}/bench/run_bench.py --hodu {ROOT}/build/bin/hodu --max-isa {cap} MODELS")


if __name__ == "__main__":
    main()
