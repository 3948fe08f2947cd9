#include "engines/cpu/row_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using vector_math::kLanes;
using vector_math::lanes_sum;

}  // namespace

HODU_ISA_BODY void softmax_row_body(const float* x, const float* add, int64_t add_stride, float* y, int64_t n,
                                    int64_t masked_from) {
  const int64_t live = masked_from < n ? masked_from : n;
  if (add && add_stride == 1) {
    for (int64_t j = 0; j < live; ++j) y[j] = x[j] + add[j];
  } else if (add && add_stride == 0) {
    const float a = add[0];
    for (int64_t j = 0; j < live; ++j) y[j] = x[j] + a;
  } else if (add) {
    for (int64_t j = 0; j < live; ++j) y[j] = x[j] + add[j * add_stride];
  } else if (y != x) {
    for (int64_t j = 0; j < live; ++j) y[j] = x[j];
  }
  if (!vector_math::softmax_in_place_fast(y, live)) {
    // Every live entry -inf (a key padding mask over the whole row): ONNX's softmax is 0/0,
    // NaN, in ONNX Runtime, torch and the interpreter; 0 here was a silent difference.
    for (int64_t j = 0; j < n; ++j) y[j] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  for (int64_t j = live; j < n; ++j) y[j] = 0;  // causally masked columns
}
HODU_ISA_VARIANTS(void, softmax_row,
                  (const float* x, const float* add, int64_t add_stride, float* y, int64_t n, int64_t masked_from),
                  (x, add, add_stride, y, n, masked_from))

HODU_ISA_BODY void layer_norm_row_body(const float* x, const float* scale, const float* bias, float* y, int64_t n,
                                       float eps, bool rms) {
  vector_math::layer_norm(x, scale, bias, y, n, eps, rms);
}
HODU_ISA_VARIANTS(void, layer_norm_row,
                  (const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps, bool rms),
                  (x, scale, bias, y, n, eps, rms))

HODU_ISA_BODY void gemv_rows_body(const float* w, const float* x, const float* bias, float* y, int64_t row_begin,
                                  int64_t row_end, int64_t cols) {
  const int64_t body = cols / kLanes * kLanes;
  // Four rows at a time: x is loaded once for four rows and their sums are independent chains of
  // multiply-adds (one row alone waits on its own adds: VGG-11's 4096 x 25088 classifier streamed
  // at half the speed of oneDNN's packed product). Each row is summed in the same order as alone:
  // the same bits.
  constexpr int64_t kRows = 4;
  int64_t o = row_begin;
  for (; o + kRows <= row_end; o += kRows) {
    const float* r0 = w + o * cols;
    const float* r1 = r0 + cols;
    const float* r2 = r1 + cols;
    const float* r3 = r2 + cols;
    float a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        const float v = x[j + l];
        a0[l] += r0[j + l] * v;
        a1[l] += r1[j + l] * v;
        a2[l] += r2[j + l] * v;
        a3[l] += r3[j + l] * v;
      }
    float s[kRows] = {lanes_sum(a0), lanes_sum(a1), lanes_sum(a2), lanes_sum(a3)};
    for (int64_t j = body; j < cols; ++j) {
      s[0] += r0[j] * x[j];
      s[1] += r1[j] * x[j];
      s[2] += r2[j] * x[j];
      s[3] += r3[j] * x[j];
    }
    for (int64_t k = 0; k < kRows; ++k) y[o + k] = bias ? s[k] + bias[o + k] : s[k];
  }
  for (; o < row_end; ++o) {
    const float* row = w + o * cols;
    float acc[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) acc[l] += row[j + l] * x[j + l];
    float sum = lanes_sum(acc);
    for (int64_t j = body; j < cols; ++j) sum += row[j] * x[j];
    y[o] = bias ? sum + bias[o] : sum;
  }
}
HODU_ISA_VARIANTS(void, gemv_rows,
                  (const float* w, const float* x, const float* bias, float* y, int64_t row_begin, int64_t row_end,
                   int64_t cols),
                  (w, x, bias, y, row_begin, row_end, cols))

HODU_ISA_BODY void depthwise_conv_row_body(const float* __restrict x, const float* w, float bias, float* __restrict y,
                                           const DepthwiseRow& g) {
  const int64_t out_len = g.out_len, stride = g.stride, n_taps = static_cast<int64_t>(g.taps.size());
  if (g.padded_len > 0) {
    // A short stride-1 row: copied with its padding's zeros into a stack buffer, then 8 outputs
    // at a time in a register, each tap one multiply-add of the block (a tap loop over a row of 15
    // outputs spent more on its bounds than on its multiply-adds).
    float xp[DepthwiseRow::kMaxPadded];
    const int64_t head = std::min(g.pad, g.padded_len), body = std::max<int64_t>(0, std::min(g.in_len, g.padded_len - head));
    for (int64_t i = 0; i < head; ++i) xp[i] = 0.0f;
    std::memcpy(xp + head, x, static_cast<size_t>(body) * sizeof(float));
    for (int64_t i = head + body; i < g.padded_len; ++i) xp[i] = 0.0f;
    for (int64_t t0 = 0; t0 < out_len; t0 += 8) {
      // vector_math's 8 floats (a ymm register, two xmm in the plain variant; 16 as two ymm ran
      // 4x slower in the AVX2 one), loaded and stored anywhere through memcpy.
      vector_math::Floats8 acc = vector_math::Floats8{} + bias;
      for (int64_t j = 0; j < n_taps; ++j) {
        vector_math::Floats8 v;
        std::memcpy(&v, xp + t0 + j * g.dilation, sizeof v);
        acc += w[j] * v;
      }
      if (out_len - t0 >= 8) {
        std::memcpy(y + t0, &acc, sizeof acc);
      } else {
        for (int64_t l = 0; l < out_len - t0; ++l) y[t0 + l] = acc[l];
      }
    }
    return;
  }
  for (int64_t t = 0; t < out_len; ++t) y[t] = bias;
  for (int64_t j = 0; j < n_taps; ++j) {
    const DepthwiseTap& tap = g.taps[static_cast<size_t>(j)];
    const float wj = w[j];
    if (stride == 1) {
      const float* xs = x + tap.offset;
      for (int64_t t = tap.lo; t < tap.hi; ++t) y[t] += wj * xs[t];
    } else {
      for (int64_t t = tap.lo; t < tap.hi; ++t) y[t] += wj * x[t * stride + tap.offset];
    }
  }
}
HODU_ISA_VARIANTS(void, depthwise_conv_row, (const float* x, const float* w, float bias, float* y, const DepthwiseRow& g),
                  (x, w, bias, y, g))

DepthwiseRow depthwise_row(int64_t n_taps, int64_t in_len, int64_t out_len, int64_t stride, int64_t dilation,
                           int64_t pad) {
  DepthwiseRow g;
  g.in_len = in_len;
  g.out_len = out_len;
  g.stride = stride;
  g.dilation = dilation;
  g.pad = pad;
  g.taps.resize(static_cast<size_t>(n_taps));
  for (int64_t j = 0; j < n_taps; ++j) {
    const int64_t off = j * dilation - pad;
    DepthwiseTap& tap = g.taps[static_cast<size_t>(j)];
    tap.offset = off;
    tap.lo = std::min(out_len, off >= 0 ? 0 : (-off + stride - 1) / stride);
    tap.hi = std::max(tap.lo, std::min(out_len, in_len > off ? (in_len - off + stride - 1) / stride : 0));
  }
  // The padded positions the last block of 8 outputs reads.
  const int64_t padded = (out_len + 7) / 8 * 8 + (n_taps - 1) * dilation;
  g.padded_len = stride == 1 && out_len <= DepthwiseRow::kShortRow && padded <= DepthwiseRow::kMaxPadded ? padded : 0;
  return g;
}

HODU_ISA_BODY void affine_lanes_body(const float* x, float* y, const float* a, const float* b, int64_t runs,
                                     int64_t lanes, bool relu) {
  // One loop per case, lanes known: each a few vector multiply-adds per run.
  if (lanes == 8 && relu) {
    for (int64_t r = 0; r < runs; ++r)
      for (int64_t l = 0; l < 8; ++l) {
        const float v = x[r * 8 + l] * a[l] + b[l];
        y[r * 8 + l] = v < 0 ? 0.0f : v;
      }
  } else if (lanes == 8) {
    for (int64_t r = 0; r < runs; ++r)
      for (int64_t l = 0; l < 8; ++l) y[r * 8 + l] = x[r * 8 + l] * a[l] + b[l];
  } else if (relu) {
    for (int64_t r = 0; r < runs; ++r)
      for (int64_t l = 0; l < 16; ++l) {
        const float v = x[r * 16 + l] * a[l] + b[l];
        y[r * 16 + l] = v < 0 ? 0.0f : v;
      }
  } else {
    for (int64_t r = 0; r < runs; ++r)
      for (int64_t l = 0; l < 16; ++l) y[r * 16 + l] = x[r * 16 + l] * a[l] + b[l];
  }
}
HODU_ISA_VARIANTS(void, affine_lanes,
                  (const float* x, float* y, const float* a, const float* b, int64_t runs, int64_t lanes, bool relu),
                  (x, y, a, b, runs, lanes, relu))

HODU_ISA_BODY void affine_strided_rows_body(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows,
                                            int64_t channels, const float* a, const float* b, bool relu) {
  // The channel loop innermost and branch-free (relu as a max with 0, else with -inf): a vector
  // loop over the row with a and b from L1.
  const float floor = relu ? 0.0f : -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    for (int64_t c = 0; c < channels; ++c) yr[c] = std::max(xr[c] * a[c] + b[c], floor);
  }
}
HODU_ISA_VARIANTS(void, affine_strided_rows,
                  (const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t channels,
                   const float* a, const float* b, bool relu),
                  (x, ldx, y, ldy, rows, channels, a, b, relu))

HODU_ISA_BODY void scale_rows_body(const float* x, const float* v, float* y, int64_t len, int64_t rows_per_v,
                                   bool scalar_per_row, int64_t begin, int64_t end) {
  if (scalar_per_row) {
    for (int64_t r = begin; r < end; ++r) {
      const float s = v[r];
      for (int64_t j = 0; j < len; ++j) y[r * len + j] = x[r * len + j] * s;
    }
    return;
  }
  // The rows sharing one vector in one run each (no division per row); the blocked layouts'
  // 8- and 16-lane rows with the lanes known, so each row is one vector multiply.
  for (int64_t r = begin; r < end;) {
    const int64_t group = r / rows_per_v, group_end = std::min(end, (group + 1) * rows_per_v);
    const float* vr = v + group * len;
    if (len == 8 || len == 16) {
      // Products into a local row before the stores: y may be x (in place), and the compiler
      // then needs no overlap check to keep the row in one register.
      float vv[16], t[16];
      for (int64_t j = 0; j < 16; ++j) vv[j] = vr[j < len ? j : 0];
      if (len == 8) {
        for (; r < group_end; ++r) {
          for (int64_t j = 0; j < 8; ++j) t[j] = x[r * 8 + j] * vv[j];
          for (int64_t j = 0; j < 8; ++j) y[r * 8 + j] = t[j];
        }
      } else {
        for (; r < group_end; ++r) {
          for (int64_t j = 0; j < 16; ++j) t[j] = x[r * 16 + j] * vv[j];
          for (int64_t j = 0; j < 16; ++j) y[r * 16 + j] = t[j];
        }
      }
    } else {
      for (; r < group_end; ++r)
        for (int64_t j = 0; j < len; ++j) y[r * len + j] = x[r * len + j] * vr[j];
    }
  }
}
HODU_ISA_VARIANTS(void, scale_rows,
                  (const float* x, const float* v, float* y, int64_t len, int64_t rows_per_v, bool scalar_per_row,
                   int64_t begin, int64_t end),
                  (x, v, y, len, rows_per_v, scalar_per_row, begin, end))

HODU_ISA_BODY void blocked_means_body(const float* x, float* y, int64_t pixels, int64_t block, int64_t begin,
                                      int64_t end) {
  // Four partial sums of a block each (the adds' latency), the lanes a compile-time count.
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * pixels * block;
    float acc[4][16] = {};
    int64_t p = 0;
    if (block == 16) {
      for (; p + 4 <= pixels; p += 4)
        for (int64_t k = 0; k < 4; ++k)
          for (int64_t l = 0; l < 16; ++l) acc[k][l] += xr[(p + k) * 16 + l];
      for (; p < pixels; ++p)
        for (int64_t l = 0; l < 16; ++l) acc[0][l] += xr[p * 16 + l];
    } else {
      for (; p + 4 <= pixels; p += 4)
        for (int64_t k = 0; k < 4; ++k)
          for (int64_t l = 0; l < 8; ++l) acc[k][l] += xr[(p + k) * 8 + l];
      for (; p < pixels; ++p)
        for (int64_t l = 0; l < 8; ++l) acc[0][l] += xr[p * 8 + l];
    }
    for (int64_t l = 0; l < block; ++l) y[r * block + l] = ((acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])) * scale;
  }
}
HODU_ISA_VARIANTS(void, blocked_means,
                  (const float* x, float* y, int64_t pixels, int64_t block, int64_t begin, int64_t end),
                  (x, y, pixels, block, begin, end))

HODU_ISA_BODY void nhwc_means_body(const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin,
                                   int64_t end) {
  // Task r: image r / chunks, channels [16 c, 16 c + 16) of it (c = r % chunks), summed in
  // registers down the pixels (partial sums in y would wait on their own stores).
  const int64_t chunks = (channels + 15) / 16;
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t c0 = r % chunks * 16, width = std::min<int64_t>(16, channels - c0);
    const float* xr = x + r / chunks * pixels * channels + c0;
    float* yr = y + r / chunks * channels + c0;
    if (width == 16) {
      using V = vector_math::Floats16;
      V a0 = {}, a1 = {}, v0, v1;
      int64_t p = 0;
      for (; p + 2 <= pixels; p += 2) {
        std::memcpy(&v0, xr + p * channels, sizeof v0);
        std::memcpy(&v1, xr + (p + 1) * channels, sizeof v1);
        a0 += v0;
        a1 += v1;
      }
      if (p < pixels) {
        std::memcpy(&v0, xr + p * channels, sizeof v0);
        a0 += v0;
      }
      a0 = (a0 + a1) * scale;
      std::memcpy(yr, &a0, sizeof a0);
    } else {
      // The last channels: the same sums in the same order as the vectors' lanes, so equal
      // channels give equal means (a softmax over a degenerate head's tied logits saw the last
      // 8 of 1000 channels one ulp apart).
      float a0[16] = {}, a1[16] = {};
      int64_t p = 0;
      for (; p + 2 <= pixels; p += 2)
        for (int64_t l = 0; l < width; ++l) {
          a0[l] += xr[p * channels + l];
          a1[l] += xr[(p + 1) * channels + l];
        }
      if (p < pixels)
        for (int64_t l = 0; l < width; ++l) a0[l] += xr[p * channels + l];
      for (int64_t l = 0; l < width; ++l) yr[l] = (a0[l] + a1[l]) * scale;
    }
  }
}
HODU_ISA_VARIANTS(void, nhwc_means,
                  (const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin, int64_t end),
                  (x, y, pixels, channels, begin, end))

HODU_ISA_BODY void max_pool_blocked_rows_body(const float* x, float* y, const BlockedPool2d& p, int64_t begin,
                                              int64_t end) {
  vector_math::max_pool_blocked(x, y, p, begin, end);
}
HODU_ISA_VARIANTS(void, max_pool_blocked_rows,
                  (const float* x, float* y, const BlockedPool2d& p, int64_t begin, int64_t end), (x, y, p, begin, end))

}  // namespace hodu::cpu
