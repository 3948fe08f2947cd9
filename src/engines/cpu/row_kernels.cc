#include "engines/cpu/row_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace hodu::cpu {
namespace {

// exp on [-87, 88] with a degree-6 polynomial: about 2 ulp, and written so that
// GCC vectorizes the loops that call it (no libm call, no branches).
inline float fast_exp(float x) {
  x = std::fmin(std::fmax(x, -87.0f), 88.0f);
  float k = std::nearbyint(x * 1.44269504088896341f);
  float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace

__attribute__((target_clones("avx2,fma", "default")))
void softmax_row(const float* x, const float* add, int64_t add_stride, float* y, int64_t n, int64_t masked_from) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    float v = x[j] + (add ? add[j * add_stride] : 0.0f);
    y[j] = j < masked_from ? v : -std::numeric_limits<float>::infinity();
    mx = std::fmax(mx, y[j]);
  }
  if (mx == -std::numeric_limits<float>::infinity()) {
    for (int64_t j = 0; j < n; ++j) y[j] = 0;  // a fully masked row
    return;
  }
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    float e = y[j] == -std::numeric_limits<float>::infinity() ? 0.0f : fast_exp(y[j] - mx);
    y[j] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

__attribute__((target_clones("avx2,fma", "default")))
void layer_norm_row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps, bool rms) {
  // Two passes in double-free float with a shifted mean keep the error small for n up to a few thousand.
  float mean = 0;
  if (!rms) {
    for (int64_t j = 0; j < n; ++j) mean += x[j];
    mean /= static_cast<float>(n);
  }
  float var = 0;
  for (int64_t j = 0; j < n; ++j) {
    float d = x[j] - mean;
    var += d * d;
  }
  var /= static_cast<float>(n);
  float inv = 1.0f / std::sqrt(var + eps);
  if (bias) {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * inv * scale[j] + bias[j];
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mean) * inv * scale[j];
  }
}

}  // namespace hodu::cpu
