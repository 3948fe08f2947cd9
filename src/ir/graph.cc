#include "ir/graph.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace hodu {

bool ValueType::operator==(const ValueType& o) const {
  if (kind != o.kind || dtype != o.dtype || key_type != o.key_type || !(shape == o.shape)) return false;
  if (!elem || !o.elem) return !elem && !o.elem;
  return *elem == *o.elem;
}

std::string ValueType::to_string() const {
  switch (kind) {
    case Kind::Unknown: return "?";
    case Kind::Tensor: return std::string(dtype_name(dtype)) + shape.to_string();
    case Kind::SparseTensor: return "sparse<" + std::string(dtype_name(dtype)) + shape.to_string() + ">";
    case Kind::Sequence: return "seq<" + (elem ? elem->to_string() : "?") + ">";
    case Kind::Optional: return "opt<" + (elem ? elem->to_string() : "?") + ">";
    case Kind::Map:
      return "map<" + std::string(dtype_name(key_type)) + ", " + (elem ? elem->to_string() : "?") + ">";
  }
  return "?";
}

// ---- Attribute -------------------------------------------------------------

Attribute Attribute::make_int(std::string n, int64_t v) { Attribute a; a.name = std::move(n); a.kind = Kind::Int; a.i = v; return a; }
Attribute Attribute::make_float(std::string n, float v) { Attribute a; a.name = std::move(n); a.kind = Kind::Float; a.f = v; return a; }
Attribute Attribute::make_string(std::string n, std::string v) { Attribute a; a.name = std::move(n); a.kind = Kind::String; a.s = std::move(v); return a; }
Attribute Attribute::make_ints(std::string n, std::vector<int64_t> v) { Attribute a; a.name = std::move(n); a.kind = Kind::Ints; a.ints = std::move(v); return a; }
Attribute Attribute::make_floats(std::string n, std::vector<float> v) { Attribute a; a.name = std::move(n); a.kind = Kind::Floats; a.floats = std::move(v); return a; }
Attribute Attribute::make_strings(std::string n, std::vector<std::string> v) { Attribute a; a.name = std::move(n); a.kind = Kind::Strings; a.strings = std::move(v); return a; }
Attribute Attribute::make_tensor(std::string n, Tensor v) { Attribute a; a.name = std::move(n); a.kind = Kind::Tensor; a.t = std::move(v); return a; }
Attribute Attribute::make_graph(std::string n, std::shared_ptr<Graph> v) { Attribute a; a.name = std::move(n); a.kind = Kind::Graph; a.g = std::move(v); return a; }

namespace {
bool tensor_eq(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || tensors_bitwise_equal(a, b);
}
bool float_bits_eq(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
}  // namespace

bool Attribute::operator==(const Attribute& o) const {
  if (name != o.name || kind != o.kind || ref_attr_name != o.ref_attr_name) return false;
  if (!float_bits_eq(f, o.f) || i != o.i || s != o.s || ints != o.ints || strings != o.strings) return false;
  if (floats.size() != o.floats.size()) return false;
  for (size_t k = 0; k < floats.size(); ++k)
    if (!float_bits_eq(floats[k], o.floats[k])) return false;
  if (!tensor_eq(t, o.t) || tensors.size() != o.tensors.size()) return false;
  for (size_t k = 0; k < tensors.size(); ++k)
    if (!tensor_eq(tensors[k], o.tensors[k])) return false;
  if (bool(g) != bool(o.g) || (g && !(*g == *o.g))) return false;
  if (graphs.size() != o.graphs.size()) return false;
  for (size_t k = 0; k < graphs.size(); ++k)
    if (!(*graphs[k] == *o.graphs[k])) return false;
  return types == o.types;
}

const char* attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Undefined: return "undefined";
    case Attribute::Kind::Float: return "float";
    case Attribute::Kind::Int: return "int";
    case Attribute::Kind::String: return "string";
    case Attribute::Kind::Tensor: return "tensor";
    case Attribute::Kind::Graph: return "graph";
    case Attribute::Kind::Floats: return "floats";
    case Attribute::Kind::Ints: return "ints";
    case Attribute::Kind::Strings: return "strings";
    case Attribute::Kind::Tensors: return "tensors";
    case Attribute::Kind::Graphs: return "graphs";
    case Attribute::Kind::TypeProto: return "type";
    case Attribute::Kind::TypeProtos: return "types";
    case Attribute::Kind::SparseTensor: return "sparse_tensor";
  }
  return "?";
}

// ---- Node ------------------------------------------------------------------

const Attribute* Node::attr(const std::string& n) const {
  for (const auto& a : attributes)
    if (a.name == n) return &a;
  return nullptr;
}
Attribute* Node::attr(const std::string& n) {
  for (auto& a : attributes)
    if (a.name == n) return &a;
  return nullptr;
}
void Node::set_attr(Attribute a) {
  if (auto* existing = attr(a.name)) *existing = std::move(a);
  else attributes.push_back(std::move(a));
}
bool Node::remove_attr(const std::string& n) {
  auto it = std::find_if(attributes.begin(), attributes.end(), [&](const Attribute& a) { return a.name == n; });
  if (it == attributes.end()) return false;
  attributes.erase(it);
  return true;
}

std::string Node::describe() const {
  std::string op = domain.empty() || domain == "ai.onnx" ? op_type : domain + "." + op_type;
  return name.empty() ? fmt::format("node ({}) producing '{}'", op, outputs.empty() ? "" : outputs[0])
                      : fmt::format("node '{}' ({})", name, op);
}

namespace {
const Attribute* typed(const Node& n, const std::string& name, Attribute::Kind kind) {
  const Attribute* a = n.attr(name);
  if (!a) return nullptr;
  if (a->kind != kind)
    fail(ErrorCode::InvalidModel, "{}: attribute '{}' is {}, expected {}", n.describe(), name,
         attribute_kind_name(a->kind), attribute_kind_name(kind));
  return a;
}
}  // namespace

int64_t Node::get_int(const std::string& n, int64_t def) const {
  auto* a = typed(*this, n, Attribute::Kind::Int);
  return a ? a->i : def;
}
float Node::get_float(const std::string& n, float def) const {
  const Attribute* a = attr(n);
  if (a && a->kind == Attribute::Kind::Int) return static_cast<float>(a->i);  // tolerate ints for floats
  a = typed(*this, n, Attribute::Kind::Float);
  return a ? a->f : def;
}
std::string Node::get_string(const std::string& n, const std::string& def) const {
  auto* a = typed(*this, n, Attribute::Kind::String);
  return a ? a->s : def;
}
std::vector<int64_t> Node::get_ints(const std::string& n, std::vector<int64_t> def) const {
  auto* a = typed(*this, n, Attribute::Kind::Ints);
  return a ? a->ints : def;
}
std::vector<float> Node::get_floats(const std::string& n, std::vector<float> def) const {
  auto* a = typed(*this, n, Attribute::Kind::Floats);
  return a ? a->floats : def;
}
std::vector<std::string> Node::get_strings(const std::string& n, std::vector<std::string> def) const {
  auto* a = typed(*this, n, Attribute::Kind::Strings);
  return a ? a->strings : def;
}
const Tensor* Node::get_tensor(const std::string& n) const {
  auto* a = typed(*this, n, Attribute::Kind::Tensor);
  return a ? &a->t : nullptr;
}
const Graph* Node::get_graph(const std::string& n) const {
  auto* a = typed(*this, n, Attribute::Kind::Graph);
  return a ? a->g.get() : nullptr;
}

bool Node::operator==(const Node& o) const {
  return name == o.name && op_type == o.op_type && domain == o.domain && inputs == o.inputs &&
         outputs == o.outputs && attributes == o.attributes;
}

// ---- Graph -----------------------------------------------------------------

const Tensor* Graph::initializer(const std::string& n) const {
  for (const auto& [k, v] : initializers)
    if (k == n) return &v;
  return nullptr;
}
void Graph::set_initializer(const std::string& n, Tensor t) {
  for (auto& [k, v] : initializers)
    if (k == n) { v = std::move(t); return; }
  initializers.emplace_back(n, std::move(t));
}
bool Graph::remove_initializer(const std::string& n) {
  auto it = std::find_if(initializers.begin(), initializers.end(), [&](const auto& p) { return p.first == n; });
  if (it == initializers.end()) return false;
  initializers.erase(it);
  return true;
}
const Value* Graph::input(const std::string& n) const {
  for (const auto& v : inputs)
    if (v.name == n) return &v;
  return nullptr;
}
const Value* Graph::output(const std::string& n) const {
  for (const auto& v : outputs)
    if (v.name == n) return &v;
  return nullptr;
}

std::optional<ValueType> Graph::type_of(const std::string& n) const {
  if (auto* v = input(n); v && v->type.kind != ValueType::Kind::Unknown) return v->type;
  if (auto* t = initializer(n)) return ValueType::tensor(t->dtype(), Shape::from(t->shape()));
  if (auto it = value_types.find(n); it != value_types.end()) return it->second;
  if (auto* v = output(n); v && v->type.kind != ValueType::Kind::Unknown) return v->type;
  return std::nullopt;
}

int Graph::producer_of(const std::string& value) const {
  for (size_t k = 0; k < nodes.size(); ++k)
    for (const auto& o : nodes[k].outputs)
      if (o == value) return static_cast<int>(k);
  return -1;
}

std::string Graph::unique_name(const std::string& prefix) const {
  std::unordered_set<std::string> used;
  for (const auto& v : inputs) used.insert(v.name);
  for (const auto& v : outputs) used.insert(v.name);
  for (const auto& [k, v] : initializers) used.insert(k);
  for (const auto& n : nodes) {
    used.insert(n.name);
    for (const auto& o : n.outputs) used.insert(o);
  }
  if (!used.count(prefix)) return prefix;
  for (int k = 1;; ++k) {
    std::string c = prefix + "_" + std::to_string(k);
    if (!used.count(c)) return c;
  }
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const auto& [k, t] : initializers) n += t.numel();
  return n;
}
int64_t Graph::parameter_bytes() const {
  int64_t n = 0;
  for (const auto& [k, t] : initializers) n += static_cast<int64_t>(t.nbytes());
  return n;
}

bool Graph::operator==(const Graph& o) const {
  if (name != o.name || inputs != o.inputs || outputs != o.outputs || nodes != o.nodes ||
      value_types != o.value_types || initializers.size() != o.initializers.size())
    return false;
  for (size_t k = 0; k < initializers.size(); ++k) {
    if (initializers[k].first != o.initializers[k].first) return false;
    if (!tensor_eq(initializers[k].second, o.initializers[k].second)) return false;
  }
  return true;
}

bool Model::operator==(const Model& o) const {
  return graph == o.graph && ir_version == o.ir_version && opset_imports == o.opset_imports &&
         producer_name == o.producer_name && producer_version == o.producer_version && domain == o.domain &&
         model_version == o.model_version && doc == o.doc && metadata == o.metadata;
}

}  // namespace hodu
