// hodu_tensor_info for a graph Value: the struct points into this holder, so
// keep the holder where the info must stay valid (a graph, a loaded model).
#pragma once
#include <hodu/plugin.h>

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

// The Value a hodu_tensor_info describes (unknown dims become unnamed unknowns).
Value value_from_info(const hodu_tensor_info& info, const std::string& what);

}  // namespace hodu::plugins
