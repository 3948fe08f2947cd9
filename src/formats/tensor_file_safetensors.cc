// .safetensors: u64 header size N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, "__metadata__": {...}}
// then the data; offsets count from the end of the header.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>

#include "formats/tensor_files.h"

namespace hodu::tensor_files {
namespace {

using Json = nlohmann::ordered_json;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kSafetensorsTypes[] = {
    {DType::Bool, "BOOL"},         {DType::U8, "U8"},         {DType::I8, "I8"},
    {DType::U16, "U16"},           {DType::I16, "I16"},       {DType::U32, "U32"},
    {DType::I32, "I32"},           {DType::U64, "U64"},       {DType::I64, "I64"},
    {DType::F16, "F16"},           {DType::BF16, "BF16"},     {DType::F32, "F32"},
    {DType::F64, "F64"},           {DType::C64, "C64"},       {DType::F8E4M3FN, "F8_E4M3"},
    {DType::F8E5M2, "F8_E5M2"},    {DType::F8E8M0, "F8_E8M0"},
};

std::optional<DType> safetensors_dtype(const std::string& name) {
  for (const auto& row : kSafetensorsTypes)
    if (name == row.name) return row.dtype;
  return std::nullopt;
}

const char* safetensors_name(DType t) {
  for (const auto& row : kSafetensorsTypes)
    if (row.dtype == t) return row.name;
  return nullptr;
}

}  // namespace

NamedTensors read_safetensors(std::string_view bytes, const std::string& what) {
  ByteReader r(bytes, what);
  auto header_size = r.read<uint64_t>("header size");
  HODU_CHECK(header_size <= r.remaining() && header_size < (uint64_t{1} << 32), ErrorCode::InvalidArgument,
             "{}: truncated or not a .safetensors file: header of {} bytes, the file has {} after it", what,
             header_size, r.remaining());
  std::string_view header_text = r.take(header_size, "header");
  HODU_CHECK(!header_text.empty() && header_text[0] == '{', ErrorCode::InvalidArgument,
             "{}: not a .safetensors file (the header is not a JSON object)", what);
  Json header;
  try {
    header = Json::parse(header_text.begin(), header_text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::InvalidArgument, "{}: invalid .safetensors header: {}", what, e.what());
  }
  HODU_CHECK(header.is_object(), ErrorCode::InvalidArgument, "{}: the header is not a JSON object", what);
  std::string_view data = bytes.substr(r.position());

  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    std::string tensor_what = fmt::format("{} (tensor '{}')", what, name);
    HODU_CHECK(info.is_object() && info.contains("dtype") && info["dtype"].is_string() && info.contains("shape") &&
                   info["shape"].is_array() && info.contains("data_offsets") && info["data_offsets"].is_array() &&
                   info["data_offsets"].size() == 2,
               ErrorCode::InvalidArgument, "{}: needs \"dtype\", \"shape\" and two \"data_offsets\"", tensor_what);
    Entry e;
    e.name = name;
    std::string dtype_text = info["dtype"].get<std::string>();
    auto dtype = safetensors_dtype(dtype_text);
    HODU_CHECK(dtype.has_value(), ErrorCode::Unsupported, "{}: unsupported dtype '{}'", tensor_what, dtype_text);
    e.dtype = *dtype;
    for (const auto& d : info["shape"]) {
      HODU_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && e.shape.size() < 64, ErrorCode::InvalidArgument,
                 "{}: bad dim {}", tensor_what, d.dump());
      e.shape.push_back(d.get<int64_t>());
    }
    for (const auto& o : info["data_offsets"])
      HODU_CHECK(o.is_number_unsigned() || (o.is_number_integer() && o.get<int64_t>() >= 0),
                 ErrorCode::InvalidArgument, "{}: bad data offset {}", tensor_what, o.dump());
    e.begin = info["data_offsets"][0].get<uint64_t>();
    e.end = info["data_offsets"][1].get<uint64_t>();
    int64_t n = checked_numel(e.shape, tensor_what);
    HODU_CHECK(e.begin <= e.end && e.end <= data.size(), ErrorCode::InvalidArgument,
               "{}: data [{}, {}) lies outside the {} bytes of data", tensor_what, e.begin, e.end, data.size());
    HODU_CHECK(e.end - e.begin == dtype_storage_bytes(e.dtype, n), ErrorCode::InvalidArgument,
               "{}: {}{} needs {} bytes, data_offsets give {}", tensor_what, dtype_name(e.dtype),
               shape_to_string(e.shape), dtype_storage_bytes(e.dtype, n), e.end - e.begin);
    entries.push_back(std::move(e));
  }
  // File order: by data offset.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  NamedTensors out;
  for (const auto& e : entries)
    out.emplace_back(e.name, Tensor::from_bytes(e.dtype, e.shape, data.data() + e.begin, e.end - e.begin));
  return out;
}

std::string write_safetensors(const NamedTensors& tensors) {
  Json header = Json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HODU_CHECK(seen.insert(name).second && name != "__metadata__", ErrorCode::InvalidArgument,
               "tensor name '{}' is used twice or reserved", name);
    const char* dtype = safetensors_name(t.dtype());
    HODU_CHECK(dtype, ErrorCode::Unsupported, "tensor '{}': .safetensors has no {} type (save it as .hdt)", name,
               dtype_name(t.dtype()));
    uint64_t size = t.nbytes();
    header[name] = {{"dtype", dtype}, {"shape", t.shape()}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out;
  append_le<uint64_t>(out, text.size());
  out += text;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors) out += tensor_bytes(t);
  return out;
}

}  // namespace hodu::tensor_files
