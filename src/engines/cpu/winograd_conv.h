// hodu's AVX2 Winograd convolution step (winograd_conv.cc), tried by make_conv (dnnl_conv.cc).
#pragma once
#include <cstdint>
#include <vector>

#include "engines/cpu/plan.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/winograd_avx2.h"

namespace hodu::cpu {

// HODU_CPU_WINOGRAD (winograd::policy_from_env); any value it does not know is an
// InvalidArgument error.
using WinogradPolicy = winograd::Policy;
WinogradPolicy winograd_policy();

// A 3x3 stride-1 undilated ungrouped 2-D conv with constant weights [cout, cin, 3, 3].
struct WinogradConv {
  std::vector<int64_t> xs, ys;  // input and output shapes (N, C, H, W)
  int64_t pad_top = 0, pad_left = 0;
  const float* weights = nullptr;
  const float* bias = nullptr;  // [cout] or null
  packed_gemm::Epilogue ep;     // the activation
  bool has_z = false;           // a residual in input 3, added before the activation
  // A part of a channel Concat (oneDNN's Winograd writes a layout of its own, so such convs run
  // its direct kernel): on AVX-512 an nhwc part of 16+ input channels takes hodu's kernel in nhwc.
  bool concat_part = false;
};
// Winograd's transformed weights are (m+2)²/9 times the weights (4x for F(4,3)), and a static
// model releases the originals: about 3x the weights more memory for each conv it takes. The
// 3x3 stride-1 convs of the graph take it by output size, largest first (its saving per byte
// grows with the pixels), while that extra stays within max(64 MiB, half the model's weights);
// false for a conv past that budget. VGG-style detectors, whose big 3x3 weights all qualified,
// held 2.3x (SSD300) and 1.6x (RetinaNet) the memory of ONNX Runtime; ResNets stay within it.
// A conv whose shapes the graph does not give is not counted and not refused.
bool winograd_within_memory_budget(PlanBuilder& b, const Node& n);

// Plans `n` on hodu's F(4,3) kernel when the policy and the CPU allow it; false otherwise.
bool make_winograd_conv(PlanBuilder& b, const Node& n, const WinogradConv& c);

}  // namespace hodu::cpu
