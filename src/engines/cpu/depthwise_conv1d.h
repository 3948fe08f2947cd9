// hodu's 1-D depthwise convolution step (depthwise_conv1d.cc), tried by make_conv (dnnl_conv.cc)
// before oneDNN: oneDNN 2.6 has no jit kernel for a depthwise conv over one spatial axis and runs
// it as im2col + one sgemm per channel.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

// HODU_CPU_DEPTHWISE_CONV1D: auto (unset: these convs on hodu's kernel) or off (oneDNN's); any
// other value is an InvalidArgument error.
enum class DepthwiseConv1dPolicy { Auto, Off };
DepthwiseConv1dPolicy depthwise_conv1d_policy();

// Plans Conv / hodu.FusedConv `n` (input xs = [N, C, W], output ys) on the depthwise row kernel
// when it is a 1-D conv with one input channel a group (group = C, any channel multiplier),
// constant weights w and a constant bias (or none); its activation, residual and bias fused.
// False, nothing planned, otherwise.
bool make_depthwise_conv1d(PlanBuilder& b, const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                           const Tensor& w, const Tensor* bias, const std::string& act,
                           const std::vector<float>& act_params, bool has_z);

}  // namespace hodu::cpu
