// Scalar helpers written so that GCC vectorizes the loops calling them (no libm call, no
// serial float reduction). Header-only: the cpu engine's row kernels (libhodu) and
// libhodu_kernels.so (which does not link libhodu) both inline them into their
// target_clones loops.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

namespace hodu::vector_math {

// Reductions keep one partial result per lane and combine them at the end: without
// -ffast-math GCC vectorizes a loop over independent lanes, never a serial float reduction.
constexpr int64_t kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp on [-87, 88] with a degree-6 polynomial: about 2 ulp. Written with plain compares and
// the 1.5·2²³ rounding trick (round to nearest, as nearbyint) so that no libm call is left.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  float k = (x * 1.44269504088896341f + kRound) - kRound;
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

inline float lanes_max(const float* m) {
  float r = m[0];
  for (int64_t l = 1; l < kLanes; ++l) r = m[l] > r ? m[l] : r;
  return r;
}

inline float lanes_sum(const float* s) {
  float r = 0;
  for (int64_t l = 0; l < kLanes; ++l) r += s[l];
  return r;
}

}  // namespace hodu::vector_math
