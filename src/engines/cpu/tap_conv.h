// hodu's tap-by-tap convolution step (tap_conv.cc on kernels/cpu/tap_conv_avx2.h), tried by
// make_conv (dnnl_conv.cc) after oneDNN has picked its kernel.
#pragma once
#include <cstdint>
#include <vector>

#include "engines/cpu/plan.h"
#include "kernels/cpu/packed_gemm.h"

namespace hodu::cpu {

// HODU_CPU_TAP_CONV: auto (unset: where oneDNN's pick is its im2col + sgemm kernel — below
// AVX-512, dilated convs past dilation 2 — the input has 32 channels or more and, for a 2-D
// conv, the taps that fall in the padding skip a tenth of the products), on (every conv that fits, whatever oneDNN
// picked: for tests), off (oneDNN's kernels only); any other value is an InvalidArgument error.
enum class TapConvPolicy { Auto, On, Off };
TapConvPolicy tap_conv_policy();

// An ungrouped 1-D or 2-D conv with constant weights [cout, cin, kh(, kw)] and cout a multiple of
// 8; bias and activation fused, no residual.
struct TapConv {
  std::vector<int64_t> xs, ys;  // input and output shapes (N, C, H, W) or (N, C, W)
  std::vector<int64_t> kernel, strides, dilations, pads_begin;  // per spatial axis; dilation 1 = none
  const float* weights = nullptr;
  const float* bias = nullptr;  // [cout] or null
  packed_gemm::Epilogue act;
  std::string onednn_impl;  // what oneDNN picked for this conv
};

// Plans `n` on the tap-by-tap kernel when the policy, the CPU and the shapes allow; false otherwise.
bool make_tap_conv(PlanBuilder& b, const Node& n, const TapConv& c);

}  // namespace hodu::cpu
