// Scalar helpers written so that GCC vectorizes the loops calling them (no libm call, no
// serial float reduction). Header-only: the cpu engine's row kernels (libhodu) and
// libhodu_kernels.so (which does not link libhodu) both inline them into their
// target_clones loops.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
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

// The row kernels below are always inlined: the target_clones functions calling them (AVX-512,
// AVX2, plain) each get a copy compiled for their own instruction set.
#define HODU_ROW_INLINE inline __attribute__((always_inline))

// y = exp(y - max) / sum over y[0, n) in place (-inf entries become 0). False, y untouched,
// when every entry is -inf: callers differ on what a fully masked row gives.
HODU_ROW_INLINE bool softmax_in_place(float* y, int64_t n) {
  float mlanes[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) mlanes[l] = kNegInf;
  const int64_t body = n / kLanes * kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) mlanes[l] = y[j + l] > mlanes[l] ? y[j + l] : mlanes[l];
  float mx = lanes_max(mlanes);
  for (int64_t j = body; j < n; ++j) mx = y[j] > mx ? y[j] : mx;
  if (mx == kNegInf) return false;
  // exp(-inf - mx) is 0 through the clamp at -87 only approximately: -inf entries are zeroed.
  float slanes[kLanes] = {};
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      float v = y[j + l];
      float e = v == kNegInf ? 0.0f : fast_exp(v - mx);
      y[j + l] = e;
      slanes[l] += e;
    }
  float sum = lanes_sum(slanes);
  for (int64_t j = body; j < n; ++j) {
    float e = y[j] == kNegInf ? 0.0f : fast_exp(y[j] - mx);
    y[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
  return true;
}

// y = (x - mean) / sqrt(var + eps) * scale [+ bias] over one row of n (rms: no mean, the root
// mean square). Two passes (mean, then the centred variance) keep the error small for n up to
// a few thousand.
HODU_ROW_INLINE void layer_norm(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps,
                                bool rms) {
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

// 2-D max pooling of a channel-blocked tensor (oneDNN's nChw8c / nChw16c: `block` channels
// innermost, 8 or 16), output rows r = (image * blocks + block) * oh + output row in [begin,
// end). Windows are clamped to the input (padding never wins), so ceil_mode and pads need
// nothing more. oneDNN 2.6's AVX2 max pooling took 4.5 ns an output; this is a few vector maxes.
struct BlockedPool2d {
  int64_t block, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};

// GCC vector types of 8 and 16 floats (a dependent vector_size in a template is ignored).
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));

template <typename Vec>
HODU_ROW_INLINE void max_pool_blocked_of(const float* x, float* y, const BlockedPool2d& p, int64_t begin,
                                         int64_t end) {
  constexpr int64_t B = sizeof(Vec) / sizeof(float);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t cb = r / p.oh, oy = r % p.oh;
    const float* xc = x + cb * p.h * p.w * B;
    float* yr = y + (cb * p.oh + oy) * p.ow * B;
    const int64_t y0 = oy * p.sh - p.ph < 0 ? 0 : oy * p.sh - p.ph;
    const int64_t y1 = oy * p.sh - p.ph + p.kh < p.h ? oy * p.sh - p.ph + p.kh : p.h;
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      const int64_t x0 = ox * p.sw - p.pw < 0 ? 0 : ox * p.sw - p.pw;
      const int64_t x1 = ox * p.sw - p.pw + p.kw < p.w ? ox * p.sw - p.pw + p.kw : p.w;
      Vec m = Vec{} + kNegInf;
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

HODU_ROW_INLINE void max_pool_blocked(const float* x, float* y, const BlockedPool2d& p, int64_t begin, int64_t end) {
  if (p.block == 16)
    max_pool_blocked_of<Floats16>(x, y, p, begin, end);
  else
    max_pool_blocked_of<Floats8>(x, y, p, begin, end);
}

// y = y · sigmoid(y) = y / (1 + exp(-y)) over y[0, n) in place, with AVX-512 or AVX2 chosen
// at run time. Written with intrinsics: GCC's vectorization of the plain loop (masked clamps,
// two divisions) ran 0.46 ns an element on Zen 5, oneDNN 2.6's swish post-op ~0.25 inside its
// convolutions; this 0.14 (AVX-512), so a conv then this loop beats the fused post-op.
// GCC 12's avx512fintrin.h fills unused lanes from _mm512_undefined_ps(): a false
// -Wmaybe-uninitialized for every intrinsic below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline void silu_in_place_avx512(float* y, int64_t n) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f), ln2_hi = _mm512_set1_ps(0.693359375f),
               ln2_lo = _mm512_set1_ps(-2.12194440e-4f), lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f),
               one = _mm512_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(y + j);
    // exp(x), x = -v clamped, as fast_exp: x = k ln2 + r, exp(r) by the same polynomial, 2^k by scalef.
    const __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), v), lo), hi);
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(k, ln2_lo, _mm512_fnmadd_ps(k, ln2_hi, x));
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, one));
    const __m512 e = _mm512_scalef_ps(p, k);
    _mm512_storeu_ps(y + j, _mm512_div_ps(v, _mm512_add_ps(e, one)));
  }
  for (; j < n; ++j) y[j] = y[j] / (1.0f + fast_exp(-y[j]));
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) inline void silu_in_place_avx2(float* y, int64_t n) {
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f), ln2_hi = _mm256_set1_ps(0.693359375f),
               ln2_lo = _mm256_set1_ps(-2.12194440e-4f), lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f),
               one = _mm256_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(y + j);
    const __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), v), lo), hi);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_fnmadd_ps(k, ln2_lo, _mm256_fnmadd_ps(k, ln2_hi, x));
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, one));
    // 2^k: k + 127 into the exponent bits (k in [-126, 127] after the clamp).
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    _mm256_storeu_ps(y + j, _mm256_div_ps(v, _mm256_add_ps(e, one)));
  }
  for (; j < n; ++j) y[j] = y[j] / (1.0f + fast_exp(-y[j]));
}

inline void silu_in_place(float* y, int64_t n) {
  static const int isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
  if (isa == 2) silu_in_place_avx512(y, n);
  else if (isa == 1) silu_in_place_avx2(y, n);
  else
    for (int64_t j = 0; j < n; ++j) y[j] = y[j] / (1.0f + fast_exp(-y[j]));
}

#undef HODU_ROW_INLINE

}  // namespace hodu::vector_math
