// .gguf (llama.cpp / ggml), versions 2 and 3, read only. Layout: "GGUF",
// u32 version, u64 tensor count, u64 metadata count, the metadata key/values
// (skipped, except general.alignment), the tensor infos (name, dims with the
// fastest-varying first, ggml type, offset), then the data section at the next
// multiple of the alignment. Unquantized types and Q8_0 (dequantized to f32)
// are read; other quantized types are Unsupported, by name.
#include <iterator>
#include <optional>
#include <set>

#include "core/float_convert.h"
#include "formats/tensor_files.h"

namespace hodu::tensor_files {
namespace {

// ggml's type numbering (ggml.h, enum ggml_type).
const char* ggml_type_name(uint32_t type) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",   "Q4_1",   "Q4_2",  "Q4_3",    "Q5_0",    "Q5_1",    "Q8_0",   "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",   "Q6_K",  "Q8_K",    "IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",  "IQ4_XS", "I8",    "I16",     "I32",     "I64",     "F64",    "IQ1_M",
      "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
      "MXFP4"};
  return type < std::size(kNames) ? kNames[type] : "unknown";
}

std::optional<DType> plain_ggml_type(uint32_t type) {
  switch (type) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 24: return DType::I8;
    case 25: return DType::I16;
    case 26: return DType::I32;
    case 27: return DType::I64;
    case 28: return DType::F64;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}
constexpr uint32_t kQ8_0 = 8;
constexpr int64_t kQ8_0BlockElements = 32;
constexpr int64_t kQ8_0BlockBytes = 2 + 32;  // f16 scale, 32 × i8

// GGUF metadata value types.
enum GgufValueType : uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64,
};

uint64_t fixed_value_size(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

std::string_view read_gguf_string(ByteReader& r, const char* field) { return r.take(r.read<uint64_t>(field), field); }

void skip_value(ByteReader& r, uint32_t type, int depth) {
  HODU_CHECK(depth < 8, ErrorCode::InvalidArgument, "{}: metadata arrays nested too deeply", r.what());
  if (uint64_t size = fixed_value_size(type)) {
    r.take(size, "metadata value");
  } else if (type == kString) {
    read_gguf_string(r, "metadata string");
  } else if (type == kArray) {
    auto element_type = r.read<uint32_t>("metadata array type");
    auto count = r.read<uint64_t>("metadata array length");
    if (uint64_t size = fixed_value_size(element_type)) {
      HODU_CHECK(count <= r.remaining() / size, ErrorCode::InvalidArgument,
                 "{}: truncated: metadata array of {} elements", r.what(), count);
      r.take(count * size, "metadata array");
    } else {
      HODU_CHECK(count <= r.remaining() / 8, ErrorCode::InvalidArgument,
                 "{}: truncated: metadata array of {} elements", r.what(), count);
      for (uint64_t i = 0; i < count; ++i) skip_value(r, element_type, depth + 1);
    }
  } else {
    fail(ErrorCode::InvalidArgument, "{}: unknown metadata value type {}", r.what(), type);
  }
}

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // hodu order: slowest-varying first
  uint32_t type;
  uint64_t offset;
};

Tensor dequantize_q8_0(std::string_view data, const std::vector<int64_t>& shape, int64_t n) {
  Tensor t = Tensor::empty(DType::F32, shape);
  float* out = t.data<float>();
  for (int64_t block = 0; block * kQ8_0BlockElements < n; ++block) {
    const char* p = data.data() + block * kQ8_0BlockBytes;
    uint16_t scale_bits;
    std::memcpy(&scale_bits, p, 2);
    float scale = f16_to_f32(scale_bits);
    for (int64_t k = 0; k < kQ8_0BlockElements && block * kQ8_0BlockElements + k < n; ++k)
      out[block * kQ8_0BlockElements + k] = scale * static_cast<float>(static_cast<int8_t>(p[2 + k]));
  }
  return t;
}

}  // namespace

NamedTensors read_gguf(std::string_view bytes, const std::string& what) {
  ByteReader r(bytes, what);
  HODU_CHECK(bytes.substr(0, 4) == "GGUF", ErrorCode::InvalidArgument, "{}: not a .gguf file (bad magic)", what);
  r.take(4, "magic");
  auto version = r.read<uint32_t>("version");
  HODU_CHECK(version == 2 || version == 3, ErrorCode::Unsupported,
             "{}: GGUF version {} is not supported (versions 2 and 3 are)", what, version);
  auto tensor_count = r.read<uint64_t>("tensor count");
  auto metadata_count = r.read<uint64_t>("metadata count");
  // Each metadata entry takes at least 12 bytes, each tensor info at least 24.
  HODU_CHECK(metadata_count <= r.remaining() / 12 && tensor_count <= r.remaining() / 24,
             ErrorCode::InvalidArgument, "{}: {} tensors and {} metadata entries cannot fit the file", what,
             tensor_count, metadata_count);

  uint64_t alignment = 32;
  for (uint64_t i = 0; i < metadata_count; ++i) {
    std::string_view key = read_gguf_string(r, "metadata key");
    auto type = r.read<uint32_t>("metadata type");
    if (key == "general.alignment" && type == kU32) {
      alignment = r.read<uint32_t>("general.alignment");
      HODU_CHECK(alignment > 0 && alignment % 8 == 0 && alignment <= 4096, ErrorCode::InvalidArgument,
                 "{}: bad general.alignment {}", what, alignment);
      continue;
    }
    skip_value(r, type, 0);
  }

  std::vector<TensorInfo> infos;
  std::set<std::string> seen;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo info;
    info.name = std::string(read_gguf_string(r, "tensor name"));
    HODU_CHECK(seen.insert(info.name).second, ErrorCode::InvalidArgument, "{}: duplicate tensor '{}'", what,
               info.name);
    auto rank = r.read<uint32_t>("tensor rank");
    HODU_CHECK(rank <= 8, ErrorCode::InvalidArgument, "{}: tensor '{}' has rank {}", what, info.name, rank);
    info.shape.resize(rank);
    for (uint32_t d = 0; d < rank; ++d) {
      auto dim = r.read<uint64_t>("tensor dim");
      HODU_CHECK(dim < (uint64_t{1} << 48), ErrorCode::InvalidArgument, "{}: tensor '{}' has dim {}", what,
                 info.name, dim);
      info.shape[rank - 1 - d] = static_cast<int64_t>(dim);  // ggml lists the innermost dim first
    }
    info.type = r.read<uint32_t>("tensor type");
    info.offset = r.read<uint64_t>("tensor offset");
    infos.push_back(std::move(info));
  }
  uint64_t data_start = (r.position() + alignment - 1) / alignment * alignment;
  HODU_CHECK(data_start <= bytes.size(), ErrorCode::InvalidArgument, "{}: truncated before the tensor data", what);
  std::string_view data = bytes.substr(data_start);

  NamedTensors out;
  for (const auto& info : infos) {
    std::string tensor_what = fmt::format("{} (tensor '{}')", what, info.name);
    int64_t n = checked_numel(info.shape, tensor_what);
    auto plain = plain_ggml_type(info.type);
    uint64_t size;
    if (plain) {
      size = dtype_storage_bytes(*plain, n);
    } else if (info.type == kQ8_0) {
      HODU_CHECK(info.shape.empty() || info.shape.back() % kQ8_0BlockElements == 0, ErrorCode::InvalidArgument,
                 "{}: Q8_0 rows must be a multiple of {} elements", tensor_what, kQ8_0BlockElements);
      size = static_cast<uint64_t>((n + kQ8_0BlockElements - 1) / kQ8_0BlockElements) * kQ8_0BlockBytes;
    } else {
      fail(ErrorCode::Unsupported, "{}: ggml type {} ({}) is not supported (F32, F16, BF16, F64, I8-I64, Q8_0 are)",
           tensor_what, ggml_type_name(info.type), info.type);
    }
    HODU_CHECK(info.offset % alignment == 0 && info.offset <= data.size() && size <= data.size() - info.offset,
               ErrorCode::InvalidArgument, "{}: data [{}, +{}) lies outside the {} bytes of data", tensor_what,
               info.offset, size, data.size());
    std::string_view payload = data.substr(info.offset, size);
    if (plain) out.emplace_back(info.name, Tensor::from_bytes(*plain, info.shape, payload.data(), payload.size()));
    else out.emplace_back(info.name, dequantize_q8_0(payload, info.shape, n));
  }
  return out;
}

}  // namespace hodu::tensor_files
