// One lane of Softmax / LogSoftmax / Hardmax and one row of LayerNormalization /
// RMSNormalization with the interpreter's arithmetic (sums in double, statistics rounded to an
// f32 stash), shared by the interpreter (reduction.cc, normalization.cc) and the cpu engine's
// general forms (engines/cpu/axis_norm_ops.cc), so both give the same bits.
#pragma once
#include <cmath>
#include <cstdint>

namespace hodu::interp {

enum class SKind { Softmax, LogSoftmax, Hardmax };

// The n elements p[0], p[inner], ..., p[(n - 1)·inner] into q at the same strides; `tmp` holds n.
// NaN counts as the largest value for Hardmax's arg max.
template <typename T>
inline void softmax_lane(SKind kind, const T* p, T* q, int64_t n, int64_t inner, T* tmp) {
  if (n == 0) return;
  T m = p[0];
  int64_t am = 0;
  for (int64_t k = 1; k < n; ++k)
    if (p[k * inner] > m || (std::isnan(p[k * inner]) && !std::isnan(m))) {
      m = p[k * inner];
      am = k;
    }
  if (kind == SKind::Hardmax) {
    for (int64_t k = 0; k < n; ++k) q[k * inner] = k == am ? T(1) : T(0);
    return;
  }
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    tmp[k] = p[k * inner] - m;
    sum += static_cast<double>(std::exp(tmp[k]));
  }
  if (kind == SKind::Softmax) {
    for (int64_t k = 0; k < n; ++k) q[k * inner] = static_cast<T>(static_cast<double>(std::exp(tmp[k])) / sum);
  } else {
    T ls = static_cast<T>(std::log(sum));
    for (int64_t k = 0; k < n; ++k) q[k * inner] = tmp[k] - ls;
  }
}

// The mean (0 for rms) and 1 / sqrt(variance + eps) of a row of `cols`, rounded to f32 unless
// `stash_f64`.
template <typename T>
inline void norm_row_stats(const T* p, int64_t cols, double eps, bool rms, bool stash_f64, double& mu, double& inv) {
  mu = 0;
  if (!rms) {
    double s = 0;
    for (int64_t k = 0; k < cols; ++k) s += p[k];
    mu = s / static_cast<double>(cols);
  }
  double q = 0;
  for (int64_t k = 0; k < cols; ++k) q += (p[k] - mu) * (p[k] - mu);
  inv = 1.0 / std::sqrt(q / static_cast<double>(cols) + eps);
  if (!stash_f64) {
    mu = static_cast<float>(mu);
    inv = static_cast<float>(inv);
  }
}

}  // namespace hodu::interp
