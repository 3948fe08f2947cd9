# Supplement to Debian's python3-onnx 1.12 (which knows ai.onnx opsets <= 17,
# ai.onnx.ml <= 3): every op version introduced by ai.onnx opsets 18..27
# (ONNX 1.13 .. 1.22), ai.onnx.ml 4..5 and ai.onnx.preview 1.
# Read by scripts/gen_schema_table.py, which provides `api`, `param`, `attr`.
#
#   api.op(name, since, inputs, outputs, attrs, types)  a whole new op version
#   api.bump(name, since, types=..., add_attrs=..., drop_attrs=..., inputs=..., outputs=...)
#       a version derived from the newest older one
#   param(name, type, option "s"|"o"|"v", homogeneous, min_arity)
#   attr(name, kind, required, default)

def t(*names):
    return [f"tensor({n})" for n in names]

FLOAT = t("float16", "float", "double")
FLOAT_BF = t("bfloat16", "float16", "float", "double")
INTS_ALL = t("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
IND = t("int32", "int64")
IR4 = t("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "bfloat16",
        "float16", "float", "double", "string", "bool", "complex64", "complex128")
F8 = t("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
I4 = t("uint4", "int4")
F4 = t("float4e2m1")
E8M0 = t("float8e8m0")
I2 = t("uint2", "int2")
IR9 = IR4 + F8
IR10 = IR9 + I4
IR11 = IR10 + F4
IR12 = IR11 + E8M0
IR13 = IR12 + I2
NUMERIC_BF = INTS_ALL + FLOAT_BF


def add_types(op, since, new, tcs=None, min_size=10):
    """`op` version `since`: the type constraints `tcs` (default: every
    constraint of at least `min_size` types, i.e. the "all types" ones) gain
    the types `new`. Sequence/optional element lists of If/Loop/Scan gain
    tensor types too."""
    prev = api.t.latest_before("", op, since)
    changes = {}
    for name, allowed in prev["types"]:
        if (tcs and name in tcs) or (not tcs and len(allowed) >= min_size):
            changes[name] = allowed + [x for x in new if x not in allowed]
    api.bump(op, since, types=changes)


A = attr
P = param

# ---------------------------------------------------------------- opset 18
api.bump("Pad", 18, inputs=[P("data", "T"), P("pads", "tensor(int64)"),
                            P("constant_value", "T", "o"), P("axes", "Tind", "o")],
         types={"Tind": IND})
api.op("CenterCropPad", 18, [P("input_data", "T"), P("shape", "Tind")], [P("output_data", "T")],
       [A("axes", "ints")], [("T", IR4), ("Tind", IND)])
api.bump("Resize", 18, add_attrs=[A("antialias", "int", False, 0), A("axes", "ints"),
                                  A("keep_aspect_ratio_policy", "string", False, "stretch")])
api.op("Mish", 18, [P("X", "T")], [P("Y", "T")], [], [("T", FLOAT)])
api.bump("OptionalGetElement", 18,
         types={"O": api.types_of("OptionalGetElement", 18, "O") + IR4,
                "V": api.types_of("OptionalGetElement", 18, "V")})
api.bump("OptionalHasElement", 18,
         inputs=[P("input", "O", "o")],
         types={"O": api.types_of("OptionalHasElement", 18, "O") + IR4})
api.bump("Split", 18, add_attrs=[A("num_outputs", "int")])
api.op("Col2Im", 18, [P("input", "T"), P("image_shape", "tensor(int64)"),
                      P("block_shape", "tensor(int64)")], [P("output", "T")],
       [A("dilations", "ints"), A("pads", "ints"), A("strides", "ints")], [("T", IR4)])
api.bump("ScatterND", 18)          # reduction: + "max", "min"
api.bump("ScatterElements", 18)    # reduction: + "max", "min"
for r in ("ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ReduceL1", "ReduceL2",
          "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd"):
    api.bump(r, 18, inputs=[P("data", "T"), P("axes", "tensor(int64)", "o")],
             add_attrs=[A("noop_with_empty_axes", "int", False, 0)], drop_attrs=["axes"])
for b in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    api.op(b, 18, [P("A", "T"), P("B", "T")], [P("C", "T")], [], [("T", INTS_ALL)])
api.op("BitwiseNot", 18, [P("X", "T")], [P("Y", "T")], [], [("T", INTS_ALL)])
api.op("GroupNormalization", 18, [P("X", "T"), P("scale", "T"), P("bias", "T")], [P("Y", "T")],
       [A("epsilon", "float", False, 1e-05), A("num_groups", "int", True)], [("T", FLOAT_BF)])
api.bump("LpPool", 18, add_attrs=[A("ceil_mode", "int", False, 0), A("dilations", "ints")])

# ---------------------------------------------------------------- opset 19
api.bump("Equal", 19, types={"T": api.types_of("Equal", 19, "T") + t("string")})
api.bump("AveragePool", 19, add_attrs=[A("dilations", "ints")])
api.bump("Cast", 19, types={"T1": IR9, "T2": IR9}, add_attrs=[A("saturate", "int", False, 1)])
api.bump("CastLike", 19, types={"T1": IR9, "T2": IR9}, add_attrs=[A("saturate", "int", False, 1)])
for op in ("Constant", "Identity", "If", "Loop", "Scan", "Reshape", "Shape", "Size"):
    add_types(op, 19, F8)
api.op("DeformConv", 19,
       [P("X", "T"), P("W", "T"), P("offset", "T"), P("B", "T", "o"), P("mask", "T", "o")],
       [P("Y", "T")],
       [A("dilations", "ints"), A("group", "int", False, 1), A("kernel_shape", "ints"),
        A("offset_group", "int", False, 1), A("pads", "ints"), A("strides", "ints")],
       [("T", FLOAT)])
api.op("DequantizeLinear", 19, [P("x", "T1"), P("x_scale", "T2"), P("x_zero_point", "T1", "o")],
       [P("y", "T2")], [A("axis", "int", False, 1)],
       [("T1", t("int8", "uint8", "int32") + F8), ("T2", t("float", "float16", "bfloat16"))])
api.bump("Pad", 19)  # mode: + "wrap"
api.op("QuantizeLinear", 19, [P("x", "T1"), P("y_scale", "T1"), P("y_zero_point", "T2", "o")],
       [P("y", "T2")], [A("axis", "int", False, 1), A("saturate", "int", False, 1)],
       [("T1", t("float", "float16", "bfloat16", "int32")), ("T2", t("int8", "uint8") + F8)])
api.bump("Resize", 19)  # coordinate_transformation_mode: + "half_pixel_symmetric"

# ---------------------------------------------------------------- opset 20
api.op("AffineGrid", 20, [P("theta", "T1"), P("size", "T2")], [P("grid", "T1")],
       [A("align_corners", "int", False, 0)], [("T1", FLOAT_BF), ("T2", t("int64"))])
api.bump("ConstantOfShape", 20,
         types={"T2": api.types_of("ConstantOfShape", 20, "T2") + t("bfloat16") + F8})
api.bump("DFT", 20, inputs=[P("input", "T1"), P("dft_length", "T2", "o"),
                            P("axis", "tensor(int64)", "o")],
         drop_attrs=["axis"], types={"T1": FLOAT_BF})
api.op("Gelu", 20, [P("X", "T")], [P("Y", "T")], [A("approximate", "string", False, "none")],
       [("T", FLOAT_BF)])
api.bump("GridSample", 20, add_attrs=[A("mode", "string", False, "linear")],
         types={"T1": IR4})
api.op("ImageDecoder", 20, [P("encoded_stream", "T1")], [P("image", "T2")],
       [A("pixel_format", "string", False, "RGB")], [("T1", t("uint8")), ("T2", t("uint8"))])
api.bump("IsInf", 20, types={"T1": FLOAT_BF + F8})
api.bump("IsNaN", 20, types={"T1": FLOAT_BF + F8})
for r in ("ReduceMax", "ReduceMin"):
    api.bump(r, 20, types={"T": api.types_of(r, 20, "T") + t("bool")})
api.op("RegexFullMatch", 20, [P("X", "T1")], [P("Y", "T2")], [A("pattern", "string")],
       [("T1", t("string")), ("T2", t("bool"))])
api.op("StringConcat", 20, [P("X", "T"), P("Y", "T")], [P("Z", "T")], [], [("T", t("string"))])
api.op("StringSplit", 20, [P("X", "T1")], [P("Y", "T2"), P("Z", "T3")],
       [A("delimiter", "string"), A("maxsplit", "int")],
       [("T1", t("string")), ("T2", t("string")), ("T3", t("int64"))])

# ---------------------------------------------------------------- opset 21
IR10_OPS = ("Cast", "CastLike", "Constant", "ConstantOfShape", "Flatten", "Identity", "If",
            "Loop", "Pad", "Reshape", "Scan", "Shape", "Size", "Squeeze", "Transpose", "Unsqueeze")
for op in IR10_OPS:
    add_types(op, 21, I4)
api.op("DequantizeLinear", 21, [P("x", "T1"), P("x_scale", "T2"), P("x_zero_point", "T1", "o")],
       [P("y", "T2")], [A("axis", "int", False, 1), A("block_size", "int", False, 0)],
       [("T1", t("int8", "uint8", "int16", "uint16", "int32") + F8 + I4),
        ("T2", t("float", "float16", "bfloat16"))])
api.op("QuantizeLinear", 21, [P("x", "T1"), P("y_scale", "T2"), P("y_zero_point", "T3", "o")],
       [P("y", "T3")],
       [A("axis", "int", False, 1), A("block_size", "int", False, 0),
        A("output_dtype", "int", False, 0), A("saturate", "int", False, 1)],
       [("T1", t("float", "float16", "bfloat16", "int32")),
        ("T2", t("float", "float16", "bfloat16", "int32")),
        ("T3", t("int8", "uint8", "int16", "uint16") + F8 + I4)])
api.bump("QLinearMatMul", 21,
         types={"TS": t("float", "float16", "bfloat16"), "T1": t("int8", "uint8") + F8,
                "T2": t("int8", "uint8") + F8, "T3": t("int8", "uint8") + F8},
         edit=lambda s: [p.update(type="TS") for p in s["inputs"] if p["name"].endswith("_scale")])
api.bump("GroupNormalization", 21, add_attrs=[A("stash_type", "int", False, 1)])

# ---------------------------------------------------------------- opset 22 (bfloat16)
for op in ("Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "AveragePool", "Bernoulli", "Conv",
           "ConvTranspose", "Cos", "Cosh", "DeformConv", "Dropout", "Elu", "EyeLike", "GRU",
           "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "HardSigmoid", "HardSwish",
           "InstanceNormalization", "LSTM", "LpNormalization", "LpPool", "MaxPool", "MaxRoiPool",
           "MaxUnpool", "Mish", "Multinomial", "NegativeLogLikelihoodLoss", "RNN", "RandomNormal",
           "RandomNormalLike", "RandomUniform", "RandomUniformLike", "RoiAlign", "Round", "Selu",
           "Sin", "Sinh", "Softplus", "Softsign", "Tan", "ThresholdedRelu"):
    add_types(op, 22, t("bfloat16"), tcs=("T", "T1", "T2"), min_size=0)

# ---------------------------------------------------------------- opset 23
IR11_OPS = IR10_OPS
for op in IR11_OPS:
    add_types(op, 23, F4)
api.op("Attention", 23,
       [P("Q", "T1"), P("K", "T1"), P("V", "T2"), P("attn_mask", "U", "o"),
        P("past_key", "T1", "o"), P("past_value", "T2", "o")],
       [P("Y", "T1"), P("present_key", "T1", "o"), P("present_value", "T2", "o"),
        P("qk_matmul_output", "T1", "o")],
       [A("is_causal", "int", False, 0), A("kv_num_heads", "int"), A("q_num_heads", "int"),
        A("qk_matmul_output_mode", "int", False, 0), A("scale", "float"),
        A("softcap", "float", False, 0.0), A("softmax_precision", "int")],
       [("T1", FLOAT_BF), ("T2", FLOAT_BF), ("U", t("bool") + FLOAT_BF + INTS_ALL)])
api.op("RMSNormalization", 23, [P("X", "T"), P("scale", "V")], [P("Y", "V")],
       [A("axis", "int", False, -1), A("epsilon", "float", False, 1e-05),
        A("stash_type", "int", False, 1)],
       [("T", FLOAT_BF), ("V", FLOAT_BF)])
api.op("RotaryEmbedding", 23,
       [P("X", "T"), P("cos_cache", "T"), P("sin_cache", "T"), P("position_ids", "M", "o")],
       [P("Y", "T")],
       [A("interleaved", "int", False, 0), A("num_heads", "int"),
        A("rotary_embedding_dim", "int", False, 0)],
       [("T", t("float", "float16", "bfloat16")), ("M", t("int64"))])
api.op("DequantizeLinear", 23, [P("x", "T1"), P("x_scale", "T2"), P("x_zero_point", "T1", "o")],
       [P("y", "T3")],
       [A("axis", "int", False, 1), A("block_size", "int", False, 0),
        A("output_dtype", "int", False, 0)],
       [("T1", t("int8", "uint8", "int16", "uint16", "int32") + F8 + I4 + F4),
        ("T2", t("float", "float16", "bfloat16")), ("T3", t("float", "float16", "bfloat16"))])
api.bump("QuantizeLinear", 23,
         types={"T3": api.types_of("QuantizeLinear", 23, "T3") + F4})

# ---------------------------------------------------------------- opset 24
IR12_OPS = tuple(o for o in IR10_OPS if o not in ("Cast", "CastLike"))
for op in IR12_OPS:
    add_types(op, 24, E8M0)
for op in ("Cast", "CastLike"):
    api.bump(op, 24, types={"T1": IR12, "T2": IR12},
             add_attrs=[A("round_mode", "string", False, "up")])
api.bump("Attention", 24,
         inputs=api.t.latest_before("", "Attention", 24)["inputs"] +
         [P("nonpad_kv_seqlen", "tensor(int64)", "o")])
api.bump("DequantizeLinear", 24, types={"T1": api.types_of("DequantizeLinear", 24, "T1") + E8M0,
                                        "T2": t("float", "float16", "bfloat16") + E8M0})
api.bump("QuantizeLinear", 24, types={"T2": t("float", "float16", "bfloat16", "int32") + E8M0})
api.op("Swish", 24, [P("X", "T")], [P("Y", "T")], [A("alpha", "float", False, 1.0)],
       [("T", FLOAT_BF)])
api.op("TensorScatter", 24,
       [P("past_cache", "T"), P("update", "T"), P("write_indices", "tensor(int64)", "o")],
       [P("present_cache", "T")],
       [A("axis", "int", False, -2), A("mode", "string", False, "linear")], [("T", IR12)])
api.bump("TopK", 24, types={"T": api.types_of("TopK", 24, "T") + t("bfloat16")})

# ---------------------------------------------------------------- opset 25 (int2/uint2)
for op in IR10_OPS:
    add_types(op, 25, I2)
api.bump("DequantizeLinear", 25, types={"T1": api.types_of("DequantizeLinear", 25, "T1") + I2})
api.bump("QuantizeLinear", 25, types={"T3": api.types_of("QuantizeLinear", 25, "T3") + I2},
         add_attrs=[A("precision", "int", False, 0)])

# ---------------------------------------------------------------- opset 26
NON_STRING = [x for x in IR13 if x != "tensor(string)"]
api.op("BitCast", 26, [P("input", "T1")], [P("output", "T2")], [A("to", "int", True)],
       [("T1", NON_STRING), ("T2", NON_STRING)])
api.op("CumProd", 26, [P("x", "T"), P("axis", "T2")], [P("y", "T")],
       [A("exclusive", "int", False, 0), A("reverse", "int", False, 0)],
       [("T", t("uint32", "uint64", "int32", "int64") + FLOAT_BF), ("T2", IND)])

# ---------------------------------------------------------------- opset 27
api.op("CausalConvWithState", 27,
       [P("input", "T"), P("weight", "T"), P("bias", "T", "o"), P("past_state", "T", "o")],
       [P("output", "T"), P("present_state", "T", "o")],
       [A("activation", "string", False, "none")], [("T", FLOAT_BF)])
api.op("LinearAttention", 27,
       [P("query", "T"), P("key", "T"), P("value", "T"), P("past_state", "S", "o"),
        P("decay", "T", "o"), P("beta", "T", "o")],
       [P("output", "T"), P("present_state", "S", "o")],
       [A("chunk_size", "int", False, 64), A("kv_num_heads", "int", True),
        A("q_num_heads", "int", True), A("scale", "float"),
        A("update_rule", "string", False, "linear")],
       [("T", FLOAT_BF), ("S", FLOAT_BF)])
api.bump("Range", 27, types={"T": api.types_of("Range", 27, "T") + t("float16", "bfloat16")},
         add_attrs=[A("stash_type", "int")])

# ---------------------------------------------------------------- ai.onnx.ml 4, 5
ML = "ai.onnx.ml"
api.bump("LabelEncoder", 4, domain=ML,
         add_attrs=[A("default_tensor", "tensor"), A("keys_tensor", "tensor"),
                    A("values_tensor", "tensor")],
         types={"T1": t("string", "int64", "float", "int32", "int16", "double"),
                "T2": t("string", "int64", "float", "int32", "int16", "double")})
api.op("TreeEnsemble", 5, [P("X", "T")], [P("Y", "T")],
       [A("aggregate_function", "int", False, 1), A("leaf_targetids", "ints", True),
        A("leaf_weights", "tensor", True), A("membership_values", "tensor"),
        A("n_targets", "int"), A("nodes_falseleafs", "ints", True),
        A("nodes_falsenodeids", "ints", True), A("nodes_featureids", "ints", True),
        A("nodes_hitrates", "tensor"), A("nodes_missing_value_tracks_true", "ints"),
        A("nodes_modes", "tensor", True), A("nodes_splits", "tensor", True),
        A("nodes_trueleafs", "ints", True), A("nodes_truenodeids", "ints", True),
        A("post_transform", "int", False, 0), A("tree_roots", "ints", True)],
       [("T", t("float", "double", "float16"))], domain=ML)
for op in ("TreeEnsembleClassifier", "TreeEnsembleRegressor"):
    api.bump(op, 5, domain=ML, edit=lambda s: s.update(deprecated=True))

# ---------------------------------------------------------------- ai.onnx.preview 1
api.op("FlexAttention", 1, [P("Q", "T"), P("K", "T"), P("V", "T")], [P("Y", "T")],
       [A("prob_mod", "graph"), A("scale", "float"), A("score_mod", "graph")],
       [("T", FLOAT_BF)], domain="ai.onnx.preview")
