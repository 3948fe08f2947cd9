#!/usr/bin/env bash
# usage: package_test.sh HODU_BINARY SOURCE_DIR
# hodu pack / run / info / convert on .hodupkg files as a user runs them: the host library
# runs and agrees with the model; a package without a host library runs its graph; an
# aarch64 library runs under qemu-aarch64 over the package's weights; damaged files are
# refused naming what failed. Prints "N passed, M failed".
set -u
hodu=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
require_onnx "write inputs and compare outputs"
h() { timeout 120 "$hodu" "$@"; }
model=$src/examples/models/tiny_cnn.onnx
image=$src/examples/inputs/tiny_cnn_image.npy
host=$(uname -m)-linux-gnu
pkg=$tmp/tiny.hodupkg

# Are two .npy files (or the outputs in two folders) equal within a relative tolerance?
same_npy() {  # same_npy A.npy B.npy [TOL]
  /usr/bin/python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import sys, numpy as np
a, b, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
err = np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b.astype(np.float64)), 1e-30)
assert err <= tol, err
PY
}

expect_ok "help lists pack" "pack +package a model" "$hodu" --help
expect_ok "pack --help" "--target.*--graph-only|--graph-only" "$hodu" pack --help
expect_ok "pack --help names the format doc" "docs/hodupkg.md" "$hodu" pack --help

# The reference: the model itself.
h run "$model" -i image="$image" -o "$tmp/ref" -f npy >/dev/null 2>&1 || bad "reference run failed"

# 1. A package with the host library.
expect_ok "pack" "packed .*tiny.hodupkg.*weights .* stored once" h pack "$model" -o "$pkg" --dim batch=2 \
  --name tiny-cnn --version 1.2.0 --author "Hodu Tests" --license MIT --description "A tiny CNN." \
  --doc-input image="8x8 grayscale images" --doc-output probabilities="class probabilities"
[ -f "$pkg" ] && ok || bad "pack wrote no file"
expect_ok "info: name and version" "name: +tiny-cnn 1.2.0" h info "$pkg"
expect_ok "info: author, license" "license: +MIT" h info "$pkg"
expect_ok "info: input doc and symbolic dim" "image: f32\[batch, 1, 8, 8\]  -- 8x8 grayscale images" h info "$pkg"
expect_ok "info: checksums" "checksums OK" h info "$pkg"
expect_ok "info --check: the graph" "problems: +none found in its graph" h info "$pkg" --check
expect_ok "info: the host target" "$host .*library .*onednn kernels.*this host" h info "$pkg"
expect_ok "info: what runs here" "on this host: +$host runs its $host library" h info "$pkg"
h info "$pkg" --json > "$tmp/info.json" 2>&1
if /usr/bin/python3 - "$tmp/info.json" "$host" <<'PY'; then ok; else bad "info --json lacks the package's fields"; fi
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "hodupkg" and j["format_version"] == 1
assert (j["name"], j["version"], j["author"], j["license"]) == ("tiny-cnn", "1.2.0", "Hodu Tests", "MIT")
assert j["inputs"][0]["shape"] == ["batch", 1, 8, 8] and j["inputs"][0]["dtype"] == "f32"
assert j["outputs"][0]["doc"] == "class probabilities"
assert j["opsets"]["ai.onnx"] >= 13 and j["hodu_version"] and j["build_date"].endswith("Z")
assert [t["triple"] for t in j["targets"]] == [sys.argv[2]]
p = j["package"]
assert p["checksums_ok"] is True and len(p["checksum"]) == 64 and p["host"]["runs"] == "library"
names = [s["name"] for s in p["sections"]]
assert {"meta", "graph", "weights", "lib/" + sys.argv[2], "header/" + sys.argv[2]} <= set(names), names
# Weights once: the weights section is the graph's tensors (2.8 KiB), the library holds none.
assert j["weights"]["bytes"] == j["weights"]["graph_bytes"] > 2000
PY
expect_ok "run: the host library" "running its $host library" h run "$pkg" -i image="$image" -v
expect_ok "run: Using line" "Using: engine native" h run "$pkg" -i image="$image" -v
h run "$pkg" -i image="$image" -o "$tmp/lib" -f npy >/dev/null 2>&1
same_npy "$tmp/lib/probabilities.npy" "$tmp/ref/probabilities.npy" && ok || bad "the package's library disagrees with the model"
expect_ok "run --engine cpu: the graph" "Using: engine cpu" h run "$pkg" -i image="$image" --engine cpu -v
expect_ok "bench a package" "engine native" h bench "$pkg" -i image="$image" --iters 3 --warmup 1
/usr/bin/python3 -c "import numpy as np; np.save('$tmp/x3.npy', np.ones((3, 1, 8, 8), np.float32))"
expect_error "a size the library was not built for" "was built for image \[2, 1, 8, 8\]; --engine cpu runs the graph" \
  h run "$pkg" -i image="$tmp/x3.npy"
expect_ok "...which the graph runs" "probabilities: f32\[3, 10\]" h run "$pkg" -i image="$tmp/x3.npy" --engine cpu

# 2. convert: the graph back to ONNX and .hdss.
expect_ok "convert to onnx" "wrote" h convert "$pkg" -o "$tmp/back.onnx"
h run "$tmp/back.onnx" -i image="$image" -o "$tmp/back" -f npy >/dev/null 2>&1
same_npy "$tmp/back/probabilities.npy" "$tmp/ref/probabilities.npy" && ok || bad "the converted graph disagrees"
expect_ok "convert to hdss" "wrote" h convert "$pkg" -o "$tmp/back.hdss"
if /usr/bin/python3 -c "
import onnx, sys
m = onnx.load(sys.argv[1])
assert m.graph.input[0].doc_string == '8x8 grayscale images', m.graph.input[0].doc_string
assert [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == ['batch', 1, 8, 8]
" "$tmp/back.onnx"; then ok; else bad "the converted ONNX lost the input's doc or its symbolic dim"; fi
expect_error "convert cannot write a package" "hodu pack" h convert "$model" -o "$tmp/no.hodupkg"

# 3. The package still runs its library once the build tree it came from is gone: the
#    library's libhodu_kernels is this hodu's, loaded first.
kdir=$tmp/kernels_copy
mkdir -p "$kdir" && cp "$(dirname "$hodu")/../lib/libhodu_kernels.so" "$kdir/" 2>/dev/null
if [ -f "$kdir/libhodu_kernels.so" ]; then
  HODU_KERNELS_DIR=$kdir h pack "$model" -o "$tmp/moved.hodupkg" --dim batch=2 -q 2>/dev/null
  rm -rf "$kdir"
  expect_ok "library linked against a removed kernel folder still runs" "running its $host library" \
    h run "$tmp/moved.hodupkg" -i image="$image" -v
  # And where this hodu's kernel library cannot be found either: the graph, with a warning.
  mkdir -p "$tmp/empty"
  expect_ok "no kernel library here: warning and the graph" "warning: .*kernel library.*running the graph on the default engine" \
    env HODU_KERNELS_DIR="$tmp/empty" "$hodu" run "$tmp/moved.hodupkg" -i image="$image"
else
  bad "no libhodu_kernels.so next to $hodu"
fi

# 4. No library for this host: the graph on the cpu engine; an aarch64 library under qemu.
if command -v aarch64-linux-gnu-gcc >/dev/null; then
  expect_ok "pack for aarch64 and the host" "lib/aarch64-linux-gnu" h pack "$model" -o "$tmp/both.hodupkg" --dim batch=2 \
    --target "$host" --target aarch64-linux-gnu
  expect_ok "pack for aarch64 only" "packed" h pack "$model" -o "$tmp/arm.hodupkg" --dim batch=2 --target aarch64-linux-gnu
  expect_ok "info: no host library" "runs its graph on the cpu engine \(no library for $host\)" h info "$tmp/arm.hodupkg"
  expect_ok "run: says the graph runs" "no prebuilt library for this host \($host; the package has aarch64-linux-gnu\)" \
    h run "$tmp/arm.hodupkg" -i image="$image" -v
  h run "$tmp/arm.hodupkg" -i image="$image" -o "$tmp/graph" -f npy >/dev/null 2>&1
  same_npy "$tmp/graph/probabilities.npy" "$tmp/ref/probabilities.npy" && ok || bad "the graph of an aarch64-only package disagrees"
  if command -v qemu-aarch64 >/dev/null; then
    # A device without hodu: examples/hodupkg/run_hodupkg.c reads the package, loads its
    # aarch64 library and runs it over the package's weights section.
    mkdir -p "$tmp/inc/dlpack" "$tmp/qemu"
    cp /usr/include/dlpack/dlpack.h "$tmp/inc/dlpack/"
    if aarch64-linux-gnu-gcc -std=gnu11 -O2 -I"$tmp/inc" "$src/examples/hodupkg/run_hodupkg.c" -ldl \
         -o "$tmp/run_hodupkg_arm" 2>"$tmp/cc.log"; then
      expect_ok "aarch64 library of the package under qemu" "wrote .*probabilities.npy" \
        qemu-aarch64 -L /usr/aarch64-linux-gnu "$tmp/run_hodupkg_arm" "$tmp/both.hodupkg" aarch64-linux-gnu \
        -i image="$image" -o "$tmp/qemu"
      same_npy "$tmp/qemu/probabilities.npy" "$tmp/ref/probabilities.npy" && ok || bad "the aarch64 library disagrees under qemu"
      expect_error "the C loader: no library for a triple" "has no library for riscv64-linux-gnu" \
        qemu-aarch64 -L /usr/aarch64-linux-gnu "$tmp/run_hodupkg_arm" "$tmp/both.hodupkg" riscv64-linux-gnu -i image="$image"
    else
      bad "cross-compiling examples/hodupkg/run_hodupkg.c failed" "$(cat "$tmp/cc.log")"
    fi
  else
    echo "skip: qemu-aarch64 is missing (Debian qemu-user): the aarch64 library of a package is not run"
  fi
else
  echo "skip: aarch64-linux-gnu-gcc is missing (Debian gcc-aarch64-linux-gnu): no aarch64 package is built"
fi
expect_ok "graph-only package" "packed" h pack "$model" -o "$tmp/graph.hodupkg" --graph-only
expect_ok "graph-only runs on the cpu engine" "Using: engine cpu" h run "$tmp/graph.hodupkg" -i image="$image" -v

# 5. Damaged packages are refused, naming what failed (the bytes are edited by Python).
damage() {  # damage IN OUT WHAT
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import hashlib, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
what = sys.argv[3]
def entry(name):
    n = struct.unpack_from("<I", b, 20)[0]
    for i in range(n):
        at = 128 + 128 * i
        if b[at:at + 48].split(b"\0")[0] == name.encode():
            return at
def section(name):
    e = entry(name)
    return struct.unpack_from("<QQ", b, e + 56)
if what == "corrupt":      # one bit of the weights flipped
    off, size = section("weights")
    b[off + size // 2] ^= 1
elif what == "tampered":   # weights changed, its SHA-256 in the table updated to match
    off, size = section("weights")
    b[off + 64] ^= 0xff
    b[entry("weights") + 72:entry("weights") + 104] = hashlib.sha256(b[off:off + size]).digest()
elif what == "truncated":
    del b[len(b) - 1000:]
elif what == "version":
    struct.pack_into("<I", b, 8, 9)
elif what == "appended":
    b += b"more"
open(sys.argv[2], "wb").write(b)
PY
}
damage "$pkg" "$tmp/corrupt.hodupkg" corrupt
expect_error "corrupt weights: run" "section 'weights' .* fails its SHA-256 check" h run "$tmp/corrupt.hodupkg" -i image="$image"
expect_error "corrupt weights: info" "corrupt.hodupkg: section 'weights'" h info "$tmp/corrupt.hodupkg"
damage "$pkg" "$tmp/tampered.hodupkg" tampered
expect_error "tampered" "package checksum mismatch over the header and table of contents" h run "$tmp/tampered.hodupkg" -i image="$image"
damage "$pkg" "$tmp/truncated.hodupkg" truncated
expect_error "truncated" "truncated: the header records [0-9]+ bytes, the file has" h info "$tmp/truncated.hodupkg"
damage "$pkg" "$tmp/version.hodupkg" version
expect_error "unknown version" "package format version 9 is newer than this hodu reads \(1\)" h run "$tmp/version.hodupkg" -i image="$image"
damage "$pkg" "$tmp/appended.hodupkg" appended
expect_error "appended bytes" "data after the end" h info "$tmp/appended.hodupkg"
cp "$model" "$tmp/not.hodupkg"
expect_error "not a package" "not a .hodupkg package \(wrong magic" h info "$tmp/not.hodupkg"
expect_error "convert a corrupt package" "fails its SHA-256 check" h convert "$tmp/corrupt.hodupkg" -o "$tmp/c.onnx"

# 6. Bad pack options.
expect_error "output not .hodupkg" "ends in .hodupkg" h pack "$model" -o "$tmp/x.zip" --dim batch=2
expect_error "doc for a missing input" "--doc-input nope: the model has no such input \(it has 'image'\)" \
  h pack "$model" -o "$tmp/x.hodupkg" --dim batch=2 --doc-input nope=x
expect_error "-O3" "-march=native" h pack "$model" -o "$tmp/x.hodupkg" --dim batch=2 -O 3
expect_error "bad triple" "not a GNU target triple" h pack "$model" -o "$tmp/x.hodupkg" --target "x86 64"
expect_error "packing a package" "is a package already" h pack "$pkg" -o "$tmp/x.hodupkg"
[ ! -e "$tmp/x.hodupkg" ] && ok || bad "a failed pack left a file behind"
summary
