#include "engines/cpu/row_kernels.h"

#include <cmath>

#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using vector_math::fast_exp;
using vector_math::kLanes;
using vector_math::kNegInf;
using vector_math::lanes_max;
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
  float mlanes[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) mlanes[l] = kNegInf;
  const int64_t body = live / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) mlanes[l] = y[j + l] > mlanes[l] ? y[j + l] : mlanes[l];
  float mx = lanes_max(mlanes);
  for (int64_t j = body; j < live; ++j) mx = y[j] > mx ? y[j] : mx;
  if (mx == kNegInf) {
    for (int64_t j = 0; j < n; ++j) y[j] = 0;  // a fully masked row
    return;
  }
  // exp(-inf - mx) is 0 through the clamp at -87 only approximately: masked entries are zeroed.
  float slanes[kLanes] = {};
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      float v = y[j + l];
      float e = v == kNegInf ? 0.0f : fast_exp(v - mx);
      y[j + l] = e;
      slanes[l] += e;
    }
  float sum = lanes_sum(slanes);
  for (int64_t j = body; j < live; ++j) {
    float e = y[j] == kNegInf ? 0.0f : fast_exp(y[j] - mx);
    y[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < live; ++j) y[j] *= inv;
  for (int64_t j = live; j < n; ++j) y[j] = 0;  // causally masked columns
}

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void layer_norm_row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps, bool rms) {
  // Two passes (mean, then the centred variance) keep the error small for n up to a few thousand.
  const int64_t body = n / kLanes * kLanes;
  float mean = 0;
  if (!rms) {
    float s[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) s[l] += x[j + l];
    mean = lanes_sum(s);
    for (int64_t j = body; j < n; ++j) mean += x[j];
    mean /= static_cast<float>(n);
  }
  float v[kLanes] = {};
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      float d = x[j + l] - mean;
      v[l] += d * d;
    }
  float var = lanes_sum(v);
  for (int64_t j = body; j < n; ++j) {
    float d = x[j] - mean;
    var += d * d;
  }
  var /= static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(var + eps);
  if (bias) {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * inv * scale[j] + bias[j];
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * inv * scale[j];
  }
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

}  // namespace hodu::cpu
