// The tap-by-tap convolution of tap_conv_avx2.h.
#include "kernels/cpu/tap_conv_avx2.h"

#include <algorithm>

namespace hodu::tap_conv {
namespace {

// Outputs o in [0, out) with 0 <= o * stride + offset < in, as [first, last).
std::pair<int64_t, int64_t> valid_range(int64_t out, int64_t in, int64_t stride, int64_t offset) {
  // o >= ceil(-offset / stride), o <= floor((in - 1 - offset) / stride)
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const int64_t first = std::max<int64_t>(0, -floor_div(offset, stride));
  const int64_t last = std::min<int64_t>(out, floor_div(in - 1 - offset, stride) + 1);
  return {first, std::max(first, last)};
}

}  // namespace

std::vector<Tap> taps_of(const ConvShape& s) {
  std::vector<Tap> taps;
  for (int64_t ky = 0; ky < s.kh; ++ky)
    for (int64_t kx = 0; kx < s.kw; ++kx) {
      const auto [oy0, oy1] = valid_range(s.oh, s.h, s.stride_h, ky * s.dilation_h - s.pad_top);
      const auto [ox0, ox1] = valid_range(s.ow, s.w, s.stride_w, kx * s.dilation_w - s.pad_left);
      if (oy0 < oy1 && ox0 < ox1) taps.push_back({ky, kx, oy0, oy1, ox0, ox1});
    }
  // One that reaches every output first: it writes y (with the bias), the others add to it.
  // Another such last: the activation goes with its product (an unpadded conv's taps all reach
  // every output), instead of a pass of its own.
  auto covers_all = [&](const Tap& t) { return t.covers_all(s); };
  auto full = std::find_if(taps.begin(), taps.end(), covers_all);
  if (full != taps.end()) std::rotate(taps.begin(), full, full + 1);
  if (taps.size() > 1) {
    auto second = std::find_if(taps.begin() + 1, taps.end(), covers_all);
    if (second != taps.end()) std::rotate(second, second + 1, taps.end());
  }
  return taps;
}

Conv::Conv(const ConvShape& s, const float* weights, const float* bias, const packed_gemm::Epilogue& act)
    : s_(s), taps_(taps_of(s)), act_(act) {
  act_.bias = nullptr;
  act_.accumulate = false;
  const int64_t stride = packed_gemm::packed_size(s.cin, s.cout);
  packed_ = Tensor::empty(DType::F32, {std::max<int64_t>(1, static_cast<int64_t>(taps_.size()) * stride)});
  const int64_t taps_per_weight = s.kh * s.kw;
  for (size_t t = 0; t < taps_.size(); ++t)
    // B(i, j) = weights[j][i][ky][kx]
    packed_gemm::pack_b(weights + taps_[t].ky * s.kw + taps_[t].kx, taps_per_weight, s.cin * taps_per_weight, s.cin,
                        s.cout, packed_.data<float>() + static_cast<int64_t>(t) * stride);
  bias_.assign(static_cast<size_t>(s.cout), 0.0f);
  if (bias) std::copy(bias, bias + s.cout, bias_.begin());
}

double valid_fraction(const ConvShape& s) {
  double reached = 0;
  for (const Tap& t : taps_of(s)) reached += static_cast<double>((t.oy1 - t.oy0) * (t.ox1 - t.ox0));
  return reached / static_cast<double>(s.kh * s.kw * s.oh * s.ow);
}

void Conv::run(const float* x, float* y, int threads) const {
  const ConvShape& s = s_;
  const int64_t cin_p = (s.cin + 7) / 8 * 8;
  const int64_t in_img = cin_p * s.h * s.w, out_img = s.cout * s.oh * s.ow;
  const int64_t stride = packed_gemm::packed_size(s.cin, s.cout);
  const bool first_covers_all = !taps_.empty() && taps_[0].covers_all(s);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xn = x + n * in_img;
    float* yn = y + n * out_img;
    if (!first_covers_all) {  // every tap adds: y starts as the bias
      for (int64_t c = 0; c < s.cout; ++c) {
        float* block = yn + (c / 8) * s.oh * s.ow * 8 + c % 8;
        for (int64_t p = 0; p < s.oh * s.ow; ++p) block[p * 8] = bias_[static_cast<size_t>(c)];
      }
    }
    for (size_t t = 0; t < taps_.size(); ++t) {
      const Tap& tap = taps_[t];
      const int64_t rows = tap.oy1 - tap.oy0, cols = tap.ox1 - tap.ox0;
      const int64_t iy = tap.oy0 * s.stride_h + tap.ky * s.dilation_h - s.pad_top;
      const int64_t ix = tap.ox0 * s.stride_w + tap.kx * s.dilation_w - s.pad_left;
      packed_gemm::MatrixA a{xn + (iy * s.w + ix) * 8, 8 * s.stride_w, s.h * s.w * 8};
      a.group = cols;
      a.group_row = s.w * 8 * s.stride_h;
      packed_gemm::MatrixC c{yn + (tap.oy0 * s.ow + tap.ox0) * 8, 8, s.oh * s.ow * 8};
      c.group = cols;
      c.group_row = s.ow * 8;
      packed_gemm::Epilogue ep;
      const bool writes = t == 0 && first_covers_all;
      ep.bias = writes ? bias_.data() : nullptr;
      ep.accumulate = !writes;
      // The activation with the last product when that one covers every output; else a pass after.
      const bool last = t + 1 == taps_.size();
      if (last && tap.covers_all(s)) ep.act = act_.act, ep.p0 = act_.p0, ep.p1 = act_.p1;
      packed_gemm::gemm(rows * cols, s.cout, s.cin, a, packed_.data<float>() + static_cast<int64_t>(t) * stride, c, ep,
                        threads);
    }
    const bool act_done = !taps_.empty() && taps_.back().covers_all(s);
    if (act_.act != packed_gemm::Act::None && !act_done) packed_gemm::activate(yn, out_img, act_);
  }
}

}  // namespace hodu::tap_conv
