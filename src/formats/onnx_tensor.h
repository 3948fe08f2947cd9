// ONNX TensorProto / SequenceProto / OptionalProto ↔ hodu tensors and runtime
// values (the `.pb` tensor files of the ONNX test data and initializers).
#pragma once
#include <string>
#include <string_view>

#include "core/runtime_value.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace onnx {
class TensorProto;
}

namespace hodu {

// `base_dir` resolves external data files (data_location = EXTERNAL);
// `what` names the tensor in error messages.
Tensor tensor_from_onnx(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what);
// Same, but moves raw_data out of `proto` instead of copying it (the importer
// discards its ModelProto, and weights are most of a model's bytes).
Tensor tensor_from_onnx_taking(onnx::TensorProto& proto, const std::string& base_dir, const std::string& what);
void tensor_to_onnx(const Tensor& t, onnx::TensorProto* proto);

// A serialized TensorProto, SequenceProto or OptionalProto (`.pb` file). The
// protobuf bytes do not say which: `expected` (the model's type for the value)
// does; without it a TensorProto is assumed.
RuntimeValue read_value_pb(std::string_view bytes, const ValueType* expected, const std::string& what);
Tensor read_tensor_pb(std::string_view bytes, const std::string& what);
std::string write_tensor_pb(const Tensor& t, const std::string& name);

}  // namespace hodu
