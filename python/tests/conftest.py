"""Shared fixtures: small ONNX models built with onnx.helper (Debian's python3-onnx)."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

SOURCE_DIR = os.environ.get("HODU_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="test"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="hodu-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save(model, tmp_path, name):
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


@pytest.fixture
def add_model(tmp_path):
    """z = x + y, x and y f32[batch, 3]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3])
    return save(make_model([helper.make_node("Add", ["x", "y"], ["z"], name="add")], [x, y], [z]), tmp_path,
                "add.onnx")


@pytest.fixture
def two_output_model(tmp_path):
    """sum = x + 1, prod = x * 2 (x f32[2, ?])."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, None])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, None]) for n in ("sum", "prod")]
    one = numpy_helper.from_array(np.array(1, np.float32), "one")
    two = numpy_helper.from_array(np.array(2, np.float32), "two")
    nodes = [helper.make_node("Add", ["x", "one"], ["sum"]), helper.make_node("Mul", ["x", "two"], ["prod"])]
    return save(make_model(nodes, [x], outs, [one, two]), tmp_path, "two.onnx")


def identity_model(tmp_path, elem_type, rank=2, name="identity"):
    """y = Identity(x), x of any size of the given rank."""
    dims = [f"d{i}" for i in range(rank)]
    x = helper.make_tensor_value_info("x", elem_type, dims)
    y = helper.make_tensor_value_info("y", elem_type, dims)
    return save(make_model([helper.make_node("Identity", ["x"], ["y"])], [x], [y]), tmp_path,
                f"{name}_{elem_type}_{rank}.onnx")


@pytest.fixture
def matmul_chain_model(tmp_path):
    """A model that runs long enough to observe threads: 12 chained 256x256 MatMuls."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])
    inits, nodes, prev = [], [], "x"
    for i in range(12):
        w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == 11 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out]))
        prev = out
    return save(make_model(nodes, [x], [y], inits), tmp_path, "chain.onnx")


@pytest.fixture
def tiny_cnn_path():
    path = os.path.join(SOURCE_DIR, "examples", "models", "tiny_cnn.onnx")
    if not os.path.exists(path):
        pytest.skip("examples/models/tiny_cnn.onnx not found")
    return path
