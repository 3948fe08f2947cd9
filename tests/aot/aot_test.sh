#!/usr/bin/env bash
# hodu build end to end: every artifact format, a C client that only includes
# model.h, valgrind, concurrent instances, --weights file, --standalone, the
# executable, the oneDNN kernel library of the default mode and --kernels
# portable, and an aarch64 cross build under qemu.
# usage: aot_test.sh HODU_BIN SOURCE_DIR
set -u
HODU=$1
SRC=$2
ROOT=$SRC/../shared/onnx-tests
T=$(mktemp -d /tmp/hodu-aot-test-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@" >"$T/log" 2>&1; then pass "$what"; else bad "$what"; tail -20 "$T/log"; fi; }

MODEL=$T/cnn.onnx
/usr/bin/python3 "$SRC/tests/aot/make_test_model.py" "$MODEL" "$T/x.npy" || { echo "FAIL cannot write the test model"; exit 1; }
IN=x

# 1. Every format (default mode: heavy ops call libhodu_kernels).
for f in c o so a s ll bc; do
  check "build .$f" "$HODU" build "$MODEL" -o "$T/m.$f" -q
  [ -s "$T/m.$f" ] || bad "build .$f wrote nothing"
done
check "build executable" "$HODU" build "$MODEL" -o "$T/m_exe" -q
[ -f "$T/model.h" ] && pass "model.h beside the library" || bad "model.h beside the library"
grep -q "^define" "$T/m.ll" && pass ".ll is LLVM IR" || bad ".ll is LLVM IR"
# The .c output compiles on its own in its folder (it .incbins m.c.weights).
check ".c compiles by itself" bash -c "cd '$T' && cc -std=gnu11 -O1 -c m.c -o m_from_c.o"

# 2. A C client that includes only model.h: .so and .a, valgrind, threads.
# Default-mode .o/.a link hodu's kernel library; hodu build prints the flags.
KLINK=$("$HODU" build "$MODEL" -o "$T/m.a" 2>&1 | sed -n 's/.*link it with: //p')
[ -n "$KLINK" ] && pass "hodu build prints the .a link flags ($KLINK)" || bad "hodu build prints the .a link flags"
check "api_test links the .so" cc -std=gnu11 -I"$T" "$SRC/tests/aot/api_test.c" -o "$T/api_so" "$T/m.so" -lpthread -Wl,-rpath,"$T"
check "api_test (.so)" "$T/api_so" 1
check "api_test links the .a" cc -std=gnu11 -I"$T" "$SRC/tests/aot/api_test.c" -o "$T/api_a" "$T/m.a" -lm -lpthread $KLINK
check "api_test (.a), 8 threads" "$T/api_a" 8
check "api_test (.a), 8 threads of 2 kernel threads each" env HODU_NUM_THREADS=2 "$T/api_a" 8
if command -v valgrind >/dev/null; then
  # oneDNN's process-wide primitive cache and libgomp's thread pool stay reachable
  # until exit; tests/aot/valgrind.supp names exactly those (see the file).
  check "valgrind: no errors, no leaks" valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=all \
    --suppressions="$SRC/tests/aot/valgrind.supp" "$T/api_a" 2
fi

# 2a. hodu info describes a built library (its info section, not the weights) and refuses to draw one.
"$HODU" info "$T/m.so" >"$T/info.log" 2>&1
grep -q "built by:   hodu build: .* libhodu_kernels ops" "$T/info.log" && grep -q "^  $IN: f32\[" "$T/info.log" \
  && pass "hodu info of a .so" || { bad "hodu info of a .so"; cat "$T/info.log"; }
"$HODU" info "$T/m.so" --json | /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); assert j['kind']=='library' and j['inputs'][0]['name']=='$IN'" \
  && pass "hodu info --json of a .so" || bad "hodu info --json of a .so"
readelf -S "$T/m.so" | grep -q "\.hodu_info" && pass "the .so has a .hodu_info section" || bad "the .so has a .hodu_info section"
"$HODU" info "$T/m.so" --dot "$T/m.dot" >"$T/info.log" 2>&1 && bad "hodu info --dot of a .so fails" \
  || { grep -q "keeps no graph" "$T/info.log" && pass "hodu info --dot of a .so: a clear error" || bad "hodu info --dot message"; }

# 2b. Default mode calls libhodu_kernels (oneDNN); --kernels portable does not.
needed=$(readelf -d "$T/m.so" | grep NEEDED | grep -o '\[.*\]' | tr -d '[]' | tr '\n' ' ')
case "$needed" in *libhodu_kernels.so*) pass "default .so needs libhodu_kernels.so" ;; *) bad "default .so needs: $needed" ;; esac
readelf -d "$T/m.so" | grep -q "RUNPATH.*/lib\]" && pass "default .so has a runpath to the kernel library" || bad "default .so runpath"
ldd "$T/m.so" | grep -q "libhodu_kernels.so => /" && pass "ldd resolves libhodu_kernels.so" || bad "ldd resolves libhodu_kernels.so"
nm -D "$T/m.so" | grep -q " U hodu_conv2d_run" && pass "the .so calls hodu_conv2d_run" || bad "the .so calls hodu_conv2d_run"
ONEDNN_VERBOSE=1 "$HODU" run "$T/m.so" -i "$IN=$T/x.npy" >"$T/verbose.log" 2>&1
grep -q "exec,cpu,convolution" "$T/verbose.log" && grep -q "exec,cpu,matmul" "$T/verbose.log" && grep -q "exec,cpu,pooling" "$T/verbose.log" \
  && pass "oneDNN runs the conv, matmul and pooling" || { bad "oneDNN runs the conv, matmul and pooling"; tail -5 "$T/verbose.log"; }
mkdir -p "$T/portable"
check "build --kernels portable" "$HODU" build "$MODEL" -o "$T/portable/p.so" --kernels portable -q
readelf -d "$T/portable/p.so" | grep -q libhodu_kernels && bad "portable .so needs libhodu_kernels" || pass "portable .so does not need libhodu_kernels"
if HODU_KERNELS_DIR=/nonexistent "$HODU" build "$MODEL" -o "$T/nolib.so" >"$T/log" 2>&1; then bad "missing kernel library rejected"; else
  grep -q "libhodu_kernels.so is not in /nonexistent.*--kernels portable" "$T/log" && pass "missing kernel library: clear message" || { bad "missing kernel library message"; cat "$T/log"; }; fi

# A kernel library of another ABI version (an interposed hodu_kernels_abi_version):
# create fails with a message naming both versions, before touching the library.
ABI=$(sed -n 's/^#define HODU_KERNELS_ABI_VERSION \([0-9]*\).*/\1/p' "$SRC/include/hodu/kernels.h")
printf 'int hodu_kernels_abi_version(void) { return %d; }\n' $((ABI + 7)) > "$T/fake_abi.c"
cc -shared -fPIC "$T/fake_abi.c" -o "$T/fake_abi.so"
if LD_PRELOAD="$T/fake_abi.so" "$HODU" run "$T/m.so" >"$T/log" 2>&1; then bad "kernel library ABI mismatch rejected"; else
  grep -q "libhodu_kernels has ABI version $((ABI + 7)), this model was built for version $ABI" "$T/log" \
    && pass "kernel library ABI mismatch: clear message" || { bad "kernel library ABI mismatch message"; cat "$T/log"; }; fi

# 3. Outputs: the executable, the .so through the native engine, the interpreter.
check "run executable" "$T/m_exe" -i "$IN=$T/x.npy" -o "$T/out_exe"
check "hodu run m.so" "$HODU" run "$T/m.so" -i "$IN=$T/x.npy" -f npy -o "$T/out_so"
check "hodu bench m.so (native engine, JSON)" bash -c "'$HODU' bench '$T/m.so' --iters 2 --warmup 1 --json | grep -q '\"median_ms\"'"
check "hodu run --engine native (compiles on the fly)" "$HODU" run "$MODEL" --engine native -i "$IN=$T/x.npy" -f npy -o "$T/out_native"
check "hodu run p.so (portable kernels)" "$HODU" run "$T/portable/p.so" -i "$IN=$T/x.npy" -f npy -o "$T/out_portable"
check "hodu run m.so --threads 2" "$HODU" run "$T/m.so" --threads 2 -i "$IN=$T/x.npy" -f npy -o "$T/out_so2"
check "hodu run (reference)" "$HODU" run "$MODEL" --engine interp -i "$IN=$T/x.npy" -f npy -o "$T/out_ref"
check "outputs agree (exe, .so, native, interp)" /usr/bin/python3 - "$T" <<'EOF'
import sys, os, numpy as np
t = sys.argv[1]
ref = {f: np.load(os.path.join(t, "out_ref", f)) for f in os.listdir(os.path.join(t, "out_ref"))}
assert ref
for d in ("out_exe", "out_so", "out_native", "out_portable", "out_so2"):
    for f, r in ref.items():
        a = np.load(os.path.join(t, d, f))
        assert a.shape == r.shape and np.allclose(a, r, rtol=1e-4, atol=1e-5), (d, f)
EOF

# 3b. Products through strides no oneDNN jit kernel takes (ConvNeXt's channels-last MLP whose
# result a Transpose turns back to NCHW): the library copies plain around its fast kernel
# instead of taking oneDNN's reference matmul (500x slower); same outputs as the interpreter.
/usr/bin/python3 - "$T/cl.onnx" "$T/cl_x.npy" <<'EOF2'
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
rng = np.random.default_rng(3)
w = numpy_helper.from_array(rng.standard_normal((24, 40)).astype(np.float32), "w")
b = numpy_helper.from_array(rng.standard_normal((40,)).astype(np.float32), "b")
nodes = [helper.make_node("Transpose", ["x"], ["xl"], perm=[0, 2, 3, 1]),
         helper.make_node("MatMul", ["xl", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["mb"]),
         helper.make_node("Transpose", ["mb"], ["t"], perm=[0, 3, 1, 2]), helper.make_node("Relu", ["t"], ["y"])]
g = helper.make_graph(nodes, "channels_last_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 9, 11])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 9, 11])], [w, b])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
np.save(sys.argv[2], rng.standard_normal((1, 24, 9, 11)).astype(np.float32))
EOF2
check "build the channels-last MLP" "$HODU" build "$T/cl.onnx" -o "$T/cl.so" -q
ONEDNN_VERBOSE=1 "$HODU" run "$T/cl.so" -i "x=$T/cl_x.npy" -f npy -o "$T/out_cl" >"$T/verbose.log" 2>&1
grep -q "exec,cpu,matmul" "$T/verbose.log" && ! grep -q "exec,cpu,matmul,ref" "$T/verbose.log" \
  && pass "strided product: no reference matmul" || { bad "strided product: no reference matmul"; grep matmul "$T/verbose.log" | tail -3; }
check "hodu run cl.onnx (reference)" "$HODU" run "$T/cl.onnx" --engine interp -i "x=$T/cl_x.npy" -f npy -o "$T/out_cl_ref"
check "strided product: outputs agree" /usr/bin/python3 -c "
import numpy as np; a = np.load('$T/out_cl/y.npy'); r = np.load('$T/out_cl_ref/y.npy')
assert a.shape == r.shape and np.allclose(a, r, rtol=1e-4, atol=1e-4), abs(a - r).max()"

# 4. --weights file: a side file checked at create time.
mkdir -p "$T/wf"
check "build --weights file" "$HODU" build "$MODEL" -o "$T/wf/w.so" --weights file -q
[ -s "$T/wf/w.so.weights" ] && pass "w.so.weights written" || bad "w.so.weights written"
check "hodu run w.so (file weights)" "$HODU" run "$T/wf/w.so" -f npy -o "$T/out_wf" -i "$IN=$T/x.npy"
check "file weights give the same outputs" bash -c "cmp '$T/out_wf/probs.npy' '$T/out_so/probs.npy' && cmp '$T/out_wf/res.npy' '$T/out_so/res.npy'"
printf 'garbage' > "$T/wf/w.so.weights"
if "$HODU" run "$T/wf/w.so" -i "$IN=$T/x.npy" >"$T/log" 2>&1; then
  bad "corrupt weights rejected"
else
  grep -q "weights" "$T/log" && pass "corrupt weights rejected with a message" || { bad "corrupt weights message"; cat "$T/log"; }
fi

# 5. --standalone: libc and libm only.
mkdir -p "$T/st"
check "build --standalone" "$HODU" build "$MODEL" -o "$T/st/st.so" --standalone -q
needed=$(readelf -d "$T/st/st.so" | grep NEEDED | grep -o '\[.*\]' | tr -d '[]' | sort | tr '\n' ' ')
case "$needed" in
  "libc.so.6 libm.so.6 "|"libc.so.6 ") pass "standalone needs only: $needed" ;;
  *) bad "standalone needs: $needed" ;;
esac
check "standalone run path makes no allocation" bash -c "cc -std=gnu11 -DCOUNT_MALLOC -I'$T/st' '$SRC/tests/aot/api_test.c' '$T/st/st.so' -Wl,-rpath,'$T/st' -lpthread -o '$T/st/api' && '$T/st/api' 1 | grep -q 'no allocation'"
grep -q "MODEL_STANDALONE 1" "$T/st/model.h" && pass "standalone header" || bad "standalone header"

# 6. Errors are clear.
if "$HODU" build "$MODEL" -o "$T/m.zip" >"$T/log" 2>&1; then bad "unknown format rejected"; else
  grep -q "unknown output format" "$T/log" && pass "unknown format rejected" || bad "unknown format message"; fi
if "$HODU" build "$ROOT/node/test_string_split_basic/model.onnx" -o "$T/h.so" >"$T/log" 2>&1; then bad "string outputs rejected"; else
  grep -q "StringSplit.*string tensor, not supported by compiled code: it has no strings" "$T/log" && pass "string outputs: clear message" || { bad "string output message"; cat "$T/log"; }; fi

# 6b. --name sets the API prefix and header; symbolic dims must be bound.
mkdir -p "$T/named"
check "build --name net" "$HODU" build "$MODEL" -o "$T/named/net.o" --name net -q
grep -q "int net_run(net_t\* m" "$T/named/net.h" && pass "net.h declares net_run" || bad "net.h declares net_run"
nm "$T/named/net.o" | grep -q " T net_create$" && pass "net.o defines net_create" || bad "net.o defines net_create"
/usr/bin/python3 - "$MODEL" "$T/sym.onnx" <<'EOF2'
import sys, onnx
m = onnx.load(sys.argv[1])
for d, name in ((0, "batch"), (2, "h"), (3, "w")):
    m.graph.input[0].type.tensor_type.shape.dim[d].dim_param = name
for o in m.graph.output:
    o.type.tensor_type.ClearField("shape")
onnx.save(m, sys.argv[2])
EOF2
check "build --dim batch=1 (static)" "$HODU" build "$T/sym.onnx" -o "$T/sym.so" --dim batch=1 --dim h=16 --dim w=16 -q
grep -q "MODEL_NUM_DIMS 0" "$T/model.h" && pass "bound dims: no free dims" || bad "bound dims: no free dims"
check "build --shape x=1x3x16x16" "$HODU" build "$T/sym.onnx" -o "$T/sym2.so" --shape x=1x3x16x16 -q

# 6c. Free dims stay free: one library for every size (tests/aot/dynamic_api_test.c).
mkdir -p "$T/dyn" "$T/dyn_st"
check "build with free dims" "$HODU" build "$T/sym.onnx" -o "$T/dyn/dyn.so" -q
grep -q "MODEL_NUM_DIMS 3" "$T/dyn/model.h" && pass "model.h: 3 free dims" || bad "model.h: 3 free dims"
grep -q "input  'x' f32 \[batch, 3, h, w\]" "$T/dyn/model.h" && pass "model.h documents the input's free dims" || bad "model.h documents the free dims"
check "dynamic_api_test (default)" bash -c "cc -std=gnu11 -I'$T/dyn' '$SRC/tests/aot/dynamic_api_test.c' '$T/dyn/dyn.so' -Wl,-rpath,'$T/dyn' -o '$T/dyn/api' && '$T/dyn/api'"
check "build --standalone with free dims" "$HODU" build "$T/sym.onnx" -o "$T/dyn_st/dyn.so" --standalone -q
check "dynamic_api_test (standalone, no allocation in caller memory)" bash -c "cc -std=gnu11 -DCOUNT_MALLOC -I'$T/dyn_st' '$SRC/tests/aot/dynamic_api_test.c' '$T/dyn_st/dyn.so' -Wl,-rpath,'$T/dyn_st' -o '$T/dyn_st/api' && '$T/dyn_st/api' | grep -q 'no allocation'"
check "valgrind: dynamic_api_test (standalone)" valgrind --error-exitcode=9 --leak-check=full -q "$T/dyn_st/api"
/usr/bin/python3 -c "
import numpy as np
np.save('$T/dyn/x1.npy', np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32))
np.save('$T/dyn/x2.npy', np.random.default_rng(2).standard_normal((2, 3, 20, 12)).astype(np.float32))"
check "build an executable with free dims" "$HODU" build "$T/sym.onnx" -o "$T/dyn/exe" -q
for k in 1 2; do
  check "executable and interpreter agree at size $k" bash -c "'$T/dyn/exe' -i x='$T/dyn/x$k.npy' -o '$T/dyn/e$k' && '$HODU' run '$T/sym.onnx' --engine interp -i x='$T/dyn/x$k.npy' -f npy -o '$T/dyn/r$k' && /usr/bin/python3 -c \"
import os, numpy as np
for f in os.listdir('$T/dyn/r$k'):
    a, r = np.load('$T/dyn/e$k/' + f), np.load('$T/dyn/r$k/' + f)
    assert a.shape == r.shape and np.allclose(a, r, rtol=1e-4, atol=1e-5), f
\""
done

# 7. aarch64 under qemu.
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
  check "build --target aarch64-linux-gnu" "$HODU" build "$MODEL" -o "$T/m_arm" --target aarch64-linux-gnu -q
  file "$T/m_arm" | grep -q aarch64 && pass "aarch64 ELF" || bad "aarch64 ELF"
  check "run under qemu-aarch64" qemu-aarch64 -L /usr/aarch64-linux-gnu "$T/m_arm" -i "$IN=$T/x.npy" -o "$T/out_arm"
  check "aarch64 outputs agree" /usr/bin/python3 -c "
import os, numpy as np
t = '$T'
for f in os.listdir(t + '/out_ref'):
    a, r = np.load(t + '/out_arm/' + f), np.load(t + '/out_ref/' + f)
    assert a.shape == r.shape and np.allclose(a, r, rtol=1e-4, atol=1e-5), f
"
else
  echo "skip aarch64: install gcc-aarch64-linux-gnu and qemu-user"
fi

echo "aot_test: $fails failures"
[ "$fails" -eq 0 ]
