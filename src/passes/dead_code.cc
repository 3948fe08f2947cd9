// Dead-code elimination: walk back from the graph outputs.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {

namespace {

// Initializers not in `read` (overridable inputs stay: the caller may feed them).
bool drop_initializers_outside(Graph& g, const std::set<std::string>& read) {
  const size_t before = g.initializers.size();
  std::vector<std::pair<std::string, Tensor>> kept;
  for (auto& [name, t] : g.initializers)
    if (read.count(name) || g.input(name)) kept.emplace_back(name, std::move(t));
  g.initializers = std::move(kept);
  return g.initializers.size() != before;
}

}  // namespace

bool drop_unread_initializers(Graph& g) {
  std::set<std::string> read;
  for (const auto& n : g.nodes) read.merge(reads_of(n));
  for (const auto& o : g.outputs) read.insert(o.name);
  return drop_initializers_outside(g, read);
}

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
  changed |= drop_initializers_outside(g, live);
  // Types of values that no longer exist.
  for (auto it = g.value_types.begin(); it != g.value_types.end();)
    it = live.count(it->first) ? std::next(it) : g.value_types.erase(it);
  return changed;
}

}  // namespace hodu::passes
