#include "engines/cpu/row_kernels.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using vector_math::kLanes;
using vector_math::lanes_sum;

}  // namespace

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void softmax_row(const float* x, const float* add, int64_t add_stride, float* y, int64_t n, int64_t masked_from) {
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
  if (!vector_math::softmax_in_place(y, live)) {
    for (int64_t j = 0; j < n; ++j) y[j] = 0;  // a fully masked row
    return;
  }
  for (int64_t j = live; j < n; ++j) y[j] = 0;  // causally masked columns
}

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void layer_norm_row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps, bool rms) {
  vector_math::layer_norm(x, scale, bias, y, n, eps, rms);
}

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void gemv_rows(const float* w, const float* x, const float* bias, float* y, int64_t row_begin, int64_t row_end,
               int64_t cols) {
  const int64_t body = cols / kLanes * kLanes;
  for (int64_t o = row_begin; o < row_end; ++o) {
    const float* row = w + o * cols;
    float acc[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) acc[l] += row[j + l] * x[j + l];
    float sum = lanes_sum(acc);
    for (int64_t j = body; j < cols; ++j) sum += row[j] * x[j];
    y[o] = bias ? sum + bias[o] : sum;
  }
}

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void scale_rows(const float* x, const float* v, float* y, int64_t len, int64_t rows_per_v, bool scalar_per_row,
                int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * len;
    float* yr = y + r * len;
    if (scalar_per_row) {
      const float s = v[r];
      for (int64_t j = 0; j < len; ++j) yr[j] = xr[j] * s;
    } else {
      const float* vr = v + r / rows_per_v * len;
      for (int64_t j = 0; j < len; ++j) yr[j] = xr[j] * vr[j];
    }
  }
}

namespace {

// GCC vector types of 8 and 16 floats (a dependent vector_size in a template is ignored).
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));

// One output vector of B channels at a time.
template <typename Vec>
inline __attribute__((always_inline)) void max_pool_rows(const float* x, float* y, const BlockedPool2d& p,
                                                          int64_t begin, int64_t end) {
  constexpr int64_t B = sizeof(Vec) / sizeof(float);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t cb = r / p.oh, oy = r % p.oh;
    const float* xc = x + cb * p.h * p.w * B;
    float* yr = y + (cb * p.oh + oy) * p.ow * B;
    const int64_t y0 = std::max<int64_t>(oy * p.sh - p.ph, 0), y1 = std::min(oy * p.sh - p.ph + p.kh, p.h);
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      const int64_t x0 = std::max<int64_t>(ox * p.sw - p.pw, 0), x1 = std::min(ox * p.sw - p.pw + p.kw, p.w);
      Vec m = Vec{} + vector_math::kNegInf;
      for (int64_t iy = y0; iy < y1; ++iy)
        for (int64_t ix = x0; ix < x1; ++ix) {
          Vec v;
          std::memcpy(&v, xc + (iy * p.w + ix) * B, sizeof v);
          m = v > m ? v : m;
        }
      std::memcpy(yr + ox * B, &m, sizeof m);
    }
  }
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void max_pool_blocked_rows(const float* x, float* y, const BlockedPool2d& p, int64_t begin, int64_t end) {
  if (p.block == 16)
    max_pool_rows<Floats16>(x, y, p, begin, end);
  else
    max_pool_rows<Floats8>(x, y, p, begin, end);
}

}  // namespace hodu::cpu
