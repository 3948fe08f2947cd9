// A value flowing through an engine at run time: a tensor, a sequence of
// tensors, an optional (empty or holding a tensor/sequence), or a map
// (ai.onnx.ml ZipMap output: list of maps). ONNX's SequenceProto/OptionalProto
// load into this.
#pragma once
#include <memory>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace hodu {

struct RuntimeValue;
using TensorSequence = std::vector<Tensor>;

struct RuntimeValue {
  enum class Kind { None, Tensor, Sequence, OptionalEmpty, Map };
  Kind kind = Kind::None;
  Tensor tensor;                 // Kind::Tensor
  TensorSequence sequence;       // Kind::Sequence
  // Kind::OptionalEmpty: an optional with no value. An optional holding a value is
  // represented as that value with `is_optional` set.
  bool is_optional = false;
  DType elem_dtype = DType::Undefined;  // element type of an empty sequence/optional, when known
  // Map (ZipMap, ai.onnx.ml): keys are a 1-D i64 or string tensor, values a 1-D tensor.
  Tensor map_keys, map_values;

  RuntimeValue() = default;
  RuntimeValue(Tensor t) : kind(Kind::Tensor), tensor(std::move(t)) {}  // NOLINT: implicit
  static RuntimeValue make_sequence(TensorSequence s, DType elem = DType::Undefined) {
    RuntimeValue v; v.kind = Kind::Sequence; v.sequence = std::move(s); v.elem_dtype = elem; return v;
  }
  static RuntimeValue empty_optional(DType elem = DType::Undefined) {
    RuntimeValue v; v.kind = Kind::OptionalEmpty; v.is_optional = true; v.elem_dtype = elem; return v;
  }

  bool is_tensor() const { return kind == Kind::Tensor; }
  bool is_sequence() const { return kind == Kind::Sequence; }
  bool is_none() const { return kind == Kind::None; }
};

}  // namespace hodu
