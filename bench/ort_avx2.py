#!/usr/bin/python3
"""Makes a copy of the benchmark harness whose ONNX Runtime runs its AVX2 kernels on an AVX-512
CPU, so that `hodu bench --max-isa avx2` can be set beside ORT's AVX2 code on one machine: what
a user with an AVX2-only CPU sees. ONNX Runtime has no ISA cap of its own; MLAS picks its
kernels once from CPUID (MLAS_PLATFORM's constructor). This copies tests/ort and bench's
harness into OUT and, in the copy of libonnxruntime.so (1.30.0, linux x64), turns the branch
that skips MLAS's AVX-512 kernels when CPUID lacks AVX512F into an unconditional one:

    test $0x10000,%r10d ; je +0x0e ; mov %r8,%rax ; not %rax ; test $0xe0,%al
    (the AVX512F bit of CPUID leaf 7 EBX)   ->   jmp +0x0e

Nothing is downloaded; the original under tests/ort is not touched.
usage: /usr/bin/python3 bench/ort_avx2.py [OUT]   (default /tmp/ort-avx2)
then:  /usr/bin/python3 OUT/bench/run_bench.py --hodu build/bin/hodu --max-isa avx2 MODELS
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.path.join("node_modules", "onnxruntime-node", "bin", "napi-v6", "linux", "x64", "libonnxruntime.so.1")
# test $0x10000,%r10d; je +0x0e; mov %r8,%rax; not %rax; test $0xe0,%al
PATTERN = bytes.fromhex("41f7c200000100740e4c89c048f7d0a8e0")
JE_AT = 7  # offset of the je (0x74) in PATTERN


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ort-avx2")
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
    at = data.find(PATTERN)
    if at < 0 or data.find(PATTERN, at + 1) >= 0:
        sys.exit("ort_avx2: MLAS's AVX512F check not found exactly once in " + lib +
                 " (another onnxruntime-node than 1.30.0?)")
    data[at + JE_AT] = 0xEB  # je -> jmp
    with open(lib, "wb") as f:
        f.write(data)
    print(f"ort_avx2: {out}: ONNX Runtime there runs MLAS's AVX2 kernels (patched at 0x{at + JE_AT:x})")
    print(f"  /usr/bin/python3 {out}/bench/run_bench.py --hodu {ROOT}/build/bin/hodu --max-isa avx2 MODELS")


if __name__ == "__main__":
    main()
