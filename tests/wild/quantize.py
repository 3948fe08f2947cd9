"""Hand-built int8 variants of corpus models, written the way ONNX Runtime's
quantization tool writes them (its Python package is not on this machine):

- dynamic_matmul: every MatMul with a constant 2-D weight becomes
  DynamicQuantizeLinear(A) -> MatMulInteger(A_q, W_q int8, A_zp, 0) -> Cast ->
  Mul(A_scale * W_scale), as quantize_dynamic does.
- qdq_conv: every Conv with a constant weight reads QuantizeLinear ->
  DequantizeLinear of its input (uint8, scale from calibration) and a
  DequantizeLinear of a per-channel int8 weight, as quantize_static's QDQ
  format does.
- qlinear_conv: every Conv with a constant weight becomes QuantizeLinear ->
  QLinearConv (uint8 activations, per-channel int8 weights, int32 bias) ->
  DequantizeLinear, as quantize_static's QOperator format does.
- dynamic_conv: every Conv with a constant weight becomes DynamicQuantizeLinear(x) ->
  ConvInteger(x_q, W_q uint8 with its zero point) -> Cast -> Mul(x_scale * w_scale)
  -> Add(bias), as quantize_dynamic does for convolutions (uint8 weights: ORT's
  ConvInteger takes no int8 weights).
- float16: float16 weights and computation behind float32 inputs and outputs (Casts at
  both ends), as onnxconverter-common's convert_float_to_float16 with keep_io_types
  writes it (not a quantization; it lives here with the other derived variants).

The activation ranges come from CALIB: {value name: (min, max)}, measured by
fetch.py with ONNX Runtime on the float model.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_calibration_values(model):
    """The value names whose ranges qdq_conv / qlinear_conv need."""
    names = []
    for n in model.graph.node:
        if n.op_type == "Conv":
            names += [n.input[0], n.output[0]]
    return names


def _uint8_params(lo, hi):
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zp = int(np.clip(round(-lo / scale), 0, 255))
    return np.float32(scale), np.uint8(zp)


def _int8_per_channel(w):
    amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.round(w / scale.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127).astype(np.int8)
    return q, scale


class _Builder:
    def __init__(self, model):
        self.model = model
        self.inits = {i.name: i for i in model.graph.initializer}
        # torch writes a weight shared by two layers once, read through Identity nodes.
        self.alias = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Identity"}
        self.new_inits = []
        self.count = 0

    def const(self, base, array):
        self.count += 1
        name = f"{base}_q{self.count}"
        self.new_inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name):
        while name not in self.inits and name in self.alias:
            name = self.alias[name]
        init = self.inits.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def finish(self, nodes, producer):
        g = self.model.graph
        del g.node[:]
        g.node.extend(nodes)
        g.initializer.extend(self.new_inits)
        used = {i for n in g.node for i in n.input}
        keep = [i for i in g.initializer if i.name in used or i.name in {x.name for x in g.input}]
        del g.initializer[:]
        g.initializer.extend(keep)
        self.model.producer_name = producer
        self.model.producer_version = "hodu tests/wild/quantize.py"
        onnx.checker.check_model(self.model)
        return self.model


def dynamic_matmul(model, calib=None):
    b = _Builder(model)
    nodes = []
    for n in model.graph.node:
        w = b.weight(n.input[1]) if n.op_type == "MatMul" else None
        if w is None or w.ndim != 2 or w.dtype != np.float32:
            nodes.append(n)
            continue
        scale = np.float32(max(np.abs(w).max(), 1e-8) / 127.0)
        wq = b.const(n.input[1], np.clip(np.round(w / scale), -127, 127).astype(np.int8))
        wzp = b.const(n.input[1], np.int8(0))
        wscale = b.const(n.input[1], scale)
        t = f"{n.output[0]}_dq"
        nodes += [
            helper.make_node("DynamicQuantizeLinear", [n.input[0]], [t + "_a", t + "_as", t + "_azp"]),
            helper.make_node("MatMulInteger", [t + "_a", wq, t + "_azp", wzp], [t + "_i32"]),
            helper.make_node("Cast", [t + "_i32"], [t + "_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [t + "_as", wscale], [t + "_s"]),
            helper.make_node("Mul", [t + "_f", t + "_s"], [n.output[0]]),
        ]
    return b.finish(nodes, "hand-built dynamic quantization (MatMulInteger)")


def _convs(b, nodes):
    """(node, weight) for each Conv with a constant weight; every other node goes to NODES as it is."""
    for n in b.model.graph.node:
        w = b.weight(n.input[1]) if n.op_type == "Conv" else None
        if w is None:
            nodes.append(n)
        else:
            yield n, w


def _weight_params(b, n, w):
    """Names of the per-channel int8 weight, its scales and zero points, and the scales."""
    wq, ws = _int8_per_channel(w)
    return (b.const(n.input[1], wq), b.const(n.input[1], ws), b.const(n.input[1], np.zeros(w.shape[0], np.int8)),
            ws)


def qdq_conv(model, calib):
    b = _Builder(model)
    nodes = []
    for n, w in _convs(b, nodes):
        s, zp = _uint8_params(*calib[n.input[0]])
        xs, xzp = b.const(n.input[0], s), b.const(n.input[0], zp)
        wqn, wsn, wzp, _ = _weight_params(b, n, w)
        t = f"{n.output[0]}_qdq"
        nodes += [
            helper.make_node("QuantizeLinear", [n.input[0], xs, xzp], [t + "_xq"]),
            helper.make_node("DequantizeLinear", [t + "_xq", xs, xzp], [t + "_x"]),
            helper.make_node("DequantizeLinear", [wqn, wsn, wzp], [t + "_w"], axis=0),
        ]
        conv = onnx.NodeProto()
        conv.CopyFrom(n)
        conv.input[0], conv.input[1] = t + "_x", t + "_w"
        nodes.append(conv)
    return b.finish(nodes, "hand-built static quantization (QDQ)")


def qlinear_conv(model, calib):
    b = _Builder(model)
    nodes = []
    for n, w in _convs(b, nodes):
        xs, xzp = _uint8_params(*calib[n.input[0]])
        ys, yzp = _uint8_params(*calib[n.output[0]])
        wqn, wsn, wzp, ws = _weight_params(b, n, w)
        xsn, xzpn = b.const(n.input[0], xs), b.const(n.input[0], xzp)
        ysn, yzpn = b.const(n.output[0], ys), b.const(n.output[0], yzp)
        ins = [n.output[0] + "_xq", xsn, xzpn, wqn, wsn, wzp, ysn, yzpn]
        if len(n.input) > 2 and n.input[2]:
            bias = b.weight(n.input[2])
            ins.append(b.const(n.input[2], np.round(bias / (xs * ws)).astype(np.int32)))
        nodes.append(helper.make_node("QuantizeLinear", [n.input[0], xsn, xzpn], [n.output[0] + "_xq"]))
        q = helper.make_node("QLinearConv", ins, [n.output[0] + "_yq"])
        q.attribute.extend(n.attribute)
        nodes.append(q)
        nodes.append(helper.make_node("DequantizeLinear", [n.output[0] + "_yq", ysn, yzpn], [n.output[0]]))
    return b.finish(nodes, "hand-built static quantization (QLinearConv)")


def dynamic_conv(model, calib=None):
    b = _Builder(model)
    nodes = []
    for n in model.graph.node:
        w = b.weight(n.input[1]) if n.op_type == "Conv" else None
        if w is None or w.dtype != np.float32:
            nodes.append(n)
            continue
        lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
        scale = np.float32((hi - lo) / 255.0 if hi > lo else 1.0)
        zp = np.uint8(np.clip(round(-lo / scale), 0, 255))
        wq = b.const(n.input[1], np.clip(np.round(w / scale) + zp, 0, 255).astype(np.uint8))
        wzp, wscale = b.const(n.input[1], zp), b.const(n.input[1], scale)
        t = f"{n.output[0]}_dc"
        conv = helper.make_node("ConvInteger", [t + "_a", wq, t + "_azp", wzp], [t + "_i32"])
        conv.attribute.extend(n.attribute)
        nodes += [
            helper.make_node("DynamicQuantizeLinear", [n.input[0]], [t + "_a", t + "_as", t + "_azp"]),
            conv,
            helper.make_node("Cast", [t + "_i32"], [t + "_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [t + "_as", wscale], [t + "_s"]),
        ]
        if len(n.input) > 2 and n.input[2]:
            bias = b.weight(n.input[2]).reshape((1, -1) + (1,) * (w.ndim - 2))
            nodes += [helper.make_node("Mul", [t + "_f", t + "_s"], [t + "_m"]),
                      helper.make_node("Add", [t + "_m", b.const(n.input[2], bias.astype(np.float32))], [n.output[0]])]
        else:
            nodes.append(helper.make_node("Mul", [t + "_f", t + "_s"], [n.output[0]]))
    return b.finish(nodes, "hand-built dynamic quantization (ConvInteger)")


def float16(model, calib=None):
    g = model.graph
    keep = set()  # Resize's roi and scales stay float32 (the op takes no other type)
    for n in g.node:
        if n.op_type == "Resize":
            keep.update(n.input[1:3])
    for i in g.initializer:
        if i.data_type == TensorProto.FLOAT and i.name not in keep:
            i.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(i).astype(np.float16), i.name))
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Constant" and a.name == "value" and a.t.data_type == TensorProto.FLOAT and \
                    n.output[0] not in keep:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16)))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    del g.value_info[:]
    nodes = list(g.node)
    rename = {v.name: v.name + "_f16" for v in g.input if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    outs = {v.name: v.name + "_f16" for v in g.output if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    for n in nodes:
        for k, x in enumerate(n.input):
            n.input[k] = rename.get(x, x)
        for k, x in enumerate(n.output):
            n.output[k] = outs.get(x, x)
    pre = [helper.make_node("Cast", [v], [h], to=TensorProto.FLOAT16) for v, h in rename.items()]
    post = [helper.make_node("Cast", [h], [v], to=TensorProto.FLOAT) for v, h in outs.items()]
    del g.node[:]
    g.node.extend(pre + nodes + post)
    return model


TRANSFORMS = {"dynamic_matmul": dynamic_matmul, "qdq_conv": qdq_conv, "qlinear_conv": qlinear_conv,
              "dynamic_conv": dynamic_conv, "float16": float16}
