// .hdt: hodu's named-tensor file. Little-endian; the layout is documented in
// docs/tensor-files.md:
//
//   "HDT1"  u32 version (1)  u64 tensor count  u64 data offset (multiple of 64)
//   per tensor: u32 name length, name (UTF-8), u8 dtype-name length, dtype name
//               ("f32", "bf16", ...), u32 rank, i64 dims[rank],
//               u64 offset (from the data section, multiple of 64), u64 byte size
//   data section: each tensor's bytes at its offset. String tensors store, per
//               element, a u64 length and the bytes.
//
// The data of every tensor starts on a 64-byte boundary of the file, so a
// reader may memory-map it.
#include <set>

#include "formats/tensor_files.h"

namespace hodu::tensor_files {
namespace {

constexpr std::string_view kHdtMagic = "HDT1";
constexpr uint32_t kHdtVersion = 1;
constexpr uint64_t kHdtAlignment = 64;

uint64_t align_up(uint64_t v) { return (v + kHdtAlignment - 1) / kHdtAlignment * kHdtAlignment; }

std::string string_tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  std::string out;
  for (int64_t i = 0; i < c.numel(); ++i) {
    append_le<uint64_t>(out, c.string_data()[i].size());
    out += c.string_data()[i];
  }
  return out;
}

Tensor string_tensor_from_bytes(std::string_view bytes, const std::vector<int64_t>& shape, int64_t n,
                                const std::string& what) {
  ByteReader r(bytes, what);
  HODU_CHECK(static_cast<uint64_t>(n) <= bytes.size() / 8, ErrorCode::InvalidArgument,
             "{}: string tensor of {} elements in {} bytes", what, n, bytes.size());
  std::vector<std::string> values(static_cast<size_t>(n));
  for (auto& v : values) v = std::string(r.take(r.read<uint64_t>("string length"), "string"));
  HODU_CHECK(r.remaining() == 0, ErrorCode::InvalidArgument, "{}: {} unused bytes after the strings", what,
             r.remaining());
  return Tensor::from_strings(shape, values);
}

}  // namespace

NamedTensors read_hdt(std::string_view bytes, const std::string& what) {
  ByteReader r(bytes, what);
  HODU_CHECK(bytes.substr(0, 4) == kHdtMagic, ErrorCode::InvalidArgument, "{}: not an .hdt file (bad magic)", what);
  r.take(4, "magic");
  auto version = r.read<uint32_t>("version");
  HODU_CHECK(version == kHdtVersion, ErrorCode::Unsupported,
             "{}: .hdt version {} is not supported (this hodu reads version {})", what, version, kHdtVersion);
  auto count = r.read<uint64_t>("tensor count");
  auto data_offset = r.read<uint64_t>("data offset");
  HODU_CHECK(data_offset % kHdtAlignment == 0 && data_offset <= bytes.size(), ErrorCode::InvalidArgument,
             "{}: bad data offset {} (file of {} bytes)", what, data_offset, bytes.size());
  // Each entry takes at least 4 + 1 + 4 + 16 bytes: a larger count is corrupt.
  HODU_CHECK(count <= r.remaining() / 25, ErrorCode::InvalidArgument, "{}: tensor count {} does not fit the file",
             what, count);
  std::string_view data = bytes.substr(data_offset);

  NamedTensors out;
  std::set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    std::string name(r.take(r.read<uint32_t>("name length"), "name"));
    std::string tensor_what = fmt::format("{} (tensor '{}')", what, name);
    HODU_CHECK(seen.insert(name).second, ErrorCode::InvalidArgument, "{}: duplicate name", tensor_what);
    std::string_view dtype_text = r.take(r.read<uint8_t>("dtype length"), "dtype");
    auto dtype = parse_dtype(dtype_text);
    HODU_CHECK(dtype.has_value() && dtype_name(*dtype) == dtype_text, ErrorCode::InvalidArgument,
               "{}: unknown dtype '{}'", tensor_what, dtype_text);
    auto rank = r.read<uint32_t>("rank");
    HODU_CHECK(rank <= 64, ErrorCode::InvalidArgument, "{}: rank {} is too large", tensor_what, rank);
    std::vector<int64_t> shape(rank);
    for (auto& d : shape) d = r.read<int64_t>("dim");
    int64_t n = checked_numel(shape, tensor_what);
    auto offset = r.read<uint64_t>("data offset");
    auto size = r.read<uint64_t>("data size");
    HODU_CHECK(offset % kHdtAlignment == 0 && offset <= data.size() && size <= data.size() - offset,
               ErrorCode::InvalidArgument, "{}: data [{}, +{}) lies outside the data section ({} bytes)", tensor_what,
               offset, size, data.size());
    std::string_view payload = data.substr(offset, size);
    if (*dtype == DType::String) {
      out.emplace_back(name, string_tensor_from_bytes(payload, shape, n, tensor_what));
      continue;
    }
    HODU_CHECK(size == dtype_storage_bytes(*dtype, n), ErrorCode::InvalidArgument,
               "{}: {} needs {} bytes, the file says {}", tensor_what,
               fmt::format("{}{}", dtype_name(*dtype), shape_to_string(shape)), dtype_storage_bytes(*dtype, n), size);
    out.emplace_back(name, Tensor::from_bytes(*dtype, shape, payload.data(), payload.size()));
  }
  HODU_CHECK(r.position() <= data_offset, ErrorCode::InvalidArgument,
             "{}: the tensor table overlaps the data section", what);
  return out;
}

std::string write_hdt(const NamedTensors& tensors) {
  std::set<std::string> seen;
  std::vector<std::string> payloads;
  std::string table;
  uint64_t data_size = 0;
  for (const auto& [name, t] : tensors) {
    HODU_CHECK(seen.insert(name).second, ErrorCode::InvalidArgument, "two tensors are named '{}'", name);
    payloads.push_back(t.dtype() == DType::String ? string_tensor_bytes(t) : tensor_bytes(t));
    append_le<uint32_t>(table, static_cast<uint32_t>(name.size()));
    table += name;
    std::string_view dtype = dtype_name(t.dtype());
    append_le<uint8_t>(table, static_cast<uint8_t>(dtype.size()));
    table += dtype;
    append_le<uint32_t>(table, static_cast<uint32_t>(t.rank()));
    for (int64_t d : t.shape()) append_le<int64_t>(table, d);
    append_le<uint64_t>(table, data_size);
    append_le<uint64_t>(table, payloads.back().size());
    data_size = align_up(data_size + payloads.back().size());
  }
  std::string out(kHdtMagic);
  append_le<uint32_t>(out, kHdtVersion);
  append_le<uint64_t>(out, tensors.size());
  uint64_t data_offset = align_up(out.size() + 8 + table.size());
  append_le<uint64_t>(out, data_offset);
  out += table;
  out.resize(data_offset, '\0');
  out.reserve(data_offset + data_size);
  for (const auto& p : payloads) {
    out += p;
    out.resize(align_up(out.size()), '\0');
  }
  return out;
}

}  // namespace hodu::tensor_files
