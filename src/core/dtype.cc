#include "core/dtype.h"

#include <array>
#include <cctype>

namespace hodu {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;       // hodu short name
  const char* onnx_name;  // ONNX tensor(...) name
  int bits;
  int onnx_code;
};

// One row per dtype, in enum order.
constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {DType::Undefined, "undefined", "undefined", 0, 0},
    {DType::Bool, "bool", "bool", 8, 9},
    {DType::F8E4M3FN, "f8e4m3fn", "float8e4m3fn", 8, 17},
    {DType::F8E4M3FNUZ, "f8e4m3fnuz", "float8e4m3fnuz", 8, 18},
    {DType::F8E5M2, "f8e5m2", "float8e5m2", 8, 19},
    {DType::F8E5M2FNUZ, "f8e5m2fnuz", "float8e5m2fnuz", 8, 20},
    {DType::F8E8M0, "f8e8m0", "float8e8m0", 8, 24},
    {DType::F4E2M1, "f4e2m1", "float4e2m1", 4, 23},
    {DType::BF16, "bf16", "bfloat16", 16, 16},
    {DType::F16, "f16", "float16", 16, 10},
    {DType::F32, "f32", "float", 32, 1},
    {DType::F64, "f64", "double", 64, 11},
    {DType::U4, "u4", "uint4", 4, 21},
    {DType::I4, "i4", "int4", 4, 22},
    {DType::U8, "u8", "uint8", 8, 2},
    {DType::U16, "u16", "uint16", 16, 4},
    {DType::U32, "u32", "uint32", 32, 12},
    {DType::U64, "u64", "uint64", 64, 13},
    {DType::I8, "i8", "int8", 8, 3},
    {DType::I16, "i16", "int16", 16, 5},
    {DType::I32, "i32", "int32", 32, 6},
    {DType::I64, "i64", "int64", 64, 7},
    {DType::C64, "c64", "complex64", 64, 14},
    {DType::C128, "c128", "complex128", 128, 15},
    {DType::String, "string", "string", 0, 8},
    {DType::U2, "u2", "uint2", 2, 25},
    {DType::I2, "i2", "int2", 2, 26},
}};

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view dtype_onnx_name(DType t) { return info(t).onnx_name; }
int dtype_bits(DType t) { return info(t).bits; }

size_t dtype_storage_bytes(DType t, int64_t n) {
  if (n <= 0) return 0;
  int bits = info(t).bits;
  if (t == DType::String) return static_cast<size_t>(n) * sizeof(std::string);
  return (static_cast<size_t>(n) * bits + 7) / 8;
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string n = lower(name);
  for (const auto& row : kInfo) {
    if (row.type == DType::Undefined) continue;
    if (n == row.name || n == row.onnx_name) return row.type;
  }
  // Common aliases.
  if (n == "float32") return DType::F32;
  if (n == "float64") return DType::F64;
  if (n == "half") return DType::F16;
  if (n == "int") return DType::I32;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ:
    case DType::F8E8M0: case DType::F4E2M1: case DType::BF16: case DType::F16: case DType::F32:
    case DType::F64:
      return true;
    default:
      return false;
  }
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::U2: case DType::I2: case DType::U4: case DType::I4: case DType::U8: case DType::U16: case DType::U32: case DType::U64:
    case DType::I8: case DType::I16: case DType::I32: case DType::I64:
      return true;
    default:
      return false;
  }
}

bool dtype_is_signed(DType t) {
  switch (t) {
    case DType::I2: case DType::I4: case DType::I8: case DType::I16: case DType::I32: case DType::I64:
      return true;
    default:
      return dtype_is_float(t) || dtype_is_complex(t);
  }
}

bool dtype_is_complex(DType t) { return t == DType::C64 || t == DType::C128; }
bool dtype_is_packed4(DType t) { return t == DType::U4 || t == DType::I4 || t == DType::F4E2M1; }
bool dtype_is_packed2(DType t) { return t == DType::U2 || t == DType::I2; }
bool dtype_is_subbyte(DType t) { return dtype_is_packed4(t) || dtype_is_packed2(t); }

std::optional<DType> dtype_from_onnx(int code) {
  for (const auto& row : kInfo)
    if (row.onnx_code == code && row.type != DType::Undefined) return row.type;
  return std::nullopt;
}

int dtype_to_onnx(DType t) { return info(t).onnx_code; }

}  // namespace hodu
