# hodu's own fused ops (domain "hodu"), produced by the fusion passes.
# Read by scripts/gen_schema_table.py (see newer.py for the API).
H = "hodu"
FLOAT = ["tensor(bfloat16)", "tensor(float16)", "tensor(float)", "tensor(double)"]
ACT = [attr("activation", "string", False, ""),        # "", Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSigmoid, Gelu, Silu
       attr("activation_params", "floats", False, [])]  # alpha/beta or min/max of the activation

api.op("FusedConv", 1,
       [param("X", "T"), param("W", "T"), param("B", "T", "o"), param("Z", "T", "o")],
       [param("Y", "T")],
       [attr("auto_pad", "string", False, "NOTSET"), attr("dilations", "ints"),
        attr("group", "int", False, 1), attr("kernel_shape", "ints"), attr("pads", "ints"),
        attr("strides", "ints")] + ACT,
       [("T", FLOAT)], domain=H)
api.op("FusedMatMul", 1, [param("A", "T"), param("B", "T"), param("bias", "T", "o"), param("Z", "T", "o")],
       [param("Y", "T")],
       [attr("alpha", "float", False, 1.0), attr("transA", "int", False, 0),
        attr("transB", "int", False, 0)] + ACT,
       [("T", FLOAT)], domain=H)
api.op("FusedGemm", 1, [param("A", "T"), param("B", "T"), param("C", "T", "o"), param("Z", "T", "o")],
       [param("Y", "T")],
       [attr("alpha", "float", False, 1.0), attr("beta", "float", False, 1.0),
        attr("transA", "int", False, 0), attr("transB", "int", False, 0)] + ACT,
       [("T", FLOAT)], domain=H)
api.op("Attention", 1,
       [param("Q", "T"), param("K", "T"), param("V", "T"), param("mask", "M", "o"),
        param("bias", "T", "o")],
       [param("Y", "T")],
       [attr("is_causal", "int", False, 0), attr("num_heads", "int", False, 0),
        attr("kv_num_heads", "int", False, 0), attr("scale", "float")],
       [("T", FLOAT), ("M", ["tensor(bool)"] + FLOAT)], domain=H)
api.op("LayerNorm", 1, [param("X", "T"), param("scale", "T"), param("bias", "T", "o")],
       [param("Y", "T")],
       [attr("axis", "int", False, -1), attr("epsilon", "float", False, 1e-05),
        attr("rms", "int", False, 0)],
       [("T", FLOAT)], domain=H)
api.op("Gelu", 1, [param("X", "T"), param("bias", "T", "o")], [param("Y", "T")],
       [attr("approximate", "string", False, "none")], [("T", FLOAT)], domain=H)
# Y[i] = Table[X[i]'s byte]: a byte's 256 values mapped at once (the float ops between a
# DequantizeLinear and a QuantizeLinear, src/passes/quantized_lookup.cc).
api.op("LookupTable", 1, [param("X", "T1"), param("Table", "T2")], [param("Y", "T2")], [],
       [("T1", ["tensor(uint8)", "tensor(int8)"]), ("T2", ["tensor(uint8)", "tensor(int8)"])], domain=H)
api.op("FusedElementwise", 1, [param("inputs", "T", "v", False, 1)],
       [param("outputs", "T", "v", False, 1)],
       [attr("body", "graph", True)],
       [("T", ["tensor(bool)", "tensor(int8)", "tensor(uint8)", "tensor(int16)", "tensor(uint16)",
               "tensor(int32)", "tensor(uint32)", "tensor(int64)", "tensor(uint64)"] + FLOAT)],
       domain=H)

# Gradient ops: the backward of a forward op, emitted by the autodiff pass (src/passes/autodiff*.cc)
# where one fused kernel is much faster than its decomposition. Each reads dY (the gradient of
# the forward op's output) and what the forward read; outputs are optional (only those wanted).
CONV_ATTRS = [attr("auto_pad", "string", False, "NOTSET"), attr("dilations", "ints"),
              attr("group", "int", False, 1), attr("kernel_shape", "ints"), attr("pads", "ints"),
              attr("strides", "ints")]
api.op("ConvGrad", 1, [param("dY", "T"), param("X", "T"), param("W", "T")],
       [param("dX", "T", "o"), param("dW", "T", "o"), param("dB", "T", "o")], CONV_ATTRS,
       [("T", FLOAT)], domain=H)
api.op("MaxPoolGrad", 1, [param("dY", "T"), param("X", "T")], [param("dX", "T")],
       [attr("auto_pad", "string", False, "NOTSET"), attr("ceil_mode", "int", False, 0),
        attr("dilations", "ints"), attr("kernel_shape", "ints", True), attr("pads", "ints"),
        attr("storage_order", "int", False, 0), attr("strides", "ints")],
       [("T", FLOAT)], domain=H)
api.op("AveragePoolGrad", 1, [param("dY", "T"), param("X", "T")], [param("dX", "T")],
       [attr("auto_pad", "string", False, "NOTSET"), attr("ceil_mode", "int", False, 0),
        attr("count_include_pad", "int", False, 0), attr("dilations", "ints"),
        attr("kernel_shape", "ints", True), attr("pads", "ints"), attr("strides", "ints")],
       [("T", FLOAT)], domain=H)
api.op("SoftmaxGrad", 1, [param("dY", "T"), param("Y", "T")], [param("dX", "T")],
       [attr("axis", "int", False, -1), attr("log", "int", False, 0)], [("T", FLOAT)], domain=H)
api.op("LayerNormGrad", 1, [param("dY", "T"), param("X", "T"), param("scale", "T")],
       [param("dX", "T", "o"), param("dscale", "T", "o"), param("dbias", "T", "o")],
       [attr("axis", "int", False, -1), attr("epsilon", "float", False, 1e-05),
        attr("rms", "int", False, 0)],
       [("T", FLOAT)], domain=H)
api.op("BatchNormGrad", 1, [param("dY", "T"), param("X", "T"), param("scale", "T")],
       [param("dX", "T", "o"), param("dscale", "T", "o"), param("dbias", "T", "o")],
       [attr("epsilon", "float", False, 1e-05)], [("T", FLOAT)], domain=H)
api.op("ActivationGrad", 1, [param("dY", "T"), param("X", "T")], [param("dX", "T")],
       [attr("activation", "string", True), attr("activation_params", "floats", False, [])],
       [("T", FLOAT)], domain=H)
LOSS_ATTRS = [attr("ignore_index", "int"), attr("reduction", "string", False, "mean")]
api.op("SoftmaxCrossEntropyLossGrad", 1,
       [param("dY", "T"), param("log_prob", "T"), param("labels", "Tind"), param("weights", "T", "o")],
       [param("dX", "T")], LOSS_ATTRS,
       [("T", FLOAT), ("Tind", ["tensor(int32)", "tensor(int64)"])], domain=H)
api.op("NegativeLogLikelihoodLossGrad", 1,
       [param("dY", "T"), param("input", "T"), param("target", "Tind"), param("weight", "T", "o")],
       [param("dX", "T")], LOSS_ATTRS,
       [("T", FLOAT), ("Tind", ["tensor(int32)", "tensor(int64)"])], domain=H)
