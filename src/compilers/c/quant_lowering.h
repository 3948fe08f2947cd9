// Quantization ops for the C generator, rewritten as the float ops they are defined by
// (ONNX's reference: x / scale rounded half to even, plus the zero point, saturated), so
// they fuse into the elementwise loops and the products and convolutions run on the
// float kernels:
//
//   DequantizeLinear(x, s, zp)  ->  (Cast(x) - Cast(zp)) * s
//   QuantizeLinear(x, s, zp)    ->  Cast(Min(Max(Round(x / s) + zp, lo), hi)) (NaN: lo)
//   DynamicQuantizeLinear(x)    ->  ReduceMin/ReduceMax, the scale and zero point, then as above
//   MatMulInteger, ConvInteger  ->  the float MatMul / Conv of the zero-point-shifted
//                                   operands, Cast to int32
//   QLinearMatMul, QLinearConv  ->  that float product, times a_scale * b_scale / y_scale in
//                                   double, then quantized as above
//
// The float32 products are exact while every partial sum stays below 2^24 (an 8-bit
// product is at most 2^15: sums over up to 512 terms of extreme values, far more for real
// data); beyond it they round as a float32 product does. Per-axis scales and zero points
// are reshaped to broadcast along their axis. Blocked quantization, 4- and 2-bit integers,
// float8/float4 and the `precision` attribute are left as they are (refused by the
// generator, naming the node).
#pragma once
#include "ir/graph.h"

namespace hodu::compilers::c {

// Set (1) on the float Convs that carry an integer product (ConvInteger, QLinearConv): their
// sums must be the direct ones, exact below 2^24, so the generator keeps them off Winograd
// (hodu_conv2d_desc.exact), whose transforms round every term.
inline constexpr const char* kExactSumsAttr = "hodu_exact_sums";

// Rewrites every quantization node of g whose input types are known. True when one was.
bool lower_quantization(Graph& g);

// Unsupported, naming the node, its input types and what compiles, for the first
// quantization node left in the graph.
void require_quantization_lowered(const Graph& g);

}  // namespace hodu::compilers::c
