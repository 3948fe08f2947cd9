// The state of one tracing run (capture.cc drives it, tracer.cc records into it). Internal.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/tensor/tensor_impl.h"
#include "ir/graph.h"

namespace hodu::eager::trace {

struct TraceState {
  Graph graph;
  std::unordered_map<const TensorImpl*, std::string> names;       // traced values
  std::unordered_map<const TensorImpl*, std::string> parameters;  // becomes an initializer of this name
  std::unordered_map<const TensorImpl*, hodu::Tensor> parameter_values;  // as they were when tracing began
  std::set<std::string> constants;                                // initializers made from constants
  std::vector<std::shared_ptr<TensorImpl>> keep;                  // keeps the keys' tensors alive
  int64_t counter = 0;
  bool paused = false;

  std::string fresh(const std::string& prefix);
  std::string name_of(const Tensor& t);  // an input's name; unseen tensors become initializers
  void keep_alive(const Tensor& t);
};

TraceState* current_state();
void set_current_state(TraceState* s);

}  // namespace hodu::eager::trace
