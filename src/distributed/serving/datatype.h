// KServe v2 / Triton tensor datatypes ("FP32", "INT64", "BYTES", ...) and
// hodu's DType. BF16 is Triton's addition to the v2 list.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace hodu::serving {

// The v2 name of a dtype, or nullopt for dtypes the protocol has no name for
// (float8, 4-bit, complex).
std::optional<std::string_view> datatype_name(DType t);
// The name shown in model metadata: the v2 name, else hodu's own in capitals
// (such a tensor cannot cross the protocol, and infer says so).
std::string metadata_datatype(DType t);
// The dtype of a v2 name; nullopt for an unknown name (names are case-sensitive).
std::optional<DType> parse_datatype(std::string_view name);
// Bytes per element in the binary extension (0 for BYTES, which has per-element lengths).
size_t datatype_element_size(DType t);

}  // namespace hodu::serving
