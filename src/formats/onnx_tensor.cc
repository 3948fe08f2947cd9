#include "formats/onnx_tensor.h"

// onnx_pb.h defines ONNX_API before including the generated classes.
#include <onnx/onnx_pb.h>
#include <onnx/onnx-data_pb.h>

#include <complex>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace hodu {
namespace {

std::string read_external(const onnx::TensorProto& p, const std::string& base_dir, const std::string& what,
                          size_t expected_bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = std::stoll(kv.value());
    else if (kv.key() == "length") length = std::stoll(kv.value());
  }
  HODU_CHECK(!location.empty(), ErrorCode::InvalidModel, "{}: external data without a location", what);
  std::filesystem::path rel(location);
  HODU_CHECK(!rel.is_absolute() && location.find("..") == std::string::npos, ErrorCode::InvalidModel,
             "{}: external data location '{}' must be a relative path inside the model's folder", what,
             location);
  std::filesystem::path full = std::filesystem::path(base_dir) / rel;
  std::ifstream f(full, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot open external data file '{}'", what, full.string());
  f.seekg(0, std::ios::end);
  int64_t size = f.tellg();
  if (length < 0) length = static_cast<int64_t>(expected_bytes);
  HODU_CHECK(offset >= 0 && offset + length <= size, ErrorCode::InvalidModel,
             "{}: external data [{}, {}) is outside '{}' ({} bytes)", what, offset, offset + length,
             full.string(), size);
  std::string out(static_cast<size_t>(length), '\0');
  f.seekg(offset);
  f.read(out.data(), length);
  return out;
}

template <typename Src, typename Fn>
void fill_from(const google::protobuf::RepeatedField<Src>& field, int64_t n, const std::string& what, Fn&& put) {
  HODU_CHECK(field.size() == n, ErrorCode::InvalidModel, "{}: has {} values, its shape needs {}", what,
             field.size(), n);
  for (int64_t i = 0; i < n; ++i) put(i, field.Get(static_cast<int>(i)));
}

// `owner` (the same proto, when the caller lets us take its bytes): raw_data is
// moved into the tensor's storage instead of copied.
Tensor tensor_from_onnx_impl(const onnx::TensorProto& p, onnx::TensorProto* owner, const std::string& base_dir,
                             const std::string& what) {
  auto dt = dtype_from_onnx(p.data_type());
  HODU_CHECK(dt.has_value(), ErrorCode::InvalidModel, "{}: unknown data type {}", what, p.data_type());
  DType dtype = *dt;
  std::vector<int64_t> shape(p.dims().begin(), p.dims().end());
  for (auto d : shape)
    HODU_CHECK(d >= 0 && d < (int64_t(1) << 40), ErrorCode::InvalidModel, "{}: invalid dim {} in {}",
               what, d, shape_to_string(shape));
  int64_t n = 1;
  for (auto d : shape) {
    HODU_CHECK(d == 0 || n <= (int64_t(1) << 40) / d, ErrorCode::InvalidModel, "{}: shape {} is too large",
               what, shape_to_string(shape));
    n *= d;
  }
  if (dtype == DType::String) {
    HODU_CHECK(p.string_data_size() == n, ErrorCode::InvalidModel, "{}: has {} strings, its shape needs {}",
               what, p.string_data_size(), n);
    return Tensor::from_strings(shape, {p.string_data().begin(), p.string_data().end()});
  }
  size_t nbytes = dtype_storage_bytes(dtype, n);
  if (p.data_location() == onnx::TensorProto::EXTERNAL || p.external_data_size() > 0) {
    std::string raw = read_external(p, base_dir, what, nbytes);
    HODU_CHECK(raw.size() == nbytes, ErrorCode::InvalidModel, "{}: external data has {} bytes, needs {}",
               what, raw.size(), nbytes);
    return Tensor::from_bytes(dtype, shape, raw.data(), raw.size());
  }
  if (p.has_raw_data()) {
    HODU_CHECK(p.raw_data().size() == nbytes, ErrorCode::InvalidModel, "{} ({}{}): raw_data has {} bytes, needs {}",
               what, dtype_name(dtype), shape_to_string(shape), p.raw_data().size(), nbytes);
    if (owner && nbytes > 0) {
      std::string* raw = owner->release_raw_data();
      return Tensor::from_storage(dtype, shape, Storage::wrap(raw->data(), nbytes, [raw] { delete raw; }));
    }
    return Tensor::from_bytes(dtype, shape, p.raw_data().data(), nbytes);
  }
  Tensor t = Tensor::empty(dtype, shape);
  if (n == 0) return t;
  void* d = t.raw_data();
  switch (dtype) {
    case DType::F32:
      fill_from(p.float_data(), n, what, [&](int64_t i, float v) { static_cast<float*>(d)[i] = v; });
      break;
    case DType::C64:
      fill_from(p.float_data(), 2 * n, what, [&](int64_t i, float v) { static_cast<float*>(d)[i] = v; });
      break;
    case DType::F64:
      fill_from(p.double_data(), n, what, [&](int64_t i, double v) { static_cast<double*>(d)[i] = v; });
      break;
    case DType::C128:
      fill_from(p.double_data(), 2 * n, what, [&](int64_t i, double v) { static_cast<double*>(d)[i] = v; });
      break;
    case DType::I64:
      fill_from(p.int64_data(), n, what, [&](int64_t i, int64_t v) { static_cast<int64_t*>(d)[i] = v; });
      break;
    case DType::U32:
      fill_from(p.uint64_data(), n, what, [&](int64_t i, uint64_t v) { static_cast<uint32_t*>(d)[i] = uint32_t(v); });
      break;
    case DType::U64:
      fill_from(p.uint64_data(), n, what, [&](int64_t i, uint64_t v) { static_cast<uint64_t*>(d)[i] = v; });
      break;
    case DType::U4: case DType::I4: case DType::F4E2M1: case DType::U2: case DType::I2: {
      // int32_data holds the packed bytes, one byte per entry.
      int64_t bytes = static_cast<int64_t>(nbytes);
      fill_from(p.int32_data(), bytes, what, [&](int64_t i, int32_t v) { static_cast<uint8_t*>(d)[i] = uint8_t(v); });
      break;
    }
    default: {
      // int32_data carries bool, int8/16, uint8/16, int32, and the bit patterns of f16/bf16/f8.
      int bits = dtype_bits(dtype);
      fill_from(p.int32_data(), n, what, [&](int64_t i, int32_t v) {
        if (bits == 8) static_cast<uint8_t*>(d)[i] = static_cast<uint8_t>(v);
        else if (bits == 16) static_cast<uint16_t*>(d)[i] = static_cast<uint16_t>(v);
        else static_cast<int32_t*>(d)[i] = v;
      });
      break;
    }
  }
  return t;
}

}  // namespace

Tensor tensor_from_onnx(const onnx::TensorProto& p, const std::string& base_dir, const std::string& what) {
  return tensor_from_onnx_impl(p, nullptr, base_dir, what);
}

Tensor tensor_from_onnx_taking(onnx::TensorProto& p, const std::string& base_dir, const std::string& what) {
  return tensor_from_onnx_impl(p, &p, base_dir, what);
}

void tensor_to_onnx(const Tensor& t, onnx::TensorProto* p) {
  p->set_data_type(dtype_to_onnx(t.dtype()));
  for (auto d : t.shape()) p->add_dims(d);
  Tensor c = t.contiguous();
  if (t.dtype() == DType::String) {
    for (int64_t i = 0; i < c.numel(); ++i) p->add_string_data(c.string_data()[i]);
    return;
  }
  p->set_raw_data(std::string(static_cast<const char*>(c.raw_data()), c.nbytes()));
}

Tensor read_tensor_pb(std::string_view bytes, const std::string& what) {
  onnx::TensorProto p;
  HODU_CHECK(p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), ErrorCode::InvalidArgument,
             "{}: not a valid ONNX TensorProto (truncated or corrupt protobuf)", what);
  return tensor_from_onnx(p, ".", what);
}

std::string write_tensor_pb(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_onnx(t, &p);
  p.set_name(name);
  return p.SerializeAsString();
}

namespace {

RuntimeValue value_from_sequence(const onnx::SequenceProto& s, const std::string& what);

RuntimeValue value_from_optional(const onnx::OptionalProto& o, const std::string& what) {
  switch (o.elem_type()) {
    case onnx::OptionalProto::TENSOR: {
      RuntimeValue v(tensor_from_onnx(o.tensor_value(), ".", what));
      v.is_optional = true;
      return v;
    }
    case onnx::OptionalProto::SEQUENCE: {
      RuntimeValue v = value_from_sequence(o.sequence_value(), what);
      v.is_optional = true;
      return v;
    }
    case onnx::OptionalProto::UNDEFINED:
      return RuntimeValue::empty_optional();
    default:
      fail(ErrorCode::Unsupported, "{}: optional of element type {} is not supported", what,
           static_cast<int>(o.elem_type()));
  }
}

RuntimeValue value_from_sequence(const onnx::SequenceProto& s, const std::string& what) {
  HODU_CHECK(s.elem_type() == onnx::SequenceProto::TENSOR || s.elem_type() == onnx::SequenceProto::UNDEFINED,
             ErrorCode::Unsupported, "{}: sequences of non-tensors are not supported", what);
  TensorSequence seq;
  for (const auto& t : s.tensor_values()) seq.push_back(tensor_from_onnx(t, ".", what));
  return RuntimeValue::make_sequence(std::move(seq));
}

}  // namespace

RuntimeValue read_value_pb(std::string_view bytes, const ValueType* expected, const std::string& what) {
  int size = static_cast<int>(bytes.size());
  if (expected && expected->kind == ValueType::Kind::Sequence) {
    onnx::SequenceProto s;
    HODU_CHECK(s.ParseFromArray(bytes.data(), size), ErrorCode::InvalidArgument,
               "{}: not a valid ONNX SequenceProto", what);
    RuntimeValue v = value_from_sequence(s, what);
    if (expected->elem && expected->elem->kind == ValueType::Kind::Tensor) v.elem_dtype = expected->elem->dtype;
    return v;
  }
  if (expected && expected->kind == ValueType::Kind::Optional) {
    onnx::OptionalProto o;
    HODU_CHECK(o.ParseFromArray(bytes.data(), size), ErrorCode::InvalidArgument,
               "{}: not a valid ONNX OptionalProto", what);
    return value_from_optional(o, what);
  }
  return RuntimeValue(read_tensor_pb(bytes, what));
}

}  // namespace hodu
