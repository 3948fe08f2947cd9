#include "ir/topological_order.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace hodu {
namespace {

void collect_reads(const Node& n, std::vector<std::string>& reads);

// The outer values a body reads: what its nodes read that it does not define itself.
void collect_free_reads(const Graph& g, std::vector<std::string>& reads) {
  std::unordered_set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) defined.insert(o);
  std::vector<std::string> inner;
  for (const auto& n : g.nodes) collect_reads(n, inner);
  for (const auto& o : g.outputs) inner.push_back(o.name);  // a body output may be an outer value
  for (auto& r : inner)
    if (!defined.count(r)) reads.push_back(std::move(r));
}

// Every name a node reads: its inputs and, for If/Loop/Scan, the outer values its bodies read.
void collect_reads(const Node& n, std::vector<std::string>& reads) {
  for (const auto& in : n.inputs)
    if (!in.empty()) reads.push_back(in);
  for (const auto& a : n.attributes) {
    if (a.g) collect_free_reads(*a.g, reads);
    for (const auto& sg : a.graphs)
      if (sg) collect_free_reads(*sg, reads);
  }
}

bool sort_subgraphs(Node& n) {
  bool ok = true;
  for (auto& a : n.attributes) {
    if (a.g) ok &= sort_topologically(*a.g);
    for (auto& sg : a.graphs)
      if (sg) ok &= sort_topologically(*sg);
  }
  return ok;
}

}  // namespace

std::vector<std::string> node_reads(const Node& n) {
  std::vector<std::string> reads;
  collect_reads(n, reads);
  return reads;
}

bool sort_topologically(Graph& graph) {
  bool ok = true;
  for (auto& n : graph.nodes) ok &= sort_subgraphs(n);
  const size_t count = graph.nodes.size();
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < count; ++k)
    for (const auto& o : graph.nodes[k].outputs)
      if (!o.empty()) producer.emplace(o, k);
  std::vector<std::vector<size_t>> deps(count);
  bool in_order = true;
  for (size_t k = 0; k < count; ++k) {
    std::vector<std::string> reads;
    collect_reads(graph.nodes[k], reads);
    std::unordered_set<size_t> seen;
    for (const auto& r : reads) {
      auto it = producer.find(r);
      if (it == producer.end() || it->second == k || !seen.insert(it->second).second) continue;
      deps[k].push_back(it->second);
      in_order &= it->second < k;
    }
  }
  if (in_order) return ok;
  // Depth-first from each node in file order, emitting a node after its producers.
  // Iterative: real graphs are tens of thousands of nodes deep.
  enum : char { kNew, kOpen, kDone };
  std::vector<char> state(count, kNew);
  std::vector<size_t> order;
  order.reserve(count);
  std::vector<std::pair<size_t, size_t>> stack;  // (node, next dep to look at)
  for (size_t root = 0; root < count; ++root) {
    if (state[root] != kNew) continue;
    stack.push_back({root, 0});
    state[root] = kOpen;
    while (!stack.empty()) {
      auto& [k, next] = stack.back();
      if (next < deps[k].size()) {
        size_t d = deps[k][next++];
        if (state[d] == kOpen) return false;  // a cycle
        if (state[d] == kNew) {
          state[d] = kOpen;
          stack.push_back({d, 0});
        }
        continue;
      }
      state[k] = kDone;
      order.push_back(k);
      stack.pop_back();
    }
  }
  std::vector<Node> sorted;
  sorted.reserve(count);
  for (size_t k : order) sorted.push_back(std::move(graph.nodes[k]));
  graph.nodes = std::move(sorted);
  return ok;
}

}  // namespace hodu
