// hodu_tensor_info for a graph Value: the struct points into this holder, so
// keep the holder where the info must stay valid (a graph, a loaded model).
#pragma once
#include <hodu/plugin.h>

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::plugins {

class TensorInfoHolder {
 public:
  explicit TensorInfoHolder(const Value& value);
  TensorInfoHolder(const TensorInfoHolder&) = delete;
  TensorInfoHolder& operator=(const TensorInfoHolder&) = delete;
  const hodu_tensor_info& info() const { return info_; }

 private:
  std::string name_;
  std::vector<int64_t> shape_;
  std::vector<std::string> dim_names_;
  std::vector<const char*> dim_name_ptrs_;
  hodu_tensor_info info_{};
};

// The infos of a graph's inputs (initializers excluded) and outputs, as a
// graph or a loaded model hands them out by index.
struct GraphTensorInfos {
  std::vector<std::unique_ptr<TensorInfoHolder>> inputs, outputs;
  GraphTensorInfos() = default;
  explicit GraphTensorInfos(const Graph& graph);
};

// `*info = list[i]`, or InvalidArgument (kept for last_error) for a bad index
// or a null `info`. For the C entry points that hand out tensor infos.
hodu_status tensor_info_at(const std::vector<std::unique_ptr<TensorInfoHolder>>& list, int32_t i,
                           hodu_tensor_info* info);

// The Value a hodu_tensor_info describes (unknown dims become unnamed unknowns).
Value value_from_info(const hodu_tensor_info& info, const std::string& what);

}  // namespace hodu::plugins
