#!/usr/bin/env bash
# Installs every Debian package hodu needs to build and test. Nothing else is
# downloaded. Safe to run again. Needs root (or sudo).
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libdlpack-dev libcli11-dev nlohmann-json3-dev libfmt-dev libtomlplusplus-dev zlib1g-dev
  libssl-dev  # SHA-256 of .hodupkg sections (libcrypto)
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-onnx
  python3-torch python3-pip python3-venv python3-setuptools python3-wheel  # Python SDK: DLPack tests, pip install .
  python3-torchvision  # real architectures for aot_vs_ort and bench/export_zoo.py
  libtorch-dev  # torch.ops.hodu's C++ extension (python/torch_ops; optional: skipped without it)
  python3-sklearn  # the digits data set of examples/train (frontend_examples)
  graphviz valgrind
  libcpp-httplib-dev  # hodugaki's HTTP server and client (src/distributed)
  libopenmpi-dev openmpi-bin  # hodugaki train: data-parallel training over MPI (src/distributed/training)
  libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev python3-pil
  clang gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user  # hodu build: .ll/.bc, aarch64 cross builds
)
# Node.js runs ONNX Runtime (onnxruntime-node). Some machines carry a Node.js
# build that bundles npm; Debian's separate npm package conflicts with it.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages are installed"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# ONNX Runtime 1.30 (CPU), the oracle and speed peer of the tests and benchmarks, from npm.
cd "$(dirname "$0")/../tests/ort"
if [ ! -d node_modules/onnxruntime-node ]; then
  echo "setup: installing onnxruntime-node 1.30.0 from npm"
  npm install --ignore-scripts --no-audit --no-fund --loglevel=error
fi
