#!/usr/bin/env bash
# usage: determinism_test.sh HODU_BINARY SOURCE_DIR
# The same inputs give bit-identical outputs run after run and at any thread
# count, on every engine (native: the model compiled by hodu build): a model
# with work big enough to be split across threads (convolution, matmul,
# reductions, softmax) runs at 1, 2 and 4 threads and every output file must
# be byte-identical.
set -u
hodu=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
require_onnx "write the test model"
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
out = sys.argv[1]
rng = np.random.default_rng(7)
w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
m2 = numpy_helper.from_array(rng.standard_normal((1024, 96)).astype(np.float32), "m2")
axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
nodes = [
    helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c"], ["r"]),
    helper.make_node("Reshape", ["r", "shape"], ["flat"]),
    helper.make_node("MatMul", ["flat", "m2"], ["mm"]),
    helper.make_node("Softmax", ["mm"], ["probs"], axis=-1),
    helper.make_node("ReduceSum", ["r", "axes"], ["sum"], keepdims=0),
]
shape = numpy_helper.from_array(np.array([32, 1024], np.int64), "shape")
g = helper.make_graph(nodes, "determinism", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                      [helper.make_tensor_value_info("probs", TensorProto.FLOAT, None),
                       helper.make_tensor_value_info("sum", TensorProto.FLOAT, None)],
                      [w, b, m2, axes, shape])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), f"{out}/model.onnx")
np.save(f"{out}/x.npy", rng.standard_normal((1, 16, 32, 32)).astype(np.float32))
PY

engines=$("$hodu" run --help 2>&1 | grep -q -- "--engine" && echo "interp default native")
for engine in $engines; do
  flag=(); [ "$engine" != default ] && flag=(--engine "$engine")
  for threads in 1 1 2 4; do
    n=$((${n:-0} + 1))
    "$hodu" run "$tmp/model.onnx" -i x="$tmp/x.npy" -f npy -o "$tmp/$engine.$n" --threads $threads "${flag[@]}" >/dev/null 2>&1 \
      || { bad "$engine engine at $threads threads fails"; continue; }
    if [ "$n" -gt 1 ] && [ -d "$tmp/$engine.1" ]; then
      same=1
      for f in "$tmp/$engine.1"/*.npy; do cmp -s "$f" "$tmp/$engine.$n/$(basename "$f")" || same=0; done
      if [ $same = 1 ]; then ok; else bad "$engine engine: outputs at $threads threads (run $n) differ from run 1 at 1 thread"; fi
    fi
  done
  unset n
done
summary
