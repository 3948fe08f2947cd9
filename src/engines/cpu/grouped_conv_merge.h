// A grouped convolution with narrow groups as one with k times fewer, k times wider groups:
// the weights block-diagonal inside each wider group, zeros between. oneDNN 2.6's direct
// AVX2 kernels need a group's channels to be whole 8-channel vectors; below that it runs its
// im2col + sgemm kernel (ResNeXt-50's 32 groups of 4 channels at 56x56: 4.1 ms a conv on one
// Zen 4 core at AVX2), and the same conv as 16 groups of 8 with half its weights zero runs on
// the direct kernel in 1.2 ms though it multiplies twice as much.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hodu::cpu {

// The smallest factor k (2, 4) that makes `group` groups of `in_width` input and `out_width`
// output channels into groups whose widths are multiples of `vector_width`, with `group`
// divisible by k; 0 when there is none (k above 4 multiplies too many zeros).
int64_t group_merge_factor(int64_t group, int64_t in_width, int64_t out_width, int64_t vector_width);

// ONNX conv weights `w` ([O, I/group, k...], contiguous f32) for `group / k` groups: [O, k * I/group, k...],
// output channel o's weights at its old group's place inside its new group, zeros elsewhere.
Tensor merge_group_weights(const Tensor& w, int64_t group, int64_t k);

}  // namespace hodu::cpu
