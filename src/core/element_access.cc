#include "core/element_access.h"

#include <cmath>
#include <complex>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/float_convert.h"

namespace hodu {
namespace {

template <typename T>
T read(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void write(void* base, int64_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(base) + i * sizeof(T), &v, sizeof(T));
}

uint8_t read_nibble(const void* base, int64_t i) {
  uint8_t byte = static_cast<const uint8_t*>(base)[i / 2];
  return (i % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
}
void write_nibble(void* base, int64_t i, uint8_t v) {
  uint8_t& byte = static_cast<uint8_t*>(base)[i / 2];
  if (i % 2 == 0) byte = static_cast<uint8_t>((byte & 0xF0) | (v & 0x0F));
  else byte = static_cast<uint8_t>((byte & 0x0F) | ((v & 0x0F) << 4));
}

uint8_t read_crumb(const void* base, int64_t i) {  // 2-bit element, lowest bits first
  return (static_cast<const uint8_t*>(base)[i / 4] >> (2 * (i % 4))) & 0x3;
}
void write_crumb(void* base, int64_t i, uint8_t v) {
  uint8_t& byte = static_cast<uint8_t*>(base)[i / 4];
  int shift = 2 * static_cast<int>(i % 4);
  byte = static_cast<uint8_t>((byte & ~(0x3 << shift)) | ((v & 0x3) << shift));
}

// Float → integer the way C casts do, without undefined behaviour: NaN → 0,
// out-of-range values clamp to the int64 range, then the caller truncates.
int64_t double_to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// double → float, rounding to odd (truncate, then set the last bit if inexact).
// Rounding that float once more to a format at least 2 bits narrower gives the
// correctly rounded result (Boldo & Melquiond), so f64 → f16/f8/f4 rounds once,
// as numpy and ml_dtypes do, instead of twice through a nearest-even float.
float double_to_float_round_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || std::isinf(v) || static_cast<double>(f) == v) return f;
  if (std::isinf(f)) return std::copysign(std::numeric_limits<float>::max(), static_cast<float>(v));
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (bits & 1) return f;
  return std::nextafter(f, v > f ? INFINITY : -INFINITY);  // the odd neighbour on v's side
}

// Which f32 feeds the narrow conversions: bf16 and e8m0 follow their reference
// (Eigen's bfloat16 and ONNX's to_float8e8m0 both go through float32 first);
// the float8/float4/f16 types round once from the double.
float narrow_source(DType t, double v) {
  switch (t) {
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ:
    case DType::F4E2M1: case DType::F16:
      return double_to_float_round_odd(v);
    default:
      return static_cast<float>(v);
  }
}

// Integers above 2^24 are not all floats: round them to f32 once, directly from
// the integer, before any narrower float (as numpy and ONNX do).
bool rounds_through_float(DType t) {
  return dtype_is_float(t) && t != DType::F64;
}

[[noreturn]] void not_numeric(DType t) {
  fail(ErrorCode::Unsupported, "element access: dtype {} is not numeric", dtype_name(t));
}

}  // namespace

double load_as_double(DType t, const void* b, int64_t i) {
  switch (t) {
    case DType::Bool: return read<uint8_t>(b, i) ? 1.0 : 0.0;
    case DType::F8E4M3FN: return f8e4m3fn_to_f32(read<uint8_t>(b, i));
    case DType::F8E4M3FNUZ: return f8e4m3fnuz_to_f32(read<uint8_t>(b, i));
    case DType::F8E5M2: return f8e5m2_to_f32(read<uint8_t>(b, i));
    case DType::F8E5M2FNUZ: return f8e5m2fnuz_to_f32(read<uint8_t>(b, i));
    case DType::F8E8M0: return f8e8m0_to_f32(read<uint8_t>(b, i));
    case DType::F4E2M1: return f4e2m1_to_f32(read_nibble(b, i));
    case DType::BF16: return bf16_to_f32(read<uint16_t>(b, i));
    case DType::F16: return f16_to_f32(read<uint16_t>(b, i));
    case DType::F32: return read<float>(b, i);
    case DType::F64: return read<double>(b, i);
    case DType::U4: return read_nibble(b, i);
    case DType::I4: { int v = read_nibble(b, i); return v >= 8 ? v - 16 : v; }
    case DType::U2: return read_crumb(b, i);
    case DType::I2: { int v = read_crumb(b, i); return v >= 2 ? v - 4 : v; }
    case DType::U8: return read<uint8_t>(b, i);
    case DType::U16: return read<uint16_t>(b, i);
    case DType::U32: return read<uint32_t>(b, i);
    case DType::U64: return static_cast<double>(read<uint64_t>(b, i));
    case DType::I8: return read<int8_t>(b, i);
    case DType::I16: return read<int16_t>(b, i);
    case DType::I32: return read<int32_t>(b, i);
    case DType::I64: return static_cast<double>(read<int64_t>(b, i));
    case DType::C64: return read<std::complex<float>>(b, i).real();
    case DType::C128: return read<std::complex<double>>(b, i).real();
    default: not_numeric(t);
  }
}

int64_t load_as_int64(DType t, const void* b, int64_t i) {
  switch (t) {
    case DType::Bool: return read<uint8_t>(b, i) ? 1 : 0;
    case DType::U4: return read_nibble(b, i);
    case DType::I4: { int v = read_nibble(b, i); return v >= 8 ? v - 16 : v; }
    case DType::U2: return read_crumb(b, i);
    case DType::I2: { int v = read_crumb(b, i); return v >= 2 ? v - 4 : v; }
    case DType::U8: return read<uint8_t>(b, i);
    case DType::U16: return read<uint16_t>(b, i);
    case DType::U32: return read<uint32_t>(b, i);
    case DType::U64: return static_cast<int64_t>(read<uint64_t>(b, i));
    case DType::I8: return read<int8_t>(b, i);
    case DType::I16: return read<int16_t>(b, i);
    case DType::I32: return read<int32_t>(b, i);
    case DType::I64: return read<int64_t>(b, i);
    default: return double_to_int64(load_as_double(t, b, i));
  }
}

uint64_t load_as_uint64(DType t, const void* b, int64_t i) {
  if (t == DType::U64) return read<uint64_t>(b, i);
  if (dtype_is_float(t)) {
    double v = load_as_double(t, b, i);
    if (v >= 1.8446744073709552e19) return std::numeric_limits<uint64_t>::max();
    if (v >= 9.2233720368547758e18) return static_cast<uint64_t>(v);
    return static_cast<uint64_t>(double_to_int64(v));
  }
  return static_cast<uint64_t>(load_as_int64(t, b, i));
}

void store_from_double(DType t, void* b, int64_t i, double v, bool saturate) {
  float f = narrow_source(t, v);
  switch (t) {
    case DType::Bool: write<uint8_t>(b, i, v != 0.0 ? 1 : 0); return;
    case DType::F8E4M3FN: write<uint8_t>(b, i, f32_to_f8e4m3fn(f, saturate)); return;
    case DType::F8E4M3FNUZ: write<uint8_t>(b, i, f32_to_f8e4m3fnuz(f, saturate)); return;
    case DType::F8E5M2: write<uint8_t>(b, i, f32_to_f8e5m2(f, saturate)); return;
    case DType::F8E5M2FNUZ: write<uint8_t>(b, i, f32_to_f8e5m2fnuz(f, saturate)); return;
    case DType::F8E8M0: write<uint8_t>(b, i, f32_to_f8e8m0(f, saturate)); return;
    case DType::F4E2M1: write_nibble(b, i, f32_to_f4e2m1(f)); return;
    case DType::BF16: write<uint16_t>(b, i, f32_to_bf16(f)); return;
    case DType::F16: write<uint16_t>(b, i, f32_to_f16(f)); return;
    case DType::F32: write<float>(b, i, f); return;
    case DType::F64: write<double>(b, i, v); return;
    case DType::C64: write<std::complex<float>>(b, i, {f, 0.f}); return;
    case DType::C128: write<std::complex<double>>(b, i, {v, 0.0}); return;
    case DType::U64:
      if (v >= 1.8446744073709552e19) write<uint64_t>(b, i, std::numeric_limits<uint64_t>::max());
      else if (v >= 9.2233720368547758e18) write<uint64_t>(b, i, static_cast<uint64_t>(v));
      else write<uint64_t>(b, i, static_cast<uint64_t>(double_to_int64(v)));
      return;
    default:
      if (dtype_is_integer(t)) return store_from_int64(t, b, i, double_to_int64(v));
      not_numeric(t);
  }
}

void store_from_int64(DType t, void* b, int64_t i, int64_t v) {
  switch (t) {
    case DType::Bool: write<uint8_t>(b, i, v != 0 ? 1 : 0); return;
    case DType::U4: case DType::I4: write_nibble(b, i, static_cast<uint8_t>(v & 0x0F)); return;
    case DType::U2: case DType::I2: write_crumb(b, i, static_cast<uint8_t>(v & 0x03)); return;
    case DType::U8: write<uint8_t>(b, i, static_cast<uint8_t>(v)); return;
    case DType::U16: write<uint16_t>(b, i, static_cast<uint16_t>(v)); return;
    case DType::U32: write<uint32_t>(b, i, static_cast<uint32_t>(v)); return;
    case DType::U64: write<uint64_t>(b, i, static_cast<uint64_t>(v)); return;
    case DType::I8: write<int8_t>(b, i, static_cast<int8_t>(v)); return;
    case DType::I16: write<int16_t>(b, i, static_cast<int16_t>(v)); return;
    case DType::I32: write<int32_t>(b, i, static_cast<int32_t>(v)); return;
    case DType::I64: write<int64_t>(b, i, v); return;
    default:
      if (rounds_through_float(t)) return store_from_double(t, b, i, static_cast<float>(v));
      store_from_double(t, b, i, static_cast<double>(v));
      return;
  }
}

void store_from_uint64(DType t, void* b, int64_t i, uint64_t v) {
  if (t == DType::U64) return write<uint64_t>(b, i, v);
  if (rounds_through_float(t)) return store_from_double(t, b, i, static_cast<float>(v));
  if (dtype_is_float(t) || dtype_is_complex(t)) return store_from_double(t, b, i, static_cast<double>(v));
  store_from_int64(t, b, i, static_cast<int64_t>(v));
}

}  // namespace hodu
