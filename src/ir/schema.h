// The op schema registry: one entry per (domain, op, since_version) for every
// standard ONNX op up to opset 27 (ai.onnx), the ai.onnx.ml / ai.onnx.preview /
// ai.onnx.preview.training ops, and hodu's own fused ops (domain "hodu").
// The same table drives the verifier, shape inference, ONNX import/export,
// HoduScript and `hodu ops`.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu {

struct FormalParameter {
  enum class Option { Single, Optional, Variadic };
  std::string name;
  std::string type_str;  // "T", "tensor(int64)", ...
  Option option = Option::Single;
  bool homogeneous = true;  // variadic: all the same type
  int min_arity = 1;        // variadic: at least this many
};

struct AttributeSchema {
  std::string name;
  Attribute::Kind kind = Attribute::Kind::Undefined;
  bool required = false;
  std::optional<Attribute> default_value;
};

struct TypeConstraint {
  std::string name;                  // "T"
  std::vector<std::string> allowed;  // "tensor(float)", "seq(tensor(int64))", "optional(...)"
};

struct InferenceContext;
using InferenceFn = std::function<void(InferenceContext&)>;

struct OpSchema {
  std::string domain;  // "" for ai.onnx
  std::string name;
  int since_version = 1;
  std::vector<FormalParameter> inputs, outputs;
  std::vector<AttributeSchema> attributes;
  std::vector<TypeConstraint> type_constraints;
  int min_inputs = 0, max_inputs = 0, min_outputs = 0, max_outputs = 0;  // max: INT32_MAX for variadic
  bool deprecated = false;
  std::string doc;
  InferenceFn infer;  // may be empty: outputs stay of unknown type

  const AttributeSchema* attribute(const std::string& n) const;
};

class SchemaRegistry {
 public:
  static const SchemaRegistry& instance();
  // The schema of `op` in effect at `opset` (the newest version <= opset); by
  // default the newest version of all. nullptr when unknown.
  const OpSchema* find(const std::string& domain, const std::string& op, int opset = 1 << 30) const;
  // All versions of an op, oldest first.
  std::vector<const OpSchema*> versions(const std::string& domain, const std::string& op) const;
  // Newest version of every op, sorted by domain then name.
  std::vector<const OpSchema*> latest() const;
  // Highest opset version known for a domain (27 for ai.onnx).
  int max_opset(const std::string& domain) const;

  void add(OpSchema schema);  // used at start-up by the table and by hodu's fused ops

 private:
  SchemaRegistry();
  std::map<std::pair<std::string, std::string>, std::vector<OpSchema>> ops_;
};

// Canonical domain name: "" and "ai.onnx" are the same domain, written "".
std::string canonical_domain(const std::string& domain);

// ---- Type and shape inference ----------------------------------------------

struct InferenceContext {
  const Node& node;
  std::vector<std::optional<ValueType>> input_types;  // nullopt: omitted or unknown
  std::vector<const Tensor*> input_constants;          // non-null when the input is an initializer/constant
  std::vector<std::optional<ValueType>> output_types;  // to fill

  size_t num_inputs() const { return input_types.size(); }
  const ValueType* input(size_t i) const {
    return i < input_types.size() && input_types[i] ? &*input_types[i] : nullptr;
  }
  const Tensor* constant(size_t i) const { return i < input_constants.size() ? input_constants[i] : nullptr; }
  void set_output(size_t i, ValueType t) {
    if (i < output_types.size()) output_types[i] = std::move(t);
  }
};

// Infers the types of every node output in order (subgraphs too), storing them
// in graph.value_types. Symbolic dims flow through (e.g. Add of [batch, 3] and
// [3] gives [batch, 3]). Throws InvalidModel on a definite contradiction (e.g.
// MatMul of [2, 3] and [4, 5]) naming the node.
void infer_types(Graph& graph);
// The same, going on past contradictions: each is returned (naming the node) and
// that node's outputs stay of unknown type. For `hodu info`'s problem list.
struct InferenceProblem {
  std::string node;     // the node's name ("" when it has none)
  std::string op;       // "Conv", "hodu.FusedConv"
  std::string message;  // names the node, op and values
};
std::vector<InferenceProblem> infer_types_collecting_problems(Graph& graph);

}  // namespace hodu
