#!/usr/bin/env bash
# Configures and builds hodu into ./build (or $HODU_BUILD_DIR). Extra
# arguments go to CMake, e.g. scripts/build.sh -DHODU_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HODU_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja "$@" > "$build.cmake.log" 2>&1 || { cat "$build.cmake.log"; exit 1; }
ninja -C "$build" -j "${HODU_JOBS:-$(nproc)}"
