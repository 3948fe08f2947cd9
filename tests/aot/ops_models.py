#!/usr/bin/python3
"""Ops compiled with free dims: small hand-built ONNX models (onnx.helper) for what the
node suite checks only at fixed sizes or not at all (Ifs decided by a static dim of a
shape that is otherwise free, nested, with branch-local constants; ops of the newest
opsets). Each is
built by `hodu build` without --dim/--shape in default mode and with --standalone, run at
two or more sizes through the native engine, and compared with the reference interpreter
and, where it runs the model, ONNX Runtime 1.30 (rel-L2 <= 1e-4, float16 2e-3; integers exactly).

usage: ops_models.py --hodu BIN [--keep DIR] [--filter SUBSTRING]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_DIR = os.path.join(HERE, "..", "ort")
F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def rng_for(name):
    return np.random.default_rng(sum(map(ord, name)))


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def model(name, nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # Debian's onnx 1.12 writes and checks up to IR 8 / opset 17
    return m


def vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


# ---- the models ----------------------------------------------------------------------
# Each: (name, ModelProto, [feeds: {input: array}], ort) where ort says ONNX Runtime runs it.

def causal_conv():
    r = rng_for("causal_conv")
    C, K = 4, 3
    n = helper.make_node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "present"], activation="silu")
    m = model("causal_conv", [n], [vi("x", F, ["B", C, "L"]), vi("past", F, ["B", C, K - 1])],
              [vi("y", F, None), vi("present", F, None)],
              [init("w", r.standard_normal((C, 1, K)).astype(np.float32)),
               init("b", r.standard_normal(C).astype(np.float32))], opset=27)
    feeds = [{"x": r.standard_normal((b, C, L)).astype(np.float32),
              "past": r.standard_normal((b, C, K - 1)).astype(np.float32)} for b, L in [(1, 5), (3, 9), (2, 1)]]
    return m, feeds, False


def linear_attention():
    r = rng_for("linear_attention")
    Hq, Hkv, dk, dv = 4, 2, 3, 5
    n = helper.make_node("LinearAttention", ["q", "k", "v", "past", "decay", "beta"], ["y", "state"],
                         q_num_heads=Hq, kv_num_heads=Hkv, update_rule="gated_delta")
    m = model("linear_attention", [n],
              [vi("q", F, ["B", "T", Hq * dk]), vi("k", F, ["B", "T", Hkv * dk]), vi("v", F, ["B", "T", Hkv * dv]),
               vi("past", F, ["B", Hkv, dk, dv]), vi("decay", F, ["B", "T", Hkv]), vi("beta", F, ["B", "T", 1])],
              [vi("y", F, None), vi("state", F, None)], opset=27)
    feeds = []
    for b, t in [(1, 4), (2, 7)]:
        feeds.append({"q": r.standard_normal((b, t, Hq * dk)).astype(np.float32) * 0.5,
                      "k": r.standard_normal((b, t, Hkv * dk)).astype(np.float32) * 0.5,
                      "v": r.standard_normal((b, t, Hkv * dv)).astype(np.float32),
                      "past": r.standard_normal((b, Hkv, dk, dv)).astype(np.float32) * 0.1,
                      "decay": -np.abs(r.standard_normal((b, t, Hkv))).astype(np.float32),
                      "beta": r.uniform(0, 1, (b, t, 1)).astype(np.float32)})
    return m, feeds, False


def attention_kv_cache():
    """Attention (opset 23), GQA with a past key/value over a free past length and a free
    sequence, an additive mask and the causal rule; present key/value out."""
    r = rng_for("attention_kv_cache")
    Hq, Hkv, D = 4, 2, 8
    n = helper.make_node("Attention", ["q", "k", "v", "mask", "pk", "pv"], ["y", "present_k", "present_v"],
                         is_causal=1)
    m = model("attention_kv_cache", [n],
              [vi("q", F, ["B", Hq, "S", D]), vi("k", F, ["B", Hkv, "S", D]), vi("v", F, ["B", Hkv, "S", D]),
               vi("mask", F, ["S", "T"]), vi("pk", F, ["B", Hkv, "P", D]), vi("pv", F, ["B", Hkv, "P", D])],
              [vi("y", F, None), vi("present_k", F, None), vi("present_v", F, None)], opset=23)
    feeds = []
    for b, s, p in [(1, 1, 5), (2, 3, 4), (1, 6, 1)]:
        feeds.append({"q": r.standard_normal((b, Hq, s, D)).astype(np.float32),
                      "k": r.standard_normal((b, Hkv, s, D)).astype(np.float32),
                      "v": r.standard_normal((b, Hkv, s, D)).astype(np.float32),
                      "mask": (r.standard_normal((s, s + p)) * 0.5).astype(np.float32),
                      "pk": r.standard_normal((b, Hkv, p, D)).astype(np.float32),
                      "pv": r.standard_normal((b, Hkv, p, D)).astype(np.float32)})
    return m, feeds, True


def if_on_static_dim(runtime_cond=False):
    """torch's shape-dependent branches: an If on Shape(x)[1] == 6 (static; the batch dim is
    free), whose then branch holds a constant of its own, reads an outer value and nests an
    If on Shape(x)[1] > 3. With runtime_cond the condition reads x's data instead."""
    r = rng_for("if_on_static_dim")
    c6 = init("c6", np.array(6, np.int64))
    inner = helper.make_node(
        "If", ["gt"], ["inner"],
        then_branch=helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t2"])], "inner_then", [],
                                      [vi("t2", F, ["B", 6])], [init("two", np.array(2.0, np.float32))]),
        else_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["e2"])], "inner_else", [],
                                      [vi("e2", F, ["B", 6])]))
    then_g = helper.make_graph(
        [helper.make_node("Greater", ["d1", "three"], ["gt"]), inner,
         helper.make_node("Add", ["inner", "bias"], ["t1"])], "then", [], [vi("t1", F, ["B", 6])],
        [init("three", np.array(3, np.int64))])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "bias"], ["e1"])], "else", [], [vi("e1", F, ["B", 6])])
    cond = ([helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0),
             helper.make_node("Greater", ["sx", "zero"], ["cond"])] if runtime_cond else
            [helper.make_node("Equal", ["d1", "c6"], ["cond"])])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["d1"], axis=0)] + cond + [
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Relu", ["y"], ["z"])]
    m = model("if_runtime" if runtime_cond else "if_on_static_dim", nodes, [vi("x", F, ["B", 6])],
              [vi("z", F, ["B", 6])],
              [c6, init("one", np.array(1, np.int64)), init("zero", np.array(0.0, np.float32)),
               init("bias", r.standard_normal(6).astype(np.float32))], opset=13)
    feeds = [{"x": r.standard_normal((b, 6)).astype(np.float32)} for b in (1, 5)]
    return m, feeds, True


def quantized_free_dims():
    """ONNX Runtime's quantization patterns over free dims: DynamicQuantizeLinear ->
    MatMulInteger (per-column int8 weight zero points) -> scales over [B, T, 8]; a per-axis
    QuantizeLinear / DequantizeLinear pair; QLinearConv (per-channel weight scales) over a
    free height and width."""
    r = rng_for("quantized_free_dims")
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    w = r.integers(-127, 128, (8, 6)).astype(np.int8)
    cw = r.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=F),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node("Mul", ["accf", "s"], ["y"]),
        helper.make_node("QuantizeLinear", ["y", "qs", "qz"], ["yq"], axis=2),
        helper.make_node("DequantizeLinear", ["yq", "qs", "qz"], ["ydq"], axis=2),
        helper.make_node("QuantizeLinear", ["img", "is", "iz"], ["imgq"]),
        helper.make_node("QLinearConv", ["imgq", "is", "iz", "cw", "cws", "cwz", "os", "oz", "cb"], ["cq"],
                         pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["cq", "os", "oz"], ["c"]),
    ]
    inits = [init("w", w), init("wz", np.array([0, 1, -2, 3, 0, -1], np.int8)),
             init("ws", np.array(0.02, np.float32)),
             init("qs", np.array([0.05, 0.1, 0.07, 0.2, 0.3, 0.04], np.float32)),
             init("qz", np.array([128, 120, 130, 128, 100, 140], np.uint8)),
             init("is", np.array(0.02, np.float32)), init("iz", np.array(128, np.uint8)),
             init("cw", cw), init("cws", np.array([0.01, 0.02, 0.015, 0.005], np.float32)),
             init("cwz", np.zeros(4, np.int8)), init("os", np.array(0.05, np.float32)),
             init("oz", np.array(120, np.uint8)), init("cb", np.array([100, -50, 0, 300], np.int32))]
    m = model("quantized_free_dims", nodes, [vi("x", F, ["B", "T", 8]), vi("img", F, ["N", 3, "H", "W"])],
              [vi("y", F, ["B", "T", 6]), vi("yq", U8, ["B", "T", 6]), vi("ydq", F, ["B", "T", 6]),
               vi("c", F, ["N", 4, "H", "W"]), vi("xs", F, []), vi("xz", U8, [])], inits, opset=13)
    feeds = [{"x": r.standard_normal((b, t, 8)).astype(np.float32),
              "img": r.uniform(-1, 1, (n, 3, h, w_)).astype(np.float32)} for b, t, n, h, w_ in
             [(1, 3, 1, 5, 7), (2, 9, 2, 8, 4)]]
    return m, feeds, True


def conv_integer_3x3():
    """ORT quantize_dynamic's Conv (DynamicQuantizeLinear -> ConvInteger with uint8 weights and
    zero point) as a 3x3 stride-1 conv of 128 channels over a free height and width: the shape
    the library runs on Winograd (AVX-512 oneDNN) for float convs, whose transforms rounded the
    integer sums (ResNet-34 dynamically quantized: 1.4e-2 rel-L2 off ONNX Runtime). The int32
    sums must be exact."""
    r = rng_for("conv_integer_3x3")
    U8 = TensorProto.UINT8
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["accf"], to=F),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    inits = [init("w", r.integers(0, 256, (128, 128, 3, 3)).astype(np.uint8)), init("wz", np.array(131, np.uint8)),
             init("ws", np.array(0.004, np.float32))]
    m = model("conv_integer_3x3", nodes, [vi("x", F, ["N", 128, "H", "W"])],
              [vi("acc", TensorProto.INT32, ["N", 128, "H", "W"]), vi("y", F, ["N", 128, "H", "W"])], inits, opset=13)
    feeds = [{"x": r.standard_normal((n, 128, h, w)).astype(np.float32)} for n, h, w in [(1, 28, 28), (2, 12, 20)]]
    return m, feeds, True


def recurrent(batch_first=False):
    """LSTM (bidirectional, peepholes, initial states, sequence_lens), GRU (linear_before_reset,
    clip) and RNN (reverse, custom activations) over a free sequence and batch; with
    batch_first the layout-1 forms (ONNX Runtime runs only layout 0: interpreter only)."""
    r = rng_for("recurrent")
    I, H = 5, 4
    L = 1 if batch_first else 0

    def weights(tag, dirs, gates, extra=()):
        return [init(f"{tag}w", (r.standard_normal((dirs, gates * H, I)) * 0.4).astype(np.float32)),
                init(f"{tag}r", (r.standard_normal((dirs, gates * H, H)) * 0.4).astype(np.float32)),
                init(f"{tag}b", (r.standard_normal((dirs, 2 * gates * H)) * 0.2).astype(np.float32))] + list(extra)

    seq_in = ["B", "S", I] if batch_first else ["S", "B", I]
    state = (lambda d: ["B", d, H]) if batch_first else (lambda d: [d, "B", H])
    nodes = [
        helper.make_node("LSTM", ["x", "lw", "lr", "lb", "lens", "h0", "c0", "lp"], ["ly", "lh", "lc"],
                         hidden_size=H, direction="bidirectional", layout=L),
        helper.make_node("GRU", ["x", "gw", "gr", "gb", "", "gh0"], ["gy", "gh"], hidden_size=H,
                         linear_before_reset=1, clip=2.5, layout=L),
        helper.make_node("RNN", ["x", "rw", "rr", "rb"], ["ry", "rh"], hidden_size=H, direction="reverse",
                         activations=["LeakyRelu"], activation_alpha=[0.3], layout=L),
    ]
    inits = (weights("l", 2, 4, [init("lp", (r.standard_normal((2, 3 * H)) * 0.3).astype(np.float32))]) +
             weights("g", 1, 3) + weights("r", 1, 1))
    outs = ([vi("ly", F, ["B", "S", 2, H] if batch_first else ["S", 2, "B", H]), vi("lh", F, state(2)),
             vi("lc", F, state(2)), vi("gy", F, ["B", "S", 1, H] if batch_first else ["S", 1, "B", H]),
             vi("gh", F, state(1)), vi("ry", F, ["B", "S", 1, H] if batch_first else ["S", 1, "B", H]),
             vi("rh", F, state(1))])
    m = model("recurrent_bf" if batch_first else "recurrent", nodes,
              [vi("x", F, seq_in), vi("lens", TensorProto.INT32, ["B"]), vi("h0", F, state(2)),
               vi("c0", F, state(2)), vi("gh0", F, state(1))], outs, inits, opset=14)
    feeds = []
    for b, s_ in [(1, 1), (3, 6), (2, 11)]:
        lens = np.array([s_] + [max(1, s_ - 2 * k) for k in range(1, b)], np.int32)
        st = (lambda d: (b, d, H)) if batch_first else (lambda d: (d, b, H))
        feeds.append({"x": r.standard_normal((b, s_, I) if batch_first else (s_, b, I)).astype(np.float32),
                      "lens": lens, "h0": r.standard_normal(st(2)).astype(np.float32) * 0.5,
                      "c0": r.standard_normal(st(2)).astype(np.float32) * 0.5,
                      "gh0": r.standard_normal(st(1)).astype(np.float32) * 0.5})
    return m, feeds, not batch_first


def recurrent_batch_first():
    return recurrent(batch_first=True)


def conv_transpose():
    """ConvTranspose over a free batch, height and width: grouped with strides, dilations,
    pads and output_padding; SAME_UPPER; 1-D with a bias (PaddleOCR's and U-Net decoders)."""
    r = rng_for("conv_transpose")
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w"], ["a"], group=2, strides=[2, 3], dilations=[1, 2],
                         pads=[1, 0, 0, 2], output_padding=[1, 0]),
        helper.make_node("ConvTranspose", ["x", "w2", "b2"], ["s"], strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("ConvTranspose", ["z", "w1", "b1"], ["t"], strides=[3], pads=[1, 1]),
    ]
    inits = [init("w", r.standard_normal((4, 3, 3, 2)).astype(np.float32)),
             init("w2", r.standard_normal((4, 5, 2, 2)).astype(np.float32)),
             init("b2", r.standard_normal(5).astype(np.float32)),
             init("w1", r.standard_normal((3, 2, 4)).astype(np.float32)),
             init("b1", r.standard_normal(2).astype(np.float32))]
    m = model("conv_transpose", nodes, [vi("x", F, ["N", 4, "H", "W"]), vi("z", F, ["N", 3, "L"])],
              [vi("a", F, ["N", 6, "OH", "OW"]), vi("s", F, ["N", 5, "SH", "SW"]), vi("t", F, ["N", 2, "TL"])],
              inits, opset=13)
    feeds = [{"x": r.standard_normal((n, 4, h, w)).astype(np.float32),
              "z": r.standard_normal((n, 3, l_)).astype(np.float32)} for n, h, w, l_ in [(1, 3, 4, 2), (2, 7, 5, 9)]]
    return m, feeds, True


def half_convs():
    """A float16 Conv -> MaxPool -> GlobalAveragePool -> Gemm chain over a free batch and image
    size: run on the float32 kernels between Casts, rounding where the interpreter does."""
    r = rng_for("half_convs")
    H16 = TensorProto.FLOAT16
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits = [init("w", (r.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float16)),
             init("b", r.standard_normal(6).astype(np.float16)),
             init("fw", r.standard_normal((4, 6)).astype(np.float16)),
             init("fb", r.standard_normal(4).astype(np.float16))]
    m = model("half_convs", nodes, [vi("x", H16, ["N", 3, "H", "W"])],
              [vi("y", H16, ["N", 4]), vi("p", H16, ["N", 6, "PH", "PW"])], inits, opset=13)
    feeds = [{"x": r.standard_normal((n, 3, h, w)).astype(np.float16)} for n, h, w in [(1, 6, 8), (3, 9, 5)]]
    return m, feeds, True


def resize_free_dims():
    """Resize over a free batch, height and width: x2 nearest (asymmetric, floor: torch's
    Upsample), x2 linear (half_pixel), and linear to sizes taken from another input's shape
    (an FPN's upsample-to-match)."""
    r = rng_for("resize_free_dims")
    empty = init("empty", np.zeros(0, np.float32))
    nodes = [
        helper.make_node("Resize", ["x", "", "s2"], ["n2"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Resize", ["x", "", "s2"], ["l2"], mode="linear"),
        helper.make_node("Shape", ["big"], ["bs"]),
        helper.make_node("Resize", ["x", "", "empty", "bs"], ["to_big"], mode="linear",
                         coordinate_transformation_mode="pytorch_half_pixel"),
    ]
    m = model("resize_free_dims", nodes, [vi("x", F, ["N", 3, "H", "W"]), vi("big", F, ["N", 3, "BH", "BW"])],
              [vi("n2", F, ["N", 3, "H2", "W2"]), vi("l2", F, ["N", 3, "H2", "W2"]),
               vi("to_big", F, ["N", 3, "BH", "BW"])],
              [init("s2", np.array([1, 1, 2, 2], np.float32)), empty], opset=13)
    feeds = [{"x": r.standard_normal((n, 3, h, w)).astype(np.float32),
              "big": np.zeros((n, 3, bh, bw), np.float32)} for n, h, w, bh, bw in [(1, 4, 5, 9, 7), (2, 7, 3, 10, 13)]]
    return m, feeds, True


def product_over_sizes_read():
    """AffineGrid's expanded form in small: a grid whose length is read from a size input
    (Range over data), multiplied by theta and transposed. The default mode once prepared the
    product before the size was read (most of the result unwritten); now it runs the portable
    product there."""
    nodes = [
        helper.make_node("Gather", ["size", "zero"], ["n0"]),
        helper.make_node("Range", ["start", "n0", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=F),
        helper.make_node("Unsqueeze", ["rf", "ax0"], ["row"]),                        # [1, n]
        helper.make_node("Mul", ["row", "half"], ["row2"]),
        helper.make_node("Unsqueeze", ["n0", "ax0"], ["n0u"]),
        helper.make_node("Concat", ["one2", "n0u"], ["ones_shape"], axis=0),
        helper.make_node("Expand", ["one_f", "ones_shape"], ["ones_row"]),            # [1, n] of 1
        helper.make_node("Concat", ["row", "row2", "ones_row"], ["grid"], axis=0),   # [3, n]
        helper.make_node("Unsqueeze", ["grid", "ax0"], ["grid3"]),                   # [1, 3, n]
        helper.make_node("MatMul", ["theta", "grid3"], ["p"]),                       # [B, 2, n]
        helper.make_node("Transpose", ["p"], ["y"], perm=[0, 2, 1]),                 # [B, n, 2]
    ]
    inits = [init("zero", np.array(0, np.int64)), init("start", np.array(0, np.int64)), init("one", np.array(1, np.int64)),
             init("ax0", np.array([0], np.int64)), init("half", np.array(0.5, np.float32)),
             init("one2", np.array([1], np.int64)), init("one_f", np.ones((1, 1), np.float32))]
    m = model("product_over_sizes_read", nodes, [vi("theta", F, ["B", 2, 3]), vi("size", I64, [1])],
              [vi("y", F, ["B", "n", 2])], inits, opset=17)
    r = rng_for("product_over_sizes_read")
    feeds = [{"theta": r.standard_normal((b, 2, 3)).astype(np.float32), "size": np.array([n], np.int64)}
             for b, n in [(2, 60), (3, 17)]]
    return m, feeds, True


def resample_free_dims():
    """The general Resize (cubic x2, constant scales), a 3-D MaxPool with its Indices, LpPool,
    and ReduceSum over axes read while running (late output dims), over a free batch and
    spatial dims."""
    r = rng_for("resample_free_dims")
    nodes = [
        helper.make_node("Resize", ["x", "", "s2"], ["cubic"], mode="cubic", cubic_coeff_a=-0.5),
        helper.make_node("Unsqueeze", ["x", "ax2"], ["x3"]),                          # [N, 3, 1, H, W]
        helper.make_node("MaxPool", ["x3"], ["mp", "mpi"], kernel_shape=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]),
        helper.make_node("LpPool", ["x"], ["lp"], kernel_shape=[3, 3], p=3, auto_pad="SAME_UPPER"),
        helper.make_node("ReduceSum", ["x", "axes"], ["red"], keepdims=1),
    ]
    m = model("resample_free_dims", nodes, [vi("x", F, ["N", 3, "H", "W"]), vi("axes", I64, [2])],
              [vi("cubic", F, None), vi("mp", F, None), vi("mpi", I64, None), vi("lp", F, None), vi("red", F, None)],
              [init("s2", np.array([1, 1, 2, 2], np.float32)), init("ax2", np.array([2], np.int64))], opset=18)
    feeds = [{"x": r.standard_normal((n, 3, h, w)).astype(np.float32), "axes": np.array(a, np.int64)}
             for n, h, w, a in [(1, 4, 5, [1, 3]), (2, 7, 3, [-2, 0])]]
    return m, feeds, True


def resize_fractional_free_dims():
    """Resize by fractional scales over a free height and width (deeplab's x1.5, a x0.5
    downsample, a x1.25 torch Upsample): the output size is floor(size * scale) at run time
    (7 * 1.5 = 10.5 -> 10), and the coordinates use the given scale, not out / in."""
    r = rng_for("resize_fractional_free_dims")
    nodes = [
        helper.make_node("Resize", ["x", "", "s15"], ["lin15"], mode="linear"),
        helper.make_node("Resize", ["x", "", "s15"], ["ac15"], mode="linear", coordinate_transformation_mode="align_corners"),
        helper.make_node("Resize", ["x", "", "s05"], ["near05"], mode="nearest"),
        helper.make_node("Resize", ["x", "", "s125"], ["asym125"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Resize", ["x", "", "s03"], ["lin03"], mode="linear",
                         coordinate_transformation_mode="pytorch_half_pixel"),
    ]
    inits = [init("s15", np.array([1, 1, 1.5, 1.5], np.float32)), init("s05", np.array([1, 1, 0.5, 0.5], np.float32)),
             init("s125", np.array([1, 1, 1.25, 2.5], np.float32)), init("s03", np.array([1, 1, 1 / 3, 0.7], np.float32))]
    outs = [vi(o, F, ["N", 3, None, None]) for o in ["lin15", "ac15", "near05", "asym125", "lin03"]]
    m = model("resize_fractional_free_dims", nodes, [vi("x", F, ["N", 3, "H", "W"])], outs, inits, opset=13)
    feeds = [{"x": r.standard_normal((n, 3, h, w)).astype(np.float32)} for n, h, w in [(1, 7, 9), (2, 12, 5)]]
    return m, feeds, True


def if_runtime():
    """The If of if_on_static_dim on a condition read from x's data (ReduceSum(x) > 0): both
    branches compiled, the one taken chosen while running (x's sum changes sign with the seed)."""
    return if_on_static_dim(runtime_cond=True)


def if_branch_shapes():
    """An If on data whose branches give different shapes: then [B, 6] (x * 2), else [B, 3]
    (a Slice of x plus a branch constant); the output's second dim is known only after the If."""
    r = rng_for("if_branch_shapes")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [], [vi("t", F, ["B", 6])],
                               [init("two", np.array(2.0, np.float32))])
    else_g = helper.make_graph([helper.make_node("Slice", ["x", "s0", "s3", "ax1"], ["sl"]),
                                helper.make_node("Add", ["sl", "c3"], ["e"])], "else", [], [vi("e", F, ["B", 3])],
                               [init("s0", np.array([0], np.int64)), init("s3", np.array([3], np.int64)),
                                init("ax1", np.array([1], np.int64)),
                                init("c3", np.array([1, 2, 3], np.float32))])
    nodes = [helper.make_node("ReduceMax", ["flag"], ["fm"], keepdims=0),
             helper.make_node("Greater", ["fm", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Sigmoid", ["y"], ["z"])]
    m = model("if_branch_shapes", nodes, [vi("x", F, ["B", 6]), vi("flag", F, [1])], [vi("z", F, ["B", "K"])],
              [init("zero", np.array(0.0, np.float32))], opset=13)
    feeds = [{"x": r.standard_normal((b, 6)).astype(np.float32), "flag": np.array([f], np.float32)}
             for b, f in [(1, 1.0), (4, -1.0), (2, -3.0)]]
    return m, feeds, True


def loop_body(nodes, inputs, outputs, inits=()):
    return helper.make_graph(nodes, "body", inputs, outputs, list(inits))


def loop_fixed():
    """A Loop with a trip count from an input: carried h = tanh(h @ W + x) over a free batch,
    a scan output of each step's h (stacked on a new first dim) and the iteration number."""
    r = rng_for("loop_fixed")
    body = loop_body(
        [helper.make_node("MatMul", ["h_in", "w"], ["hw"]), helper.make_node("Add", ["hw", "x"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=F), helper.make_node("Mul", ["h_out", "i_f"], ["scan"])],
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("h_in", F, ["B", 4])],
        [vi("cond_out", BOOL, []), vi("h_out", F, ["B", 4]), vi("scan", F, ["B", 4])])
    nodes = [helper.make_node("Loop", ["trips", "", "h0"], ["h", "steps"], body=body)]
    m = model("loop_fixed", nodes, [vi("x", F, ["B", 4]), vi("h0", F, ["B", 4]), vi("trips", I64, [])],
              [vi("h", F, ["B", 4]), vi("steps", F, ["T", "B", 4])],
              [init("w", (r.standard_normal((4, 4)) * 0.5).astype(np.float32))], opset=13)
    feeds = [{"x": r.standard_normal((b, 4)).astype(np.float32), "h0": r.standard_normal((b, 4)).astype(np.float32),
              "trips": np.array(t, np.int64)} for b, t in [(1, 3), (3, 5), (2, 1)]]
    return m, feeds, True


def loop_cond():
    """A Loop ended by its condition (no trip count): halve v until its max is below a limit
    read from data; the iteration count and a scan output depend on the data."""
    r = rng_for("loop_cond")
    body = loop_body(
        [helper.make_node("Mul", ["v_in", "half"], ["v_out"]), helper.make_node("ReduceMax", ["v_out"], ["mx"], keepdims=0),
         helper.make_node("Greater", ["mx", "limit"], ["cond_out"]),
         helper.make_node("Add", ["n_in", "one"], ["n_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=1)],
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("v_in", F, ["N"]), vi("n_in", I64, [])],
        [vi("cond_out", BOOL, []), vi("v_out", F, ["N"]), vi("n_out", I64, []), vi("s", F, [1])])
    nodes = [helper.make_node("ReduceMax", ["v"], ["m0"], keepdims=0),
             helper.make_node("Greater", ["m0", "limit"], ["c0"]),
             helper.make_node("Loop", ["", "c0", "v", "n0"], ["vf", "count", "sums"], body=body)]
    m = model("loop_cond", nodes, [vi("v", F, ["N"]), vi("limit", F, [])],
              [vi("vf", F, ["N"]), vi("count", I64, []), vi("sums", F, ["K", 1])],
              [init("half", np.array(0.5, np.float32)), init("one", np.array(1, np.int64)),
               init("n0", np.array(0, np.int64))], opset=13)
    feeds = [{"v": np.abs(r.standard_normal(n)).astype(np.float32) * sc, "limit": np.array(lim, np.float32)}
             for n, sc, lim in [(5, 10.0, 0.5), (12, 100.0, 0.01), (3, 0.1, 1.0)]]
    return m, feeds, True


def loop_growing():
    """A Loop whose carried value grows every iteration (Concat of itself and x on axis 0: its
    shape changes per step), with an outer value read inside and a scan output of its sum."""
    r = rng_for("loop_growing")
    body = loop_body(
        [helper.make_node("Mul", ["x", "scale"], ["xs"]), helper.make_node("Concat", ["acc_in", "xs"], ["acc_out"], axis=0),
         helper.make_node("ReduceSum", ["acc_out"], ["tot"], keepdims=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F, ["A", 3])],
        [vi("cond_out", BOOL, []), vi("acc_out", F, ["A2", 3]), vi("tot", F, [])])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["acc", "tots"], body=body)]
    m = model("loop_growing", nodes, [vi("x", F, ["B", 3]), vi("trips", I64, []), vi("scale", F, [])],
              [vi("acc", F, ["R", 3]), vi("tots", F, ["T"])], opset=13)
    feeds = [{"x": r.standard_normal((b, 3)).astype(np.float32), "trips": np.array(t, np.int64),
              "scale": np.array(sc, np.float32)} for b, t, sc in [(1, 4, 0.5), (3, 2, -1.5)]]
    return m, feeds, True


def loop_nested():
    """Control flow inside control flow: a Loop whose body runs an inner Loop (two steps of
    v = v * 0.5 + x) and an If on the iteration's data (ReduceSum(v) > 3i - 4 picks v + 1 or v - 1),
    each body a nested library inside its parent's. The threshold grows with the iteration, so
both branches run."""
    inner = loop_body([helper.make_node("Mul", ["w_in", "half"], ["wh"]), helper.make_node("Add", ["wh", "x"], ["w_out"]),
                       helper.make_node("Identity", ["c_in"], ["c_out"])],
                      [vi("j", I64, []), vi("c_in", BOOL, []), vi("w_in", F, ["B", 3])],
                      [vi("c_out", BOOL, []), vi("w_out", F, ["B", 3])])
    pick = helper.make_node(
        "If", ["pos"], ["v_out"],
        then_branch=helper.make_graph([helper.make_node("Add", ["w", "one_f"], ["tp"])], "then", [], [vi("tp", F, ["B", 3])]),
        else_branch=helper.make_graph([helper.make_node("Sub", ["w", "one_f"], ["tm"])], "else", [], [vi("tm", F, ["B", 3])]))
    body = loop_body(
        [helper.make_node("Loop", ["two", "", "v_in"], ["w"], body=inner),
         helper.make_node("ReduceSum", ["w"], ["sw"], keepdims=0), helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["fi", "three"], ["fi3"]), helper.make_node("Sub", ["fi3", "four"], ["thr"]),
         helper.make_node("Greater", ["sw", "thr"], ["pos"]),
         pick, helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Cast", ["pos"], ["p"], to=F)],
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("v_in", F, ["B", 3])],
        [vi("cond_out", BOOL, []), vi("v_out", F, ["B", 3]), vi("p", F, [])])
    nodes = [helper.make_node("Loop", ["trips", "", "v0"], ["v", "picks"], body=body)]
    m = model("loop_nested", nodes, [vi("x", F, ["B", 3]), vi("v0", F, ["B", 3]), vi("trips", I64, [])],
              [vi("v", F, ["B", 3]), vi("picks", F, ["T"])],
              [init("two", np.array(2, np.int64)), init("half", np.array(0.5, np.float32)),
               init("one_f", np.array(1.0, np.float32)), init("three", np.array(3.0, np.float32)),
               init("four", np.array(4.0, np.float32))], opset=13)
    r = rng_for("loop_nested")
    feeds = [{"x": r.standard_normal((b, 3)).astype(np.float32), "v0": r.standard_normal((b, 3)).astype(np.float32),
              "trips": np.array(t, np.int64)} for b, t in [(1, 4), (3, 6)]]
    return m, feeds, True


def scan_directions():
    """Scan (opset 11 form) over a free sequence: two scan inputs, one forward on axis 0 and one
    reversed on axis 1; a running state; scan outputs stacked forward on axis 0 and reversed on
    axis 1."""
    r = rng_for("scan_directions")
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["s1"]), helper.make_node("Mul", ["s1", "b"], ["s_out"]),
         helper.make_node("Relu", ["s_out"], ["y1"]), helper.make_node("Sub", ["a", "b"], ["y2"])],
        "scan_body", [vi("s_in", F, ["C"]), vi("a", F, ["C"]), vi("b", F, ["C"])],
        [vi("s_out", F, ["C"]), vi("y1", F, ["C"]), vi("y2", F, ["C"])])
    nodes = [helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "ya", "yb"], body=body, num_scan_inputs=2,
                              scan_input_axes=[0, 1], scan_input_directions=[0, 1], scan_output_axes=[0, 1],
                              scan_output_directions=[0, 1])]
    m = model("scan_directions", nodes, [vi("s0", F, ["C"]), vi("xa", F, ["T", "C"]), vi("xb", F, ["C", "T"])],
              [vi("s", F, ["C"]), vi("ya", F, ["T", "C"]), vi("yb", F, ["C", "T"])], opset=13)
    feeds = [{"s0": r.standard_normal(c).astype(np.float32), "xa": r.standard_normal((t, c)).astype(np.float32),
              "xb": (r.uniform(0.5, 1.0, (c, t))).astype(np.float32)} for c, t in [(3, 4), (5, 9)]]
    return m, feeds, True


def rank_divergent_if(graph_output=False):
    """Silero VAD's decoder in small: an If on Shape(x)[2] == 1 (T, a free dim) whose then
    branch squeezes it ([N, C]) and whose else branch passes x on ([N, C, T]), so its output's
    rank is known only while running; then torch's "is it 2-D?" rank test (Size(Shape(y)) == 2,
    an If unsqueezing the 2-D case) brings the ranks together again before a product, a sum
    over T and a Relu. hodu build moves the nodes after the If into its branches until the ranks
    agree (if_continuation.h). With graph_output the divergent value is a model output: refused."""
    r = rng_for("rank_divergent_if")
    sq = helper.make_graph([helper.make_node("Squeeze", ["x", "ax2"], ["sq"])], "squeeze", [],
                           [helper.make_tensor_value_info("sq", F, None)])
    keep = helper.make_graph([helper.make_node("Identity", ["x"], ["kp"])], "keep", [],
                             [helper.make_tensor_value_info("kp", F, None)])
    unsq = helper.make_graph([helper.make_node("Unsqueeze", ["y", "ax2"], ["us"])], "unsqueeze", [],
                             [helper.make_tensor_value_info("us", F, None)])
    same = helper.make_graph([helper.make_node("Identity", ["y"], ["id"])], "same", [],
                             [helper.make_tensor_value_info("id", F, None)])
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "two"], ["t"], axis=0),
             helper.make_node("Equal", ["t", "one"], ["t_is_1"]),
             helper.make_node("If", ["t_is_1"], ["y"], then_branch=sq, else_branch=keep)]
    inits = [init("ax2", np.array([2], np.int64)), init("two", np.array(2, np.int64)),
             init("one", np.array(1, np.int64)), init("w", r.standard_normal((4, 1)).astype(np.float32))]
    if graph_output:
        m = model("rank_divergent_output", nodes, [vi("x", F, ["N", 4, "T"])],
                  [helper.make_tensor_value_info("y", F, None)], inits, opset=13)
        return m, [], True
    nodes += [helper.make_node("Shape", ["y"], ["ys"]),
              helper.make_node("Size", ["ys"], ["rank"]),
              helper.make_node("Equal", ["rank", "two"], ["is_2d"]),
              helper.make_node("If", ["is_2d"], ["z"], then_branch=unsq, else_branch=same),
              helper.make_node("Mul", ["z", "w"], ["zw"]),
              helper.make_node("ReduceSum", ["zw", "ax2"], ["s"], keepdims=0),
              helper.make_node("Relu", ["s"], ["out"])]
    m = model("rank_divergent_if", nodes, [vi("x", F, ["N", 4, "T"])], [vi("out", F, ["N", 4])], inits, opset=13)
    feeds = [{"x": r.standard_normal((n, 4, t)).astype(np.float32)} for n, t in [(1, 1), (3, 5), (2, 1), (1, 7)]]
    return m, feeds, True


def rank_divergent_on_data():
    """An If on data (flag > 0) whose then branch unsqueezes x ([N, 1, C]) and whose else
    branch passes it on ([N, C]); a Reshape to [0, -1] after it makes both [N, C]."""
    r = rng_for("rank_divergent_on_data")
    up = helper.make_graph([helper.make_node("Unsqueeze", ["x", "ax1"], ["u"])], "up", [],
                           [helper.make_tensor_value_info("u", F, None)])
    keep = helper.make_graph([helper.make_node("Identity", ["x"], ["k"])], "keep", [],
                             [helper.make_tensor_value_info("k", F, None)])
    nodes = [helper.make_node("ReduceMax", ["flag"], ["fm"], keepdims=0),
             helper.make_node("Greater", ["fm", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=up, else_branch=keep),
             helper.make_node("Reshape", ["y", "flat"], ["y2"]),
             helper.make_node("Add", ["y2", "b"], ["out"])]
    inits = [init("ax1", np.array([1], np.int64)), init("zero", np.array(0.0, np.float32)),
             init("flat", np.array([0, -1], np.int64)), init("b", r.standard_normal(5).astype(np.float32))]
    m = model("rank_divergent_on_data", nodes, [vi("x", F, ["N", 5]), vi("flag", F, [1])], [vi("out", F, ["N", 5])],
              inits, opset=13)
    feeds = [{"x": r.standard_normal((n, 5)).astype(np.float32), "flag": np.array([f], np.float32)}
             for n, f in [(1, 1.0), (3, -1.0), (2, 2.0)]]
    return m, feeds, True

def rank_divergent_output():
    return rank_divergent_if(graph_output=True)


MODELS = [product_over_sizes_read, resize_free_dims, resize_fractional_free_dims, half_convs, conv_transpose,
          causal_conv, linear_attention, attention_kv_cache, if_on_static_dim, quantized_free_dims, conv_integer_3x3,
          recurrent,
          recurrent_batch_first, if_runtime, if_branch_shapes, loop_fixed, loop_cond, loop_growing,
          loop_nested, scan_directions]
MODELS += [resample_free_dims, rank_divergent_if, rank_divergent_on_data]


def roi_align_free_dims():
    """RoiAlign (avg and max, both coordinate modes) over a free batch, image size and roi count."""
    r = rng_for("roi_align_free_dims")
    nodes = [helper.make_node("RoiAlign", ["x", "rois", "bi"], ["ya"], output_height=3, output_width=2,
                              sampling_ratio=2, spatial_scale=0.5),
             helper.make_node("RoiAlign", ["x", "rois", "bi"], ["ym"], mode="max", output_height=2, output_width=4,
                              coordinate_transformation_mode="output_half_pixel")]
    m = model("roi_align_free_dims", nodes, [vi("x", F, ["N", 3, "H", "W"]), vi("rois", F, ["R", 4]),
                                            vi("bi", I64, ["R"])], [vi("ya", F, ["R", 3, 3, 2]), vi("ym", F, ["R", 3, 2, 4])], opset=16)
    feeds = []
    for n, h, w, k in [(1, 6, 8, 2), (3, 10, 7, 5)]:
        x1, y1 = r.uniform(0, w, k), r.uniform(0, h, k)
        rois = np.stack([x1, y1, x1 + r.uniform(1, w, k), y1 + r.uniform(1, h, k)], 1).astype(np.float32)
        feeds.append({"x": r.standard_normal((n, 3, h, w)).astype(np.float32), "rois": rois,
                      "bi": r.integers(0, n, k).astype(np.int64)})
    return m, feeds, True


def matmul_wide_free_dims():
    """MatMul and Gemm outside float32: float64 with broadcast batch dims, int32 (wrapping), and a
    float64 Gemm with transB, alpha, beta and a row of C, over free dims."""
    r = rng_for("matmul_wide_free_dims")
    D, I32 = TensorProto.DOUBLE, TensorProto.INT32
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"]),
             helper.make_node("MatMul", ["ia", "ib"], ["iy"]),
             helper.make_node("Gemm", ["ga", "gb", "gc"], ["gy"], transB=1, alpha=0.5, beta=2.0)]
    m = model("matmul_wide_free_dims", nodes,
              [vi("a", D, ["B", 1, "M", 5]), vi("b", D, [3, 5, "N"]), vi("ia", I32, ["M", 4]), vi("ib", I32, [4, "N"]),
               vi("ga", D, ["M", 6]), vi("gb", D, ["N", 6]), vi("gc", D, [1, "N"])],
              [vi("y", D, ["B", 3, "M", "N"]), vi("iy", I32, ["M", "N"]), vi("gy", D, ["M", "N"])], opset=13)
    feeds = [{"a": r.standard_normal((b, 1, mm, 5)), "b": r.standard_normal((3, 5, nn)),
              "ia": r.integers(-2 ** 20, 2 ** 20, (mm, 4)).astype(np.int32),
              "ib": r.integers(-2 ** 12, 2 ** 12, (4, nn)).astype(np.int32),
              "ga": r.standard_normal((mm, 6)), "gb": r.standard_normal((nn, 6)), "gc": r.standard_normal((1, nn))}
             for b, mm, nn in [(1, 2, 3), (2, 7, 4)]]
    return m, feeds, True


def ml_pipeline_free_dims():
    """A scikit-learn style pipeline of ai.onnx.ml ops over a free batch: Imputer, Scaler, a
    TreeEnsemble (set membership, NaN routing, softmax), LinearRegressor, Binarizer,
    Normalizer, ArrayFeatureExtractor, FeatureVectorizer, and OneHotEncoder and LabelEncoder of
    int64 categories."""
    r = rng_for("ml_pipeline_free_dims")
    ML = "ai.onnx.ml"
    T = helper.make_tensor
    tree = helper.make_node(
        "TreeEnsemble", ["s"], ["t"], domain=ML, n_targets=2, aggregate_function=1, post_transform=0,
        tree_roots=[0, 3], nodes_featureids=[0, 1, 2, 3, 2], nodes_truenodeids=[1, 0, 1, 4, 2],
        nodes_trueleafs=[0, 1, 1, 0, 1], nodes_falsenodeids=[2, 1, 3, 2, 3], nodes_falseleafs=[0, 1, 1, 1, 1],
        nodes_modes=T("m", TensorProto.UINT8, [5], [0, 3, 6, 2, 1]),
        nodes_splits=T("sp", F, [5], [0.1, -0.3, 0.0, 0.5, 0.2]),
        nodes_missing_value_tracks_true=[1, 0, 0, 1, 0],
        membership_values=T("mv", F, [4], [-1.0, 2.0, float("nan"), float("nan")]),
        leaf_targetids=[0, 1, 0, 1], leaf_weights=T("lw", F, [4], [1.5, -0.7, 0.3, 2.0]))
    nodes = [helper.make_node("Imputer", ["x"], ["xi"], domain=ML, imputed_value_floats=[0.5, -1.0, 0.0, 2.0],
                              replaced_value_float=float("nan")),
             helper.make_node("Scaler", ["xi"], ["s"], domain=ML, offset=[0.1, -0.2, 0.0, 0.3], scale=[2.0, 0.5, 1.0, 3.0]),
             tree,
             helper.make_node("LinearRegressor", ["s"], ["lr"], domain=ML, targets=2, post_transform="LOGISTIC",
                              coefficients=[0.2, -0.1, 0.4, 0.3, -0.5, 0.25, 0.1, 0.05], intercepts=[0.1, -0.2]),
             helper.make_node("Binarizer", ["xi"], ["b"], domain=ML, threshold=0.25),
             helper.make_node("Normalizer", ["xi"], ["nrm"], domain=ML, norm="L2"),
             helper.make_node("ArrayFeatureExtractor", ["xi", "idx"], ["afe"], domain=ML),
             helper.make_node("FeatureVectorizer", ["afe", "lr"], ["fv"], domain=ML, inputdimensions=[2, 2]),
             helper.make_node("OneHotEncoder", ["c"], ["oh"], domain=ML, cats_int64s=[7, 3, 11], zeros=1),
             helper.make_node("LabelEncoder", ["c"], ["le"], domain=ML, keys_int64s=[3, 7, 11],
                              values_floats=[0.5, -1.5, 2.5], default_float=9.0)]
    g = helper.make_graph(nodes, "ml_pipeline_free_dims", [vi("x", F, ["N", 4]), vi("c", I64, ["N"])],
                          [vi(o, F, None) for o in ["t", "lr", "b", "nrm", "afe", "fv", "oh", "le"]],
                          [init("idx", np.array([3, 0], np.int64))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)])
    m.ir_version = 10
    feeds = []
    for n in (3, 17):
        x = r.standard_normal((n, 4)).astype(np.float32)
        x[r.uniform(size=(n, 4)) < 0.2] = np.nan
        # Members of node 2's set, and others that do not truncate to one (ONNX Runtime compares
        # the feature truncated to an integer).
        x[:, 2] = np.where(np.abs(x[:, 2]) > 0.9, 0.3, x[:, 2])
        x[:2, 2] = 2.0
        feeds.append({"x": x, "c": r.choice([3, 7, 11, 5], n).astype(np.int64)})
    return m, feeds, True


def random_ops_free_dims():
    """Random ops over a free batch, seeded and not: the library must draw exactly what the
    interpreter draws (hodu run's default --seed 0), RandomNormal, RandomUniformLike,
    Bernoulli, Multinomial, and Dropout in training mode (numpy's MT19937 mask)."""
    r = rng_for("random_ops_free_dims")
    nodes = [helper.make_node("RandomNormal", [], ["n"], shape=[3, 4], mean=1.0, scale=2.0, seed=3.0),
             helper.make_node("RandomUniformLike", ["x"], ["u"], low=-1.0, high=3.0),
             helper.make_node("Sigmoid", ["x"], ["p"]),
             helper.make_node("Bernoulli", ["p"], ["b"]),
             helper.make_node("Multinomial", ["x"], ["k"], sample_size=5, seed=7.0, dtype=TensorProto.INT64),
             helper.make_node("Dropout", ["x", "ratio", "train"], ["d", "mask"])]
    m = model("random_ops_free_dims", nodes, [vi("x", F, ["N", 6]), vi("train", BOOL, [])],
              [vi("n", F, [3, 4]), vi("u", F, ["N", 6]), vi("b", F, ["N", 6]), vi("k", I64, ["N", 5]),
               vi("d", F, ["N", 6]), vi("mask", BOOL, ["N", 6])],
              [init("ratio", np.array(0.4, np.float32))], opset=17)
    feeds = [{"x": r.standard_normal((n, 6)).astype(np.float32), "train": np.array(t)} for n, t in [(2, True), (9, True),
                                                                                                   (4, False)]]
    return m, feeds, False


def training_ops_free_dims():
    """The ai.onnx.preview.training optimizers over free dims: Adam over two tensors (float32),
    Nesterov Momentum and Adagrad (float64), R and T fed while running."""
    r = rng_for("training_ops_free_dims")
    TR, D = "ai.onnx.preview.training", TensorProto.DOUBLE
    nodes = [helper.make_node("Adam", ["R", "T", "x1", "x2", "g1", "g2", "v1", "v2", "h1", "h2"],
                              ["x1n", "x2n", "v1n", "v2n", "h1n", "h2n"], domain=TR, alpha=0.8, beta=0.95,
                              epsilon=1e-4, norm_coefficient=0.01, norm_coefficient_post=0.02),
             helper.make_node("Momentum", ["R", "T", "dx", "dg", "dv"], ["dxn", "dvn"], domain=TR, alpha=0.9, beta=0.5,
                              mode="nesterov", norm_coefficient=0.1),
             helper.make_node("Adagrad", ["R", "T", "dx", "dg", "dh"], ["axn", "ahn"], domain=TR, decay_factor=0.1,
                              epsilon=1e-5, norm_coefficient=0.05)]
    ins = [vi("R", F, []), vi("T", I64, [])] + [vi(f"{k}1", F, ["N", 3]) for k in "xgvh"] + \
          [vi(f"{k}2", F, ["M"]) for k in "xgvh"] + [vi(f"d{k}", D, ["N", "M"]) for k in "xgvh"]
    ins = [ins[0], ins[1], ins[2], ins[6], ins[3], ins[7], ins[4], ins[8], ins[5], ins[9]] + ins[10:]
    outs = [vi(o, F, ["N", 3] if o[1] == "1" else ["M"]) for o in ["x1n", "x2n", "v1n", "v2n", "h1n", "h2n"]] + \
           [vi(o, D, ["N", "M"]) for o in ["dxn", "dvn", "axn", "ahn"]]
    g = helper.make_graph(nodes, "training_ops_free_dims", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TR, 1)])
    m.ir_version = 8
    feeds = []
    for n, mm, t in [(2, 5, 0), (4, 3, 7)]:
        f = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
        for k in "xgvh":
            f[f"{k}1"] = r.standard_normal((n, 3)).astype(np.float32)
            f[f"{k}2"] = r.standard_normal(mm).astype(np.float32)
            f[f"d{k}"] = r.standard_normal((n, mm))
        for k in ("h1", "h2", "dh"):
            f[k] = np.abs(f[k])
        feeds.append(f)
    return m, feeds, False


def deform_conv_free_dims():
    """DeformConv (offset groups, mask, bias, stride, padding, dilation) over a free batch and
    image size; the offsets' grid given as its own free dims, checked against the output's."""
    r = rng_for("deform_conv_free_dims")
    C, M, k = 4, 6, 3
    n = helper.make_node("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], group=2, offset_group=2,
                         strides=[2, 1], pads=[1, 1, 1, 1], dilations=[1, 2])
    m = model("deform_conv_free_dims", [n],
              [vi("x", F, ["N", C, "H", "W"]), vi("off", F, ["N", 2 * 2 * k * k, "OH", "OW"]),
               vi("mask", F, ["N", 2 * k * k, "OH", "OW"])], [vi("y", F, ["N", M, "OH", "OW"])],
              [init("w", r.standard_normal((M, C // 2, k, k)).astype(np.float32)),
               init("b", r.standard_normal(M).astype(np.float32))], opset=19)
    feeds = []
    for b, h, w in [(1, 5, 6), (2, 8, 7)]:
        oh, ow = (h + 2 - 3) // 2 + 1, (w + 2 - 5) + 1
        feeds.append({"x": r.standard_normal((b, C, h, w)).astype(np.float32),
                      "off": (r.standard_normal((b, 36, oh, ow)) * 1.5).astype(np.float32),
                      "mask": r.uniform(0, 1, (b, 18, oh, ow)).astype(np.float32)})
    return m, feeds, True


def mel_weight_matrix_sizes_read():
    """MelWeightMatrix whose num_mel_bins and dft_length are inputs: the output's dims are read
    while running, so one library gives [33, 8] and [129, 20]."""
    n = helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["y"])
    m = model("mel_weight_matrix_sizes_read", [n], [vi("bins", I64, []), vi("dft", I64, [])],
              [vi("y", F, ["S", "B"])],
              [init("rate", np.array(16000, np.int64)), init("lo", np.array(20.0, np.float32)),
               init("hi", np.array(7600.0, np.float32))], opset=17)
    return m, [{"bins": np.array(b, np.int64), "dft": np.array(d, np.int64)} for b, d in [(8, 64), (20, 256)]], True


def tfidf_free_dims():
    """TfIdfVectorizer (uni- and bigrams with skips, TFIDF weights) over int64 tokens with a free
    batch and length."""
    r = rng_for("tfidf_free_dims")
    n = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                         max_skip_count=2, ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7],
                         pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 5], weights=[1.0, 0.5, 2.0, 0.1, 3.0, 1.5, 0.7, 0.2])
    m = model("tfidf_free_dims", [n], [vi("x", I64, ["N", "C"])], [vi("y", F, ["N", 8])], opset=17)
    return m, [{"x": r.integers(1, 9, (b, c)).astype(np.int64)} for b, c in [(1, 6), (4, 13)]], True


def roi_pools_free_dims():
    """MaxRoiPool and GlobalLpPool (p = 3) over a free batch, image size and roi count."""
    r = rng_for("roi_pools_free_dims")
    nodes = [helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 3], spatial_scale=0.5),
             helper.make_node("GlobalLpPool", ["x"], ["g"], p=3)]
    m = model("roi_pools_free_dims", nodes, [vi("x", F, ["N", 3, "H", "W"]), vi("rois", F, ["R", 5])],
              [vi("y", F, ["R", 3, 2, 3]), vi("g", F, ["N", 3, 1, 1])], opset=17)
    feeds = []
    for n, h, w, k in [(1, 6, 8, 2), (3, 11, 7, 4)]:
        x1, y1 = r.uniform(0, 2 * w, k), r.uniform(0, 2 * h, k)
        rois = np.stack([r.integers(0, n, k), x1, y1, x1 + r.uniform(2, 2 * w, k), y1 + r.uniform(2, 2 * h, k)], 1)
        feeds.append({"x": r.standard_normal((n, 3, h, w)).astype(np.float32), "rois": rois.astype(np.float32)})
    return m, feeds, True


def conv_f64_free_dims():
    """Conv of float64 (1-D with SAME_UPPER and dilation, 2-D with groups, stride and padding)
    over a free batch and length/size."""
    r = rng_for("conv_f64_free_dims")
    D = TensorProto.DOUBLE
    nodes = [helper.make_node("Conv", ["a", "wa", "ba"], ["ya"], auto_pad="SAME_UPPER", dilations=[2], strides=[2]),
             helper.make_node("Conv", ["x", "wx"], ["yx"], group=2, strides=[2, 1], pads=[1, 0, 1, 2])]
    m = model("conv_f64_free_dims", nodes, [vi("a", D, ["N", 3, "L"]), vi("x", D, ["N", 4, "H", "W"])],
              [vi("ya", D, ["N", 5, "LO"]), vi("yx", D, ["N", 6, "HO", "WO"])],
              [init("wa", r.standard_normal((5, 3, 3))), init("ba", r.standard_normal(5)),
               init("wx", r.standard_normal((6, 2, 3, 3)))], opset=17)
    return m, [{"a": r.standard_normal((n, 3, l)), "x": r.standard_normal((n, 4, h, w))}
               for n, l, h, w in [(1, 9, 5, 6), (3, 16, 8, 4)]], False  # ORT has no float64 Conv


MODELS += [roi_align_free_dims, matmul_wide_free_dims, ml_pipeline_free_dims, random_ops_free_dims,
           training_ops_free_dims, deform_conv_free_dims, mel_weight_matrix_sizes_read,
           tfidf_free_dims, roi_pools_free_dims, conv_f64_free_dims]


def einsum_free_dims():
    m = model("einsum_free_dims", [helper.make_node("Einsum", ["a", "b"], ["y"], equation="btd,bsd->bts")],
              [vi("a", F, ["B", "T", 4]), vi("b", F, ["B", "S", 4])], [vi("y", F, ["B", "T", "S"])], opset=13)
    return m, [], True


def sequence_from_constants():
    """torch.repeat_interleave's export in small: a SequenceEmpty (no inputs, so constant
    folding evaluated it and stopped at its non-tensor result: 'folding produced a non-tensor
    value') filled and concatenated; lowered to the tensors it holds."""
    r = rng_for("sequence_from_constants")
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("SequenceInsert", ["s0", "x"], ["s1"]),
             helper.make_node("ConcatFromSequence", ["s1"], ["y"], axis=0)]
    m = model("sequence_from_constants", nodes, [vi("x", F, ["N", 3])], [vi("y", F, ["N", 3])], opset=13)
    return m, [{"x": r.standard_normal((n, 3)).astype(np.float32)} for n in (2, 5)], True


def sequences_inside_graph():
    """Sequences and optionals between tensor inputs and outputs (SplitToSequence without and
    with split sizes, SequenceInsert/Erase/At/Length, ConcatFromSequence with and without
    new_axis, Optional/OptionalHasElement/OptionalGetElement) over a free batch: lowered to
    Split/Concat/Unsqueeze at build time."""
    r = rng_for("sequences_inside_graph")
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0),
             helper.make_node("SplitToSequence", ["x", "sizes"], ["chunks"], axis=1),
             helper.make_node("SequenceInsert", ["parts", "w", "one"], ["p1"]),
             helper.make_node("SequenceErase", ["p1", "minus_one"], ["p2"]),
             helper.make_node("ConcatFromSequence", ["p2"], ["stacked"], axis=-1, new_axis=1),
             helper.make_node("SequenceAt", ["chunks", "one"], ["second"]),
             helper.make_node("SequenceLength", ["p2"], ["len"]),
             helper.make_node("ConcatFromSequence", ["chunks"], ["back"], axis=1),
             helper.make_node("Optional", ["second"], ["opt"]),
             helper.make_node("OptionalHasElement", ["opt"], ["has"]),
             helper.make_node("OptionalGetElement", ["opt"], ["got"]),
             helper.make_node("Mul", ["got", "two"], ["y"])]
    m = model("sequences_inside_graph", nodes, [vi("x", F, ["N", 4]), vi("w", F, ["N"])],
              [vi("stacked", F, ["N", 4]), vi("len", I64, []), vi("back", F, ["N", 4]), vi("has", BOOL, []),
               vi("y", F, ["N", 3])],
              [init("sizes", np.array([1, 3], np.int64)), init("one", np.array(1, np.int64)),
               init("minus_one", np.array(-1, np.int64)), init("two", np.array(2.0, np.float32))], opset=18)
    return m, [{"x": r.standard_normal((n, 4)).astype(np.float32), "w": r.standard_normal(n).astype(np.float32)}
               for n in (1, 6)], True


def add_of_f32_and_i64():
    """An invalid model (Add of float and int64): hodu run and ONNX Runtime refuse it; the build
    made a library that ran it and returned numbers."""
    m = model("add_of_f32_and_i64", [helper.make_node("Add", ["x", "i"], ["y"])],
              [vi("x", F, ["N", 3]), vi("i", I64, ["N", 3])], [vi("y", F, ["N", 3])], opset=13)
    return m, [], False


def if_over_sequence():
    """An If on data whose then branch goes through a sequence (SequenceConstruct, SequenceAt),
    lowered inside the branch; the inputs take each branch."""
    then_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["sq"]),
                                helper.make_node("SequenceAt", ["sq", "zero_i"], ["t"])], "then", [],
                               [vi("t", F, ["N"])], [init("zero_i", np.array(0, np.int64))])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, ["N"])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0),
             helper.make_node("Greater", ["sx", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = model("if_over_sequence", nodes, [vi("x", F, ["N"])], [vi("y", F, ["N"])],
              [init("zero", np.array(0.0, np.float32))], opset=13)
    r = rng_for("if_over_sequence")
    return m, [{"x": (r.standard_normal(n) + s).astype(np.float32)} for n, s in [(3, 2.0), (5, -2.0)]], False


def sequence_output():
    """A sequence as the model's output: the C API carries tensors only."""
    m = model("sequence_output", [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)], [vi("x", F, [4, 3])],
              [helper.make_tensor_sequence_value_info("s", F, None)], opset=13)
    return m, [], False


def category_mapper_to_strings():
    """CategoryMapper of int64 to strings: the interpreter runs it, compiled code cannot carry the
    strings out."""
    n = helper.make_node("CategoryMapper", ["c"], ["y"], domain="ai.onnx.ml", cats_int64s=[1, 2],
                         cats_strings=["a", "b"])
    g = helper.make_graph([n], "category_mapper_to_strings", [vi("c", I64, ["N"])],
                          [vi("y", TensorProto.STRING, ["N"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m, [], False


MODELS += [sequence_from_constants, sequences_inside_graph, if_over_sequence]

# Models `hodu build` refuses, with what its error must say.
REFUSED = [(einsum_free_dims, "(Einsum) producing 'y': compiled code cannot derive this op's output shape from sizes "
                               "known only at run time"),
           (add_of_f32_and_i64, "the model cannot run as it is: node (Add) producing 'y': inputs 0 (float) and 1 (int64)"),
           (rank_divergent_output, "output 'y' has no known rank: its branches or iterations give tensors of "
                                   "different ranks"),
           (sequence_output, "(SplitToSequence) producing 's': not supported by compiled code: sequences and "
                             "optionals compile only inside a graph"),
           (category_mapper_to_strings, "(ai.onnx.ml.CategoryMapper) producing 'y': output 'y' is a string tensor, "
                                        "not supported by compiled code: it has no strings")]


# ---- running -------------------------------------------------------------------------

def rel_l2(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (den if den > 0 else 1.0))


def outputs(out_dir):
    return {f[:-4]: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir)) if f.endswith(".npy")}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def compare(a, b):
    """None when a matches b, else what differs."""
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if a.dtype.kind in "biu" or b.dtype.kind in "biu":
        return None if np.array_equal(a, b) else f"{int(np.sum(a != b))} elements differ"
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return "NaNs differ"
    # float16 results: a float32 sum in another order lands an ulp away (eps 9.8e-4).
    tol = 2e-3 if b.dtype == np.float16 else 1e-4
    a, b = np.nan_to_num(a), np.nan_to_num(b)
    e = rel_l2(a, b)
    return None if e <= tol else f"rel-L2 {e:.2e} > {tol:g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hodu", required=True)
    ap.add_argument("--keep", help="work in this folder (kept) instead of a temporary one")
    ap.add_argument("--filter", default="", help="only models whose name contains this")
    args = ap.parse_args()
    have_ort = os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node"))
    tmp_obj = None if args.keep else tempfile.TemporaryDirectory(prefix="hodu-opsm-")
    tmp = args.keep or tmp_obj.name
    os.makedirs(tmp, exist_ok=True)
    failures = checks = 0

    def fail(msg):
        nonlocal failures
        failures += 1
        print("FAIL " + msg, flush=True)

    for make in MODELS:
        name = make.__name__
        if args.filter not in name:
            continue
        m, sizes, ort_runs = make()
        if m.opset_import[0].version <= onnx.defs.onnx_opset_version():
            onnx.checker.check_model(m, full_check=True)
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(m, path)
        libs = {}
        for mode, flags in [("default", []), ("standalone", ["--standalone"])]:
            lib = os.path.join(tmp, f"{name}_{mode}.so")
            r = run([args.hodu, "build", path, "-o", lib, "-q"] + flags)
            if r.returncode != 0:
                fail(f"{name} {mode}: build: {r.stderr.strip()[:600]}")
                continue
            libs[mode] = lib
        for k, feeds in enumerate(sizes):
            tag = f"{name}{k}"
            paths = []
            for n, a in feeds.items():
                p = os.path.join(tmp, f"{tag}_{n}.npy")
                np.save(p, a)
                paths.append((n, p))
            ins = [f"{n}={p}" for n, p in paths]
            refs = {}
            r = run([args.hodu, "run", path, "--engine", "interp", "-f", "npy", "-o", os.path.join(tmp, tag + "_i")] +
                    sum([["-i", x] for x in ins], []))
            if r.returncode != 0:
                fail(f"{tag}: interpreter: {r.stderr.strip()[:300]}")
                continue
            refs["interpreter"] = outputs(os.path.join(tmp, tag + "_i"))
            if ort_runs and have_ort:
                r = run(["node", os.path.join(ORT_DIR, "ort_run.js"), path, os.path.join(tmp, tag + "_o"),
                         "--threads", "2"] + ins)
                if r.returncode != 0:
                    fail(f"{tag}: ONNX Runtime: {r.stderr.strip()[:300]}")
                else:
                    refs["ORT"] = outputs(os.path.join(tmp, tag + "_o"))
            shapes = " ".join(f"{n}{list(a.shape)}" for n, a in feeds.items())
            for mode, lib in libs.items():
                out = os.path.join(tmp, f"{tag}_{mode}")
                r = run([args.hodu, "run", lib, "-f", "npy", "-o", out, "--threads", "2"] +
                        sum([["-i", x] for x in ins], []))
                if r.returncode != 0:
                    fail(f"{tag} {mode} ({shapes}): run: {r.stderr.strip()[-400:]}")
                    continue
                got = outputs(out)
                bad = []
                for ref_name, ref in refs.items():
                    for o, b in ref.items():
                        checks += 1
                        why = "missing" if o not in got else compare(got[o], b)
                        if why:
                            bad.append(f"{o} vs {ref_name}: {why}")
                print(f"{tag:24s} {mode:10s} {shapes:40s} {'ok' if not bad else 'MISMATCH ' + '; '.join(bad)}",
                      flush=True)
                if bad:
                    fail(f"{tag} {mode}: " + "; ".join(bad))
    for k, (make, needle) in enumerate(REFUSED):
        if args.filter not in "refused":
            continue
        path = os.path.join(tmp, f"refused{k}.onnx")
        onnx.save(make()[0], path)
        r = run([args.hodu, "build", path, "-o", os.path.join(tmp, f"refused{k}.so"), "-q"])
        checks += 1
        if r.returncode == 0 or "error: " not in r.stderr or needle not in r.stderr:
            fail(f"refused{k}: expected an error saying '{needle}', got rc {r.returncode}: {r.stderr.strip()[:300]}")
        else:
            print(f"refused{k:<17d} clear error: {r.stderr.strip()[:120]}", flush=True)
    print(f"ops models: {checks} checks, {failures} failures")
    return 1 if failures or checks == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
