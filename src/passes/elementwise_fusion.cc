// Elementwise fusion: a connected group of f32 elementwise ops whose
// intermediates have one reader each and all have the output's shape becomes
// one hodu.FusedElementwise node whose `body` graph holds the ops (a kernel
// then makes one pass over memory instead of one per op). The group's other
// inputs must have the output's shape or one element (broadcast); scalar
// constants move into the body as initializers.
#include <algorithm>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

const std::set<std::string>& unary_ops() {
  static const std::set<std::string> ops = {"Relu", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp",
                                            "Log", "Sigmoid", "Tanh", "Erf"};
  return ops;
}
const std::set<std::string>& binary_ops() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div"};
  return ops;
}

bool is_f32(const Graph& g, const std::string& v) {
  auto t = g.type_of(v);
  return t && t->is_tensor() && t->dtype == DType::F32;
}

bool fusable(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || !is_f32(g, n.outputs[0])) return false;
  if (unary_ops().count(n.op_type)) return n.inputs.size() == 1 && is_f32(g, n.inputs[0]);
  if (binary_ops().count(n.op_type))
    return n.inputs.size() == 2 && is_f32(g, n.inputs[0]) && is_f32(g, n.inputs[1]);
  return false;
}

}  // namespace

bool fuse_elementwise(Graph& g) {
  auto uses = use_counts(g);
  std::set<size_t> grouped, removed;
  bool changed = false;
  for (size_t root = g.nodes.size(); root-- > 0;) {
    if (grouped.count(root) || !fusable(g, g.nodes[root])) continue;
    auto shape = static_shape(g, g.nodes[root].outputs[0]);
    if (!shape || shape_numel(*shape) == 0) continue;
    // Grow backwards through producers read by the group only.
    std::set<size_t> group = {root};
    std::vector<size_t> work = {root};
    while (!work.empty()) {
      size_t k = work.back();
      work.pop_back();
      for (const auto& in : g.nodes[k].inputs) {
        int p = g.producer_of(in);
        if (p < 0 || group.count(p) || grouped.count(p) || uses[in] != 1 || is_graph_output(g, in)) continue;
        if (!fusable(g, g.nodes[p]) || static_shape(g, in) != shape) continue;
        group.insert(p);
        work.push_back(p);
      }
    }
    if (group.size() < 2) continue;
    // External inputs: the output's shape, or one element.
    std::set<std::string> produced;
    for (size_t k : group) produced.insert(g.nodes[k].outputs[0]);
    std::vector<std::string> inputs;
    std::vector<std::pair<std::string, Tensor>> scalars;
    bool ok = true;
    for (size_t k : group)
      for (const auto& in : g.nodes[k].inputs) {
        if (produced.count(in)) continue;
        auto s = static_shape(g, in);
        if (!s || (*s != *shape && shape_numel(*s) != 1)) ok = false;
        const Tensor* c = constant_of(g, in);
        if (c && c->numel() == 1) {
          if (std::none_of(scalars.begin(), scalars.end(), [&](const auto& p) { return p.first == in; }))
            scalars.emplace_back(in, *c);
        } else if (std::find(inputs.begin(), inputs.end(), in) == inputs.end()) {
          inputs.push_back(in);
        }
      }
    if (!ok || inputs.empty()) continue;
    auto body = std::make_shared<Graph>();
    body->name = "fused_elementwise";
    for (const auto& in : inputs) body->inputs.push_back({in, *g.type_of(in), ""});
    for (auto& [name, t] : scalars) body->set_initializer(name, t);
    for (size_t k : group) body->nodes.push_back(g.nodes[k]);  // std::set: topological order kept
    const std::string out = g.nodes[root].outputs[0];
    body->outputs.push_back({out, *g.type_of(out), ""});
    for (size_t k : group)
      if (k != root && g.type_of(g.nodes[k].outputs[0]))
        body->value_types[g.nodes[k].outputs[0]] = *g.type_of(g.nodes[k].outputs[0]);
    Node fused;
    fused.name = g.nodes[root].name;
    fused.op_type = "FusedElementwise";
    fused.domain = "hodu";
    fused.inputs = inputs;
    fused.outputs = {out};
    fused.attributes = {Attribute::make_graph("body", body)};
    g.nodes[root] = std::move(fused);
    grouped.insert(group.begin(), group.end());
    group.erase(root);
    removed.insert(group.begin(), group.end());
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
