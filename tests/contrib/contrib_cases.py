"""Small models with ONNX Runtime contrib ops (domain com.microsoft), built with
onnx.helper, for run_contrib.py. Each case: a model, seeded inputs, and how its
outputs are compared (float: relative L2; quantized: at most `quanta` apart).

A case is a dict: id, model (ModelProto), feeds {name: array}, quanta (int
outputs: largest allowed |hodu - ort|, default 0), rel (float outputs, default 1e-4),
refused ({engine: text} where hodu must stop with an error containing the text).
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
F, U8, I8, I32, I64 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.INT64
NP = {F: np.float32, U8: np.uint8, I8: np.int8, I32: np.int32, I64: np.int64}


def rng(tag):
    import zlib
    return np.random.default_rng(zlib.crc32(tag.encode()))


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def ms(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain=MS, **attrs)


def qrand(r, dt, shape):
    lo, hi = (0, 256) if dt == U8 else (-128, 128)
    return r.integers(lo, hi, size=shape).astype(NP[dt])


def f32(x):
    return np.asarray(x, dtype=np.float32)


def zp(dt, v):
    return np.asarray(v, dtype=NP[dt])


# ---- QOperator ----

def qlinear_binary(op, dt, sa, sb, const_b=False):
    r = rng(f"{op}{dt}{sa}{sb}")
    za, zb, zc = (128, 120, 130) if dt == U8 else (3, -5, 0)
    a = qrand(r, dt, sa)
    b = qrand(r, dt, sb)
    inits = [("as", f32(0.05)), ("az", zp(dt, za)), ("bs", f32(0.031)), ("bz", zp(dt, zb)),
             ("cs", f32(0.09 if op == "QLinearAdd" else 0.4)), ("cz", zp(dt, zc))]
    inputs = [("a", dt, sa)]
    feeds = {"a": a}
    if const_b:
        inits.append(("b", b))
    else:
        inputs.append(("b", dt, sb))
        feeds["b"] = b
    out_shape = list(np.broadcast_shapes(tuple(sa), tuple(sb)))
    m = model([ms(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"])], inputs, [("c", dt, out_shape)], inits)
    tag = "u8" if dt == U8 else "i8"
    return dict(id=f"{op}_{tag}{'_bcast' if const_b else ''}", model=m, feeds=feeds, quanta=1)


def qlinear_unary(op, dt, shape, **attrs):
    r = rng(op + str(dt))
    x = qrand(r, dt, shape)
    z = 128 if dt == U8 else 0
    inits = [("xs", f32(0.06)), ("xz", zp(dt, z)), ("ys", f32(1 / 255 if op == "QLinearSigmoid" else 0.05)),
             ("yz", zp(dt, 0 if op == "QLinearSigmoid" and dt == U8 else (100 if dt == U8 else -20)))]
    m = model([ms(op, ["x", "xs", "xz", "ys", "yz"], ["y"], **attrs)], [("x", dt, shape)], [("y", dt, None)], inits)
    tag = "u8" if dt == U8 else "i8"
    return dict(id=f"{op}_{tag}", model=m, feeds={"x": x}, quanta=1)


def qlinear_concat():
    r = rng("concat")
    shapes = [[1, 3, 4, 4], [1, 5, 4, 4], [1, 2, 4, 4]]
    ins, inits, feeds, inputs = ["ys", "yz"], [("ys", f32(0.1)), ("yz", zp(U8, 125))], {}, []
    for i, s in enumerate(shapes):
        ins += [f"x{i}", f"s{i}", f"z{i}"]
        inits += [(f"s{i}", f32(0.05 + 0.04 * i)), (f"z{i}", zp(U8, 110 + 10 * i))]
        inputs.append((f"x{i}", U8, s))
        feeds[f"x{i}"] = qrand(r, U8, s)
    m = model([ms("QLinearConcat", ins, ["y"], axis=1)], inputs, [("y", U8, [1, 10, 4, 4])], inits)
    return dict(id="QLinearConcat_u8", model=m, feeds=feeds, quanta=1)


def qlinear_pool(op, channels_last, shape, dt=U8, **attrs):
    r = rng(op + str(channels_last) + str(attrs))
    x = qrand(r, dt, shape)
    inits = [("xs", f32(0.04)), ("xz", zp(dt, 128 if dt == U8 else -3)), ("ys", f32(0.03)),
             ("yz", zp(dt, 120 if dt == U8 else 2))]
    m = model([ms(op, ["x", "xs", "xz", "ys", "yz"], ["y"], channels_last=channels_last, **attrs)],
              [("x", dt, shape)], [("y", dt, None)], inits)
    extra = "_".join(f"{k}{v if not isinstance(v, list) else ''.join(map(str, v))}" for k, v in attrs.items()
                     if k in ("count_include_pad", "ceil_mode"))
    return dict(id=f"{op}{'_nhwc' if channels_last else ''}{'_i8' if dt == I8 else ''}{'_' + extra if extra else ''}", model=m,
                feeds={"x": x}, quanta=1)


def qlinear_softmax(opset, dt, shape, axis):
    r = rng(f"softmax{opset}{dt}")
    x = qrand(r, dt, shape)
    inits = [("xs", f32(0.08)), ("xz", zp(dt, 128 if dt == U8 else 0)), ("ys", f32(1 / 256)),
             ("yz", zp(dt, 0 if dt == U8 else -128))]
    m = model([ms("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], axis=axis, opset=opset)],
              [("x", dt, shape)], [("y", dt, shape)], inits, opset=opset)
    return dict(id=f"QLinearSoftmax_op{opset}_{'u8' if dt == U8 else 'i8'}", model=m, feeds={"x": x}, quanta=1)


def qgemm(with_c, quant_out, transB, per_column):
    r = rng(f"qgemm{with_c}{quant_out}{transB}{per_column}")
    M, K, N = 6, 32, 10
    a = qrand(r, U8, [M, K])
    b = qrand(r, I8, [N, K] if transB else [K, N])
    bs = f32(r.uniform(0.01, 0.03, N)) if per_column else f32(0.02)
    bz = np.zeros(N, np.int8) if per_column else zp(I8, 0)
    inits = [("as", f32(0.04)), ("az", zp(U8, 125)), ("b", b), ("bs", bs), ("bz", bz)]
    ins = ["a", "as", "az", "b", "bs", "bz"]
    if with_c:
        inits.append(("c", r.integers(-30000, 30000, N).astype(np.int32)))
        ins.append("c")
    else:
        ins.append("")
    if quant_out:  # y_scale from the float result's range, so a wrong term moves many quanta
        bt = b.astype(np.float64) if transB else b.astype(np.float64).T
        y = 0.75 * ((a.astype(np.float64) - 125) @ bt.T) * 0.04 * np.asarray(bs, np.float64)
        if with_c:
            y += 0.75 * dict(inits)["c"] * 0.04 * np.asarray(bs, np.float64)
        inits += [("ys", f32(max(np.abs(y).max(), 1e-3) / 127.0)), ("yz", zp(U8, 128))]
        ins += ["ys", "yz"]
    m = model([ms("QGemm", ins, ["y"], alpha=0.75, transB=transB)], [("a", U8, [M, K])],
              [("y", U8 if quant_out else F, [M, N])], inits)
    name = f"QGemm{'_c' if with_c else ''}{'_q' if quant_out else '_f'}{'_tb' if transB else ''}{'_pc' if per_column else ''}"
    return dict(id=name, model=m, feeds={"a": a}, quanta=1 if quant_out else 0, rel=1e-5)


def dynamic_quantize_matmul(bias, per_column):
    r = rng(f"dqmm{bias}{per_column}")
    K, N = 24, 12
    a = f32(r.normal(size=[2, 5, K]))
    b = qrand(r, I8, [K, N])
    inits = [("b", b), ("bs", f32(r.uniform(0.01, 0.02, N)) if per_column else f32(0.015)),
             ("bz", np.zeros(N, np.int8) if per_column else zp(I8, 0))]
    ins = ["a", "b", "bs", "bz"]
    if bias:
        inits.append(("bias", f32(r.normal(size=N))))
        ins.append("bias")
    m = model([ms("DynamicQuantizeMatMul", ins, ["y"])], [("a", F, [2, 5, K])], [("y", F, [2, 5, N])], inits)
    return dict(id=f"DynamicQuantizeMatMul{'_bias' if bias else ''}{'_pc' if per_column else ''}", model=m,
                feeds={"a": a}, rel=1e-5)


def matmul_integer_to_float():
    r = rng("mmitf")
    K, N = 16, 8
    a = qrand(r, U8, [3, 4, K])
    inits = [("b", qrand(r, I8, [K, N])), ("as", f32(0.03)), ("bs", f32(r.uniform(0.01, 0.02, N))),
             ("az", zp(U8, 127)), ("bz", np.zeros(N, np.int8)), ("bias", f32(r.normal(size=N)))]
    m = model([ms("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], ["y"])],
              [("a", U8, [3, 4, K])], [("y", F, [3, 4, N])], inits)
    return dict(id="MatMulIntegerToFloat", model=m, feeds={"a": a}, rel=1e-5)


def pack_bits(values, bits, nbytes):
    """VALUES (ints < 2**bits) packed low bits first into NBYTES bytes."""
    out = np.zeros(nbytes, np.uint8)
    for j, v in enumerate(values):
        out[(j * bits) // 8] |= np.uint8(int(v) << ((j * bits) % 8))
    return out


def matmul_nbits(bits, zero_points, bias, K, N, block, float_zp=False):
    r = rng(f"nbits{bits}{zero_points}{bias}{K}{N}{block}{float_zp}")
    blocks = (K + block - 1) // block
    blob = block * bits // 8
    q = r.integers(0, 2 ** bits, [N, blocks * block])
    b = np.stack([np.stack([pack_bits(q[n, k * block:(k + 1) * block], bits, blob) for k in range(blocks)])
                  for n in range(N)])
    inits = [("b", b), ("scales", f32(r.uniform(0.01, 0.05, N * blocks)))]
    ins = ["a", "b", "scales"]
    if zero_points:
        zq = r.integers(0, 2 ** bits, [N, blocks])
        if float_zp:
            inits.append(("zp", f32(zq.reshape(-1) + r.uniform(-0.5, 0.5, N * blocks))))
        else:
            row = (blocks * bits + 7) // 8
            inits.append(("zp", np.concatenate([pack_bits(zq[n], bits, row) for n in range(N)])))
        ins.append("zp")
    else:
        ins.append("")
    if bias:
        ins += ["", "bias"]
        inits.append(("bias", f32(r.normal(size=N))))
    while ins[-1] == "":
        ins.pop()
    a = f32(r.normal(size=[2, 3, K]))
    m = model([ms("MatMulNBits", ins, ["y"], K=K, N=N, bits=bits, block_size=block)], [("a", F, [2, 3, K])],
              [("y", F, [2, 3, N])], inits)
    tag = f"MatMulNBits_b{bits}_K{K}{'_zp' if zero_points else ''}{'f' if float_zp else ''}{'_bias' if bias else ''}"
    return dict(id=tag, model=m, feeds={"a": a}, rel=1e-5)


def ms_quantize_pair():
    r = rng("msq")
    x = f32(r.normal(size=[2, 3, 4]))
    inits = [("s", f32(0.02)), ("z", zp(U8, 128))]
    m = model([ms("QuantizeLinear", ["x", "s", "z"], ["q"]), ms("DequantizeLinear", ["q", "s", "z"], ["y"])],
              [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4]), ("q", U8, [2, 3, 4])], inits)
    return dict(id="QuantizeDequantizeLinear_ms", model=m, feeds={"x": x}, quanta=1)


# ---- transformer fusions ----

def unary_float(op, ins_extra=(), shape=(2, 5, 16), **attrs):
    r = rng(op + str(ins_extra) + str(attrs))
    x = f32(r.normal(size=shape) * 2)
    inits = [(n, f32(r.normal(size=s))) for n, s in ins_extra]
    m = model([ms(op, ["x"] + [n for n, _ in ins_extra], ["y"], **attrs)], [("x", F, list(shape))],
              [("y", F, list(shape))], inits)
    tag = "_".join([op] + [n for n, _ in ins_extra] + [f"{k}{v}" for k, v in attrs.items()])
    return dict(id=tag, model=m, feeds={"x": x})


def bias_add():
    r = rng("biasadd")
    x, skip = f32(r.normal(size=[2, 4, 8])), f32(r.normal(size=[2, 4, 8]))
    m = model([ms("BiasAdd", ["x", "bias", "skip"], ["y"])], [("x", F, [2, 4, 8]), ("skip", F, [2, 4, 8])],
              [("y", F, [2, 4, 8])], [("bias", f32(r.normal(size=8)))])
    # ONNX Runtime has BiasAdd on CUDA only: the reference is its definition.
    return dict(id="BiasAdd", model=m, feeds={"x": x, "skip": skip},
                numpy_ref={"y": x + numpy_helper.to_array(m.graph.initializer[0]) + skip})


def skip_layer_norm(simplified, beta, bias, outs, skip_shape=None, H=32):
    r = rng(f"sln{simplified}{beta}{bias}{outs}{skip_shape}")
    B, S = 2, 6
    skip_shape = skip_shape or [B, S, H]
    x, skip = f32(r.normal(size=[B, S, H])), f32(r.normal(size=skip_shape))
    inits = [("gamma", f32(r.uniform(0.5, 1.5, H)))]
    ins = ["x", "skip", "gamma"]
    if simplified:
        ins.append("bias" if bias else "")
    else:
        ins += ["beta" if beta else "", "bias" if bias else ""]
    if beta:
        inits.append(("beta", f32(r.normal(size=H))))
    if bias:
        inits.append(("bias", f32(r.normal(size=H))))
    while ins[-1] == "":
        ins.pop()
    names = ["y", "mean", "inv_std", "sum"]
    node_outs = [names[i] if i in outs else "" for i in range(max(outs) + 1)]
    shapes = {"y": [B, S, H], "sum": [B, S, H], "mean": [B, S, 1], "inv_std": [B, S, 1]}
    op = "SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization"
    m = model([ms(op, ins, node_outs, epsilon=1e-5)], [("x", F, [B, S, H]), ("skip", F, skip_shape)],
              [(names[i], F, shapes[names[i]]) for i in outs], inits)
    tag = f"{op}{'_beta' if beta else ''}{'_bias' if bias else ''}_out{''.join(map(str, outs))}"
    if skip_shape != [B, S, H]:
        tag += "_skip" + "x".join(map(str, skip_shape))
    return dict(id=tag, model=m, feeds={"x": x, "skip": skip})


def simplified_layer_norm(domain):
    r = rng("simp" + domain)
    x = f32(r.normal(size=[3, 7, 16]))
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], domain=domain, epsilon=1e-6,
                            axis=-1)
    m = model([node], [("x", F, [3, 7, 16])], [("y", F, [3, 7, 16])], [("scale", f32(r.uniform(0.5, 1.5, 16)))])
    return dict(id=f"SimplifiedLayerNormalization{'_ms' if domain else ''}", model=m, feeds={"x": x})


def fused_matmul(transA, transB, alpha, sa, sb):
    r = rng(f"fmm{transA}{transB}{alpha}{sa}{sb}")
    a, b = f32(r.normal(size=sa)), f32(r.normal(size=sb))
    m = model([ms("FusedMatMul", ["a", "b"], ["y"], transA=transA, transB=transB, alpha=alpha)],
              [("a", F, sa), ("b", F, sb)], [("y", F, None)])
    return dict(id=f"FusedMatMul_tA{transA}_tB{transB}_r{len(sa)}", model=m, feeds={"a": a, "b": b})


def fused_gemm(act, **attrs):
    r = rng("fgemm" + act)
    a = f32(r.normal(size=[5, 12]))
    inits = [("b", f32(r.normal(size=[7, 12]))), ("c", f32(r.normal(size=7)))]
    m = model([ms("FusedGemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0, activation=act, **attrs)],
              [("a", F, [5, 12])], [("y", F, [5, 7])], inits)
    return dict(id=f"FusedGemm_{act}", model=m, feeds={"a": a})


def fused_conv(act, params, with_z):
    r = rng(f"fconv{act}{with_z}")
    x = f32(r.normal(size=[1, 4, 9, 9]))
    inits = [("w", f32(r.normal(size=[6, 4, 3, 3]) * 0.3)), ("bias", f32(r.normal(size=6)))]
    ins = ["x", "w", "bias"]
    inputs = [("x", F, [1, 4, 9, 9])]
    feeds = {"x": x}
    if with_z:
        ins.append("z")
        inputs.append(("z", F, [1, 6, 5, 5]))
        feeds["z"] = f32(r.normal(size=[1, 6, 5, 5]))
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], activation=act)
    if params:
        attrs["activation_params"] = params
    m = model([ms("FusedConv", ins, ["y"], **attrs)], inputs, [("y", F, [1, 6, 5, 5])], inits)
    return dict(id=f"FusedConv_{act}{'_z' if with_z else ''}", model=m, feeds=feeds)


def attention(mask_rank, unidirectional, attn_bias, S=5, H=16, N=4, B=2, qkv_sizes=None):
    r = rng(f"attn{mask_rank}{unidirectional}{attn_bias}{S}{qkv_sizes}")
    x = f32(r.normal(size=[B, S, H]))
    width = sum(qkv_sizes) if qkv_sizes else 3 * H
    inits = [("w", f32(r.normal(size=[H, width]) * 0.3)), ("bias", f32(r.normal(size=width) * 0.1))]
    ins = ["x", "w", "bias"]
    inputs = [("x", F, [B, S, H])]
    feeds = {"x": x}
    if mask_rank == 1:  # key end positions [B]
        inputs.append(("mask", I32, [B]))
        feeds["mask"] = np.array([S - 2] + [S] * (B - 1), np.int32)
        ins.append("mask")
    elif mask_rank == -1:  # end then start positions [2B]
        inputs.append(("mask", I32, [2 * B]))
        feeds["mask"] = np.array([S - 1] + [S] * (B - 1) + [1] + [0] * (B - 1), np.int32)
        ins.append("mask")
    elif mask_rank:
        shape = [B, S] if mask_rank == 2 else [B, S, S]
        mask = np.ones(shape, np.int32)
        mask[0, ..., -2:] = 0
        inputs.append(("mask", I32, shape))
        feeds["mask"] = mask
        ins.append("mask")
    else:
        ins.append("")
    if attn_bias:
        ins += ["", "ab"]
        inputs.append(("ab", F, [B, N, S, S]))
        feeds["ab"] = f32(r.normal(size=[B, N, S, S]))
    attrs = dict(num_heads=N, unidirectional=unidirectional)
    if qkv_sizes:
        attrs["qkv_hidden_sizes"] = qkv_sizes
    vw = qkv_sizes[2] if qkv_sizes else H
    m = model([ms("Attention", ins, ["y"], **attrs)], inputs, [("y", F, [B, S, vw])], inits)
    tag = f"Attention_mask{mask_rank if mask_rank >= 0 else '1_start'}{'_causal' if unidirectional else ''}{'_bias' if attn_bias else ''}" \
          f"{'_qkv' if qkv_sizes else ''}"
    return dict(id=tag, model=m, feeds=feeds)


def attention_past(mask, P=3, S=4, H=16, N=4, B=2):
    """GPT-2 style with a key/value cache: past [2, B, N, P, h] in, present [2, B, N, P + S, h] out."""
    r = rng(f"attnpast{mask}")
    h = H // N
    x = f32(r.normal(size=[B, S, H]))
    past = f32(r.normal(size=[2, B, N, P, h]))
    inits = [("w", f32(r.normal(size=[H, 3 * H]) * 0.3)), ("bias", f32(r.normal(size=3 * H) * 0.1))]
    inputs = [("x", F, [B, S, H]), ("past", F, [2, B, N, P, h])]
    feeds = {"x": x, "past": past}
    ins = ["x", "w", "bias", "", "past"]
    if mask:
        m_ = np.ones([B, P + S], np.int32)
        m_[1, :2] = 0  # left padding, as batched generation writes it
        inputs.append(("mask", I32, [B, P + S]))
        feeds["mask"] = m_
        ins[3] = "mask"
    m = model([ms("Attention", ins, ["y", "present"], num_heads=N, unidirectional=1)], inputs,
              [("y", F, [B, S, H]), ("present", F, [2, B, N, P + S, h])], inits)
    return dict(id=f"Attention_past_causal{'_mask2' if mask else ''}", model=m, feeds=feeds)


def qattention(mask, per_column, S=5, H=16, N=4, B=2):
    """ORT's quantize_dynamic form: DynamicQuantizeLinear(x) -> QAttention (int8 weight)."""
    r = rng(f"qattn{mask}{per_column}")
    x = f32(r.normal(size=[B, S, H]))
    w = qrand(r, I8, [H, 3 * H])
    inits = [("w", w), ("bias", f32(r.normal(size=3 * H) * 0.1)),
             ("ws", f32(r.uniform(0.005, 0.02, 3 * H)) if per_column else f32(0.01)),
             ("wz", np.zeros(3 * H, np.int8) if per_column else zp(I8, 0))]
    inputs, feeds = [("x", F, [B, S, H])], {"x": x}
    ins = ["xq", "w", "bias", "xs", "ws", "", "xz", "wz"]
    if mask:
        m_ = np.ones([B, S], np.int32)
        m_[0, -2:] = 0
        inputs.append(("mask", I32, [B, S]))
        feeds["mask"] = m_
        ins[5] = "mask"
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             ms("QAttention", ins, ["y"], num_heads=N)]
    m = model(nodes, inputs, [("y", F, [B, S, H])], inits)
    return dict(id=f"QAttention{'_mask' if mask else ''}{'_pc' if per_column else ''}", model=m, feeds=feeds)


def multi_head_attention(bias, kpm, present, L=7, S=5, D=16, N=2, B=2):
    r = rng(f"mha{bias}{kpm}{present}")
    q, k, v = (f32(r.normal(size=s)) for s in ([B, S, D], [B, L, D], [B, L, D]))
    ins = ["q", "k", "v"]
    inputs = [("q", F, [B, S, D]), ("k", F, [B, L, D]), ("v", F, [B, L, D])]
    feeds = {"q": q, "k": k, "v": v}
    inits = []
    ins.append("bias" if bias else "")
    if bias:
        inits.append(("bias", f32(r.normal(size=3 * D) * 0.2)))
    if kpm:
        mask = np.ones([B, L], np.int32)
        mask[1, -3:] = 0
        ins.append("kpm")
        inputs.append(("kpm", I32, [B, L]))
        feeds["kpm"] = mask
    while ins[-1] == "":
        ins.pop()
    outs = ["y"] + (["pk", "pv"] if present else [])
    outputs = [("y", F, [B, S, D])] + ([("pk", F, [B, N, L, D // N]), ("pv", F, [B, N, L, D // N])] if present else [])
    m = model([ms("MultiHeadAttention", ins, outs, num_heads=N)], inputs, outputs, inits)
    return dict(id=f"MultiHeadAttention{'_bias' if bias else ''}{'_kpm' if kpm else ''}{'_present' if present else ''}",
                model=m, feeds=feeds)


def embed_layer_norm(segments, mask, pos_ids, B=2, S=6, H=16, V=30):
    r = rng(f"eln{segments}{mask}{pos_ids}")
    ids = r.integers(0, V, [B, S]).astype(np.int32)
    inits = [("word", f32(r.normal(size=[V, H]))), ("pos", f32(r.normal(size=[16, H]))),
             ("gamma", f32(r.uniform(0.5, 1.5, H))), ("beta", f32(r.normal(size=H)))]
    inputs = [("ids", I32, [B, S])]
    feeds = {"ids": ids}
    ins = ["ids", "seg" if segments else "", "word", "pos", "segemb" if segments else "", "gamma", "beta"]
    if segments:
        inputs.append(("seg", I32, [B, S]))
        feeds["seg"] = r.integers(0, 2, [B, S]).astype(np.int32)
        inits.append(("segemb", f32(r.normal(size=[2, H]))))
    if mask:
        m_ = np.ones([B, S], np.int32)
        m_[0, -2:] = 0
        inputs.append(("mask", I32, [B, S]))
        feeds["mask"] = m_
    ins.append("mask" if mask else "")
    if pos_ids:
        inputs.append(("pids", I32, [B, S]))
        feeds["pids"] = r.integers(0, 16, [B, S]).astype(np.int32)
        ins.append("pids")
    while ins[-1] == "":
        ins.pop()
    m = model([ms("EmbedLayerNormalization", ins, ["y", "mask_index", "emb_sum"], epsilon=1e-5)], inputs,
              [("y", F, [B, S, H]), ("mask_index", I32, [B]), ("emb_sum", F, [B, S, H])], inits)
    tag = f"EmbedLayerNormalization{'_seg' if segments else ''}{'_mask' if mask else ''}{'_pos' if pos_ids else ''}"
    return dict(id=tag, model=m, feeds=feeds)


def qembed_layer_norm(segments, B=2, S=6, H=16, V=30):
    r = rng(f"qeln{segments}")
    ids = r.integers(0, V, [B, S]).astype(np.int32)
    mask = np.ones([B, S], np.int32)
    mask[0, -2:] = 0
    tables = {"word": [V, H], "pos": [16, H], "gamma": [H], "beta": [H]}
    if segments:
        tables["seg"] = [2, H]
    inits = []
    for n, shape in tables.items():
        inits += [(n + "_q", qrand(r, U8, shape)), (n + "_s", f32(r.uniform(0.005, 0.02))),
                  (n + "_z", zp(U8, int(r.integers(100, 156))))]
    inputs = [("ids", I32, [B, S]), ("mask", I32, [B, S])]
    feeds = {"ids": ids, "mask": mask}
    if segments:
        inputs.append(("segids", I32, [B, S]))
        feeds["segids"] = r.integers(0, 2, [B, S]).astype(np.int32)
    sg = (lambda x: x) if segments else (lambda x: "")
    ins = ["ids", sg("segids"), "word_q", "pos_q", sg("seg_q"), "gamma_q", "beta_q", "mask",
           "word_s", "pos_s", sg("seg_s"), "gamma_s", "beta_s", "word_z", "pos_z", sg("seg_z"), "gamma_z", "beta_z"]
    m = model([ms("QEmbedLayerNormalization", ins, ["y", "mask_index"], epsilon=1e-5)], inputs,
              [("y", F, [B, S, H]), ("mask_index", I32, [B])], inits)
    return dict(id=f"QEmbedLayerNormalization{'_seg' if segments else ''}", model=m, feeds=feeds)


def rotary(rank, offset, interleaved, rot_dim=0, B=2, S=5, N=2, Hd=8):
    r = rng(f"rot{rank}{offset}{interleaved}{rot_dim}")
    shape = [B, S, N * Hd] if rank == 3 else [B, N, S, Hd]
    x = f32(r.normal(size=shape))
    half = (rot_dim or Hd) // 2
    maxp = 32
    pos = np.arange(maxp)[:, None] / (10000 ** (np.arange(half)[None, :] / half))
    inits = [("cos", f32(np.cos(pos))), ("sin", f32(np.sin(pos)))]
    inputs = [("x", F, shape)]
    feeds = {"x": x}
    if offset:
        inputs.append(("pos", I64, [1]))
        feeds["pos"] = np.array([3], np.int64)
    else:
        inputs.append(("pos", I64, [B, S]))
        feeds["pos"] = r.integers(0, maxp, [B, S]).astype(np.int64)
    attrs = dict(interleaved=interleaved)
    if rot_dim:
        attrs.update(rotary_embedding_dim=rot_dim, num_heads=N)
    elif rank == 3:
        attrs["num_heads"] = N
    m = model([ms("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)], inputs, [("y", F, shape)], inits)
    tag = f"RotaryEmbedding_r{rank}{'_offset' if offset else ''}{'_il' if interleaved else ''}" \
          f"{'_rot' + str(rot_dim) if rot_dim else ''}"
    return dict(id=tag, model=m, feeds=feeds)


def on_intermediates():
    """Contrib nodes whose inputs are made by other nodes (their types known only by inference)."""
    r = rng("intermediates")
    B, S, H = 2, 6, 16
    x = f32(r.normal(size=[B, S, H]))
    mask = np.ones([B, S], np.int64)
    mask[1, -2:] = 0
    nodes = [helper.make_node("Cast", ["mask"], ["mask32"], to=I32),
             helper.make_node("Relu", ["x"], ["xr"]),
             ms("Attention", ["xr", "w", "bias", "mask32"], ["a"], num_heads=2),
             ms("FusedMatMul", ["a", "xr"], ["s"], transB=1, alpha=0.5),
             ms("QuickGelu", ["s"], ["y"])]
    inits = [("w", f32(r.normal(size=[H, 3 * H]) * 0.3)), ("bias", f32(r.normal(size=3 * H) * 0.1))]
    m = model(nodes, [("x", F, [B, S, H]), ("mask", I64, [B, S])], [("y", F, [B, S, S])], inits)
    return dict(id="chain_on_intermediates", model=m, feeds={"x": x, "mask": mask})


def in_subgraphs(flag):
    """Contrib nodes inside If branches (lowered in every subgraph, reading outer values)."""
    r = rng("subgraph")
    x = f32(r.normal(size=[2, 3, 8]))
    then_g = helper.make_graph([ms("FastGelu", ["x", "bias"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [2, 3, 8])])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["xr"]), ms("QuickGelu", ["xr"], ["e"], alpha=1.5)],
                               "else", [], [helper.make_tensor_value_info("e", F, [2, 3, 8])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = model(nodes, [("x", F, [2, 3, 8]), ("cond", TensorProto.BOOL, [])], [("y", F, [2, 3, 8])],
              [("bias", f32(r.normal(size=8)))])
    return dict(id=f"If_branches_{'then' if flag else 'else'}", model=m, feeds={"x": x, "cond": np.array(flag)})


def grid_sample(mode, padding, align):
    r = rng(f"grid{mode}{padding}{align}")
    x = f32(r.normal(size=[2, 3, 6, 7]))
    grid = f32(r.uniform(-1.2, 1.2, [2, 4, 5, 2]))
    m = model([ms("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)],
              [("x", F, [2, 3, 6, 7]), ("grid", F, [2, 4, 5, 2])], [("y", F, [2, 3, 4, 5])], opset=13)
    return dict(id=f"GridSample_{mode}_{padding}_ac{align}", model=m, feeds={"x": x, "grid": grid})


def trilu(upper):
    r = rng(f"trilu{upper}")
    x = f32(r.normal(size=[2, 5, 6]))
    m = model([ms("Trilu", ["x", "k"], ["y"], upper=upper)], [("x", F, [2, 5, 6])], [("y", F, [2, 5, 6])],
              [("k", np.array(1 if upper else -1, np.int64))], opset=13)
    return dict(id=f"Trilu_ms_{'upper' if upper else 'lower'}", model=m, feeds={"x": x})


def cases():
    c = [
        qlinear_binary("QLinearAdd", U8, [2, 3, 4, 5], [2, 3, 4, 5]),
        qlinear_binary("QLinearAdd", I8, [2, 8, 4, 4], [1, 8, 1, 1], const_b=True),
        qlinear_binary("QLinearMul", U8, [3, 7], [3, 7]),
        qlinear_binary("QLinearMul", I8, [2, 6, 5], [6, 1], const_b=True),
        qlinear_unary("QLinearSigmoid", U8, [2, 3, 8, 8]),
        qlinear_unary("QLinearSigmoid", I8, [4, 33]),
        qlinear_unary("QLinearLeakyRelu", U8, [2, 4, 6, 6], alpha=0.1),
        qlinear_unary("QLinearLeakyRelu", I8, [5, 17], alpha=0.2),
        qlinear_concat(),
        qlinear_pool("QLinearGlobalAveragePool", 0, [2, 8, 7, 7]),
        qlinear_pool("QLinearGlobalAveragePool", 1, [2, 5, 5, 8]),
        qlinear_pool("QLinearGlobalAveragePool", 0, [1, 16, 4, 4], dt=I8),
        qlinear_pool("QLinearAveragePool", 0, [1, 3, 9, 9], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                     count_include_pad=0),
        qlinear_pool("QLinearAveragePool", 0, [1, 3, 9, 9], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                     count_include_pad=1),
        qlinear_pool("QLinearAveragePool", 1, [1, 8, 8, 4], kernel_shape=[2, 2], strides=[2, 2]),
        qlinear_softmax(13, U8, [2, 3, 10], -1),
        qlinear_softmax(12, U8, [2, 3, 10], 1),
        qlinear_softmax(13, I8, [4, 20], -1),
        qgemm(True, True, False, False),
        qgemm(False, False, True, False),
        qgemm(True, False, True, True),
        dynamic_quantize_matmul(True, False),
        dynamic_quantize_matmul(False, True),
        matmul_integer_to_float(),
        matmul_nbits(4, True, False, 64, 12, 32),
        matmul_nbits(4, False, True, 40, 9, 16),
        matmul_nbits(8, True, True, 48, 8, 16),
        matmul_nbits(4, True, False, 32, 6, 16, float_zp=True),
        ms_quantize_pair(),
        unary_float("Gelu"),
        unary_float("FastGelu"),
        unary_float("FastGelu", [("bias", (16,))]),
        unary_float("BiasGelu", [("bias", (16,))]),
        unary_float("QuickGelu"),
        unary_float("QuickGelu", alpha=1.0),
        bias_add(),
        skip_layer_norm(False, True, True, [0, 1, 2, 3]),
        skip_layer_norm(False, False, False, [0]),
        skip_layer_norm(False, True, False, [0, 3], skip_shape=[6, 32]),
        skip_layer_norm(True, False, True, [0, 3]),
        skip_layer_norm(True, False, False, [0]),
        simplified_layer_norm(""),
        fused_matmul(0, 1, 0.125, [2, 3, 5, 8], [2, 3, 7, 8]),
        fused_matmul(1, 0, 1.0, [8, 5], [8, 6]),
        fused_gemm("Relu"),
        fused_gemm("LeakyRelu", activation_alpha=0.2),
        fused_conv("Relu", None, True),
        fused_conv("HardSigmoid", [0.3, 0.4], False),
        fused_conv("Clip", [-0.5, 0.5], False),
        attention(0, 0, False),
        attention(2, 0, False),
        attention(1, 0, False),
        attention(-1, 0, False),
        attention(1, 1, False, S=7),
        attention(3, 1, False),
        attention(2, 0, True),
        attention(0, 1, False, qkv_sizes=[16, 16, 8]),
        attention_past(False),
        attention_past(True),
        qattention(False, False),
        qattention(True, True),
        multi_head_attention(False, False, False),
        multi_head_attention(True, True, True),
        embed_layer_norm(True, True, False),
        embed_layer_norm(False, False, False),
        embed_layer_norm(True, True, True),
        qembed_layer_norm(True),
        qembed_layer_norm(False),
        rotary(3, False, 0),
        rotary(3, True, 1),
        rotary(4, False, 1),
        rotary(4, True, 0, rot_dim=4),
        on_intermediates(),
        grid_sample("bilinear", "zeros", 0),
        grid_sample("bicubic", "zeros", 1),
        grid_sample("bicubic", "border", 0),  # border clamps each cubic tap, not the point (as ORT)
        grid_sample("bicubic", "border", 1),
        grid_sample("bilinear", "border", 1),
        grid_sample("nearest", "reflection", 0),
        trilu(1),
        trilu(0),
        in_subgraphs(True),
        in_subgraphs(False),
    ]
    ids = [x["id"] for x in c]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    return c


def error_cases():
    """Models hodu must refuse with an error naming the op, its domain and what is missing."""
    r = rng("errors")
    x = f32(r.normal(size=[1, 4, 8]))
    unknown = model([ms("NotARealContribOp", ["x"], ["y"])], [("x", F, [1, 4, 8])], [("y", F, [1, 4, 8])])
    past = model([ms("Attention", ["x", "w", "", "", "past", "", "plen"], ["y", "present"], num_heads=2,
                     past_present_share_buffer=1)],
                 [("x", F, [1, 4, 8]), ("past", F, [2, 1, 2, 8, 4]), ("plen", I32, [1])],
                 [("y", F, [1, 4, 8]), ("present", F, None)], [("w", f32(r.normal(size=[8, 24])))])
    act = model([ms("FusedConv", ["x", "w"], ["y"], kernel_shape=[1], activation="Softplus")],
                [("x", F, [1, 4, 8])], [("y", F, None)], [("w", f32(r.normal(size=[2, 4, 1])))])
    return [
        dict(id="error_unknown_op", model=unknown, feeds={"x": x},
             expect=["NotARealContribOp", "com.microsoft", "unsupported op"]),
        dict(id="error_attention_shared_cache", model=past,
             feeds={"x": x, "past": f32(np.zeros([2, 1, 2, 8, 4])), "plen": np.array([3], np.int32)},
             expect=["Attention", "com.microsoft", "past_sequence_length"]),
        dict(id="error_fusedconv_activation", model=act, feeds={"x": x},
             expect=["FusedConv", "com.microsoft", "Softplus"]),
    ]
