// Common-subexpression elimination over the top-level graph.
#include <fmt/ranges.h>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {

bool eliminate_common_subexpressions(Graph& g) {
  bool changed = false;
  // Key: op + inputs; nodes sharing a key are compared attribute by attribute.
  std::map<std::string, std::vector<size_t>> seen;
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (is_random_op(n) || has_subgraph(n)) continue;
    std::string key = fmt::format("{}.{}({}){}", n.domain, n.op_type, fmt::join(n.inputs, ","), n.outputs.size());
    bool merged = false;
    for (size_t j : seen[key]) {
      const Node& m = g.nodes[j];
      if (m.attributes.size() != n.attributes.size()) continue;
      bool same = true;
      for (const auto& a : n.attributes) {
        const Attribute* b = m.attr(a.name);
        if (!b || !(*b == a)) { same = false; break; }
      }
      bool outputs_compatible = true;
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (n.outputs[i].empty() != m.outputs[i].empty() && !n.outputs[i].empty()) outputs_compatible = false;
      if (!same || !outputs_compatible) continue;
      bool keeps_output_name = false;
      for (const auto& o : n.outputs) keeps_output_name |= !o.empty() && is_graph_output(g, o);
      if (keeps_output_name) continue;
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!n.outputs[i].empty()) replace_uses(g, n.outputs[i], m.outputs[i]);
      merged = true;
      break;
    }
    if (merged) {
      removed.insert(k);
      changed = true;
    } else {
      seen[key].push_back(k);
    }
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
