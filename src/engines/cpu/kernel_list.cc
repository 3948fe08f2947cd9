// The cpu engine's kernels as the runtime's KernelRegistry knows them (for
// policies such as `Conv: reference` and for `-v` / profiles). The engine
// looks its own factories up by these names; "reference" is the
// interpreter's kernel, which every op has.
#include "engines/cpu/cpu_engine.h"
#include "runtime/kernel_registry.h"

namespace hodu::cpu {

void register_cpu_kernels(KernelRegistry& r) {
  auto add = [&](std::initializer_list<const char*> ops, const char* domain, const char* name, const char* what) {
    for (const char* op : ops)
      r.add({.op = op, .domain = domain, .device = Device::Kind::CPU, .dtypes = {DType::F32}, .name = name,
             .engine = "cpu", .priority = 10, .description = what, .supports = {}});
  };
  r.add({.op = "*", .domain = "", .device = Device::Kind::CPU, .dtypes = {}, .name = "reference", .engine = "cpu",
         .priority = 0, .description = "the interpreter's kernel, run by the cpu engine", .supports = {}});
  add({"Conv"}, "", "onednn", "oneDNN convolution, weights packed once, blocked layouts");
  add({"FusedConv"}, "hodu", "onednn", "oneDNN convolution with bias, sum and eltwise post-ops");
  add({"MatMul", "Gemm"}, "", "onednn", "oneDNN matmul, constant weights packed once");
  add({"FusedMatMul", "FusedGemm"}, "hodu", "onednn", "oneDNN matmul with bias and eltwise post-ops");
  add({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}, "", "onednn", "oneDNN pooling");
  add({"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Abs", "Neg", "Elu", "HardSwish",
       "Gelu", "Clip"},
      "", "onednn", "oneDNN eltwise (any layout)");
  add({"Gelu"}, "hodu", "onednn", "oneDNN eltwise gelu");
  add({"Add", "Sum", "Sub", "Mul", "Div", "Max", "Min"}, "", "onednn", "oneDNN binary with broadcasting (any layout)");
  add({"Softmax", "LayerNormalization"}, "", "cpu", "hand-written row kernel, AVX2 or portable");
  add({"LogSoftmax"}, "", "cpu", "row kernel over the last axis (sum of exponentials in double)");
  add({"BatchNormalization"}, "", "onednn", "oneDNN batch normalization at inference, any layout (one no conv absorbed)");
  add({"LayerNorm"}, "hodu", "cpu", "hand-written row kernel, AVX2 or portable");
  add({"Reshape", "Flatten", "Squeeze", "Unsqueeze"}, "", "cpu", "a view, no copy");
  r.add({.op = "Identity", .domain = "", .device = Device::Kind::CPU, .dtypes = {}, .name = "cpu", .engine = "cpu",
         .priority = 10, .description = "a view, no copy", .supports = {}});
  add({"Transpose", "Slice", "Concat", "Gather"}, "", "cpu", "hand-written multithreaded copy");
  add({"Concat"}, "", "onednn", "channel concat of blocked-layout tensors: whole channel blocks copied, else oneDNN concat");
  add({"Attention"}, "hodu", "onednn", "oneDNN matmuls around a hand-written masked softmax");
  add({"FusedElementwise"}, "hodu", "cpu", "the body's ops in one loop over L1-sized chunks");
  add({"ConvGrad", "MaxPoolGrad", "AveragePoolGrad", "BatchNormGrad", "ActivationGrad"}, "hodu", "onednn",
      "oneDNN backward primitives (convolution data/weights, pooling, batch norm, eltwise)");
  add({"SoftmaxGrad", "LayerNormGrad", "SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}, "hodu", "cpu",
      "hand-written loops over rows");
  // Tensor kernels of any dtype (TensorStep), below oneDNN's f32 kernels of the same ops.
  auto add_any = [&](std::initializer_list<const char*> ops, const char* what) {
    for (const char* op : ops)
      r.add({.op = op, .domain = "", .device = Device::Kind::CPU, .dtypes = {}, .name = "cpu", .engine = "cpu",
             .priority = 5, .description = what, .supports = {}});
  };
  add_any({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "Equal", "Less",
           "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Expand", "Clip"},
          "broadcast loop of any dtype and pattern");
  add_any({"Cast", "CastLike", "Neg", "Abs", "Sign", "Relu", "Reciprocal", "Floor", "Ceil", "Round", "Log", "Sin", "Cos",
           "Tan", "Erf", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Mish", "Selu", "Celu", "Elu", "LeakyRelu",
           "ThresholdedRelu", "Exp", "Sqrt", "Sigmoid", "Tanh", "Not", "IsNaN", "IsInf", "Swish", "Asin", "Acos",
           "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"},
          "elementwise loop (casts, unary math)");
  add_any({"Split", "Pad", "Tile", "DepthToSpace", "SpaceToDepth", "Trilu", "Shape", "Size", "ConstantOfShape",
           "Range", "NonZero", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter",
           "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Concat"},
          "hand-written copy or index loop, shapes known at plan or run time");
  add_any({"Resize"}, "index gather (nearest) or separable weighted rows (linear, cubic)");
  add_any({"GridSample"}, "the interpreter's sampling loop split over threads (f32)");
  add_any({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "CumProd", "TopK"},
          "hand-written reduction along any axes");
  add_any({"InstanceNormalization", "GroupNormalization", "LRN"}, "hand-written normalization loop");
  add_any({"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization"},
          "loop along any axis, f32 or f64, with LayerNormalization's Mean and InvStdDev");
  add({"NonMaxSuppression"}, "", "cpu",
      "greedy suppression over box corners and areas computed once, (batch, class) pairs over threads, "
      "ONNX Runtime's float IoU");
  add({"RoiAlign"}, "", "cpu", "bilinear taps computed once per region, (region, channel range) tasks over threads");
  add_any({"RotaryEmbedding"}, "pairwise rotation loop in the input's layout (f32)");
  add_any({"Einsum"}, "batched products of the operands gathered once (f32, letters only)");
  add_any({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
           "SplitToSequence", "ConcatFromSequence"},
          "sequences as lists of tensor handles; split and concat as block copies");
  add({"ConvTranspose"}, "", "onednn", "oneDNN deconvolution, weights packed once, blocked layouts");
  r.add({.op = "If", .domain = "", .device = Device::Kind::CPU, .dtypes = {}, .name = "cpu", .engine = "cpu",
         .priority = 10, .description = "the taken branch planned once per input shape and run by the engine",
         .supports = {}});
  for (const char* op : {"Loop", "Scan"})
    r.add({.op = op, .domain = "", .device = Device::Kind::CPU, .dtypes = {}, .name = "cpu", .engine = "cpu",
           .priority = 10, .description = "the body planned once per input shape, outputs written in place",
           .supports = {}});
  add({"LSTM", "GRU", "RNN"}, "", "cpu",
      "oneDNN's RNN primitive where it matches ONNX's cell, else a projection GEMM and a fused per-step loop");
  // Quantized ops, dispatched on their first input's dtype (dnnl_int8.cc).
  auto add_int8 = [&](std::initializer_list<const char*> ops, std::vector<DType> dtypes, const char* name,
                      const char* what) {
    for (const char* op : ops)
      r.add({.op = op, .domain = "", .device = Device::Kind::CPU, .dtypes = dtypes, .name = name, .engine = "cpu",
             .priority = 10, .description = what, .supports = {}});
  };
  add_int8({"QLinearConv", "ConvInteger"}, {DType::U8, DType::I8}, "onednn",
           "oneDNN int8 convolution (weights minus their zero point, split in two where oneDNN would saturate), "
           "exact requantization; ConvInteger with its Cast/Mul/Add/Relu in one epilogue");
  add_int8({"QLinearMatMul", "MatMulInteger"}, {DType::U8, DType::I8}, "onednn",
           "oneDNN int8 matmul (weights as for the convolution), exact requantization or float epilogue");
  add_int8({"DynamicQuantizeLinear"}, {DType::F32}, "cpu", "hand-written vectorized min/max and quantize loops");
  add_int8({"QuantizeLinear"}, {DType::F32}, "cpu", "hand-written vectorized loop, per tensor or per axis");
  add_int8({"DequantizeLinear"}, {DType::U8, DType::I8}, "cpu", "hand-written vectorized loop, per tensor or per axis");
  r.add({.op = "LookupTable", .domain = "hodu", .device = Device::Kind::CPU, .dtypes = {DType::U8, DType::I8},
         .name = "cpu", .engine = "cpu", .priority = 10,
         .description = "byte table loop in the input's layout (the float ops between a DQ and a Q)", .supports = {}});
  // One entry for every dtype: a registration names its slot by op and kernel name, so a second
  // "onednn" MaxPool would replace the f32 one above (f32 MaxPool then went to the reference kernel).
  add_int8({"MaxPool"}, {DType::F32, DType::U8, DType::I8}, "onednn",
           "oneDNN pooling (f32); u8/s8: hand-written max pooling loop, plain layout (2-D windows)");
}

}  // namespace hodu::cpu
