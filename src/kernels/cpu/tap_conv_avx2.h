// A convolution as one product per kernel tap, each over the outputs whose input pixel under that
// tap lies inside the image, on packed_gemm.h (AVX2+FMA) over nChw8c. For dilated convs: a tap
// of a rate-12..36 ASPP conv (DeepLabV3) at 28x28 reaches a fraction of the outputs or none, and
// oneDNN 2.6 below AVX-512 runs such convs as im2col + sgemm over every tap, the padding's
// zeros included (DeepLabV3-ResNet50's three ASPP convs: 22 GFLOP computed, 5.9 needed).
// Output rows stay whole products of all input channels: for each tap a [pixels, cin] x
// [cin, cout] product adds into y. Sums run tap by tap in one fixed order, whatever the threads.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/packed_gemm.h"

namespace hodu::tap_conv {

struct ConvShape {
  int64_t batch = 1, cin = 0, cout = 0;  // cout a multiple of 8 (y's nChw8c blocks are whole)
  int64_t h = 0, w = 0, oh = 0, ow = 0;  // a 1-D conv: h = oh = 1
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // the bottom/right padding follows from oh/ow
};

// One kernel tap (ky, kx) and the outputs [oy0, oy1) x [ox0, ox1) whose input pixel
// (oy * stride + ky * dilation - pad, ...) is inside the image.
struct Tap {
  int64_t ky, kx, oy0, oy1, ox0, ox1;
  bool covers_all(const ConvShape& s) const { return oy0 == 0 && oy1 == s.oh && ox0 == 0 && ox1 == s.ow; }
};

class Conv {
 public:
  // `weights` [cout, cin, kh, kw] (ONNX's layout), `bias` [cout] or null; `act`: the activation
  // (its bias and accumulate fields are ignored).
  Conv(const ConvShape& s, const float* weights, const float* bias, const packed_gemm::Epilogue& act);
  // y = act(conv(x) + bias), x and y in nChw8c (x's channels padded to 8; y's cout whole blocks).
  void run(const float* x, float* y, int threads) const;
  const ConvShape& shape() const { return s_; }
  // The taps that reach some output, in the order they run (one that reaches all, if any, first).
  const std::vector<Tap>& taps() const { return taps_; }
  size_t packed_bytes() const { return packed_.nbytes(); }

 private:
  ConvShape s_;
  std::vector<Tap> taps_;
  Tensor packed_;  // taps_.size() packed matrices, packed_size(cin, cout) floats apart (64-byte aligned)
  std::vector<float> bias_;  // [cout], zeros without a bias
  packed_gemm::Epilogue act_;
};

// The taps of a conv that reach an output, the first one that reaches every output first.
std::vector<Tap> taps_of(const ConvShape& s);
// The multiply-adds of those taps' products against the dense conv's (every tap, every output).
double valid_fraction(const ConvShape& s);

}  // namespace hodu::tap_conv
