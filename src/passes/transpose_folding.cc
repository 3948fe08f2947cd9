// Transpose folding: consecutive Transposes compose; identities vanish; a
// Transpose that only moves dims of size 1 is a Reshape (a view, no copy).
#include <numeric>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

std::optional<std::vector<int64_t>> perm_of(const Graph& g, const Node& n) {
  std::vector<int64_t> p = n.get_ints("perm");
  if (!p.empty()) return p;
  // Default perm reverses the dims: needs the rank.
  auto t = g.type_of(n.inputs[0]);
  if (!t || !t->is_tensor() || !t->shape.rank_known()) return std::nullopt;
  p.resize(t->shape.rank());
  std::iota(p.rbegin(), p.rend(), 0);
  return p;
}

bool is_transpose(const Node& n) { return n.op_type == "Transpose" && (n.domain.empty() || n.domain == "ai.onnx"); }

// True when transposing `shape` by `perm` keeps the dims larger than 1 in their order.
bool moves_only_unit_dims(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(shape.size())) return false;
    if (shape[p] == 1) continue;
    if (p < last) return false;
    last = p;
  }
  return true;
}

}  // namespace

bool fold_transposes(Graph& g) {
  bool changed = false;
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (!is_transpose(n) || !n.has_input(0)) continue;
    auto p2 = perm_of(g, n);
    if (!p2) continue;
    int prod = g.producer_of(n.inputs[0]);
    if (prod >= 0 && !removed.count(prod) && is_transpose(g.nodes[prod])) {
      auto p1 = perm_of(g, g.nodes[prod]);
      if (p1 && p1->size() == p2->size()) {
        // y = transpose(transpose(x, p1), p2): y[i] = x[p1[p2[i]]].
        std::vector<int64_t> p(p2->size());
        for (size_t i = 0; i < p.size(); ++i) p[i] = (*p1)[(*p2)[i]];
        n.inputs[0] = g.nodes[prod].inputs[0];
        n.set_attr(Attribute::make_ints("perm", p));
        *p2 = p;
        changed = true;
      }
    }
    bool identity = true;
    for (size_t i = 0; i < p2->size(); ++i) identity &= (*p2)[i] == static_cast<int64_t>(i);
    if (identity && !is_graph_output(g, n.outputs[0])) {
      replace_uses(g, n.outputs[0], n.inputs[0]);
      removed.insert(k);
      changed = true;
      continue;
    }
    auto shape = static_shape(g, n.inputs[0]);
    if (!identity && shape && shape_numel(*shape) > 0 && moves_only_unit_dims(*shape, *p2)) {
      std::vector<int64_t> out(p2->size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = (*shape)[(*p2)[i]];
      std::string shape_name = n.outputs[0] + "/shape";
      g.set_initializer(shape_name, Tensor::from_vector(DType::I64, {static_cast<int64_t>(out.size())}, out));
      n.op_type = "Reshape";
      n.domain.clear();
      n.attributes.clear();
      n.inputs = {n.inputs[0], shape_name};
      changed = true;
    }
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
