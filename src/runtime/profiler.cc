#include "runtime/profiler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <unistd.h>

#include "core/error.h"

namespace hodu {
namespace {

std::atomic<Profiler*> g_active{nullptr};
thread_local int t_span_depth = 0;

// ORT names element types as in ONNX ("float", "int64").
nlohmann::json shape_entry(DType dtype, const std::vector<int64_t>& dims) {
  return {{std::string(dtype_onnx_name(dtype)), dims}};
}

int64_t value_bytes(const RuntimeValue& v) {
  if (v.is_tensor()) return static_cast<int64_t>(v.tensor.nbytes());
  int64_t n = 0;
  if (v.is_sequence())
    for (const auto& t : v.sequence) n += static_cast<int64_t>(t.nbytes());
  return n;
}

// Total of the model_run spans, in ms.
double run_ms_of(const std::vector<ProfileEvent>& events) {
  double us = 0;
  for (const auto& e : events)
    if (e.category == "Session" && e.phase == 'X' && e.name == "model_run") us += e.dur_us;
  return us / 1000.0;
}

// Per-op totals of the top-level node spans, largest first; percent of `run_ms`
// (of the node spans' sum when there is no run span).
std::vector<OpSummary> summarize(const std::vector<ProfileEvent>& events, double run_ms) {
  std::map<std::string, OpSummary> by_op;
  double node_ms = 0;
  for (const auto& e : events) {
    if (e.category != "Node" || e.depth != 0) continue;
    auto& s = by_op[e.op];
    s.op = e.op;
    s.count++;
    s.total_ms += e.dur_us / 1000.0;
    node_ms += e.dur_us / 1000.0;
  }
  double run = run_ms > 0 ? run_ms : node_ms;
  std::vector<OpSummary> out;
  for (auto& [op, s] : by_op) {
    s.percent = run > 0 ? 100.0 * s.total_ms / run : 0;
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const OpSummary& a, const OpSummary& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace

int profiler_thread_id() {
  static std::atomic<int> next{1};
  thread_local int id = next++;
  return id;
}

Profiler::Profiler() : origin_(std::chrono::steady_clock::now()) {}

Profiler::~Profiler() { stop(); }

Profiler* Profiler::active() { return g_active.load(std::memory_order_acquire); }

void Profiler::start() { g_active.store(this, std::memory_order_release); }

void Profiler::stop() {
  Profiler* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

double Profiler::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

void Profiler::add(ProfileEvent e) {
  if (e.tid == 0) e.tid = profiler_thread_id();
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(e));
}

std::vector<ProfileEvent> Profiler::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

void Profiler::clear() {
  std::lock_guard lock(mutex_);
  events_.clear();
}

void Profiler::add_run(double start_us, double end_us, const std::string& name) {
  ProfileEvent e;
  e.category = "Session";
  e.name = name;
  e.ts_us = start_us;
  e.dur_us = end_us - start_us;
  add(std::move(e));
}

void Profiler::add_instant(const std::string& name, std::map<std::string, std::string> args) {
  ProfileEvent e;
  e.category = "Session";
  e.name = name;
  e.phase = 'i';
  e.ts_us = now_us();
  e.args = std::move(args);
  add(std::move(e));
}

nlohmann::json Profiler::to_chrome_trace() const {
  nlohmann::json trace = nlohmann::json::array();
  const int pid = static_cast<int>(::getpid());
  for (const auto& e : events()) {
    nlohmann::json args = nlohmann::json::object();
    if (e.category == "Node") {
      args["op_name"] = e.op;
      args["node_name"] = e.node;
      args["provider"] = e.engine;
      args["kernel"] = e.kernel;
      nlohmann::json shapes = nlohmann::json::array();
      for (const auto& [dt, dims] : e.input_shapes) shapes.push_back(shape_entry(dt, dims));
      args["input_type_shape"] = shapes;
      args["output_size"] = std::to_string(e.output_bytes);  // ORT writes sizes as strings
      if (e.depth) args["depth"] = std::to_string(e.depth);
    }
    for (const auto& [k, v] : e.args) args[k] = v;
    nlohmann::json j = {{"cat", e.category}, {"name", e.name},  {"ph", std::string(1, e.phase)},
                        {"ts", static_cast<int64_t>(e.ts_us)}, {"pid", pid}, {"tid", e.tid}, {"args", args}};
    if (e.phase == 'X') j["dur"] = static_cast<int64_t>(e.dur_us + 0.5);
    if (e.phase == 'i') j["s"] = "p";  // process-scoped instant
    trace.push_back(std::move(j));
  }
  return trace;
}

void Profiler::write_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  HODU_CHECK(f, ErrorCode::Io, "cannot write profile {}", path);
  // One event per line, like ORT's files: readable and diff-able.
  auto trace = to_chrome_trace();
  f << "[\n";
  for (size_t i = 0; i < trace.size(); ++i) f << trace[i].dump() << (i + 1 < trace.size() ? ",\n" : "\n");
  f << "]\n";
  HODU_CHECK(f.good(), ErrorCode::Io, "cannot write profile {}", path);
}

double Profiler::run_ms() const { return run_ms_of(events()); }

std::vector<OpSummary> Profiler::summary() const {
  auto all = events();
  return summarize(all, run_ms_of(all));
}

std::string Profiler::summary_table() const {
  // One snapshot of the events for the rows and the run line.
  auto all = events();
  const double run = run_ms_of(all);
  auto rows = summarize(all, run);
  size_t w = 2;
  for (const auto& r : rows) w = std::max(w, r.op.size());
  std::string s = fmt::format("{:<{}}  {:>7}  {:>11}  {:>7}\n", "op", w, "count", "total ms", "% run");
  int64_t count = 0;
  double total = 0, percent = 0;
  for (const auto& r : rows) {
    s += fmt::format("{:<{}}  {:>7}  {:>11.3f}  {:>6.1f}%\n", r.op, w, r.count, r.total_ms, r.percent);
    count += r.count;
    total += r.total_ms;
    percent += r.percent;
  }
  s += fmt::format("{:<{}}  {:>7}  {:>11.3f}  {:>6.1f}%\n", "all ops", w, count, total, percent);
  if (run > 0) s += fmt::format("{:<{}}  {:>7}  {:>11.3f}\n", "run (wall)", w, "", run);
  return s;
}

NodeSpan::NodeSpan(Profiler* profiler, const Node& node, const std::vector<const RuntimeValue*>& inputs,
                   const std::string& engine, const std::string& kernel)
    : profiler_(profiler) {
  if (!profiler_) return;
  event_.category = "Node";
  event_.name = (node.name.empty() ? node.op_type : node.name) + "_kernel_time";
  event_.op = node.op_type;
  event_.node = node.name;
  event_.engine = engine;
  event_.kernel = kernel;
  for (const RuntimeValue* v : inputs)
    if (v && v->is_tensor()) event_.input_shapes.emplace_back(v->tensor.dtype(), v->tensor.shape());
  event_.depth = t_span_depth++;
  event_.ts_us = profiler_->now_us();  // last: the span covers the kernel, not this bookkeeping
}

void NodeSpan::finish(const std::vector<RuntimeValue>& outputs) {
  if (!profiler_) return;
  event_.dur_us = profiler_->now_us() - event_.ts_us;
  for (const auto& o : outputs) event_.output_bytes += value_bytes(o);
  --t_span_depth;
  profiler_->add(std::move(event_));
  profiler_ = nullptr;
}

NodeSpan::~NodeSpan() {
  if (profiler_) --t_span_depth;
}

}  // namespace hodu
