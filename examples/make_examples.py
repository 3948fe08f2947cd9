#!/usr/bin/env python3
"""Writes the small example models bundled with hodu (run with Debian's python3).

tiny_cnn.onnx: Conv → Relu → MaxPool → Flatten → Gemm → Softmax on a
1x1x8x8 image with seeded random weights, and a matching input file.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)

w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32) * 0.5
b = rng.standard_normal((4,)).astype(np.float32) * 0.1
fc_w = rng.standard_normal((10, 4 * 4 * 4)).astype(np.float32) * 0.2
fc_b = np.zeros((10,), np.float32)

nodes = [
    helper.make_node("Conv", ["image", "conv.weight", "conv.bias"], ["conv"], name="conv1", pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["conv"], ["relu"], name="relu1"),
    helper.make_node("MaxPool", ["relu"], ["pool"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
    helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
]
graph = helper.make_graph(
    nodes, "tiny_cnn",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
    [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
    [numpy_helper.from_array(w, "conv.weight"), numpy_helper.from_array(b, "conv.bias"),
     numpy_helper.from_array(fc_w, "fc.weight"), numpy_helper.from_array(fc_b, "fc.bias")])
model = helper.make_model(graph, producer_name="hodu-examples", opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, os.path.join(here, "models", "tiny_cnn.onnx"))
np.save(os.path.join(here, "inputs", "tiny_cnn_image.npy"), rng.standard_normal((2, 1, 8, 8)).astype(np.float32))
print("wrote examples/models/tiny_cnn.onnx and examples/inputs/tiny_cnn_image.npy")
