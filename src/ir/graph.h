// The graph IR. Values are named (as in ONNX); a Node reads and writes values by
// name, "" standing for an omitted optional input/output. Nodes are kept in
// topological order. Subgraphs (If/Loop/Scan bodies) are Graph attributes and
// may read values of enclosing graphs by name.
//
// Ops follow one table (ir/schema.h): a standard op always has the semantics of
// its newest ONNX version; the ONNX importer rewrites older versions.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace hodu {

class Graph;

// The type of a value: a tensor (dtype + shape), a sequence or optional of a
// type, or a map (ai.onnx.ml).
struct ValueType {
  enum class Kind { Unknown, Tensor, SparseTensor, Sequence, Optional, Map };
  Kind kind = Kind::Unknown;
  DType dtype = DType::Undefined;  // Tensor/SparseTensor element type; Map value... see `elem`
  Shape shape;                     // Tensor/SparseTensor
  DType key_type = DType::Undefined;  // Map key
  std::shared_ptr<ValueType> elem;    // Sequence/Optional element, Map value

  static ValueType tensor(DType dt, Shape s) {
    ValueType t; t.kind = Kind::Tensor; t.dtype = dt; t.shape = std::move(s); return t;
  }
  static ValueType sequence(ValueType e) {
    ValueType t; t.kind = Kind::Sequence; t.elem = std::make_shared<ValueType>(std::move(e)); return t;
  }
  static ValueType optional(ValueType e) {
    ValueType t; t.kind = Kind::Optional; t.elem = std::make_shared<ValueType>(std::move(e)); return t;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  bool operator==(const ValueType& o) const;
  std::string to_string() const;  // "f32[batch, 3]", "seq<f32[?]>", "opt<i64[]>", "map<i64, f32>"
};

struct Value {
  std::string name;
  ValueType type;
  std::string doc;
  bool operator==(const Value& o) const { return name == o.name && type == o.type; }
};

struct Attribute {
  enum class Kind { Undefined, Float, Int, String, Tensor, Graph, Floats, Ints, Strings, Tensors, Graphs,
                    TypeProto, TypeProtos, SparseTensor };
  std::string name;
  Kind kind = Kind::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::vector<ValueType> types;  // TypeProto (one) / TypeProtos
  std::string ref_attr_name;     // inside function bodies: refers to the caller's attribute
  std::string doc;

  static Attribute make_int(std::string name, int64_t v);
  static Attribute make_float(std::string name, float v);
  static Attribute make_string(std::string name, std::string v);
  static Attribute make_ints(std::string name, std::vector<int64_t> v);
  static Attribute make_floats(std::string name, std::vector<float> v);
  static Attribute make_strings(std::string name, std::vector<std::string> v);
  static Attribute make_tensor(std::string name, Tensor v);
  static Attribute make_graph(std::string name, std::shared_ptr<Graph> v);

  bool operator==(const Attribute& o) const;  // deep (tensors by value, graphs structurally)
};

const char* attribute_kind_name(Attribute::Kind k);

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" = ai.onnx, "ai.onnx.ml", "hodu", ...
  std::vector<std::string> inputs;   // "" = omitted optional input
  std::vector<std::string> outputs;  // "" = omitted optional output
  std::vector<Attribute> attributes;
  std::string doc;

  const Attribute* attr(const std::string& name) const;
  Attribute* attr(const std::string& name);
  bool has_attr(const std::string& name) const { return attr(name) != nullptr; }
  void set_attr(Attribute a);  // replaces an attribute of the same name
  bool remove_attr(const std::string& name);

  // Typed getters: the default when absent; InvalidModel when present with another kind.
  int64_t get_int(const std::string& name, int64_t def) const;
  float get_float(const std::string& name, float def) const;
  std::string get_string(const std::string& name, const std::string& def) const;
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<float> get_floats(const std::string& name, std::vector<float> def = {}) const;
  std::vector<std::string> get_strings(const std::string& name, std::vector<std::string> def = {}) const;
  const Tensor* get_tensor(const std::string& name) const;
  const Graph* get_graph(const std::string& name) const;

  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool has_output(size_t i) const { return i < outputs.size() && !outputs[i].empty(); }
  // "node 'conv1' (Conv)" — used at the start of error messages.
  std::string describe() const;
  bool operator==(const Node& o) const;
};

class Graph {
 public:
  std::string name;
  std::string doc;
  std::vector<Value> inputs;    // graph inputs (initializers are not listed here unless overridable)
  std::vector<Value> outputs;
  std::vector<Node> nodes;      // topological order
  std::vector<std::pair<std::string, Tensor>> initializers;  // constant tensors, in file order
  std::map<std::string, ValueType> value_types;              // known types of intermediate values

  const Tensor* initializer(const std::string& name) const;
  void set_initializer(const std::string& name, Tensor t);  // adds or replaces
  bool remove_initializer(const std::string& name);
  const Value* input(const std::string& name) const;
  const Value* output(const std::string& name) const;
  // The type of any value: graph input/output, initializer or intermediate.
  std::optional<ValueType> type_of(const std::string& value) const;
  // Index of the node producing `value`, or -1.
  int producer_of(const std::string& value) const;
  // Fresh value/node name with the given prefix, unique in this graph.
  std::string unique_name(const std::string& prefix) const;
  int64_t parameter_count() const;  // elements in initializers
  int64_t parameter_bytes() const;

  bool operator==(const Graph& o) const;  // deep structural equality
};

// A model: a main graph plus the file's metadata. Opset versions record what
// the source file declared; the graph itself is in canonical (newest) form.
struct Model {
  Graph graph;
  int64_t ir_version = 10;
  std::map<std::string, int64_t> opset_imports;  // domain → version as imported ("" = ai.onnx)
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc;
  std::vector<std::pair<std::string, std::string>> metadata;

  bool operator==(const Model& o) const;
};

}  // namespace hodu
