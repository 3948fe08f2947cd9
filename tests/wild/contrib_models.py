"""Hand-built models with ONNX Runtime contrib ops (domain com.microsoft), written
the way ORT's tools write them (their Python package is not on this machine):

- ort_fused_bert: the corpus's BERT-style encoder (torch_export.BertEncoder, same
  seed, so the same weights as torch_bert_encoder_op13) as ORT's transformer
  optimizer writes it: EmbedLayerNormalization, Attention (fused QKV weight;
  layer 0 reads EmbedLayerNormalization's 1-D mask_index, layer 1 the 2-D mask), SkipLayerNormalization with the projection bias folded
  in, BiasGelu (torch's erf GELU; FastGelu is its tanh form). Built from the
  weights, not pattern-matched from the export.
- qoperator_cnn: a float CNN (Conv/Relu/MaxPool/Add/GlobalAveragePool/Flatten/
  Gemm: ResNet-18) in ORT quantize_static's QOperator format: QLinearConv with
  the Relu folded into its output range, QLinearAdd, MaxPool and Flatten on the
  uint8 tensors, QLinearGlobalAveragePool, QGemm with a float output; uint8
  activations calibrated by fetch.py, per-channel int8 weights, int32 biases.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantize import _Builder, _int8_per_channel, _uint8_params

MS = "com.microsoft"


def _ms_opset(model):
    if not any(o.domain == MS for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS, 1))


# ---- ort_fused_bert ----

def ort_fused_bert(model, calib=None):
    import torch
    import torch_export
    torch.manual_seed(0)  # torch_export.export's seed: the weights of torch_bert_encoder_op13
    module = torch_export.BUILDERS["bert_encoder"]().eval()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in module.state_dict().items()}
    heads = module.encoder.layers[0].self_attn.num_heads
    eps = float(module.norm.eps)
    inits, nodes = {}, []

    def w(name, array):
        inits[name] = np.ascontiguousarray(array, dtype=np.float32)
        return name

    nodes += [helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
              helper.make_node("Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32),
              helper.make_node("EmbedLayerNormalization",
                               ["ids32", "", w("tok", sd["tok.weight"]), w("pos", sd["pos.weight"]), "",
                                w("emb_gamma", sd["norm.weight"]), w("emb_beta", sd["norm.bias"]), "mask32"],
                               ["x0", "mask_index"], domain=MS, epsilon=eps)]
    x = "x0"
    for i in range(len(module.encoder.layers)):
        p = f"encoder.layers.{i}."
        e = float(module.encoder.layers[i].norm1.eps)
        nodes += [
            # Layer 0 reads EmbedLayerNormalization's mask_index (key counts: the mask pads on
            # the right), as ORT's optimizer wires it; layer 1 the raw 2-D mask.
            helper.make_node("Attention", [x, w(f"l{i}_qkv_w", sd[p + "self_attn.in_proj_weight"].T),
                                           w(f"l{i}_qkv_b", sd[p + "self_attn.in_proj_bias"]),
                                           "mask_index" if i == 0 else "mask32"],
                             [f"l{i}_attn"], domain=MS, num_heads=heads),
            helper.make_node("MatMul", [f"l{i}_attn", w(f"l{i}_out_w", sd[p + "self_attn.out_proj.weight"].T)],
                             [f"l{i}_attn_out"]),
            helper.make_node("SkipLayerNormalization",
                             [f"l{i}_attn_out", x, w(f"l{i}_n1_g", sd[p + "norm1.weight"]),
                              w(f"l{i}_n1_b", sd[p + "norm1.bias"]), w(f"l{i}_out_b", sd[p + "self_attn.out_proj.bias"])],
                             [f"l{i}_x1"], domain=MS, epsilon=e),
            helper.make_node("MatMul", [f"l{i}_x1", w(f"l{i}_ff1_w", sd[p + "linear1.weight"].T)], [f"l{i}_ff1"]),
            helper.make_node("BiasGelu", [f"l{i}_ff1", w(f"l{i}_ff1_b", sd[p + "linear1.bias"])], [f"l{i}_gelu"],
                             domain=MS),
            helper.make_node("MatMul", [f"l{i}_gelu", w(f"l{i}_ff2_w", sd[p + "linear2.weight"].T)], [f"l{i}_ff2"]),
            helper.make_node("SkipLayerNormalization",
                             [f"l{i}_ff2", f"l{i}_x1", w(f"l{i}_n2_g", sd[p + "norm2.weight"]),
                              w(f"l{i}_n2_b", sd[p + "norm2.bias"]), w(f"l{i}_ff2_b", sd[p + "linear2.bias"])],
                             [f"l{i}_x2" if i + 1 < len(module.encoder.layers) else "hidden"], domain=MS, epsilon=e),
        ]
        x = f"l{i}_x2"
    inits["first"] = np.array(0, np.int64)
    nodes += [helper.make_node("Gather", ["hidden", "first"], ["cls"], axis=1),
              helper.make_node("Gemm", ["cls", w("pool_w", sd["pool.weight"]), w("pool_b", sd["pool.bias"])],
                               ["pool_lin"], transB=1),
              helper.make_node("Tanh", ["pool_lin"], ["pooled"])]
    d = sd["tok.weight"].shape[1]
    g = helper.make_graph(
        nodes, "ort_fused_bert",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "sequence", d]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", d])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)],
                          producer_name="hand-built ORT transformer-optimizer fusion",
                          producer_version="hodu tests/wild/contrib_models.py")
    m.ir_version = 8
    return m


# ---- qoperator_cnn ----

_QOPS = ("Conv", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm")


def qoperator_calibration_values(model):
    """The float activations whose ranges qoperator_cnn needs."""
    inits = {i.name for i in model.graph.initializer}
    names = []
    for n in model.graph.node:
        if n.op_type in _QOPS:
            ins = n.input if n.op_type == "Add" else n.input[:1]
            names += [v for v in list(ins) + list(n.output) if v and v not in inits and v not in names]
    return names


def qoperator_cnn(model, calib):
    b = _Builder(model)
    graph_nodes = list(model.graph.node)
    consumers = {}
    for n in graph_nodes:
        for v in n.input:
            consumers.setdefault(v, []).append(n)
    outputs = {o.name for o in model.graph.output}
    nodes, quant, have_float, skip = [], {}, {i.name for i in model.graph.input}, set()

    def params(v):
        s, z = _uint8_params(*calib[v])
        return b.const(v + "_scale", s), b.const(v + "_zp", z), s

    def quantized(v):
        if v not in quant:
            sn, zn, s = params(v)
            nodes.append(helper.make_node("QuantizeLinear", [v, sn, zn], [v + "_q"]))
            quant[v] = (v + "_q", sn, zn, s)
        return quant[v]

    def floated(v):
        if v not in have_float:
            qv, sn, zn, _ = quant[v]
            nodes.append(helper.make_node("DequantizeLinear", [qv, sn, zn], [v]))
            have_float.add(v)
        return v

    def fused_relu(v):
        """The Relu that alone reads V (its range then starts at 0: uint8 zero point 0 clamps like Relu)."""
        c = consumers.get(v, [])
        if len(c) == 1 and c[0].op_type == "Relu" and v not in outputs:
            skip.add(id(c[0]))
            return c[0].output[0]
        return v

    def out_params(v):
        sn, zn, s = params(v)
        quant[v] = (v + "_q", sn, zn, s)
        return v + "_q", sn, zn

    for n in graph_nodes:
        if id(n) in skip:
            continue
        w = b.weight(n.input[1]) if n.op_type in ("Conv", "Gemm") and len(n.input) > 1 else None
        if n.op_type == "Conv" and w is not None:
            xq, xs, xz, xsv = quantized(n.input[0])
            wq, ws = _int8_per_channel(w)
            y = fused_relu(n.output[0])
            yq, ys, yz = out_params(y)
            ins = [xq, xs, xz, b.const(n.input[1], wq), b.const(n.input[1], ws),
                   b.const(n.input[1], np.zeros(w.shape[0], np.int8)), ys, yz]
            if len(n.input) > 2 and n.input[2]:
                ins.append(b.const(n.input[2], np.round(b.weight(n.input[2]) / (xsv * ws)).astype(np.int32)))
            q = helper.make_node("QLinearConv", ins, [yq])
            q.attribute.extend(n.attribute)
            nodes.append(q)
        elif n.op_type == "Add" and all(v in calib for v in n.input):
            a, c = quantized(n.input[0]), quantized(n.input[1])
            y = fused_relu(n.output[0])
            yq, ys, yz = out_params(y)
            nodes.append(helper.make_node("QLinearAdd", [a[0], a[1], a[2], c[0], c[1], c[2], ys, yz], [yq], domain=MS))
        elif n.op_type in ("MaxPool", "Flatten") and n.input[0] in quant:
            xq, xs, xz, xsv = quant[n.input[0]]
            q = helper.make_node(n.op_type, [xq], [n.output[0] + "_q"])
            q.attribute.extend(n.attribute)
            nodes.append(q)
            quant[n.output[0]] = (n.output[0] + "_q", xs, xz, xsv)
        elif n.op_type == "GlobalAveragePool":
            xq, xs, xz, _ = quantized(n.input[0])
            yq, ys, yz = out_params(n.output[0])
            nodes.append(helper.make_node("QLinearGlobalAveragePool", [xq, xs, xz, ys, yz], [yq], domain=MS,
                                          channels_last=0))
        elif n.op_type == "Gemm" and w is not None and not any(
                a.name == "transA" and a.i for a in n.attribute):
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            alpha = [a.f for a in n.attribute if a.name == "alpha"]
            beta = [a.f for a in n.attribute if a.name == "beta"]
            if (alpha and alpha[0] != 1.0) or (beta and beta[0] != 1.0):
                raise ValueError(f"{n.name}: Gemm with alpha/beta other than 1")
            xq, xs, xz, xsv = quantized(n.input[0])
            wt = w if trans_b else w.T          # [N, K]: one scale per output column
            wq, ws = _int8_per_channel(wt)
            ins = [xq, xs, xz, b.const(n.input[1], wq), b.const(n.input[1], ws),
                   b.const(n.input[1], np.zeros(wt.shape[0], np.int8))]
            if len(n.input) > 2 and n.input[2]:
                ins.append(b.const(n.input[2], np.round(b.weight(n.input[2]) / (xsv * ws)).astype(np.int32)))
            nodes.append(helper.make_node("QGemm", ins, [n.output[0]], domain=MS, transB=1))
            have_float.add(n.output[0])
        else:
            for v in n.input:
                if v in quant and v not in have_float:
                    floated(v)
            nodes.append(n)
            have_float.update(n.output)
    for o in outputs:
        floated(o)
    _ms_opset(model)
    # MaxPool on uint8 needs opset 12 (the other ops mean the same from 11 to 13).
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < 13:
            o.version = 13
    return b.finish(nodes, "hand-built static quantization (QOperator: QLinearConv, QLinearAdd, "
                           "QLinearGlobalAveragePool, QGemm)")


TRANSFORMS = {"ort_fused_bert": ort_fused_bert, "qoperator_cnn": qoperator_cnn}
CALIBRATION = {"qoperator_cnn": qoperator_calibration_values, "ort_fused_bert": None}
