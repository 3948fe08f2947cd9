#!/usr/bin/env bash
# usage: malformed_test.sh HODU_BINARY SOURCE_DIR
# Every kind of malformed input must end in a clear `error:` that names the
# problem, a non-zero exit and no crash (no signal, no hang: each command runs
# under a time limit).
set -u
hodu=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
require_onnx "write the malformed files"
/usr/bin/python3 "$src/tests/cli/make_malformed.py" "$tmp" || exit 1
h() { timeout 60 "$hodu" "$@"; }
m=$tmp

# Model files.
expect_ok    "control: the good model runs" "y: f32\[1, 4\]" h run "$m/good.onnx" -i x="$m/input.npy"
expect_error "truncated protobuf" "truncated.onnx" h info "$m/truncated.onnx"
expect_error "corrupt protobuf" "garbage.onnx" h info "$m/garbage.onnx"
expect_error "empty file" "empty.onnx" h info "$m/empty.onnx"
expect_error "opset too new" "opset 99" h info "$m/opset_too_new.onnx"
expect_error "IR version too new" "IR version 99|ir_version 99|ir version 99" h info "$m/ir_too_new.onnx"
expect_error "cyclic graph" "cycle|before it is produced|not produced|undefined" h info "$m/cyclic.onnx"
expect_error "dangling value" "nowhere" h info "$m/dangling.onnx"
expect_error "unknown op (run)" "FrobnicateTensor.*frob0|frob0.*FrobnicateTensor" h run "$m/unknown_op.onnx" -i x="$m/input.npy"
expect_error "output never produced" "'y'" h info "$m/output_never_produced.onnx"
expect_error "negative dims" "'w'.*-4|-4.*'w'" h info "$m/negative_dims.onnx"
expect_error "absurd dims" "'w'" h info "$m/absurd_dims.onnx"
expect_error "raw data shorter than dims" "'w'" h info "$m/short_raw_data.onnx"
expect_error "missing external data" "missing_weights.bin" h info "$m/missing_external_data.onnx"
expect_error "external data outside the model folder" "etc/passwd" h info "$m/external_data_escapes.onnx"
expect_error "unknown model extension" "model.txt|extension" h info "$m/model.txt"

# Well formed, unable to run: info lists the problem (JSON too), --check exits 1, run refuses.
expect_ok    "info: no problems in the good model" "problems: +none found" h info "$m/good.onnx"
expect_ok    "info --check passes a good model" "none found" h info "$m/good.onnx" --check
expect_ok    "info lists a bad perm" "tr0.*Transpose.*perm entry 3 is out of range" h info "$m/bad_perm.onnx"
expect_error "info --check fails on a bad perm" "perm entry 3" h info "$m/bad_perm.onnx" --check
expect_error "info --check: mismatched MatMul" "mm0.*inner dimensions do not match" h info "$m/bad_matmul.onnx" --check
expect_error "info --check: dtypes an op does not take" "add0.*float.*int64.*same type" h info "$m/bad_dtypes.onnx" --check
expect_error "info --check: absurd dims" "more than 2\^62 elements" h info "$m/bad_huge.onnx" --check
expect_ok    "info --json lists problems" '"op": "MatMul"' h info "$m/bad_matmul.onnx" --json
expect_error "run refuses a bad perm" "tr0.*perm entry 3" h run "$m/bad_perm.onnx" -i x="$m/x23.npy"
expect_error "run refuses a bad MatMul" "mm0.*inner dimensions" h run "$m/bad_matmul.onnx" -i x="$m/x23.npy"
expect_error "run refuses mixed dtypes" "add0" h run "$m/bad_dtypes.onnx" -i x="$m/x23.npy"

# .hdss: built from the good model, then damaged one field at a time.
h convert "$m/good.onnx" -o "$m/good.hdss" >/dev/null
expect_ok "control: .hdss loads" "x: f32\[1, 4\]" h info "$m/good.hdss"
cp "$m/good.hdss" "$m/magic.hdss" && printf 'XDSS' | dd of="$m/magic.hdss" bs=1 count=4 conv=notrunc status=none
expect_error ".hdss wrong magic" "magic.hdss" h info "$m/magic.hdss"
cp "$m/good.hdss" "$m/version.hdss" && printf '\x07\x00\x00\x00' | dd of="$m/version.hdss" bs=1 seek=4 count=4 conv=notrunc status=none
expect_error ".hdss unknown version" "version 7" h info "$m/version.hdss"
head -c 100 "$m/good.hdss" > "$m/truncated.hdss"
expect_error ".hdss truncated" "truncated.hdss" h info "$m/truncated.hdss"
cp "$m/good.hdss" "$m/flipped.hdss" && printf '\xff' | dd of="$m/flipped.hdss" bs=1 seek=70 count=1 conv=notrunc status=none
expect_error ".hdss corrupt graph section" "flipped.hdss" h info "$m/flipped.hdss"

# HoduScript.
printf 'model ir 10 opset 17\ngraph g(%%x: f32[1, 4]) -> (%%y) {\n  %%y = Relu(%%x\n}\n' > "$m/bad.hodu"
expect_error "HoduScript syntax error" "bad.hodu:[0-9]+" h info "$m/bad.hodu"

# Tensor files.
expect_error "truncated .npy" "truncated.npy" h run "$m/good.onnx" -i x="$m/truncated.npy"
expect_error ".npy wrong magic" "bad_magic.npy" h run "$m/good.onnx" -i x="$m/bad_magic.npy"
expect_error ".npy negative shape" "negative_shape.npy" h run "$m/good.onnx" -i x="$m/negative_shape.npy"
expect_error ".npy bad header" "bad_header.npy" h run "$m/good.onnx" -i x="$m/bad_header.npy"
expect_error "invalid JSON" "not_json.json" h run "$m/good.onnx" -i x="$m/not_json.json"
expect_error "JSON data count" "wrong_count.json" h run "$m/good.onnx" -i x="$m/wrong_count.json"
expect_error "corrupt .npz" "garbage.npz" h run "$m/good.onnx" -i x="$m/garbage.npz"

summary
