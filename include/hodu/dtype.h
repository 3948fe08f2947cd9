/* hodu/dtype.h — element types of hodu tensors (public). The list and the
 * numbering are hodu's own; ONNX's TensorProto.DataType codes are mapped by
 * dtype_from_onnx / dtype_to_onnx. */
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hodu {

enum class DType : uint8_t {
  Undefined = 0,
  Bool,
  F8E4M3FN,    // float8 e4m3, finite only (no Inf), NaN = S.1111.111
  F8E4M3FNUZ,  // float8 e4m3, no negative zero, NaN = 0x80
  F8E5M2,      // float8 e5m2, IEEE-like (Inf and NaN)
  F8E5M2FNUZ,  // float8 e5m2, no negative zero, NaN = 0x80
  F8E8M0,      // float8 e8m0 exponent-only scale type
  F4E2M1,      // float4 e2m1, packed two per byte (storage)
  BF16,
  F16,
  F32,
  F64,
  U4,          // packed two per byte, low nibble first (storage)
  I4,
  U8,
  U16,
  U32,
  U64,
  I8,
  I16,
  I32,
  I64,
  C64,         // complex<float>
  C128,        // complex<double>
  String,      // std::string elements
  U2,          // packed four per byte, lowest bits first (storage)
  I2,
};

inline constexpr int kNumDTypes = static_cast<int>(DType::I2) + 1;

// Short name used by HoduScript, the CLI and .hdt: "f32", "i64", "bool", "f8e4m3fn"...
std::string_view dtype_name(DType t);
// Parses a short name ("f32") or an ONNX-style name ("float", "int64", "float16").
std::optional<DType> parse_dtype(std::string_view name);
// ONNX's name for tensor types: "float", "int64", "float16", "bfloat16", ...
std::string_view dtype_onnx_name(DType t);

// Bits per element (4 / 2 for the packed types, 0 for String).
int dtype_bits(DType t);
// Bytes needed to store n elements (4-bit types round up).
size_t dtype_storage_bytes(DType t, int64_t n);

bool dtype_is_float(DType t);    // any floating type, the f8/f4 storage types included
bool dtype_is_integer(DType t);  // u*/i*, 4-bit included, bool excluded
bool dtype_is_signed(DType t);
bool dtype_is_complex(DType t);
bool dtype_is_packed4(DType t);  // U4, I4, F4E2M1
bool dtype_is_packed2(DType t);  // U2, I2
bool dtype_is_subbyte(DType t);  // packed4 or packed2: no strided views, whole-byte offsets only

// ONNX TensorProto.DataType codes (FLOAT=1, UINT8=2, ..., FLOAT4E2M1=23, FLOAT8E8M0=24).
std::optional<DType> dtype_from_onnx(int onnx_code);
int dtype_to_onnx(DType t);

}  // namespace hodu
