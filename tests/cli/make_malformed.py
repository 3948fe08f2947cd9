#!/usr/bin/env python3
"""Writes one malformed file per kind of bad input into DIR, for malformed_test.sh.

Each file is broken in exactly one way; the test expects `hodu` to refuse it
with an `error:` line that names the problem, a non-zero exit and no crash.
usage: make_malformed.py DIR
"""
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, model, check=False):
    path = os.path.join(out, name)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def relu_model(opset=17, **graph_kw):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = graph_kw.pop("nodes", [helper.make_node("Relu", ["x"], ["y"], name="relu0")])
    g = helper.make_graph(nodes, "g", [x], [y], **graph_kw)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


good = relu_model()
save("good.onnx", good)
raw = good.SerializeToString()

# Protobuf damage.
open(os.path.join(out, "truncated.onnx"), "wb").write(raw[: len(raw) // 2])
open(os.path.join(out, "garbage.onnx"), "wb").write(b"\xff\xfe\x00garbage" * 16)
open(os.path.join(out, "empty.onnx"), "wb").write(b"")

# Opset / IR version checks.
m = relu_model(opset=99)
save("opset_too_new.onnx", m)
m = relu_model()
m.ir_version = 99
save("ir_too_new.onnx", m)

# Graph structure.
save("cyclic.onnx", relu_model(nodes=[
    helper.make_node("Add", ["x", "b"], ["a"], name="add0"),
    helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
    helper.make_node("Relu", ["a"], ["y"], name="relu_y")]))
save("dangling.onnx", relu_model(nodes=[helper.make_node("Add", ["x", "nowhere"], ["y"], name="add_dangling")]))
save("unknown_op.onnx", relu_model(nodes=[helper.make_node("FrobnicateTensor", ["x"], ["y"], name="frob0")]))
save("output_never_produced.onnx", relu_model(nodes=[helper.make_node("Relu", ["x"], ["z"], name="relu_z")]))

# Initializers with bad dims or missing data.
bad = numpy_helper.from_array(np.ones(4, np.float32), "w")
bad.dims[:] = [-4]
save("negative_dims.onnx", relu_model(nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
                                      initializer=[bad]))
absurd = numpy_helper.from_array(np.ones(4, np.float32), "w")
absurd.dims[:] = [1 << 40, 1 << 40]
save("absurd_dims.onnx", relu_model(nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
                                    initializer=[absurd]))
short = numpy_helper.from_array(np.ones(4, np.float32), "w")
short.raw_data = short.raw_data[:6]
save("short_raw_data.onnx", relu_model(nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
                                       initializer=[short]))
ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
ext.data_location = TensorProto.EXTERNAL
for k, v in (("location", "missing_weights.bin"), ("offset", "0"), ("length", "16")):
    e = ext.external_data.add()
    e.key, e.value = k, v
save("missing_external_data.onnx", relu_model(nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
                                              initializer=[ext]))
escape = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
escape.data_location = TensorProto.EXTERNAL
e = escape.external_data.add()
e.key, e.value = "location", "../../../../etc/passwd"
save("external_data_escapes.onnx", relu_model(nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
                                              initializer=[escape]))

# .hdss damage: wrong magic, unknown version, truncation (written from the good
# model's .hdss by malformed_test.sh, which knows the header layout via hodu).

# Tensor files.
np.save(os.path.join(out, "input.npy"), np.ones((1, 4), np.float32))
data = open(os.path.join(out, "input.npy"), "rb").read()
open(os.path.join(out, "truncated.npy"), "wb").write(data[:-5])
open(os.path.join(out, "bad_magic.npy"), "wb").write(b"\x93NUMPX" + data[6:])
hdr = data.replace(b"(1, 4)", b"(-1, 4)")
open(os.path.join(out, "negative_shape.npy"), "wb").write(hdr)
open(os.path.join(out, "bad_header.npy"), "wb").write(data.replace(b"'descr'", b"'dxscr'"))
open(os.path.join(out, "not_json.json"), "w").write('{"x": {"dtype": "f32", "shape": [1, 4], "data": [1, 2')
open(os.path.join(out, "wrong_count.json"), "w").write('{"x": {"dtype": "f32", "shape": [1, 4], "data": [1, 2]}}')
open(os.path.join(out, "garbage.npz"), "wb").write(b"PK\x03\x04" + b"\x00" * 20)

# Well formed but unable to run: `hodu info` lists the problem, `--check` exits 1, `run` refuses.
x23 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
anyf = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def graph_model(nodes, inputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, [anyf], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


save("bad_perm.onnx", graph_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3], name="tr0")], [x23]))
save("bad_matmul.onnx", graph_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm0")], [x23],
                                    [numpy_helper.from_array(np.ones((4, 5), np.float32), "w")]))
save("bad_dtypes.onnx", graph_model([helper.make_node("Add", ["x", "k"], ["y"], name="add0")], [x23],
                                    [numpy_helper.from_array(np.ones((2, 3), np.int64), "k")]))
huge = helper.make_tensor_value_info("x", TensorProto.FLOAT, [10**12, 10**12, 10**6])
save("bad_huge.onnx", graph_model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [huge]))
np.save(os.path.join(out, "x23.npy"), np.ones((2, 3), np.float32))
