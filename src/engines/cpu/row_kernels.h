// Hand-written row kernels (softmax, layer norm): compiled for AVX2+FMA and
// for plain x86-64, the variant picked at run time by the CPU capped by HODU_MAX_ISA
// (kernels/cpu/isa_dispatch.h).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {

// y[i] = softmax(x[i] + add[i]) over one row of n; add may be null, add_stride 0 broadcasts one value.
// masked_from: columns >= masked_from get -inf (causal), n when none.
void softmax_row(const float* x, const float* add, int64_t add_stride, float* y, int64_t n, int64_t masked_from);
// y = (x - mean) / sqrt(var + eps) * scale + bias over one row (rms: no mean, root mean square).
void layer_norm_row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps, bool rms);

// y[o] = bias[o] + sum_i w[o * cols + i] * x[i] for rows o in [row_begin, row_end); bias may be null.
void gemv_rows(const float* w, const float* x, const float* bias, float* y, int64_t row_begin, int64_t row_end,
               int64_t cols);
// One tap of a 1-D depthwise convolution: outputs t in [lo, hi) read x[t * stride + offset],
// those inside the input (the padding's zeros are skipped, not read).
struct DepthwiseTap {
  int64_t lo = 0, hi = 0, offset = 0;
};
// A 1-D depthwise convolution's row geometry, computed once (a division per tap per channel cost
// more than the taps): a kernel of taps.size() (dilation 1 = none) over in_len inputs, out_len
// outputs. Stride-1 rows of up to kShortRow outputs whose padded window fits kMaxPadded floats
// (padded_len > 0) run from a zero-padded copy, 8 outputs at a time; others tap by tap.
struct DepthwiseRow {
  static constexpr int64_t kShortRow = 256, kMaxPadded = 2048;
  int64_t in_len = 0, out_len = 0, stride = 1, dilation = 1, pad = 0, padded_len = 0;
  std::vector<DepthwiseTap> taps;
};
DepthwiseRow depthwise_row(int64_t n_taps, int64_t in_len, int64_t out_len, int64_t stride, int64_t dilation,
                           int64_t pad);
// One channel: y[t] = bias + sum over taps j of w[j] * x[t * stride + j * dilation - pad] for t in
// [0, out_len), taps outside the input adding nothing; each output sums its taps in order
// j = 0, 1, ...
void depthwise_conv_row(const float* x, const float* w, float bias, float* y, const DepthwiseRow& g);
// Rows r in [begin, end) of `len` values: y[r, j] = x[r, j] * v[r / rows_per_v, j] (a vector per
// group of rows: nhwc's channels, nChw16c's blocks), or with scalar_per_row y[r, j] = x[r, j] * v[r]
// (nchw's channels). y may be x.
void scale_rows(const float* x, const float* v, float* y, int64_t len, int64_t rows_per_v, bool scalar_per_row,
                int64_t begin, int64_t end);

// y[r, l] = x[r, l] * a[l] + b[l], max(·, 0) with relu, over `runs` vectors of `lanes` (8 or
// 16: a channel block of nChw8c/16c) values. y may be x.
void affine_lanes(const float* x, float* y, const float* a, const float* b, int64_t runs, int64_t lanes, bool relu);
// y[r · ldy + c] = x[r · ldx + c] · a[c] + b[c] (max(·, 0) with relu) for r in [0, rows), c in
// [0, channels): one channels-last tensor's rows (pixels) into their place in a wider one (an nhwc
// concat with its normalization), the channels' scale and shift loaded once a row block.
void affine_strided_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t channels,
                         const float* a, const float* b, bool relu);

using vector_math::silu_in_place;  // y = y · sigmoid(y) in place, AVX-512/AVX2 chosen at run time

// 2-D max pooling of a channel-blocked tensor, rows [begin, end) (vector_math::max_pool_blocked).
using vector_math::BlockedPool2d;
void max_pool_blocked_rows(const float* x, float* y, const BlockedPool2d& p, int64_t begin, int64_t end);

// The mean over `pixels` of each channel-block row of a channel-blocked tensor (nChw8c/16c):
// y[r, l] = sum_p x[(r * pixels + p) * block + l] / pixels for rows (image, block) r in
// [begin, end), `block` 8 or 16. GlobalAveragePool (and ReduceMean over H, W) in the layout a
// conv left, without a reorder.
void blocked_means(const float* x, float* y, int64_t pixels, int64_t block, int64_t begin, int64_t end);
// The same over nhwc x [N, pixels, channels] into y [N, channels]: task r is image r / chunks,
// channels [16 c, 16 c + 16) (c = r % chunks, chunks = ceil(channels / 16)), r in [begin, end).
void nhwc_means(const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin, int64_t end);

// Runs f(i) for i in [0, n) on `threads` OpenMP threads.
template <typename F>
void parallel_for(int64_t n, int threads, F&& f) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n > 1)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace hodu::cpu
