/* hodu kernel library, dtype section: element access and conversions for the dtypes C has
 * no arithmetic type for (float16, bfloat16, the float8 formats, float4 e2m1, and the packed
 * 4- and 2-bit integers), emitted into a compiled model that uses them. A C port of hodu's
 * core/float_convert.cc and core/element_access.cc, so compiled code rounds as the
 * interpreter does: round to nearest even from the exact value, saturation where ONNX asks.
 * dtype codes are hodu's (core/dtype.h, HK_DT_* below). Needs <math.h>, <stdint.h>, <string.h>. */

/* hodu's DType values (core/dtype.h; codegen.cc checks they agree). */
enum {
  HK_DT_UNDEFINED = 0, HK_DT_BOOL = 1, HK_DT_F8E4M3FN = 2, HK_DT_F8E4M3FNUZ = 3, HK_DT_F8E5M2 = 4,
  HK_DT_F8E5M2FNUZ = 5, HK_DT_F8E8M0 = 6, HK_DT_F4E2M1 = 7, HK_DT_BF16 = 8, HK_DT_F16 = 9, HK_DT_F32 = 10,
  HK_DT_F64 = 11, HK_DT_U4 = 12, HK_DT_I4 = 13, HK_DT_U8 = 14, HK_DT_U16 = 15, HK_DT_U32 = 16, HK_DT_U64 = 17,
  HK_DT_I8 = 18, HK_DT_I16 = 19, HK_DT_I32 = 20, HK_DT_I64 = 21, HK_DT_U2 = 25, HK_DT_I2 = 26
};

typedef struct {
  int exponent_bits, mantissa_bits, bias;
  uint32_t max_finite, overflow;
} hk_narrow;

static const hk_narrow hk_f16_fmt = {5, 10, 15, 0x7BFF, 0x7C00};
static const hk_narrow hk_e4m3fn_fmt = {4, 3, 7, 0x7E, 0x7F};
static const hk_narrow hk_e4m3fnuz_fmt = {4, 3, 8, 0x7F, 0x80};
static const hk_narrow hk_e5m2_fmt = {5, 2, 15, 0x7B, 0x7C};
static const hk_narrow hk_e5m2fnuz_fmt = {5, 2, 16, 0x7F, 0x80};
static const hk_narrow hk_f4_fmt = {2, 1, 1, 0x7, 0x7};

HK uint32_t hk_fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
HK float hk_bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int hk_clz32(uint32_t v) {
  int n = 0;
  if (!v) return 32;
  while (!(v & 0x80000000u)) {
    v <<= 1;
    ++n;
  }
  return n;
}

/* A finite, non-zero f32 magnitude rounded to a narrow format, ties to even (may exceed max_finite). */
static uint32_t hk_round_magnitude(uint32_t abs_bits, const hk_narrow* fmt) {
  uint32_t biased = abs_bits >> 23, fraction = abs_bits & 0x7FFFFF;
  uint64_t significand, units;
  int scale, exponent, min_normal = 1 - fmt->bias, quantum, shift;
  if (biased != 0) {
    significand = fraction | 0x800000u;
    scale = (int)biased - 150;
    exponent = (int)biased - 127;
  } else {
    significand = fraction;
    scale = -149;
    exponent = (31 - hk_clz32(fraction)) - 149;
  }
  quantum = (exponent >= min_normal ? exponent : min_normal) - fmt->mantissa_bits;
  shift = quantum - scale;
  if (shift <= 0) {
    units = significand << -shift;
  } else {
    uint64_t rest, half;
    if (shift > 40) shift = 40;
    units = significand >> shift;
    rest = significand & (((uint64_t)1 << shift) - 1);
    half = (uint64_t)1 << (shift - 1);
    if (rest > half || (rest == half && (units & 1))) ++units;
  }
  if (exponent < min_normal) return (uint32_t)units;
  {
    uint64_t code = ((uint64_t)(uint32_t)(exponent + fmt->bias - 1) << fmt->mantissa_bits) + units;
    return code > 0xFFFFFFFFull ? 0xFFFFFFFFu : (uint32_t)code;
  }
}

static float hk_decode_magnitude(uint32_t code, const hk_narrow* fmt) {
  uint32_t exponent_field = code >> fmt->mantissa_bits, mantissa = code & ((1u << fmt->mantissa_bits) - 1);
  int exponent;
  if (exponent_field == 0) return ldexpf((float)mantissa, 1 - fmt->bias - fmt->mantissa_bits);
  exponent = (int)exponent_field - fmt->bias;
  if (exponent >= -126) return hk_bitsf(((uint32_t)(exponent + 127) << 23) | (mantissa << (23 - fmt->mantissa_bits)));
  return ldexpf((float)((1u << fmt->mantissa_bits) | mantissa), exponent - fmt->mantissa_bits);
}

static uint32_t hk_encode_finite(uint32_t bits, const hk_narrow* fmt, int saturate, uint32_t sign_bit) {
  uint32_t abs_bits = bits & 0x7FFFFFFF, sign = (bits >> 31) ? sign_bit : 0, code;
  if (abs_bits == 0) return sign;
  code = hk_round_magnitude(abs_bits, fmt);
  if (code > fmt->max_finite) code = saturate ? fmt->max_finite : fmt->overflow;
  return sign | code;
}

static uint8_t hk_encode_fnuz(float f, const hk_narrow* fmt, int saturate) {
  uint32_t bits = hk_fbits(f), abs_bits = bits & 0x7FFFFFFF, code;
  uint8_t sign = (bits >> 31) ? 0x80 : 0;
  if (f != f) return 0x80;
  if (isinf(f)) return saturate ? (uint8_t)(sign | fmt->max_finite) : 0x80;
  if (abs_bits == 0) return 0;
  code = hk_round_magnitude(abs_bits, fmt);
  if (code == 0) return 0;
  if (code > fmt->max_finite) return saturate ? (uint8_t)(sign | fmt->max_finite) : 0x80;
  return (uint8_t)(sign | code);
}

static float hk_decode_fnuz(uint8_t v, const hk_narrow* fmt) {
  float magnitude;
  if (v == 0x80) return NAN;
  magnitude = hk_decode_magnitude(v & 0x7F, fmt);
  return (v & 0x80) ? -magnitude : magnitude;
}

HK uint16_t hk_f32_to_f16(float f) {
  uint32_t bits = hk_fbits(f), sign = (bits >> 16) & 0x8000, abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000) return (uint16_t)(sign | 0x7E00 | ((abs_bits & 0x7FFFFF) >> 13));
  if (abs_bits == 0x7F800000) return (uint16_t)(sign | 0x7C00);
  return (uint16_t)hk_encode_finite(bits, &hk_f16_fmt, 0, 0x8000);
}

HK float hk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, magnitude = h & 0x7FFF;
  float value;
  if (magnitude >= 0x7C00) return hk_bitsf(sign | 0x7F800000u | ((magnitude & 0x3FF) << 13));
  value = hk_decode_magnitude(magnitude, &hk_f16_fmt);
  return sign ? -value : value;
}

HK uint16_t hk_f32_to_bf16(float f) {
  uint32_t bits = hk_fbits(f);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((bits >> 31) ? 0xFFC0 : 0x7FC0);
  return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

HK float hk_bf16_to_f32(uint16_t b) { return hk_bitsf((uint32_t)b << 16); }

HK uint8_t hk_f32_to_f8e4m3fn(float f, int saturate) {
  uint32_t bits = hk_fbits(f);
  uint8_t sign = (bits >> 31) ? 0x80 : 0;
  if (f != f) return sign | 0x7F;
  if (isinf(f)) return sign | (saturate ? 0x7E : 0x7F);
  return (uint8_t)hk_encode_finite(bits, &hk_e4m3fn_fmt, saturate, 0x80);
}

HK float hk_f8e4m3fn_to_f32(uint8_t v) {
  float magnitude;
  if ((v & 0x7F) == 0x7F) return NAN;
  magnitude = hk_decode_magnitude(v & 0x7F, &hk_e4m3fn_fmt);
  return (v & 0x80) ? -magnitude : magnitude;
}

HK uint8_t hk_f32_to_f8e5m2(float f, int saturate) {
  uint32_t bits = hk_fbits(f);
  uint8_t sign = (bits >> 31) ? 0x80 : 0;
  if (f != f) return sign | 0x7E;
  if (isinf(f)) return sign | (saturate ? 0x7B : 0x7C);
  return (uint8_t)hk_encode_finite(bits, &hk_e5m2_fmt, saturate, 0x80);
}

HK float hk_f8e5m2_to_f32(uint8_t v) {
  uint32_t magnitude = v & 0x7F;
  float value;
  if (magnitude == 0x7C) return (v & 0x80) ? -INFINITY : INFINITY;
  if (magnitude > 0x7C) return NAN;
  value = hk_decode_magnitude(magnitude, &hk_e5m2_fmt);
  return (v & 0x80) ? -value : value;
}

/* ONNX's to_float8e8m0: the f32 exponent field rounded by the fraction (round_mode: 0 up,
 * 1 down, 2 nearest); NaN and Inf are 0xFF. */
HK uint8_t hk_f32_to_f8e8m0(float f, int saturate, int round_mode) {
  uint32_t bits = hk_fbits(f), exponent = (bits >> 23) & 0xFF;
  int round_up;
  if (exponent == 0xFF) return 0xFF;
  if (round_mode == 2) {
    int guard = (bits & 0x400000) != 0, round = (bits & 0x200000) != 0, sticky = (bits & 0x1FFFFF) != 0;
    round_up = guard && (round || sticky || exponent > 0);
  } else if (round_mode == 1) {
    round_up = 0;
  } else {
    round_up = (bits & 0x7FFFFF) != 0;
  }
  if (round_up && exponent == 0xFE && saturate) round_up = 0;
  return (uint8_t)(exponent + (round_up ? 1 : 0));
}

HK float hk_f8e8m0_to_f32(uint8_t v) {
  if (v == 0xFF) return NAN;
  if (v == 0) return hk_bitsf(0x00400000u);
  return hk_bitsf((uint32_t)v << 23);
}

HK uint8_t hk_f32_to_f4e2m1(float f) {
  uint32_t bits = hk_fbits(f);
  uint8_t sign = (bits >> 31) ? 0x8 : 0;
  if (f != f) return sign ? 0x0 : 0x8;
  if (isinf(f)) return sign | 0x7;
  return (uint8_t)hk_encode_finite(bits, &hk_f4_fmt, 1, 0x8);
}

HK float hk_f4e2m1_to_f32(uint8_t nibble) {
  float magnitude = hk_decode_magnitude(nibble & 0x7, &hk_f4_fmt);
  return (nibble & 0x8) ? -magnitude : magnitude;
}

/* f16 round trips: an f16 result of a float computation (numpy computes f16 ops in f32 and
 * rounds each result). */
HK float hk_round_f16(float v) { return hk_f16_to_f32(hk_f32_to_f16(v)); }
HK float hk_round_bf16(float v) { return hk_bf16_to_f32(hk_f32_to_bf16(v)); }

/* ---- element access of any dtype (the slow path: casts and quantization) ---- */

HK uint8_t hk_nibble(const void* b, int64_t i) {
  uint8_t byte = ((const uint8_t*)b)[i / 2];
  return (i % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
}
HK void hk_set_nibble(void* b, int64_t i, uint8_t v) {
  uint8_t* byte = (uint8_t*)b + i / 2;
  *byte = (i % 2 == 0) ? (uint8_t)((*byte & 0xF0) | (v & 0x0F)) : (uint8_t)((*byte & 0x0F) | ((v & 0x0F) << 4));
}
HK uint8_t hk_crumb(const void* b, int64_t i) { return (((const uint8_t*)b)[i / 4] >> (2 * (i % 4))) & 0x3; }
HK void hk_set_crumb(void* b, int64_t i, uint8_t v) {
  uint8_t* byte = (uint8_t*)b + i / 4;
  int shift = 2 * (int)(i % 4);
  *byte = (uint8_t)((*byte & ~(0x3 << shift)) | ((v & 0x3) << shift));
}

/* Float to integer as C casts do, without undefined behaviour: NaN 0, clamped to int64. */
HK int64_t hk_d2i64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

HK uint64_t hk_d2u64(double v) {
  if (v >= 1.8446744073709552e19) return UINT64_MAX;
  if (v >= 9.2233720368547758e18) return (uint64_t)v;
  return (uint64_t)hk_d2i64(v);
}

/* double to float rounding to odd: rounding that once more to a format 2+ bits narrower
 * is the correctly rounded result (f64 → f16/f8/f4 round once, as numpy does). */
HK float hk_d2f_odd(double v) {
  float f = (float)v;
  uint32_t bits;
  if (v != v || isinf(v) || (double)f == v) return f;
  if (isinf(f)) return copysignf(3.40282347e38f, (float)v);
  bits = hk_fbits(f);
  if (bits & 1) return f;
  return nextafterf(f, v > f ? INFINITY : -INFINITY);
}

HK int hk_dt_is_float(int t) { return t >= HK_DT_F8E4M3FN && t <= HK_DT_F64; }
HK int64_t hk_load_i64(int t, const void* b, int64_t i);

HK double hk_load_f64(int t, const void* b, int64_t i) {
  switch (t) {
    case HK_DT_BOOL: return ((const uint8_t*)b)[i] ? 1.0 : 0.0;
    case HK_DT_F8E4M3FN: return hk_f8e4m3fn_to_f32(((const uint8_t*)b)[i]);
    case HK_DT_F8E4M3FNUZ: return hk_decode_fnuz(((const uint8_t*)b)[i], &hk_e4m3fnuz_fmt);
    case HK_DT_F8E5M2: return hk_f8e5m2_to_f32(((const uint8_t*)b)[i]);
    case HK_DT_F8E5M2FNUZ: return hk_decode_fnuz(((const uint8_t*)b)[i], &hk_e5m2fnuz_fmt);
    case HK_DT_F8E8M0: return hk_f8e8m0_to_f32(((const uint8_t*)b)[i]);
    case HK_DT_F4E2M1: return hk_f4e2m1_to_f32(hk_nibble(b, i));
    case HK_DT_BF16: return hk_bf16_to_f32(((const uint16_t*)b)[i]);
    case HK_DT_F16: return hk_f16_to_f32(((const uint16_t*)b)[i]);
    case HK_DT_F32: return ((const float*)b)[i];
    case HK_DT_F64: return ((const double*)b)[i];
    case HK_DT_U64: return (double)((const uint64_t*)b)[i];
    default: return (double)hk_load_i64(t, b, i); /* the other integers (0 for an unknown dtype) */
  }
}

HK int64_t hk_load_i64(int t, const void* b, int64_t i) {
  switch (t) {
    case HK_DT_BOOL: return ((const uint8_t*)b)[i] ? 1 : 0;
    case HK_DT_U4: return hk_nibble(b, i);
    case HK_DT_I4: { int v = hk_nibble(b, i); return v >= 8 ? v - 16 : v; }
    case HK_DT_U2: return hk_crumb(b, i);
    case HK_DT_I2: { int v = hk_crumb(b, i); return v >= 2 ? v - 4 : v; }
    case HK_DT_U8: return ((const uint8_t*)b)[i];
    case HK_DT_U16: return ((const uint16_t*)b)[i];
    case HK_DT_U32: return ((const uint32_t*)b)[i];
    case HK_DT_U64: return (int64_t)((const uint64_t*)b)[i];
    case HK_DT_I8: return ((const int8_t*)b)[i];
    case HK_DT_I16: return ((const int16_t*)b)[i];
    case HK_DT_I32: return ((const int32_t*)b)[i];
    case HK_DT_I64: return ((const int64_t*)b)[i];
    default: return hk_dt_is_float(t) ? hk_d2i64(hk_load_f64(t, b, i)) : 0;
  }
}

HK uint64_t hk_load_u64(int t, const void* b, int64_t i) {
  if (t == HK_DT_U64) return ((const uint64_t*)b)[i];
  if (hk_dt_is_float(t)) return hk_d2u64(hk_load_f64(t, b, i));
  return (uint64_t)hk_load_i64(t, b, i);
}

HK void hk_store_i64(int t, void* b, int64_t i, int64_t v);

HK void hk_store_f64(int t, void* b, int64_t i, double v, int saturate) {
  float f = (t == HK_DT_F8E4M3FN || t == HK_DT_F8E4M3FNUZ || t == HK_DT_F8E5M2 || t == HK_DT_F8E5M2FNUZ ||
             t == HK_DT_F4E2M1 || t == HK_DT_F16)
                ? hk_d2f_odd(v)
                : (float)v;
  switch (t) {
    case HK_DT_BOOL: ((uint8_t*)b)[i] = v != 0.0; return;
    case HK_DT_F8E4M3FN: ((uint8_t*)b)[i] = hk_f32_to_f8e4m3fn(f, saturate); return;
    case HK_DT_F8E4M3FNUZ: ((uint8_t*)b)[i] = hk_encode_fnuz(f, &hk_e4m3fnuz_fmt, saturate); return;
    case HK_DT_F8E5M2: ((uint8_t*)b)[i] = hk_f32_to_f8e5m2(f, saturate); return;
    case HK_DT_F8E5M2FNUZ: ((uint8_t*)b)[i] = hk_encode_fnuz(f, &hk_e5m2fnuz_fmt, saturate); return;
    case HK_DT_F8E8M0: ((uint8_t*)b)[i] = hk_f32_to_f8e8m0(f, saturate, 0); return;
    case HK_DT_F4E2M1: hk_set_nibble(b, i, hk_f32_to_f4e2m1(f)); return;
    case HK_DT_BF16: ((uint16_t*)b)[i] = hk_f32_to_bf16(f); return;
    case HK_DT_F16: ((uint16_t*)b)[i] = hk_f32_to_f16(f); return;
    case HK_DT_F32: ((float*)b)[i] = f; return;
    case HK_DT_F64: ((double*)b)[i] = v; return;
    case HK_DT_U64: ((uint64_t*)b)[i] = hk_d2u64(v); return;
    default: hk_store_i64(t, b, i, hk_d2i64(v));
  }
}

HK void hk_store_i64(int t, void* b, int64_t i, int64_t v) {
  switch (t) {
    case HK_DT_BOOL: ((uint8_t*)b)[i] = v != 0; return;
    case HK_DT_U4: case HK_DT_I4: hk_set_nibble(b, i, (uint8_t)(v & 0x0F)); return;
    case HK_DT_U2: case HK_DT_I2: hk_set_crumb(b, i, (uint8_t)(v & 0x03)); return;
    case HK_DT_U8: ((uint8_t*)b)[i] = (uint8_t)v; return;
    case HK_DT_U16: ((uint16_t*)b)[i] = (uint16_t)v; return;
    case HK_DT_U32: ((uint32_t*)b)[i] = (uint32_t)v; return;
    case HK_DT_U64: ((uint64_t*)b)[i] = (uint64_t)v; return;
    case HK_DT_I8: ((int8_t*)b)[i] = (int8_t)v; return;
    case HK_DT_I16: ((int16_t*)b)[i] = (int16_t)v; return;
    case HK_DT_I32: ((int32_t*)b)[i] = (int32_t)v; return;
    case HK_DT_I64: ((int64_t*)b)[i] = v; return;
    default: /* the floats; nothing for an unknown dtype (no loop back through hk_store_f64) */
      if (hk_dt_is_float(t)) hk_store_f64(t, b, i, t != HK_DT_F64 ? (double)(float)v : (double)v, 1);
  }
}

HK void hk_store_u64(int t, void* b, int64_t i, uint64_t v) {
  if (t == HK_DT_U64) {
    ((uint64_t*)b)[i] = v;
    return;
  }
  if (hk_dt_is_float(t)) {
    hk_store_f64(t, b, i, t != HK_DT_F64 ? (double)(float)v : (double)v, 1);
    return;
  }
  hk_store_i64(t, b, i, (int64_t)v);
}

/* Cast of n elements (Tensor::cast's rules): integers exactly, 64-bit integers to narrow
 * floats through one f32 rounding, floats through the double; round_mode for e8m0. */
HK void hk_cast(const void* x, int from, void* y, int to, int64_t n, int saturate, int round_mode) {
  int64_t i;
  int from_int = !hk_dt_is_float(from), to_int = !hk_dt_is_float(to);
  if (to == HK_DT_F8E8M0) {
    for (i = 0; i < n; ++i) {
      float f = from == HK_DT_F32 ? ((const float*)x)[i] : (float)hk_load_f64(from, x, i);
      ((uint8_t*)y)[i] = hk_f32_to_f8e8m0(f, saturate, round_mode);
    }
    return;
  }
  if (from_int && to_int) {
    if (from == HK_DT_U64)
      for (i = 0; i < n; ++i) hk_store_u64(to, y, i, hk_load_u64(from, x, i));
    else
      for (i = 0; i < n; ++i) hk_store_i64(to, y, i, hk_load_i64(from, x, i));
  } else if ((from == HK_DT_I64 || from == HK_DT_U64) && to != HK_DT_F64) {
    for (i = 0; i < n; ++i) {
      float f = from == HK_DT_U64 ? (float)hk_load_u64(from, x, i) : (float)hk_load_i64(from, x, i);
      hk_store_f64(to, y, i, f, saturate);
    }
  } else if (to == HK_DT_I64 || to == HK_DT_U64) {
    for (i = 0; i < n; ++i) {
      if (to == HK_DT_U64) hk_store_u64(to, y, i, hk_load_u64(from, x, i));
      else hk_store_i64(to, y, i, hk_load_i64(from, x, i));
    }
  } else {
    for (i = 0; i < n; ++i) hk_store_f64(to, y, i, hk_load_f64(from, x, i), saturate);
  }
}
