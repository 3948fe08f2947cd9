// Exact conversions between f32 and the narrow float formats. Every f32 → narrow
// conversion rounds to nearest, ties to even; NaN, Inf and denormals follow the
// format's rules (see each function). Narrow → f32 is always exact.
#pragma once
#include <cstdint>

namespace hodu {

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

// `saturate` (ONNX Cast's default) clamps out-of-range finite values and Inf to
// the largest finite value; otherwise they become NaN (FN types) or Inf (E5M2).
uint8_t f32_to_f8e4m3fn(float f, bool saturate = true);
float f8e4m3fn_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3fnuz(float f, bool saturate = true);
float f8e4m3fnuz_to_f32(uint8_t v);
uint8_t f32_to_f8e5m2(float f, bool saturate = true);
float f8e5m2_to_f32(uint8_t v);
uint8_t f32_to_f8e5m2fnuz(float f, bool saturate = true);
float f8e5m2fnuz_to_f32(uint8_t v);
// E8M0: an exponent-only scale (2^(v-127)); 0xFF is NaN. Rounding per ONNX Cast
// default ("up": round toward +inf in the exponent) unless round_nearest is set.
uint8_t f32_to_f8e8m0(float f, bool saturate = true, bool round_nearest = false);
float f8e8m0_to_f32(uint8_t v);

// 4-bit float e2m1 (values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}); saturates to ±6, NaN → 0x7? per ONNX.
uint8_t f32_to_f4e2m1(float f);
float f4e2m1_to_f32(uint8_t nibble);

}  // namespace hodu
