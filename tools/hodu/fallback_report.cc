#include "fallback_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hodu::cli {

std::vector<FallbackNode> fallback_nodes(const Profiler& profiler) {
  const double run_ms = profiler.run_ms();
  std::map<std::pair<std::string, std::string>, FallbackNode> by_node;
  for (const auto& e : profiler.events()) {
    // Steps of subgraphs (a Loop body's, a node planned while running) too: a fallback inside
    // one is a fallback of the model.
    if (e.category != "Node" || e.kernel != "interp" || e.engine == "interp") continue;
    FallbackNode& f = by_node[{e.node, e.op}];
    f.op = e.op;
    f.node = e.node;
    ++f.count;
    f.total_ms += e.dur_us / 1000.0;
  }
  std::vector<FallbackNode> out;
  for (auto& [key, f] : by_node) {
    f.percent = run_ms > 0 ? 100.0 * f.total_ms / run_ms : 0;
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string fallback_table(const std::vector<FallbackNode>& nodes) {
  if (nodes.empty()) return "interpreter fallbacks: none (every node ran on an engine kernel)\n";
  double ms = 0, percent = 0;
  size_t wo = 2, wn = 4;
  for (const auto& f : nodes) {
    ms += f.total_ms;
    percent += f.percent;
    wo = std::max(wo, f.op.size());
    wn = std::max(wn, f.node.size());
  }
  std::string s = fmt::format("interpreter fallbacks: {} node(s), {:.3f} ms, {:.1f}% of the run\n", nodes.size(), ms,
                              percent);
  s += fmt::format("  {:<{}}  {:<{}}  {:>5}  {:>10}  {:>6}\n", "op", wo, "node", wn, "count", "total ms", "% run");
  for (const auto& f : nodes)
    s += fmt::format("  {:<{}}  {:<{}}  {:>5}  {:>10.3f}  {:>5.1f}%\n", f.op, wo, f.node, wn, f.count, f.total_ms,
                     f.percent);
  return s;
}

nlohmann::json fallback_json(const std::vector<FallbackNode>& nodes) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : nodes)
    j.push_back({{"op", f.op}, {"node", f.node}, {"count", f.count}, {"total_ms", f.total_ms}, {"percent", f.percent}});
  return j;
}

}  // namespace hodu::cli
