#include "passes/graph_utils.h"

#include <functional>
#include <limits>

namespace hodu::passes {
namespace {

void collect_subgraph_reads(const Graph& sg, std::set<std::string>& reads);

// What the subgraphs of `n` read (names their nodes read, their outputs).
void collect_node_subgraph_reads(const Node& n, std::set<std::string>& reads) {
  for (const auto& a : n.attributes) {
    if (a.g) collect_subgraph_reads(*a.g, reads);
    for (const auto& s : a.graphs) collect_subgraph_reads(*s, reads);
  }
}

// Only the outer values: a name the subgraph defines itself (an input, an initializer, a node's
// output) is its own, even where it repeats an outer name (a fused body's output has its node's).
void collect_subgraph_reads(const Graph& sg, std::set<std::string>& reads) {
  std::set<std::string> defined, used;
  for (const auto& in : sg.inputs) defined.insert(in.name);
  for (const auto& [name, t] : sg.initializers) defined.insert(name);
  for (const auto& n : sg.nodes) {
    std::set<std::string> here;
    for (const auto& in : n.inputs)
      if (!in.empty()) here.insert(in);
    collect_node_subgraph_reads(n, here);
    for (const auto& r : here)
      if (!defined.count(r)) used.insert(r);
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
  }
  for (const auto& o : sg.outputs)
    if (!defined.count(o.name)) used.insert(o.name);
  reads.merge(used);
}

void rename_in_subgraph(Graph& sg, const std::string& from, const std::string& to) {
  // A subgraph that defines `from` itself shadows the outer value.
  for (const auto& in : sg.inputs)
    if (in.name == from) return;
  for (auto& n : sg.nodes) {
    for (auto& in : n.inputs)
      if (in == from) in = to;
    for (auto& a : n.attributes) {
      if (a.g) rename_in_subgraph(*a.g, from, to);
      for (auto& s : a.graphs) rename_in_subgraph(*s, from, to);
    }
  }
  for (auto& o : sg.outputs)
    if (o.name == from && sg.producer_of(from) < 0 && !sg.initializer(from)) {
      // A subgraph output that passes an outer value straight through: keep its name, add an Identity.
      Node id;
      id.op_type = "Identity";
      id.inputs = {to};
      id.outputs = {from};
      sg.nodes.push_back(id);
    }
}

}  // namespace

std::set<std::string> reads_of(const Node& n) {
  std::set<std::string> reads;
  for (const auto& in : n.inputs)
    if (!in.empty()) reads.insert(in);
  collect_node_subgraph_reads(n, reads);
  return reads;
}

std::map<std::string, int> use_counts(const Graph& g) {
  std::map<std::string, int> uses;
  for (const auto& n : g.nodes) {
    for (const auto& in : n.inputs)
      if (!in.empty()) ++uses[in];
    std::set<std::string> reads;
    collect_node_subgraph_reads(n, reads);
    for (const auto& r : reads) ++uses[r];
  }
  for (const auto& o : g.outputs) ++uses[o.name];
  return uses;
}

std::map<std::string, std::vector<size_t>> consumers(const Graph& g) {
  std::map<std::string, std::vector<size_t>> c;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& in : g.nodes[k].inputs)
      if (!in.empty()) c[in].push_back(k);
  return c;
}

int sole_reader(const Graph& g, const std::map<std::string, int>& uses,
                const std::map<std::string, std::vector<size_t>>& readers, const std::string& value) {
  auto u = uses.find(value);
  auto r = readers.find(value);
  if (u == uses.end() || u->second != 1 || r == readers.end() || r->second.size() != 1) return -1;
  if (is_graph_output(g, value)) return -1;
  return static_cast<int>(r->second[0]);
}

std::string other_input(const Node& n, const std::string& value) {
  if (n.inputs.size() != 2) return {};
  return n.inputs[0] == value ? n.inputs[1] : n.inputs[1] == value ? n.inputs[0] : std::string();
}

const Tensor* constant_of(const Graph& g, const std::string& value) {
  if (value.empty() || g.input(value)) return nullptr;
  return g.initializer(value);
}

std::optional<double> scalar_constant(const Graph& g, const std::string& value) {
  const Tensor* t = constant_of(g, value);
  if (!t || t->numel() != 1 || t->dtype() == DType::String) return std::nullopt;
  return t->get_double(0);
}

bool is_graph_output(const Graph& g, const std::string& value) { return g.output(value) != nullptr; }

namespace {
void add_value_names(const Graph& g, bool nested, std::set<std::string>& names) {
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& v : g.outputs) names.insert(v.name);
  for (const auto& [name, t] : g.initializers) names.insert(name);
  for (const auto& n : g.nodes) {
    names.insert(n.inputs.begin(), n.inputs.end());
    names.insert(n.outputs.begin(), n.outputs.end());
    for (const auto& a : n.attributes) {
      if (nested && a.g) add_value_names(*a.g, nested, names);
      for (const auto& s : a.graphs)
        if (nested) add_value_names(*s, nested, names);
    }
  }
}
}  // namespace

std::set<std::string> value_names(const Graph& g, bool nested) {
  std::set<std::string> names;
  add_value_names(g, nested, names);
  names.erase("");
  return names;
}

void replace_uses(Graph& g, std::string from, std::string to) {
  for (auto& n : g.nodes) {
    for (auto& in : n.inputs)
      if (in == from) in = to;
    for (auto& a : n.attributes) {
      if (a.g) rename_in_subgraph(*a.g, from, to);
      for (auto& s : a.graphs) rename_in_subgraph(*s, from, to);
    }
  }
}

void erase_nodes(Graph& g, const std::set<size_t>& indices) {
  if (!indices.empty()) splice_nodes(g, indices, {});
}

bool is_reshape_op(const Node& n) {
  return n.domain.empty() &&
         (n.op_type == "Reshape" || n.op_type == "Squeeze" || n.op_type == "Unsqueeze" || n.op_type == "Flatten");
}

std::optional<std::vector<int64_t>> static_shape(const Graph& g, const std::string& value) {
  if (const Tensor* t = constant_of(g, value)) return t->shape();
  auto t = g.type_of(value);
  if (!t || !t->is_tensor()) return std::nullopt;
  return t->shape.to_static();
}

bool is_random_op(const Node& n) {
  static const std::set<std::string> ops = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                            "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"};
  return ops.count(n.op_type) > 0;
}

bool has_subgraph(const Node& n) {
  for (const auto& a : n.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

std::optional<Activation> as_activation(const Graph& g, const Node& n) {
  if (!n.domain.empty() && n.domain != "ai.onnx") {
    if (n.domain == "hodu" && n.op_type == "Gelu" && !n.has_input(1))
      return Activation{n.get_string("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu", {}};
    return std::nullopt;
  }
  const std::string& op = n.op_type;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh") return Activation{op, {}};
  if (op == "LeakyRelu") return Activation{op, {n.get_float("alpha", 0.01f)}};
  if (op == "HardSigmoid") return Activation{op, {n.get_float("alpha", 0.2f), n.get_float("beta", 0.5f)}};
  if (op == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (n.has_input(1)) {
      auto v = scalar_constant(g, n.inputs[1]);
      if (!v) return std::nullopt;
      lo = static_cast<float>(*v);
    }
    if (n.has_input(2)) {
      auto v = scalar_constant(g, n.inputs[2]);
      if (!v) return std::nullopt;
      hi = static_cast<float>(*v);
    }
    return Activation{op, {lo, hi}};
  }
  return std::nullopt;
}

void splice_nodes(Graph& g, const std::set<size_t>& removed, std::map<size_t, std::vector<Node>> before,
                  std::map<size_t, std::vector<Node>> after) {
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (auto it = before.find(k); it != before.end())
      for (auto& n : it->second) nodes.push_back(std::move(n));
    if (!removed.count(k)) nodes.push_back(std::move(g.nodes[k]));
    if (auto it = after.find(k); it != after.end())
      for (auto& n : it->second) nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
}

Node make_reshape(Graph& g, const std::string& x, const std::string& y, const std::vector<int64_t>& shape) {
  std::string shape_name = y + "/shape";
  g.set_initializer(shape_name, Tensor::from_vector(DType::I64, {static_cast<int64_t>(shape.size())}, shape));
  Node n;
  n.name = y + "/reshape";
  n.op_type = "Reshape";
  n.inputs = {x, shape_name};
  n.outputs = {y};
  return n;
}

void finish_fusion(Graph& g, Node& fused, const std::optional<Activation>& act, const std::string& y) {
  if (act) {
    fused.set_attr(Attribute::make_string("activation", act->name));
    if (!act->params.empty()) fused.set_attr(Attribute::make_floats("activation_params", act->params));
  }
  if (y != fused.outputs[0]) {
    g.value_types.erase(fused.outputs[0]);
    fused.outputs[0] = y;
  }
}

bool replace_chain(Graph& g, std::set<size_t> chain, size_t last, const std::string& op, const std::string& domain,
                   const std::string& x, std::set<size_t>& removed) {
  for (size_t c : chain)
    if (removed.count(c)) return false;
  Node fused;
  fused.name = g.nodes[last].name;
  fused.op_type = op;
  fused.domain = domain;
  fused.inputs = {x};
  fused.outputs = {g.nodes[last].outputs[0]};
  chain.erase(last);
  g.nodes[last] = std::move(fused);
  removed.insert(chain.begin(), chain.end());
  return true;
}

std::optional<std::vector<int64_t>> reshape_strides(const std::vector<int64_t>& sizes,
                                                    const std::vector<int64_t>& strides,
                                                    const std::vector<int64_t>& shape) {
  return reshape_strides_with(sizes, strides, shape, [](int64_t a, int64_t b) { return a >= b; });
}

std::vector<int64_t> transpose_perm(const Node& n, size_t rank) {
  std::vector<int64_t> perm = n.get_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  return perm;
}

bool all_inputs_static(const Graph& g) {
  for (const auto& in : g.inputs)
    if (!g.initializer(in.name) && (!in.type.is_tensor() || !in.type.shape.to_static())) return false;
  return true;
}

}  // namespace hodu::passes
