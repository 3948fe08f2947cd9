#include "distributed/serving/datatype.h"

#include <cctype>

namespace hodu::serving {
namespace {

struct Entry {
  DType dtype;
  std::string_view name;
};

constexpr Entry kTable[] = {
    {DType::Bool, "BOOL"},   {DType::U8, "UINT8"},   {DType::U16, "UINT16"}, {DType::U32, "UINT32"},
    {DType::U64, "UINT64"},  {DType::I8, "INT8"},    {DType::I16, "INT16"},  {DType::I32, "INT32"},
    {DType::I64, "INT64"},   {DType::F16, "FP16"},   {DType::F32, "FP32"},   {DType::F64, "FP64"},
    {DType::BF16, "BF16"},   {DType::String, "BYTES"},
};

}  // namespace

std::optional<std::string_view> datatype_name(DType t) {
  for (const auto& e : kTable)
    if (e.dtype == t) return e.name;
  return std::nullopt;
}

std::string metadata_datatype(DType t) {
  if (auto n = datatype_name(t)) return std::string(*n);
  std::string s(dtype_name(t));
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::optional<DType> parse_datatype(std::string_view name) {
  for (const auto& e : kTable)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

size_t datatype_element_size(DType t) { return t == DType::String ? 0 : static_cast<size_t>(dtype_bits(t) / 8); }

}  // namespace hodu::serving
