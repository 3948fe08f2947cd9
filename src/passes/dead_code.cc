// Dead-code elimination: walk back from the graph outputs.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {

bool eliminate_dead_code(Graph& g) {
  bool changed = false;
  // Backwards: a node is live when one of its outputs is read by a live node or is a graph output.
  std::set<std::string> live;
  for (const auto& o : g.outputs) live.insert(o.name);
  std::set<size_t> dead;
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    bool used = false;
    for (const auto& o : n.outputs) used |= !o.empty() && live.count(o);
    if (!used) {
      dead.insert(k);
      continue;
    }
    live.merge(reads_of(n));
  }
  if (!dead.empty()) changed = true;
  erase_nodes(g, dead);
  // Unused initializers (overridable inputs stay: the caller may feed them).
  std::vector<std::pair<std::string, Tensor>> kept;
  for (auto& [name, t] : g.initializers) {
    if (live.count(name) || g.input(name)) kept.emplace_back(name, std::move(t));
    else changed = true;
  }
  g.initializers = std::move(kept);
  // Types of values that no longer exist.
  for (auto it = g.value_types.begin(); it != g.value_types.end();)
    it = live.count(it->first) ? std::next(it) : g.value_types.erase(it);
  return changed;
}

}  // namespace hodu::passes
