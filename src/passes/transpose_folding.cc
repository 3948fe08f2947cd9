// Transpose folding: consecutive Transposes compose; identities vanish.
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
    }
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
