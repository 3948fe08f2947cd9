#include "plugins/tensor_info.h"

#include "core/error.h"
#include "core/dlpack_tensor.h"
#include "plugins/plugin_status.h"

namespace hodu::plugins {

TensorInfoHolder::TensorInfoHolder(const Value& value) : name_(value.name) {
  info_.name = name_.c_str();
  HODU_CHECK(value.type.kind == ValueType::Kind::Tensor, ErrorCode::Unsupported,
             "'{}' is a {}; plugins exchange tensors only", value.name, value.type.to_string());
  info_.dtype = to_dl_dtype(value.type.dtype, "'" + value.name + "'");
  const Shape& s = value.type.shape;
  if (!s.rank_known()) {
    info_.ndim = -1;
    return;
  }
  bool any_symbol = false;
  for (int64_t d = 0; d < s.rank(); ++d) {
    shape_.push_back(s[d].is_known() ? s[d].value : -1);
    dim_names_.push_back(s[d].is_symbolic() ? s[d].symbol : "");
    any_symbol |= s[d].is_symbolic();
  }
  for (const auto& n : dim_names_) dim_name_ptrs_.push_back(n.empty() ? nullptr : n.c_str());
  info_.ndim = static_cast<int32_t>(s.rank());
  info_.shape = shape_.data();
  info_.dim_names = any_symbol ? dim_name_ptrs_.data() : nullptr;
}

GraphTensorInfos::GraphTensorInfos(const Graph& graph) {
  for (const auto& in : graph.inputs)
    if (!graph.initializer(in.name)) inputs.push_back(std::make_unique<TensorInfoHolder>(in));
  for (const auto& out : graph.outputs) outputs.push_back(std::make_unique<TensorInfoHolder>(out));
}

hodu_status tensor_info_at(const std::vector<std::unique_ptr<TensorInfoHolder>>& list, int32_t i,
                           hodu_tensor_info* info) {
  return guarded([&] {
    HODU_CHECK(info && i >= 0 && i < static_cast<int32_t>(list.size()), ErrorCode::InvalidArgument,
               "index {} out of range (0..{})", i, list.size());
    *info = list[i]->info();
  });
}

Value value_from_info(const hodu_tensor_info& info, const std::string& what) {
  HODU_CHECK(info.name, ErrorCode::InvalidModel, "{}: a tensor info has no name", what);
  std::string name = info.name;
  DType dtype = from_dl_dtype(info.dtype, what + ": '" + name + "'");
  if (info.ndim < 0) return Value{name, ValueType::tensor(dtype, Shape::unknown_rank()), {}};
  HODU_CHECK(info.ndim == 0 || info.shape, ErrorCode::InvalidModel, "{}: '{}' has no shape", what, name);
  std::vector<Dim> dims;
  for (int32_t d = 0; d < info.ndim; ++d) {
    const char* sym = info.dim_names ? info.dim_names[d] : nullptr;
    if (info.shape[d] >= 0) dims.push_back(Dim(info.shape[d]));
    else if (sym && *sym) dims.push_back(Dim::sym(sym));
    else dims.push_back(Dim::unknown());
  }
  return Value{name, ValueType::tensor(dtype, Shape(std::move(dims))), {}};
}

}  // namespace hodu::plugins
