#!/usr/bin/python3
"""Quantized models for the benchmarks and the quantized-model tests, written the way ONNX
Runtime's quantization tool writes them (it is not installable here: no network):

  dynamic  quantize_dynamic: every Conv becomes DynamicQuantizeLinear → ConvInteger → Cast →
           Mul(x_scale · w_scale) → Add(bias); every MatMul DynamicQuantizeLinear →
           MatMulInteger → Cast → Mul. Weights u8 with a zero point (per tensor), the tool's
           QUInt8 default of its versions that wrote the published *_quant*.onnx models.
  qdq      quantize_static, QDQ format: activations u8 (asymmetric, ranges calibrated on a few
           random inputs run by hodu), weights s8 symmetric per output channel, int32 biases, a
           QuantizeLinear → DequantizeLinear pair after every activation, DequantizeLinear on
           every weight and bias; Relu after Conv kept (its output quantized).

Sources: torchvision architectures (random weights, fixed seed) exported to ONNX, and a small
U-Net (the dynamic-quantized segmentation models in the wild: imgly's ISNet, rembg's u2net).

usage: PYTHONPATH=build/python /usr/bin/python3 bench/quantize_models.py [--out bench/models]
           [--only resnet18_dynamic unet_dynamic ...]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import torch
import torch.nn as nn
import torchvision
from onnx import helper, numpy_helper, TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))


class UNet(nn.Module):
    """A U-Net: conv-relu blocks, max pooling down, bilinear resize up, skip concatenations."""

    def __init__(self, ch=(16, 32, 64, 128)):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(), nn.Conv2d(o, o, 3, padding=1), nn.ReLU())

        self.down = nn.ModuleList()
        c = 3
        for o in ch:
            self.down.append(block(c, o))
            c = o
        self.up = nn.ModuleList(block(ch[i] + ch[i - 1], ch[i - 1]) for i in range(len(ch) - 1, 0, -1))
        self.head = nn.Conv2d(ch[0], 1, 1)

    def forward(self, x):
        skips = []
        for i, d in enumerate(self.down):
            x = d(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
        for u in self.up:
            s = skips.pop()
            x = nn.functional.interpolate(x, size=s.shape[2:], mode="bilinear", align_corners=False)
            x = u(torch.cat([x, s], 1))
        return torch.sigmoid(self.head(x))


def export(name, size):
    torch.manual_seed(0)
    if name == "unet":
        model, shape = UNet(), (1, 3, size, size)
    else:
        model, shape = getattr(torchvision.models, name)(weights=None), (1, 3, size, size)
    model.eval()
    path = os.path.join(tempfile.mkdtemp(), name + ".onnx")
    torch.onnx.export(model, torch.randn(*shape), path, opset_version=17, input_names=["input"],
                      output_names=["output"], do_constant_folding=True)
    return onnx.load(path), shape


def inits_of(g):
    """Initializers, and the values of Constant nodes, by name."""
    values = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        elif n.op_type == "Identity" and n.input[0] in values:  # torch's shared weights
            values[n.output[0]] = values[n.input[0]]
    return values


def add_init(g, name, array):
    g.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    return name


def with_nodes(model, nodes, opset):
    """The model with these nodes, the initializers they read and at least this opset."""
    g = model.graph
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    model.opset_import[0].version = max(model.opset_import[0].version, opset)
    return model


def quantize_u8(w):
    """Asymmetric u8 over [min(w, 0), max(w, 0)], per tensor (the tool's QUInt8 weights)."""
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    zp = int(np.clip(round(-lo / scale), 0, 255))
    q = np.clip(np.rint(w / scale) + zp, 0, 255).astype(np.uint8)
    return q, np.float32(scale), np.uint8(zp)


def dynamic(model):
    """quantize_dynamic: Conv and MatMul (with a constant B) through the integer ops."""
    g = model.graph
    inits = inits_of(g)
    nodes = []
    for n in g.node:
        w = inits.get(n.input[1]) if len(n.input) > 1 else None
        if n.op_type not in ("Conv", "MatMul") or w is None or w.dtype != np.float32:
            if n.op_type == "Gemm" and w is not None:
                raise SystemExit("export without Gemm (Linear as MatMul + Add) for dynamic quantization")
            nodes.append(n)
            continue
        x = n.input[0]
        p = n.name.replace("/", "_") or n.output[0]
        wq, ws, wz = quantize_u8(w)
        wq_name = add_init(g, p + "_w_quantized", wq)
        ws_name = add_init(g, p + "_w_scale", ws)
        wz_name = add_init(g, p + "_w_zero_point", wz)
        xq, xs, xz = p + "_x_quantized", p + "_x_scale", p + "_x_zero_point"
        nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [xq, xs, xz], name=p + "_quant"))
        nodes.append(helper.make_node("Mul", [xs, ws_name], [p + "_scales"], name=p + "_scales_mul"))
        acc = p + "_output_quantized"
        if n.op_type == "Conv":
            nodes.append(helper.make_node("ConvInteger", [xq, wq_name, xz, wz_name], [acc], name=p + "_conv",
                                          **{a.name: helper.get_attribute_value(a) for a in n.attribute}))
        else:
            nodes.append(helper.make_node("MatMulInteger", [xq, wq_name, xz, wz_name], [acc], name=p + "_matmul"))
        nodes.append(helper.make_node("Cast", [acc], [acc + "_cast"], to=TensorProto.FLOAT, name=p + "_cast"))
        has_bias = n.op_type == "Conv" and len(n.input) > 2 and n.input[2]
        scaled = p + "_scaled" if has_bias else n.output[0]
        nodes.append(helper.make_node("Mul", [acc + "_cast", p + "_scales"], [scaled], name=p + "_scaled_mul"))
        if has_bias:
            b = inits[n.input[2]]
            bname = add_init(g, p + "_bias_reshaped", b.reshape(1, -1, 1, 1))
            nodes.append(helper.make_node("Add", [scaled, bname], [n.output[0]], name=p + "_bias_add"))
    return with_nodes(model, nodes, 11)


def calibrate(model, shape, runs=4):
    """Ranges of every float activation over a few random inputs, run by hodu's Python SDK."""
    import hodu
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = [o for n in m.graph.node for o in n.output if o]
    del m.graph.output[:]
    for name in names:
        m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
    path = os.path.join(tempfile.mkdtemp(), "calib.onnx")
    onnx.save(m, path)
    sess = hodu.InferenceSession(path)
    rng = np.random.default_rng(1)
    ranges = {}
    for _ in range(runs):
        x = rng.standard_normal(shape).astype(np.float32)
        outs = sess.run(None, {"input": x})
        for name, v in zip(names, outs):
            if v.dtype != np.float32:
                continue
            lo, hi = ranges.get(name, (0.0, 0.0))
            ranges[name] = (min(lo, float(v.min())), max(hi, float(v.max())))
    x_lo, x_hi = -4.0, 4.0
    ranges["input"] = (x_lo, x_hi)
    return ranges


def qdq(model, shape):
    """quantize_static in QDQ format, activations u8, weights s8 per channel, biases int32."""
    ranges = calibrate(model, shape)
    g = model.graph
    inits = inits_of(g)
    quantized_ops = {"Conv", "Gemm", "MatMul", "Add", "Concat", "MaxPool", "GlobalAveragePool", "AveragePool",
                     "Relu", "Clip", "Flatten", "Reshape"}
    outputs = {o.name for o in g.output}
    readers = {}
    for n in g.node:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    nodes, dq_of = [], {}

    def quantize_act(name):
        """Q → DQ after `name` (u8 over its calibrated range), once; its DQ output."""
        if name not in dq_of:
            lo, hi = ranges[name]
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            scale = np.float32((hi - lo) / 255.0 or 1.0)
            zp = np.uint8(np.clip(round(-lo / float(scale)), 0, 255))
            p = name.replace("/", "_").replace(".", "_")
            sn, zn = add_init(g, p + "_scale", scale), add_init(g, p + "_zero_point", zp)
            nodes.append(helper.make_node("QuantizeLinear", [name, sn, zn], [p + "_QuantizeLinear_Output"],
                                          name=p + "_QuantizeLinear"))
            nodes.append(helper.make_node("DequantizeLinear", [p + "_QuantizeLinear_Output", sn, zn],
                                          [p + "_DequantizeLinear_Output"], name=p + "_DequantizeLinear"))
            dq_of[name] = (p + "_DequantizeLinear_Output", scale)
        return dq_of[name]

    def wanted(name):
        rd = readers.get(name, [])
        # Conv/Gemm → Relu/Clip: the tool fuses the activation, only its output is quantized.
        if len(rd) == 1 and rd[0].op_type in ("Relu", "Clip") and any(
                n.op_type in ("Conv", "Gemm", "MatMul") and name in n.output for n in g.node):
            return False
        return name in ranges and name not in outputs and any(r.op_type in quantized_ops for r in rd)

    if wanted("input"):
        quantize_act("input")
    for n in g.node:
        ins = list(n.input)
        if n.op_type in quantized_ops:
            for i, name in enumerate(ins):
                if name in dq_of:
                    ins[i] = dq_of[name][0]
        if n.op_type in ("Conv", "Gemm") or (n.op_type == "MatMul" and n.input[1] in inits):
            w = inits[n.input[1]]
            trans_b = n.op_type == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)
            axis = 0 if n.op_type == "Conv" or trans_b else 1
            amax = np.abs(w).max(axis=tuple(d for d in range(w.ndim) if d != axis), keepdims=True)
            ws = (np.maximum(amax, 1e-8) / 127.0).astype(np.float32)
            wq = np.clip(np.rint(w / ws), -127, 127).astype(np.int8)
            p = n.input[1].replace("/", "_").replace(".", "_")
            sn = add_init(g, p + "_scale", ws.reshape(-1))
            zn = add_init(g, p + "_zero_point", np.zeros(ws.size, np.int8))
            qn = add_init(g, p + "_quantized", wq)
            nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [p + "_DequantizeLinear_Output"],
                                          axis=axis, name=p + "_DequantizeLinear"))
            ins[1] = p + "_DequantizeLinear_Output"
            if len(n.input) > 2 and n.input[2] in inits and n.input[0] in dq_of:
                b = inits[n.input[2]]
                bs = (dq_of[n.input[0]][1] * ws.reshape(-1)).astype(np.float32)
                bq = np.rint(b / bs).astype(np.int32)
                p = n.input[2].replace("/", "_").replace(".", "_")
                bsn = add_init(g, p + "_scale", bs)
                bzn = add_init(g, p + "_zero_point", np.zeros(bs.size, np.int32))
                bqn = add_init(g, p + "_quantized", bq)
                nodes.append(helper.make_node("DequantizeLinear", [bqn, bsn, bzn], [p + "_DequantizeLinear_Output"],
                                              axis=0, name=p + "_DequantizeLinear"))
                ins[2] = p + "_DequantizeLinear_Output"
        nodes.append(helper.make_node(n.op_type, ins, list(n.output), name=n.name,
                                      **{a.name: helper.get_attribute_value(a) for a in n.attribute}))
        if n.op_type in quantized_ops:
            for o in n.output:
                if wanted(o):
                    quantize_act(o)
    return with_nodes(model, nodes, 13)


MODELS = {
    "resnet18_dynamic": ("resnet18", 224, "dynamic"),
    "mobilenet_v2_dynamic": ("mobilenet_v2", 224, "dynamic"),
    "unet_dynamic": ("unet", 256, "dynamic"),
    "resnet18_qdq": ("resnet18", 224, "qdq"),
    "mobilenet_v2_qdq": ("mobilenet_v2", 224, "qdq"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "models"))
    ap.add_argument("--only", nargs="*", default=[])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, (arch, size, kind) in MODELS.items():
        if args.only and name not in args.only:
            continue
        model, shape = export(arch, size)
        if kind == "dynamic":
            # Linear as MatMul + Add, as the tool's dynamic path quantizes it.
            model = dynamic(gemm_to_matmul(model))
        else:
            model = qdq(model, shape)
        onnx.checker.check_model(model)
        path = os.path.join(args.out, name + ".onnx")
        onnx.save(model, path)
        print(f"wrote {path} ({len(model.graph.node)} nodes)")
    return 0


def gemm_to_matmul(model):
    """Gemm(x, W, b, transB=1) → MatMul(x, Wᵀ) + b."""
    g = model.graph
    inits = inits_of(g)
    nodes = []
    for n in g.node:
        if n.op_type != "Gemm" or n.input[1] not in inits:
            nodes.append(n)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        w = inits[n.input[1]]
        if attrs.get("transB", 0):
            w = w.T
        wn = add_init(g, n.input[1] + "_t", np.ascontiguousarray(w).astype(np.float32))
        mid = n.output[0] + "_matmul"
        nodes.append(helper.make_node("MatMul", [n.input[0], wn], [mid], name=n.name + "_matmul"))
        nodes.append(helper.make_node("Add", [mid, n.input[2]], [n.output[0]], name=n.name + "_add"))
    del g.node[:]
    g.node.extend(nodes)
    return model


if __name__ == "__main__":
    sys.exit(main())
