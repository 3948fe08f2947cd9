// When a 3x3 stride-1 convolution runs on oneDNN's Winograd kernels, shared by the cpu engine
// and libhodu_kernels.so so both make the same choice.
#pragma once
#include <cstdint>

namespace hodu::onednn {

// Winograd's weights are transformed when a plan is built, by oneDNN's reference code: 43 ms
// for one 512x512x3x3 conv of ResNet-50 on Zen 5, where its run on a 7x7 output is no faster
// than the direct kernel's (ResNet-50 34.3 vs 34.1 ms a run, first run 64 ms shorter). From
// 10x10 outputs up it pays (14x14: 0.3 ms a conv).
constexpr int64_t kWinogradMinPixels = 100;

}  // namespace hodu::onednn
