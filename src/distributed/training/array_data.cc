#include "distributed/training/array_data.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace hodu::distributed {

ArrayData::ArrayData(NamedTensors arrays, std::string source) : source_(std::move(source)) {
  for (auto& [name, t] : arrays) {
    names_.push_back(name);
    arrays_[name] = t;
  }
}

ArrayData ArrayData::load(const std::string& path) {
  HODU_CHECK(std::filesystem::exists(path), ErrorCode::Io, "--data '{}': no such file", path);
  NamedTensors arrays = read_tensor_file(path);
  HODU_CHECK(!arrays.empty(), ErrorCode::InvalidArgument, "--data '{}' holds no arrays", path);
  return ArrayData(std::move(arrays), std::filesystem::path(path).filename().string());
}

bool ArrayData::has(const std::string& array) const { return arrays_.count(array) > 0; }

void ArrayData::bind(const std::vector<Value>& inputs, const std::map<std::string, std::string>& names, int64_t batch) {
  bound_.clear();
  rows_ = -1;
  std::string first;
  for (const auto& [input, array] : names) {
    bool known = false;
    for (const auto& in : inputs) known = known || in.name == input;
    std::string list;
    for (const auto& in : inputs) list += (list.empty() ? "'" : ", '") + in.name + "'";
    HODU_CHECK(known, ErrorCode::InvalidArgument, "'{}={}': the model has no input '{}' (its inputs: {})", input, array,
               input, list);
  }
  for (const auto& in : inputs) {
    auto it = names.find(in.name);
    const std::string array = it == names.end() ? in.name : it->second;
    auto a = arrays_.find(array);
    if (a == arrays_.end()) {
      std::string list;
      for (const auto& n : names_) list += (list.empty() ? "'" : ", '") + n + "'";
      fail(ErrorCode::InvalidArgument,
           "{} has no array '{}' for the model input '{}' (its arrays: {}); map one with --input {}=ARRAY{}", source_,
           array, in.name, list, in.name, in.type.dtype == DType::I64 || in.type.dtype == DType::I32 ? " or --labels ARRAY" : "");
    }
    const Tensor& t = a->second;
    const std::string what = fmt::format("{}'s '{}' (for the model input '{}')", source_, array, in.name);
    HODU_CHECK(in.type.is_tensor(), ErrorCode::Unsupported, "the model input '{}' is {}, not a tensor", in.name,
               in.type.to_string());
    HODU_CHECK(t.dtype() != DType::String && !dtype_is_subbyte(t.dtype()), ErrorCode::Unsupported,
               "{} is {}: string and packed arrays are not batched", what, t.type_string());
    HODU_CHECK(in.type.dtype == DType::Undefined || t.dtype() == in.type.dtype, ErrorCode::InvalidArgument,
               "{} is {}, the input is {}: convert the array (numpy: a.astype(...))", what, t.type_string(),
               in.type.to_string());
    HODU_CHECK(t.rank() >= 1, ErrorCode::InvalidArgument, "{} is a scalar; arrays hold one row per sample", what);
    const auto& dims = in.type.shape.dims();
    if (in.type.shape.rank_known()) {
      HODU_CHECK(static_cast<int64_t>(dims.size()) == t.rank(), ErrorCode::InvalidArgument,
                 "{} is {}: rank {}, the input {} has rank {}", what, t.type_string(), t.rank(), in.type.to_string(),
                 dims.size());
      if (dims[0].is_known())
        HODU_CHECK(dims[0].value == batch, ErrorCode::InvalidArgument,
                   "the model input '{}' is {}: its batch dim is fixed to {}, but --batch is {}; export the model "
                   "with a dynamic batch (torch.onnx.export(..., dynamic_axes={{'{}': {{0: 'batch'}}}}))",
                   in.name, in.type.to_string(), dims[0].value, batch, in.name);
      for (size_t d = 1; d < dims.size(); ++d)
        HODU_CHECK(!dims[d].is_known() || dims[d].value == t.dim(static_cast<int64_t>(d)), ErrorCode::InvalidArgument,
                   "{} is {}: dim {} is {}, the input {} wants {}", what, t.type_string(), d,
                   t.dim(static_cast<int64_t>(d)), in.type.to_string(), dims[d].value);
    }
    if (rows_ < 0) {
      rows_ = t.dim(0);
      first = array;
    }
    HODU_CHECK(t.dim(0) == rows_, ErrorCode::InvalidArgument, "{}'s arrays '{}' and '{}' have {} and {} rows", source_,
               first, array, rows_, t.dim(0));
    bound_.emplace_back(in.name, array);
  }
  HODU_CHECK(!bound_.empty(), ErrorCode::InvalidArgument, "the model has no data inputs to feed from {}", source_);
}

std::map<std::string, Tensor> ArrayData::batch(const std::vector<int64_t>& rows) const {
  std::map<std::string, Tensor> out;
  for (const auto& [input, array] : bound_) {
    const Tensor a = arrays_.at(array).contiguous();
    std::vector<int64_t> shape = a.shape();
    const size_t row_bytes = a.nbytes() / static_cast<size_t>(std::max<int64_t>(a.dim(0), 1));
    shape[0] = static_cast<int64_t>(rows.size());
    Tensor t = Tensor::empty(a.dtype(), shape);
    const auto* src = static_cast<const char*>(a.raw_data());
    auto* dst = static_cast<char*>(t.raw_data());
    for (size_t i = 0; i < rows.size(); ++i) {
      HODU_CHECK(rows[i] >= 0 && rows[i] < rows_, ErrorCode::Internal, "row {} of {}", rows[i], rows_);
      std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
    }
    out[input] = t;
  }
  return out;
}

}  // namespace hodu::distributed
