#!/usr/bin/env bash
# usage: cli_test.sh HODU_BINARY SOURCE_DIR
# Each check runs the CLI and asserts on exit code and output; prints
# "N passed, M failed" at the end.
set -u
hodu=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
model=$src/examples/models/tiny_cnn.onnx
image=$src/examples/inputs/tiny_cnn_image.npy

expect_ok "version" "^hodu [0-9]+\.[0-9]+" "$hodu" --version
expect_ok "help lists commands" "info" "$hodu" --help
for c in info run convert; do expect_ok "$c --help" "Usage|usage" "$hodu" $c --help; done

# info
expect_ok "info text" "image: f32\[batch, 1, 8, 8\]" "$hodu" info "$model"
expect_ok "info ops" "Conv +1" "$hodu" info "$model"
expect_ok "info params" "parameters: 690" "$hodu" info "$model"
expect_ok "info json" '"parameter_count": 690' "$hodu" info "$model" --json
expect_ok "info dot" "" "$hodu" info "$model" --dot "$tmp/g.dot"
grep -q "digraph" "$tmp/g.dot" 2>/dev/null && ok || bad "info --dot wrote no graph"

# run
expect_ok "run pretty" "probabilities: f32\[2, 10\] = \[\[" "$hodu" run "$model" -i image="$image"
expect_ok "run json" '"probabilities": \{"dtype": "f32", "shape": \[2, 10\]' "$hodu" run "$model" -i image="$image" -f json
expect_ok "run npy" "wrote" "$hodu" run "$model" -i image="$image" -f npy -o "$tmp/out"
[ -f "$tmp/out/probabilities.npy" ] && ok || bad "run -f npy did not write probabilities.npy"
expect_ok "run input without name (single input)" "probabilities" "$hodu" run "$model" -i "$image"
expect_ok "run -I list" "probabilities" "$hodu" run "$model" -I image="$image"
# softmax rows sum to 1: check with the json output
"$hodu" run "$model" -i image="$image" -f json > "$tmp/out.json" 2>&1
if /usr/bin/python3 - "$tmp/out.json" <<'PY' 2>/dev/null; then ok; else bad "softmax rows of the example do not sum to 1"; fi
import json, sys
d = json.load(open(sys.argv[1]))["probabilities"]["data"]
assert len(d) == 20 and all(abs(sum(d[i*10:(i+1)*10]) - 1) < 1e-5 for i in range(2))
PY
# bit-identical across thread counts
"$hodu" run "$model" -i image="$image" -f json --threads 1 > "$tmp/t1.json" 2>&1
"$hodu" run "$model" -i image="$image" -f json --threads 2 > "$tmp/t2.json" 2>&1
cmp -s "$tmp/t1.json" "$tmp/t2.json" && ok || bad "outputs differ between --threads 1 and 2"

# --check: the engine against the interpreter, bisecting to the first differing node
expect_ok "run --check matches" "check: all 1 outputs match" "$hodu" run "$model" -i image="$image" --check
expect_ok "run --check at -O3 names the engine" "engine 'cpu' at -O3 against the interpreter" \
  "$hodu" run "$model" -i image="$image" --check -O3

# errors
expect_error "missing model" "no-such.onnx" "$hodu" info "$tmp/no-such.onnx"
printf 'this is not a model' > "$tmp/garbage.onnx"
expect_error "garbage onnx" "garbage.onnx" "$hodu" info "$tmp/garbage.onnx"
head -c 1500 "$model" > "$tmp/truncated.onnx"
expect_error "truncated onnx" "truncated.onnx" "$hodu" info "$tmp/truncated.onnx"
expect_error "missing input" "missing input 'image'" "$hodu" run "$model"
expect_error "unknown input name" "'nope' is not an input" "$hodu" run "$model" -i nope="$image"
expect_error "missing input file" "does not exist" "$hodu" run "$model" -i image="$tmp/none.npy"
printf '\x93NUMPY\x01\x00\x10\x00{garbage' > "$tmp/bad.npy"
expect_error "corrupt npy" "bad.npy" "$hodu" run "$model" -i image="$tmp/bad.npy"
/usr/bin/python3 -c "
import numpy as np; np.save('$tmp/wrong_dtype.npy', np.zeros((2,1,8,8), np.float64)); np.save('$tmp/wrong_rank.npy', np.zeros((1,8,8), np.float32)); np.save('$tmp/wrong_dim.npy', np.zeros((2,3,8,8), np.float32))" 2>/dev/null
expect_error "wrong dtype" "input 'image': dtype double does not match the model's float" "$hodu" run "$model" -i image="$tmp/wrong_dtype.npy"
expect_error "wrong rank" "input 'image': rank 3" "$hodu" run "$model" -i image="$tmp/wrong_rank.npy"
expect_error "wrong dim" "input 'image': dim 1 is 3 but the model expects 1" "$hodu" run "$model" -i image="$tmp/wrong_dim.npy"
expect_error "bad format" "-f xml" "$hodu" run "$model" -i image="$image" -f xml
expect_error "npy needs -o" "-o DIR" "$hodu" run "$model" -i image="$image" -f npy
expect_error "unknown engine" "unknown engine 'warp'" "$hodu" run "$model" -i image="$image" --engine warp
expect_error "bad device" "unknown device" "$hodu" run "$model" -i image="$image" -d tpu

# convert round trips: onnx → hdss → hodu → onnx, same outputs
expect_ok "convert to hdss" "wrote" "$hodu" convert "$model" -o "$tmp/m.hdss"
expect_ok "convert to hoduscript" "wrote" "$hodu" convert "$tmp/m.hdss" -o "$tmp/m.hodu"
expect_ok "convert back to onnx" "wrote" "$hodu" convert "$tmp/m.hodu" -o "$tmp/m.onnx"
"$hodu" run "$tmp/m.onnx" -i image="$image" -f json > "$tmp/rt.json" 2>&1
cmp -s "$tmp/t1.json" "$tmp/rt.json" && ok || bad "outputs differ after onnx→hdss→hodu→onnx"
expect_ok "info on hdss" "image: f32\[batch, 1, 8, 8\]" "$hodu" info "$tmp/m.hdss"
expect_ok "convert npy to json" "wrote" "$hodu" convert "$image" -o "$tmp/image.json"
expect_ok "run with json input" "probabilities" "$hodu" run "$model" -i image="$tmp/image.json"
expect_error "convert model to tensor" "cannot convert" "$hodu" convert "$model" -o "$tmp/x.npy"

# runtime services: devices, --profile, --policy
expect_ok "devices" "^cpu: " "$hodu" devices
expect_ok "devices json" '"logical_cores": [0-9]+' "$hodu" devices --json
expect_ok "run --profile summary" "Conv +1 +[0-9.]+ +[0-9.]+%" "$hodu" run "$model" -i image="$image" --engine interp --profile "$tmp/trace.json"
if python3 - "$tmp/trace.json" <<'PY' 2>/dev/null; then ok; else bad "--profile trace is not a chrome trace with one Node span per node"; fi
import json, sys
t = json.load(open(sys.argv[1]))
nodes = [e for e in t if e["cat"] == "Node"]
assert len(nodes) == 6 and all(e["ph"] == "X" and e["dur"] >= 0 and e["args"]["kernel"] == "reference" for e in nodes)
assert any(e["name"] == "model_run" for e in t)
PY
expect_ok "bench --profile per-op table" "FusedConv +4 +[0-9.]+ +[0-9.]+%" "$hodu" bench "$model" --iters 4 --warmup 1 --profile "$tmp/bench_trace.json"
if python3 - "$tmp/bench_trace.json" <<'PY' 2>/dev/null; then ok; else bad "bench --profile trace has no cpu-engine Node spans for the 4 timed runs"; fi
import json, sys
t = json.load(open(sys.argv[1]))
nodes = [e for e in t if e["cat"] == "Node" and e["args"].get("provider") == "cpu"]
assert len(nodes) >= 4 and sum(e["name"] == "model_run" for e in t) == 4
conv = [e for e in nodes if e["args"]["op_name"] == "FusedConv"]
assert conv and conv[0]["args"]["input_type_shape"] and int(conv[0]["args"]["output_size"]) > 0
PY
echo '{"execution": {"threads": 1}, "kernels": {"Conv": "reference"}}' > "$tmp/policy.json"
expect_ok "run --policy -v logs decisions" "node 'conv1' \(Conv\) -> kernel reference \(policy\)" "$hodu" run "$model" -i image="$image" --policy "$tmp/policy.json" -v
echo '{"kernels": {"Softmax": "reference"}}' > "$tmp/softmax_reference.json"
expect_ok "run -v names the nodes on the interpreter's kernel" "Softmax +softmax +1 +[0-9.]+ +[0-9.]+%" "$hodu" run "$model" -i image="$image" --policy "$tmp/softmax_reference.json" -v
expect_ok "run -v without fallbacks" "interpreter fallbacks: none" "$hodu" run "$model" -i image="$image" -v
expect_ok "bench -v lists fallbacks" "interpreter fallbacks: none" "$hodu" bench "$model" --iters 2 --warmup 0 -v
expect_ok "bench --json has fallback_nodes" '"fallback_nodes":\[\]' "$hodu" bench "$model" --iters 2 --warmup 0 --json
expect_ok "run --max-isa avx2" "probabilities" "$hodu" run "$model" -i image="$image" --max-isa avx2
expect_error "run --max-isa unknown" "HODU_MAX_ISA=avx3: expected baseline, avx2" "$hodu" run "$model" -i image="$image" --max-isa avx3
# A default-mode library honours the cap too (libhodu_kernels passes it on to oneDNN), and refuses an unknown one.
if "$hodu" build "$model" -o "$tmp/isa_model.so" -q >/dev/null 2>&1; then
  expect_ok "library --max-isa avx2" "probabilities" "$hodu" run "$tmp/isa_model.so" -i image="$image" --max-isa avx2
  expect_error "library with HODU_MAX_ISA unknown" "HODU_MAX_ISA=avx3: expected baseline, avx2" env HODU_MAX_ISA=avx3 "$hodu" run "$tmp/isa_model.so" -i image="$image"
else
  expect_ok "hodu build for the ISA checks" "." false
fi
echo '{"kernels": {"Conv": "nope"}}' > "$tmp/bad_kernel.json"
expect_error "policy with unregistered kernel" "no kernel 'nope' is registered for op 'Conv' on device cpu" "$hodu" run "$model" -i image="$image" --policy "$tmp/bad_kernel.json"
echo '{"execution": {"precision": "fp64"}}' > "$tmp/bad_precision.json"
expect_error "policy with unknown precision" "unknown precision 'fp64'" "$hodu" run "$model" -i image="$image" --policy "$tmp/bad_precision.json"
expect_error "policy file missing" "cannot read policy file" "$hodu" run "$model" -i image="$image" --policy "$tmp/none.json"

summary
