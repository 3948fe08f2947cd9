// If with a constant condition → the taken branch's nodes in its place. Exporters guard
// shape-dependent code with If (Silero VAD: "is the input 2-D?", "is the batch 1?"); once the
// input shapes fold the conditions, the engines see one straight graph instead of a subgraph.
#include <functional>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// Renames `from` to `to` everywhere in `g` and in its subgraphs (ONNX forbids a subgraph to
// shadow an outer name, so every occurrence is the same value).
void rename_everywhere(Graph& g, const std::string& from, const std::string& to) {
  for (auto& v : g.inputs)
    if (v.name == from) v.name = to;
  for (auto& v : g.outputs)
    if (v.name == from) v.name = to;
  for (auto& [name, t] : g.initializers)
    if (name == from) name = to;
  if (auto it = g.value_types.find(from); it != g.value_types.end()) {
    ValueType t = it->second;
    g.value_types.erase(it);
    g.value_types[to] = t;
  }
  for (auto& n : g.nodes) {
    for (auto& in : n.inputs)
      if (in == from) in = to;
    for (auto& out : n.outputs)
      if (out == from) out = to;
    for (auto& a : n.attributes) {
      if (a.g) rename_everywhere(*a.g, from, to);
      for (auto& s : a.graphs) rename_everywhere(*s, from, to);
    }
  }
}

}  // namespace

bool inline_constant_ifs(Graph& g) {
  bool changed = false;
  for (size_t k = 0; k < g.nodes.size();) {
    const Node& n = g.nodes[k++];
    if (!n.domain.empty() || n.op_type != "If" || !n.has_input(0)) continue;
    const size_t at = k - 1;
    const Tensor* cond = constant_of(g, n.inputs[0]);
    if (!cond || cond->numel() != 1 || cond->dtype() == DType::String) continue;
    const Graph* taken = n.get_graph(cond->get_double(0) != 0 ? "then_branch" : "else_branch");
    if (!taken || taken->outputs.size() != n.outputs.size() || !taken->inputs.empty()) continue;
    Graph branch = *taken;
    // Nested graphs are shared pointers: copied before anything is renamed inside them.
    std::function<void(Graph&)> own = [&](Graph& sg) {
      for (auto& bn : sg.nodes)
        for (auto& a : bn.attributes) {
          if (a.g) {
            a.g = std::make_shared<Graph>(*a.g);
            own(*a.g);
          }
          for (auto& s : a.graphs) {
            s = std::make_shared<Graph>(*s);
            own(*s);
          }
        }
    };
    own(branch);
    // Values the branch defines whose names the outer graph uses too get fresh ones.
    std::set<std::string> outer = value_names(g);
    std::set<std::string> defined;
    for (const auto& [name, t] : branch.initializers) defined.insert(name);
    for (const auto& bn : branch.nodes)
      for (const auto& o : bn.outputs)
        if (!o.empty()) defined.insert(o);
    for (const auto& name : defined) {
      if (!outer.count(name)) continue;
      std::string fresh = g.unique_name(name + "/inlined");
      while (outer.count(fresh) || defined.count(fresh)) fresh += "_";
      rename_everywhere(branch, name, fresh);
      outer.insert(fresh);
    }
    for (const auto& [name, t] : branch.initializers) g.set_initializer(name, t);
    for (const auto& [name, t] : branch.value_types) g.value_types.emplace(name, t);
    std::vector<Node> body = std::move(branch.nodes);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      Node id;
      id.name = n.name + "/output" + std::to_string(i);
      id.op_type = "Identity";
      id.inputs = {branch.outputs[i].name};
      id.outputs = {n.outputs[i]};
      body.push_back(std::move(id));
    }
    splice_nodes(g, {at}, {{at, std::move(body)}});
    changed = true;
    k = at;  // the branch's first node now sits here (it may hold an If of its own)
  }
  return changed;
}

}  // namespace hodu::passes
