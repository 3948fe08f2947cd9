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

#include "kernels/cpu/isa_cap.h"

namespace hodu::vector_math {

// Reductions keep one partial result per lane and combine them at the end: without
// -ffast-math GCC vectorizes a loop over independent lanes, never a serial float reduction.
constexpr int64_t kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kMinNormal = std::numeric_limits<float>::min();  // 1.17549435e-38

// exp on [-87, 88] with a degree-6 polynomial: about 2 ulp. Written with plain compares and
// the 1.5·2²³ rounding trick (round to nearest, as nearbyint) so that no libm call is left.
inline __attribute__((always_inline)) float fast_exp(float x) {
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

// exp over f32's whole range: fast_exp clamps its argument to [-87, 88] (the softmax needs no
// more); as an op exp must reach exp(-100) = 3.8e-44 (subnormal), exp(-inf) = 0,
// exp(88.5) = 2.7e38, exp(89) = inf. Outside [-87, 88] the argument moves by 64 ln 2 and the
// result is scaled by 2^-64 or 2^64 (exact, or rounding once into the subnormals / to inf).
inline __attribute__((always_inline)) float exp_full(float x) {
  constexpr float k64Ln2 = 44.3614195558365f, kTwo64 = 18446744073709551616.0f, kTwoMinus64 = 5.42101086242752217e-20f;
  const bool lo = x < -87.0f, hi = x > 88.0f;
  const float r = fast_exp(lo ? x + k64Ln2 : hi ? x - k64Ln2 : x);
  return lo ? r * kTwoMinus64 : hi ? r * kTwo64 : r;
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error 1.5e-7; 3.5e-7 in float arithmetic) over
// the vectorizable exp.
inline __attribute__((always_inline)) float erf_approx(float x) {
  const float ax = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float r = 1.0f - poly * exp_full(-ax * ax);
  return x < 0 ? -r : r;
}

// tanh as the rational 13/6 approximation Eigen and ONNX Runtime's MLAS use (x·P(x²)/Q(x²)
// on [-7.9053, 7.9053], ±1 past it, x itself below 4e-4): a few ulp, vectorizable, where the
// C library's tanhf runs one element at a time.
inline __attribute__((always_inline)) float tanh_approx(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  const float c = x < -kClamp ? -kClamp : x > kClamp ? kClamp : x;
  const float x2 = c * c;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * c;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  const float ax = x < 0 ? -x : x;
  return ax < 0.0004f ? x : p / q;
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

// Probabilities below the smallest normal float (1.2e-38) as 0. A softmax over a peaked row
// (GPT-2's attention) gave subnormal ones, and the product with V that reads them ran 80x
// slower (x86 takes a microcode assist for each subnormal operand: 12 ms instead of 0.15 for
// a 12-head 128x128 by 128x64 product). ONNX Runtime's softmax gives no subnormals either.
HODU_ROW_INLINE float flush_subnormal(float v) { return v < kMinNormal ? 0.0f : v; }

// y = exp(y - max) / sum over y[0, n) in place (-inf entries become 0; results below the
// smallest normal float 0, flush_subnormal). False, y untouched, when every entry is -inf:
// callers differ on what a fully masked row gives.
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
  for (int64_t j = 0; j < n; ++j) y[j] = flush_subnormal(y[j] * inv);
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

// Hand-written AVX-512 / AVX2 loops, chosen at run time (cpu_isa). GCC's vectorization of the
// plain loops above costs what these avoid: masked clamps with a second division (SiLU ran 0.46
// ns an element on Zen 5, oneDNN 2.6's swish post-op ~0.25 inside its convolutions, this 0.14),
// and per-row lane reductions through the stack (a 128-wide softmax row: 0.86 ns an element).
// GCC 12's avx512fintrin.h fills unused lanes from _mm512_undefined_ps(): a false
// -Wmaybe-uninitialized (or -Wuninitialized) for the intrinsics below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

enum class Isa { Plain, Avx2, Avx512 };
// What this CPU has, lowered to HODU_MAX_ISA (isa_cap.h; an unknown value caps nothing here).
inline Isa cpu_isa() {
  static const Isa isa = [] {
    const Isa host = __builtin_cpu_supports("avx512f")                                  ? Isa::Avx512
                     : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::Avx2
                                                                                       : Isa::Plain;
    const int cap = isa_cap::level();
    if (cap == 0) return Isa::Plain;
    if (cap >= 1 && cap <= isa_cap::kAvx2Levels && host == Isa::Avx512) return Isa::Avx2;
    return host;
  }();
  return isa;
}

// exp(x) as fast_exp: x clamped to [-87, 88], x = k ln2 + r, exp(r) by the same polynomial.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, k);  // p · 2^k
}

__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 k =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r =
      _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x));
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^k: k + 127 into the exponent bits (k in [-126, 127] after the clamp).
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// exp(-v) for SiLU as 2^k · 2^f: k = round(-v·log2 e), f = -v·log2 e - k in [-0.5, 0.5] from a
// two-part log2 e (f exact to a few ulp whatever k), 2^f by a degree-6 polynomial.
// Fewer operations than exp16's ln 2 reduction and polynomial (a Cascade Lake core: the SiLU
// loop 0.63 -> 0.54 ns an element at AVX-512, 0.85 -> 0.67 at AVX2), within 1.3e-7 relative of
// v·sigmoid(v). v is clamped first to where 2^k is infinity (below -88.8) and where exp(-v)
// no longer changes 1 + exp(-v).
constexpr float kNegLog2eHi = -1.44269502162933350f, kNegLog2eLo = -1.92596298909109e-08f;
// 2^f on [-0.5, 0.5], highest degree first: near (ln 2)^i / i!, adjusted for the interval.
constexpr float kExp2Poly[7] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                                  5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f, 1.0f};
__attribute__((target("avx512f"))) inline __m512 exp_neg16(__m512 v) {
  v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-88.8f)), _mm512_set1_ps(87.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(kNegLog2eHi)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_fmadd_ps(v, _mm512_set1_ps(kNegLog2eLo), _mm512_fmsub_ps(v, _mm512_set1_ps(kNegLog2eHi), k));
  __m512 p = _mm512_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[i]));
  return _mm512_scalef_ps(p, k);  // p · 2^k
}

// The same with 2^k put into the exponent bits (k in [-126, 128]; 128: infinity).
__attribute__((target("avx2,fma"))) inline __m256 exp_neg8(__m256 v) {
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-88.8f)), _mm256_set1_ps(87.0f));
  const __m256 k =
      _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(kNegLog2eHi)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_fmadd_ps(v, _mm256_set1_ps(kNegLog2eLo), _mm256_fmsub_ps(v, _mm256_set1_ps(kNegLog2eHi), k));
  __m256 p = _mm256_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Poly[i]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// y = y · sigmoid(y) = y / (1 + exp(-y)) over y[0, n) in place.
__attribute__((target("avx512f"))) inline void silu_in_place_avx512(float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(y + j);
    _mm512_storeu_ps(y + j, _mm512_div_ps(v, _mm512_add_ps(exp_neg16(v), one)));
  }
  for (; j < n; ++j) y[j] = y[j] / (1.0f + fast_exp(-y[j]));
}

__attribute__((target("avx2,fma"))) inline void silu_in_place_avx2(float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(y + j);
    _mm256_storeu_ps(y + j, _mm256_div_ps(v, _mm256_add_ps(exp_neg8(v), one)));
  }
  for (; j < n; ++j) y[j] = y[j] / (1.0f + fast_exp(-y[j]));
}

inline void silu_in_place(float* y, int64_t n) {
  switch (cpu_isa()) {
    case Isa::Avx512: return silu_in_place_avx512(y, n);
    case Isa::Avx2: return silu_in_place_avx2(y, n);
    case Isa::Plain:
      for (int64_t j = 0; j < n; ++j) y[j] = y[j] / (1.0f + fast_exp(-y[j]));
  }
}

// The lanes of a 16-wide vector that hold one of the `left` entries still to do.
inline __mmask16 lanes16(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

// softmax_in_place's contract (-inf entries give 0; false, y untouched, when all are -inf) with
// the row's max and sum reduced in registers; the tail through masked loads.
__attribute__((target("avx512f"))) inline bool softmax_in_place_avx512(float* y, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  __m512 m = neg_inf;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = lanes16(n - j);
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(neg_inf, k, y + j));
  }
  const float mx = _mm512_reduce_max_ps(m);
  if (mx == kNegInf) return false;
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = lanes16(n - j);
    const __m512 v = _mm512_maskz_loadu_ps(k, y + j);
    // -inf entries (and the tail) are exactly 0, not exp's floor at -87.
    const __mmask16 live = _mm512_mask_cmp_ps_mask(k, v, neg_inf, _CMP_NEQ_OQ);
    const __m512 e = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(v, vmx)));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(y + j, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum)), min_normal = _mm512_set1_ps(kMinNormal);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = lanes16(n - j);
    const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + j), inv);
    _mm512_mask_storeu_ps(y + j, k, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, min_normal, _CMP_GE_OQ), p));  // flush_subnormal
  }
  return true;
}

__attribute__((target("avx2,fma"))) inline bool softmax_in_place_avx2(float* y, int64_t n) {
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const int64_t body = n / 8 * 8;
  __m256 m = neg_inf;
  for (int64_t j = 0; j < body; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(y + j));
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float mx = kNegInf;
  for (float l : lanes) mx = l > mx ? l : mx;
  for (int64_t j = body; j < n; ++j) mx = y[j] > mx ? y[j] : mx;
  if (mx == kNegInf) return false;
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 v = _mm256_loadu_ps(y + j);
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(v, vmx)), _mm256_cmp_ps(v, neg_inf, _CMP_NEQ_OQ));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(y + j, e);
  }
  _mm256_storeu_ps(lanes, sum);
  float total = 0;
  for (float l : lanes) total += l;
  for (int64_t j = body; j < n; ++j) {
    const float e = y[j] == kNegInf ? 0.0f : fast_exp(y[j] - mx);
    y[j] = e;
    total += e;
  }
  const float inv = 1.0f / total;
  const __m256 vinv = _mm256_set1_ps(inv), min_normal = _mm256_set1_ps(kMinNormal);
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(y + j), vinv);
    _mm256_storeu_ps(y + j, _mm256_and_ps(p, _mm256_cmp_ps(p, min_normal, _CMP_GE_OQ)));  // flush_subnormal
  }
  for (int64_t j = body; j < n; ++j) y[j] = flush_subnormal(y[j] * inv);
  return true;
}

// softmax_in_place on the best loop this CPU has.
inline bool softmax_in_place_fast(float* y, int64_t n) {
  switch (cpu_isa()) {
    case Isa::Avx512: return softmax_in_place_avx512(y, n);
    case Isa::Avx2: return softmax_in_place_avx2(y, n);
    case Isa::Plain: break;
  }
  return softmax_in_place(y, n);
}

#pragma GCC diagnostic pop

#undef HODU_ROW_INLINE

}  // namespace hodu::vector_math
