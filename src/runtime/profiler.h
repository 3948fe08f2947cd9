// Profiler: records one span per executed node (op, node name, engine, kernel,
// input shapes, output bytes) and writes them as a chrome-trace JSON array in
// ONNX Runtime's event style, which Perfetto and chrome://tracing open:
//
//   [{"cat":"Session","name":"model_run","ph":"X","ts":0,"dur":1234,"pid":1,"tid":1,"args":{}},
//    {"cat":"Node","name":"conv1_kernel_time","ph":"X","ts":12,"dur":345,"pid":1,"tid":1,
//     "args":{"op_name":"Conv","node_name":"conv1","provider":"interp","kernel":"reference",
//             "input_type_shape":[{"float":[1,3,8,8]}],"output_size":"1024"}}]
//
// Times are microseconds since the profiler was created. Thread-safe.
// Engines profile with NodeSpan when Profiler::active() is set:
//
//   NodeSpan span(Profiler::active(), node, inputs, "interp", "reference");
//   fn(ctx);
//   span.finish(ctx.outputs);          // no-op when no profiler is active
//
// summary() folds the top-level node spans per op (a subgraph's nodes are
// inside their If/Loop's span, so counting them too would count twice):
// count, total ms, % of the run time (the "model_run" spans, or the sum of
// node spans when there are none).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ir/graph.h"

namespace hodu {

struct ProfileEvent {
  std::string category;  // "Node", "Session"
  std::string name;
  char phase = 'X';      // 'X' complete span, 'i' instant
  double ts_us = 0;
  double dur_us = 0;
  int tid = 0;
  // Node spans
  std::string op, node, engine, kernel;
  std::vector<std::pair<DType, std::vector<int64_t>>> input_shapes;
  int64_t output_bytes = 0;
  int depth = 0;  // nesting: nodes of a subgraph (If/Loop body) run inside their owner's span
  std::map<std::string, std::string> args;  // any further string arguments
};

struct OpSummary {
  std::string op;
  int64_t count = 0;
  double total_ms = 0;
  double percent = 0;  // of the run time
};

class Profiler {
 public:
  Profiler();

  // The process-wide active profiler (nullptr when profiling is off).
  static Profiler* active();
  // Makes this profiler active until stop() or destruction.
  void start();
  void stop();
  ~Profiler();

  double now_us() const;  // since construction
  void add(ProfileEvent e);
  std::vector<ProfileEvent> events() const;
  void clear();

  // Span around a whole run ("model_run" in the Session category).
  void add_run(double start_us, double end_us, const std::string& name = "model_run");
  // Instant event in the Session category (dispatch decisions and the like).
  void add_instant(const std::string& name, std::map<std::string, std::string> args);

  nlohmann::json to_chrome_trace() const;
  void write_chrome_trace(const std::string& path) const;  // Io on failure

  // Per-op totals, largest first.
  std::vector<OpSummary> summary() const;
  double run_ms() const;  // total of the model_run spans (0 if none)
  // A text table: op, count, total ms, % of run; and a total line.
  std::string summary_table() const;

 private:
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<ProfileEvent> events_;
};

// Small integer id of the calling thread for trace "tid" (1, 2, ... in order of first use).
int profiler_thread_id();

// One node's span; inert when constructed with a null profiler.
class NodeSpan {
 public:
  NodeSpan(Profiler* profiler, const Node& node, const std::vector<const RuntimeValue*>& inputs,
           const std::string& engine, const std::string& kernel);
  void finish(const std::vector<RuntimeValue>& outputs);
  ~NodeSpan();  // a span not finished (the kernel threw) is dropped
  NodeSpan(const NodeSpan&) = delete;
  NodeSpan& operator=(const NodeSpan&) = delete;

 private:
  Profiler* profiler_;
  ProfileEvent event_;
};

}  // namespace hodu
