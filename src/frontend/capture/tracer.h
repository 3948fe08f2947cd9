// Recording eager ops into a Graph while hodu::capture runs a forward. Every
// op calls record() with its inputs and outputs; a tensor the capture has not
// seen (a constant made inside the forward, a scalar operand) becomes an
// initializer. Internal.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "hodu/tensor.h"

namespace hodu::eager::trace {

// A capture is recording on this thread (and is not paused).
bool active();

// Stops recording in its scope: an op built from other ops records itself once.
class Pause {
 public:
  Pause();
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

 private:
  bool previous_;
};

// Records `op_type`(inputs) -> outputs. Undefined inputs are omitted optional inputs ("").
void record(const std::string& op_type, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            std::vector<Attribute> attributes = {}, const std::string& domain = "");
// An i64 1-D tensor of `values` to pass to record() as a shape/axes input.
Tensor ints(const std::vector<int64_t>& values);
// A one-element tensor of `dtype` holding `value`, as a constant operand.
Tensor constant(double value, DType dtype);
// `y` is x with training-mode dropout of ratio p (ONNX Dropout, its own mask at run time).
void record_dropout(const Tensor& x, const Tensor& y, double p);
// After an in-place op: `self` now holds the value recorded for `result`.
void alias(const Tensor& self, const Tensor& result);

}  // namespace hodu::eager::trace
