#!/usr/bin/env bash
# usage: grad_test.sh HODU_BINARY SOURCE_DIR
# hodu grad as a user runs it on the bundled tiny CNN: a gradient graph whose gradients the cpu
# engine and the interpreter agree on (and that vanish where the math says they must: the
# probabilities of a softmax sum to 1), a training step whose SGD update is p - lr·grad of the
# same gradient graph, and clear errors for bad requests.
set -u
hodu=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c "import numpy" 2>/dev/null || { echo "skipped: Debian's python3-numpy is needed"; exit 77; }
model="$src/examples/models/tiny_cnn.onnx"
image="$src/examples/inputs/tiny_cnn_image.npy"

expect_ok "grad --help" "Usage|usage" "$hodu" grad --help
expect_ok "gradient graph" "wrote .*g.onnx" "$hodu" grad "$model" --loss probabilities --wrt image --seed-input -o "$tmp/g.onnx"
expect_ok "it lists grad.image" "grad.image: f32\[batch, 1, 8, 8\]" "$hodu" info "$tmp/g.onnx"
/usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
np.save(sys.argv[1] + "/onehot.npy", np.eye(10, dtype=np.float32)[3:5])   # the image file has a batch of 2
np.save(sys.argv[1] + "/ones.npy", np.ones((2, 10), np.float32))
np.save(sys.argv[1] + "/lr.npy", np.array(0.1, np.float32))
PY
for engine in cpu interp; do
  for seed in onehot ones; do
    expect_ok "run gradient graph ($engine, $seed)" "wrote" "$hodu" run "$tmp/g.onnx" --engine $engine -i image="$image" \
      -i grad.probabilities="$tmp/$seed.npy" -f npy -o "$tmp/$engine-$seed"
  done
done
expect_ok "gradients agree and vanish for a constant seed" "ok" /usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
cpu, ref = np.load(d + "/cpu-onehot/grad.image.npy"), np.load(d + "/interp-onehot/grad.image.npy")
assert cpu.shape == (2, 1, 8, 8), cpu.shape
assert np.abs(ref).max() > 1e-3, "a one-hot seed gives a gradient"
assert np.abs(cpu - ref).max() <= 1e-5 * np.abs(ref).max(), np.abs(cpu - ref).max()
# d(sum of softmax)/dx = 0
for e in ("cpu", "interp"):
    g = np.load(d + f"/{e}-ones/grad.image.npy")
    assert np.abs(g).max() < 1e-6, (e, np.abs(g).max())
print("ok")
PY

# A training step: SGD's update is p - lr·grad, grad from the gradient graph of the same loss. The
# loss is the logits' sum: the probabilities' sum is 1 whatever the params, so its gradient is 0
# up to rounding, and a check of p - lr·0 would prove nothing.
expect_ok "training step" "wrote .*step.onnx" "$hodu" grad "$model" --loss logits --all-params --optimizer sgd \
  -o "$tmp/step.onnx" --state "$tmp/state.npz"
expect_ok "it lists lr and conv.weight.next" "lr: f32\[\].*|conv.weight.next" "$hodu" info "$tmp/step.onnx"
expect_ok "gradients of the params" "wrote" "$hodu" grad "$model" --loss logits --all-params -o "$tmp/gp.onnx"
expect_ok "run the step" "wrote" "$hodu" run "$tmp/step.onnx" -i image="$image" -i lr="$tmp/lr.npy" -i "$tmp/state.npz" \
  -f npy -o "$tmp/step"
expect_ok "run the gradients" "wrote" "$hodu" run "$tmp/gp.onnx" -i image="$image" -f npy -o "$tmp/gp"
expect_ok "the step is p - lr·grad" "ok" /usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
state = np.load(d + "/state.npz")
for p in ("conv.weight", "conv.bias", "fc.weight", "fc.bias"):
    nxt, g = np.load(d + f"/step/{p}.next.npy"), np.load(d + f"/gp/grad.{p}.npy")
    want = state[p] - np.float32(0.1) * g
    assert np.abs(nxt - want).max() <= 1e-6 * max(1.0, np.abs(want).max()), (p, np.abs(nxt - want).max())
    assert np.abs(g).max() > 0 or p == "conv.bias", p
print("ok")
PY

expect_error "no wrt" "--wrt a,b,... or --all-params" "$hodu" grad "$model" --loss probabilities -o "$tmp/x.onnx"
expect_error "unknown loss" "the loss 'nope' is not a value" "$hodu" grad "$model" --loss nope --wrt image -o "$tmp/x.onnx"
expect_error "wrt not a value" "wrt 'nope' is neither an input nor an initializer" "$hodu" grad "$model" \
  --loss probabilities --wrt nope -o "$tmp/x.onnx"
summary
