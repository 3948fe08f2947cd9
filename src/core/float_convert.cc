// Conversions between f32 and the narrow float formats.
//
// Semantics follow ONNX's reference implementation (numpy / ml_dtypes, ONNX
// >= 1.18): round to nearest, ties to even, with one rounding step from the
// exact f32 value; NaN keeps its sign where the format has a signed NaN; the
// FNUZ formats have no negative zero (a result that rounds to zero is +0).
// The conformance data in onnx-tests/node/test_cast_* pins these rules.
#include "core/float_convert.h"

#include <bit>
#include <cmath>
#include <limits>

namespace hodu {
namespace {

// How a narrow format encodes numbers. All codes below are magnitudes (no sign).
struct NarrowFormat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  uint32_t max_finite;  // largest finite magnitude code
  uint32_t overflow;    // magnitude code for out-of-range values when not saturating (Inf or NaN)
};

constexpr NarrowFormat kF16{5, 10, 15, 0x7BFF, 0x7C00};
constexpr NarrowFormat kBF16{8, 7, 127, 0x7F7F, 0x7F80};
constexpr NarrowFormat kE4M3FN{4, 3, 7, 0x7E, 0x7F};      // overflow → NaN (S.1111.111)
constexpr NarrowFormat kE4M3FNUZ{4, 3, 8, 0x7F, 0x80};    // overflow → NaN (0x80, unsigned)
constexpr NarrowFormat kE5M2{5, 2, 15, 0x7B, 0x7C};       // overflow → Inf
constexpr NarrowFormat kE5M2FNUZ{5, 2, 16, 0x7F, 0x80};   // overflow → NaN (0x80, unsigned)
constexpr NarrowFormat kF4E2M1{2, 1, 1, 0x7, 0x7};        // no Inf/NaN: always saturates

uint32_t float_bits(float f) { return std::bit_cast<uint32_t>(f); }

// Rounds a finite, non-zero f32 magnitude (bits without sign) to `fmt`, ties
// to even. The result may exceed fmt.max_finite (the caller handles overflow);
// 0 means the value rounded to zero. The carry of a rounding that overflows
// the mantissa flows into the exponent, as in IEEE encodings.
uint32_t round_magnitude(uint32_t abs_bits, const NarrowFormat& fmt) {
  uint32_t biased = abs_bits >> 23;
  uint32_t fraction = abs_bits & 0x7FFFFF;
  // value = significand * 2^scale, with the unbiased exponent of the leading bit.
  uint64_t significand;
  int scale;
  int exponent;
  if (biased != 0) {
    significand = fraction | 0x800000u;
    scale = static_cast<int>(biased) - 150;
    exponent = static_cast<int>(biased) - 127;
  } else {  // f32 subnormal
    significand = fraction;
    scale = -149;
    exponent = (31 - std::countl_zero(fraction)) - 149;
  }
  const int min_normal_exponent = 1 - fmt.bias;
  // Exponent of the target's unit in the last place at this magnitude.
  int quantum = (exponent >= min_normal_exponent ? exponent : min_normal_exponent) - fmt.mantissa_bits;
  int shift = quantum - scale;
  uint64_t units;
  if (shift <= 0) {
    units = significand << -shift;  // exact (only for formats wider than the input's precision)
  } else {
    if (shift > 40) shift = 40;  // significand < 2^24: everything rounds to 0
    units = significand >> shift;
    uint64_t rest = significand & ((uint64_t{1} << shift) - 1);
    uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (units & 1))) ++units;
  }
  if (exponent < min_normal_exponent) return static_cast<uint32_t>(units);  // subnormal code (may carry to normal)
  // units is in [2^m, 2^(m+1)]: the implicit bit adds one to the exponent field.
  uint32_t exponent_field_minus_one = static_cast<uint32_t>(exponent + fmt.bias - 1);
  uint64_t code = (uint64_t{exponent_field_minus_one} << fmt.mantissa_bits) + units;
  return code > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(code);
}

// Narrow magnitude code → f32 (exact). Callers deal with NaN/Inf codes first.
float decode_magnitude(uint32_t code, const NarrowFormat& fmt) {
  uint32_t exponent_field = code >> fmt.mantissa_bits;
  uint32_t mantissa = code & ((1u << fmt.mantissa_bits) - 1);
  if (exponent_field == 0)
    return std::ldexp(static_cast<float>(mantissa), 1 - fmt.bias - fmt.mantissa_bits);
  int exponent = static_cast<int>(exponent_field) - fmt.bias;
  if (exponent >= -126) {
    uint32_t bits = (static_cast<uint32_t>(exponent + 127) << 23) | (mantissa << (23 - fmt.mantissa_bits));
    return std::bit_cast<float>(bits);
  }
  return std::ldexp(static_cast<float>((1u << fmt.mantissa_bits) | mantissa), exponent - fmt.mantissa_bits);
}

// Finite f32 → signed narrow code; out-of-range values saturate or overflow.
uint32_t encode_finite(uint32_t bits, const NarrowFormat& fmt, bool saturate, uint32_t sign_bit) {
  uint32_t abs_bits = bits & 0x7FFFFFFF;
  uint32_t sign = (bits >> 31) ? sign_bit : 0;
  if (abs_bits == 0) return sign;
  uint32_t code = round_magnitude(abs_bits, fmt);
  if (code > fmt.max_finite) code = saturate ? fmt.max_finite : fmt.overflow;
  return sign | code;
}

// The FNUZ formats: one NaN (0x80), no -0, no Inf.
uint8_t encode_fnuz(float f, const NarrowFormat& fmt, bool saturate) {
  uint32_t bits = float_bits(f);
  uint8_t sign = (bits >> 31) ? 0x80 : 0;
  if (std::isnan(f)) return 0x80;
  if (std::isinf(f)) return saturate ? static_cast<uint8_t>(sign | fmt.max_finite) : 0x80;
  uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits == 0) return 0;
  uint32_t code = round_magnitude(abs_bits, fmt);
  if (code == 0) return 0;  // rounds to zero: +0, whatever the sign
  if (code > fmt.max_finite) return saturate ? static_cast<uint8_t>(sign | fmt.max_finite) : 0x80;
  return static_cast<uint8_t>(sign | code);
}

float decode_fnuz(uint8_t v, const NarrowFormat& fmt) {
  if (v == 0x80) return std::numeric_limits<float>::quiet_NaN();
  float magnitude = decode_magnitude(v & 0x7F, fmt);
  return (v & 0x80) ? -magnitude : magnitude;
}

}  // namespace

// ---- f16 ---------------------------------------------------------------------

uint16_t f32_to_f16(float f) {
  uint32_t bits = float_bits(f);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000)  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs_bits & 0x7FFFFF) >> 13));
  if (abs_bits == 0x7F800000) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(encode_finite(bits, kF16, /*saturate=*/false, 0x8000));
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t magnitude = h & 0x7FFF;
  if (magnitude >= 0x7C00) {  // Inf / NaN: widen the payload
    return std::bit_cast<float>(sign | 0x7F800000u | ((magnitude & 0x3FF) << 13));
  }
  float value = decode_magnitude(magnitude, kF16);
  return sign ? -value : value;
}

// ---- bf16 --------------------------------------------------------------------

uint16_t f32_to_bf16(float f) {
  uint32_t bits = float_bits(f);
  // NaN → the quiet NaN with its sign (as Eigen / ml_dtypes do), never Inf.
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((bits >> 31) ? 0xFFC0 : 0x7FC0);
  // Ties to even by adding 0x7FFF plus the lowest kept bit; overflow carries into Inf.
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// ---- float8 e4m3fn -------------------------------------------------------------

uint8_t f32_to_f8e4m3fn(float f, bool saturate) {
  uint32_t bits = float_bits(f);
  uint8_t sign = (bits >> 31) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7F;
  if (std::isinf(f)) return sign | (saturate ? 0x7E : 0x7F);
  return static_cast<uint8_t>(encode_finite(bits, kE4M3FN, saturate, 0x80));
}

float f8e4m3fn_to_f32(uint8_t v) {
  if ((v & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  float magnitude = decode_magnitude(v & 0x7F, kE4M3FN);
  return (v & 0x80) ? -magnitude : magnitude;
}

// ---- float8 e4m3fnuz / e5m2fnuz ---------------------------------------------------

uint8_t f32_to_f8e4m3fnuz(float f, bool saturate) { return encode_fnuz(f, kE4M3FNUZ, saturate); }
float f8e4m3fnuz_to_f32(uint8_t v) { return decode_fnuz(v, kE4M3FNUZ); }
uint8_t f32_to_f8e5m2fnuz(float f, bool saturate) { return encode_fnuz(f, kE5M2FNUZ, saturate); }
float f8e5m2fnuz_to_f32(uint8_t v) { return decode_fnuz(v, kE5M2FNUZ); }

// ---- float8 e5m2 ---------------------------------------------------------------

uint8_t f32_to_f8e5m2(float f, bool saturate) {
  uint32_t bits = float_bits(f);
  uint8_t sign = (bits >> 31) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7E;  // ml_dtypes' quiet NaN
  if (std::isinf(f)) return sign | (saturate ? 0x7B : 0x7C);
  return static_cast<uint8_t>(encode_finite(bits, kE5M2, saturate, 0x80));
}

float f8e5m2_to_f32(uint8_t v) {
  uint32_t magnitude = v & 0x7F;
  bool negative = v & 0x80;
  if (magnitude == 0x7C) return negative ? -INFINITY : INFINITY;
  if (magnitude > 0x7C) return std::numeric_limits<float>::quiet_NaN();
  float value = decode_magnitude(magnitude, kE5M2);
  return negative ? -value : value;
}

// ---- float8 e8m0 ---------------------------------------------------------------

// ONNX's to_float8e8m0: the result is the f32 exponent field (the sign is
// ignored), rounded by the fraction bits; NaN and Inf → 0xFF (NaN).
uint8_t f32_to_f8e8m0(float f, bool saturate, bool round_nearest) {
  uint32_t bits = float_bits(f);
  uint32_t exponent = (bits >> 23) & 0xFF;
  if (exponent == 0xFF) return 0xFF;
  bool round_up;
  if (round_nearest) {
    bool guard = bits & 0x400000;
    bool round = bits & 0x200000;
    bool sticky = bits & 0x1FFFFF;
    bool implicit_one = exponent > 0;  // ONNX treats the leading bit as the "lsb"
    round_up = guard && (round || sticky || implicit_one);
  } else {
    round_up = (bits & 0x7FFFFF) != 0;
  }
  if (round_up && exponent == 0xFE && saturate) round_up = false;
  return static_cast<uint8_t>(exponent + (round_up ? 1 : 0));  // 0xFE + 1 = 0xFF: NaN
}

float f8e8m0_to_f32(uint8_t v) {
  if (v == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  if (v == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, an f32 subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 23);
}

// ---- float4 e2m1 ---------------------------------------------------------------

// ml_dtypes' float4_e2m1fn: no Inf or NaN, so Inf and overflow saturate to ±6;
// NaN becomes the format's "quiet NaN" stand-in 0b1000 (-0), negated for -NaN (+0).
uint8_t f32_to_f4e2m1(float f) {
  uint32_t bits = float_bits(f);
  uint8_t sign = (bits >> 31) ? 0x8 : 0;
  if (std::isnan(f)) return sign ? 0x0 : 0x8;
  if (std::isinf(f)) return sign | 0x7;
  return static_cast<uint8_t>(encode_finite(bits, kF4E2M1, /*saturate=*/true, 0x8));
}

float f4e2m1_to_f32(uint8_t nibble) {
  float magnitude = decode_magnitude(nibble & 0x7, kF4E2M1);
  return (nibble & 0x8) ? -magnitude : magnitude;
}

}  // namespace hodu
