#!/usr/bin/env bash
# The whole test suite: builds, then runs every test through ctest (unit tests,
# the ONNX conformance suite on the interpreter, CLI tests). Prints ctest's
# summary line. HODU_SANITIZE=1 runs it under ASan + UBSan in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${HODU_SANITIZE:-0}" = 1 ]; then
  export HODU_BUILD_DIR=build-asan
  bash scripts/build.sh -DHODU_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  bash scripts/build.sh
fi
build=${HODU_BUILD_DIR:-build}
cd "$build"
ctest --output-on-failure --timeout 1800 -j "${HODU_TEST_JOBS:-2}"
