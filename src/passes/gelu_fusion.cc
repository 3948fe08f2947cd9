// GELU as exported by PyTorch at opsets < 20:
//   Mul(Mul(x, Add(Erf(Div(x, 1.41421)), 1)), 0.5)   or   Mul(Mul(x, 0.5), Add(Erf(...), 1))
// (Div by sqrt 2 may be Mul by 1/sqrt 2) → hodu.Gelu(x).
#include <cmath>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool near(std::optional<double> v, double want) { return v && std::abs(*v - want) < 1e-4 * std::abs(want); }

bool is_op(const Node& n, const char* op) { return n.op_type == op && n.domain.empty() && n.inputs.size() == 2; }

}  // namespace

bool fuse_gelu(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  auto readers = consumers(g);
  auto only_reader = [&](const std::string& v) { return sole_reader(g, uses, readers, v); };
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& erf = g.nodes[k];
    if (erf.op_type != "Erf" || !erf.domain.empty() || removed.count(k)) continue;
    int d = g.producer_of(erf.inputs[0]);
    if (d < 0 || uses[erf.inputs[0]] != 1) continue;
    const Node& div = g.nodes[d];
    std::string x;
    if (is_op(div, "Div") && near(scalar_constant(g, div.inputs[1]), std::sqrt(2.0))) x = div.inputs[0];
    else if (is_op(div, "Mul") && near(scalar_constant(g, div.inputs[1]), std::sqrt(0.5))) x = div.inputs[0];
    else if (is_op(div, "Mul") && near(scalar_constant(g, div.inputs[0]), std::sqrt(0.5))) x = div.inputs[1];
    if (x.empty()) continue;
    int a = only_reader(erf.outputs[0]);
    if (a < 0 || !is_op(g.nodes[a], "Add") || !near(scalar_constant(g, other_input(g.nodes[a], erf.outputs[0])), 1.0))
      continue;
    const std::string& one_plus = g.nodes[a].outputs[0];
    int m1 = only_reader(one_plus);
    if (m1 < 0 || !is_op(g.nodes[m1], "Mul")) continue;
    std::string partner = other_input(g.nodes[m1], one_plus);
    std::set<size_t> chain = {static_cast<size_t>(d), k, static_cast<size_t>(a), static_cast<size_t>(m1)};
    size_t last;
    if (partner == x) {
      // (x * (1 + erf)) * 0.5
      int m2 = only_reader(g.nodes[m1].outputs[0]);
      if (m2 < 0 || !is_op(g.nodes[m2], "Mul") ||
          !near(scalar_constant(g, other_input(g.nodes[m2], g.nodes[m1].outputs[0])), 0.5))
        continue;
      chain.insert(m2);
      last = m2;
    } else {
      // (x * 0.5) * (1 + erf)
      int h = g.producer_of(partner);
      if (h < 0 || uses[partner] != 1 || !is_op(g.nodes[h], "Mul") ||
          other_input(g.nodes[h], x).empty() || !near(scalar_constant(g, other_input(g.nodes[h], x)), 0.5))
        continue;
      chain.insert(h);
      last = m1;
    }
    if (!replace_chain(g, chain, last, "Gelu", "hodu", x, removed)) continue;
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
