#!/usr/bin/env python3
"""Writes a small CNN with real weights (Conv+BN+Relu, depthwise Conv, MaxPool,
residual Add, GlobalAveragePool, Gemm, Softmax) for the AOT tests.
usage: make_test_model.py OUT.onnx INPUT.npy"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def w(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)


nodes = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["bn"]),
    helper.make_node("Relu", ["bn"], ["r1"]),
    helper.make_node("Conv", ["r1", "wd"], ["dw"], group=8, pads=[1, 1, 1, 1]),
    helper.make_node("Add", ["dw", "r1"], ["res"]),
    helper.make_node("MaxPool", ["res"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("GlobalAveragePool", ["p"], ["gap"]),
    helper.make_node("Flatten", ["gap"], ["f"]),
    helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    helper.make_node("Softmax", ["logits"], ["probs"]),
]
inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("g", 8), w("be", 8), w("mu", 8),
         numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "var"),
         w("wd", 8, 1, 3, 3), w("fw", 10, 8), w("fb", 10)]
graph = helper.make_graph(nodes, "aot_test_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10]),
                           helper.make_tensor_value_info("res", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
np.save(sys.argv[2], rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
