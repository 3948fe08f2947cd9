#!/usr/bin/env bash
# examples/train as a user meets it (docs/frontend.md): install hodu to a prefix, build the
# examples out of tree against it with find_package(hodu), train the digits CNN and the
# transformer, check their accuracy, then `hodu build` their ONNX files and check that the
# compiled programs predict what the trained modules predicted.
# Usage: examples_test.sh HODU_BINARY SOURCE_DIR
set -u
hodu_build=$1
src=$2
source "$src/tests/cli/lib.sh"

/usr/bin/python3 -c "import sklearn" 2>/dev/null || { echo "SKIP: python3-sklearn is not installed"; exit 77; }
build_dir=$(cd "$(dirname "$hodu_build")/.." && pwd)
[ -f "$build_dir/lib/libhodu.so" ] || { echo "FAIL: $build_dir/lib/libhodu.so not built (ninja hodu_shared)"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$hodu_build" install --prefix "$tmp/prefix" -q >/dev/null || { echo "FAIL: hodu install"; exit 1; }
[ -f "$tmp/prefix/lib/libhodu.so" ] && [ -f "$tmp/prefix/include/hodu/hodu.h" ] && ok || bad "install lacks libhodu.so or hodu.h"
hodu="$tmp/prefix/bin/hodu"

gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S "$src/examples/train" -B "$tmp/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release \
     >"$tmp/cmake.log" 2>&1 && cmake --build "$tmp/build" >>"$tmp/cmake.log" 2>&1; then ok
else bad "examples/train does not build against the installed hodu" "$(tail -30 "$tmp/cmake.log")"; summary; exit 1; fi

/usr/bin/python3 "$src/examples/train/make_digits.py" "$tmp/digits.npz" >/dev/null && ok || bad "make_digits.py"

# ---- digits CNN: >= 97 % test accuracy in under a minute ----
start=$(date +%s%N)
"$tmp/build/train_digits" "$tmp/digits.npz" --out "$tmp/digits" > "$tmp/digits.log" 2>&1
rc=$?
seconds=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
cat "$tmp/digits.log"
[ $rc -eq 0 ] && ok || bad "train_digits exited $rc"
acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$tmp/digits.log")
[ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 97) }' && ok || bad "digits test accuracy ${acc:-?}% (want at least 97%)"
awk -v s="$seconds" 'BEGIN { exit !(s < 60) }' && ok || bad "train_digits took ${seconds}s (want under 60)"
echo "train_digits: ${acc}% in ${seconds}s"

# The ONNX file compiled by hodu build predicts what the trained module did.
if "$hodu" build "$tmp/digits/digits.onnx" -o "$tmp/digits/digits" --dim batch=360 -q > "$tmp/build_digits.log" 2>&1 &&
   "$tmp/digits/digits" -i input="$tmp/digits/x_test.npy" -o "$tmp/digits/built" > "$tmp/run_digits.log" 2>&1; then ok
else bad "hodu build / run of digits.onnx" "$(tail -20 "$tmp/build_digits.log" "$tmp/run_digits.log")"; fi
if /usr/bin/python3 - "$tmp/digits" <<'PY'; then ok; else bad "the compiled digits model predicts differently"; fi
import sys, numpy as np
d = sys.argv[1]
logits = np.load(f"{d}/built/output.npy")
pred = np.load(f"{d}/pred.npy")
same = (logits.argmax(1) == pred).sum()
print(f"compiled digits model: {same} of {len(pred)} predictions equal the trained module's")
sys.exit(0 if same == len(pred) else 1)
PY

# ---- transformer: reverses sequences ----
"$tmp/build/train_transformer" --out "$tmp/tf" > "$tmp/tf.log" 2>&1
rc=$?
cat "$tmp/tf.log"
[ $rc -eq 0 ] && ok || bad "train_transformer exited $rc"
tacc=$(sed -n 's/^token accuracy \([0-9.]*\)%.*/\1/p' "$tmp/tf.log")
[ -n "$tacc" ] && awk -v a="$tacc" 'BEGIN { exit !(a >= 95) }' && ok || bad "transformer token accuracy ${tacc:-?}% (want at least 95%)"
if "$hodu" build "$tmp/tf/transformer.onnx" -o "$tmp/tf/transformer" --dim batch=256 -q > "$tmp/build_tf.log" 2>&1 &&
   "$tmp/tf/transformer" -i tokens="$tmp/tf/tokens.npy" -o "$tmp/tf/built" > "$tmp/run_tf.log" 2>&1; then ok
else bad "hodu build / run of transformer.onnx" "$(tail -20 "$tmp/build_tf.log" "$tmp/run_tf.log")"; fi
if /usr/bin/python3 - "$tmp/tf" <<'PY'; then ok; else bad "the compiled transformer predicts differently"; fi
import sys, numpy as np
d = sys.argv[1]
logits = np.load(f"{d}/built/logits.npy")
pred = np.load(f"{d}/pred.npy")
same = (logits.argmax(-1) == pred).sum()
print(f"compiled transformer: {same} of {pred.size} token predictions equal the trained module's")
sys.exit(0 if same == pred.size else 1)
PY
summary
