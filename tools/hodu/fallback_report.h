// Which nodes of a profiled run the cpu engine ran on the interpreter's kernel (its fallback
// for ops and types it has no kernel of its own for): `hodu run -v`, `hodu bench -v/--profile`
// and `hodu bench --json` (the "fallback_nodes" field bench/run_bench.py reports per model).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "runtime/profiler.h"

namespace hodu::cli {

struct FallbackNode {
  std::string op, node;
  int64_t count = 0;    // spans over the profiled runs
  double total_ms = 0;
  double percent = 0;   // of the profiled runs' wall time
};

// Nodes whose span says kernel "interp" on an engine other than the interpreter, largest first.
std::vector<FallbackNode> fallback_nodes(const Profiler& profiler);
// "interpreter fallbacks: none" or a table of op, node, count, ms, % of the run.
std::string fallback_table(const std::vector<FallbackNode>& nodes);
nlohmann::json fallback_json(const std::vector<FallbackNode>& nodes);

}  // namespace hodu::cli
