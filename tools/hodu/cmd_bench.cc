// hodu bench MODEL [-d DEVICE] [--engine E] [--threads N] [--warmup N] [--iters N]
//                  [--shape NAME=1x3x224x224] [--dim NAME=V] [-i NAME=PATH] [--seed N] [--json]
//                  [--profile TRACE.json] [-v] [--max-isa avx2]
// Times load, the first run and steady-state runs. Inputs not given with -i
// are synthesized from the declared types (seeded: normal floats, small ints).

#include <nlohmann/json.hpp>

#include <time.h>

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "commands.h"
#include "fallback_report.h"
#include "core/error.h"
#include "core/process_memory.h"
#include "engines/native/native_engine.h"
#include "input_files.h"
#include "runtime/profiler.h"
#include "runtime/session.h"

namespace hodu::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string device = "cpu";
  std::string engine;
  int threads = 0;
  int warmup = 3;
  int iters = 20;
  std::vector<std::string> shapes;
  std::vector<std::string> dims;
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  bool json = false;
  std::string profile;  // chrome trace of the timed runs; per-op table to stderr
  bool verbose = false;  // the nodes that ran on the interpreter's kernel, to stderr
  std::string max_isa;   // HODU_MAX_ISA for this process
};

// User + system CPU time of the process so far (every thread), in ms.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// "NAME=1x3x224x224" → (NAME, {1, 3, 224, 224})
std::pair<std::string, std::vector<int64_t>> parse_shape(const std::string& spec) {
  auto eq = spec.rfind('=');
  HODU_CHECK(eq != std::string::npos && eq > 0, ErrorCode::InvalidArgument,
             "--shape {}: expected NAME=DxDxD (e.g. input=1x3x224x224)", spec);
  std::vector<int64_t> dims;
  std::string rest = spec.substr(eq + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t x = rest.find('x', pos);
    std::string d = rest.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    char* end = nullptr;
    long long v = std::strtoll(d.c_str(), &end, 10);
    HODU_CHECK(!d.empty() && end && *end == '\0' && v >= 0, ErrorCode::InvalidArgument,
               "--shape {}: '{}' is not a dimension", spec, d);
    dims.push_back(v);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return {spec.substr(0, eq), dims};
}

Tensor synthesize(const Value& in, const std::vector<int64_t>& shape, std::mt19937_64& rng) {
  DType dt = in.type.dtype;
  Tensor t = Tensor::empty(dt, shape);
  int64_t n = t.numel();
  if (dt == DType::F32) {
    std::normal_distribution<float> d;
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng);
  } else if (dtype_is_float(dt)) {
    std::normal_distribution<double> d;
    for (int64_t i = 0; i < n; ++i) t.set_double(i, d(rng));
  } else if (dt == DType::Bool) {
    for (int64_t i = 0; i < n; ++i) t.set_double(i, static_cast<double>(rng() & 1));
  } else if (dt == DType::String) {
    fail(ErrorCode::Unsupported, "input '{}' is a string tensor: give it with -i NAME=PATH", in.name);
  } else {
    for (int64_t i = 0; i < n; ++i) t.set_double(i, static_cast<double>(rng() % 10));
  }
  return t;
}


double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  size_t i = static_cast<size_t>(std::min<double>(v.size() - 1, std::ceil(p * v.size()) - 1));
  return v[i];
}

int run_bench(const BenchArgs& a) {
  HODU_CHECK(a.iters >= 1, ErrorCode::InvalidArgument, "--iters {}: need at least 1", a.iters);
  HODU_CHECK(a.warmup >= 0, ErrorCode::InvalidArgument, "--warmup {}: must be >= 0", a.warmup);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& s : a.shapes) shapes.insert(parse_shape(s));
  std::map<std::string, int64_t> dims;
  for (const auto& d : a.dims) {
    auto eq = d.find('=');
    HODU_CHECK(eq != std::string::npos && eq > 0, ErrorCode::InvalidArgument, "--dim {}: expected NAME=VALUE", d);
    char* end = nullptr;
    long long v = std::strtoll(d.c_str() + eq + 1, &end, 10);
    HODU_CHECK(end && *end == '\0' && v >= 0 && eq + 1 < d.size(), ErrorCode::InvalidArgument,
               "--dim {}: '{}' is not a dimension", d, d.substr(eq + 1));
    dims[d.substr(0, eq)] = v;
  }

  if (!a.max_isa.empty()) setenv("HODU_MAX_ISA", a.max_isa.c_str(), 1);  // before the engine's first kernel
  SessionOptions so;
  so.device = Device::parse(a.device);
  so.threads = a.threads;
  so.engine = a.engine;
  // A library built by `hodu build` runs on the native engine, as with `hodu run`.
  const bool library = native::is_native_library(a.model);
  if (library && so.engine.empty()) so.engine = "native";
  auto t0 = std::chrono::steady_clock::now();
  auto session = library ? Session::from_model(native::describe_library(a.model), so) : Session::load(a.model, so);
  double load_ms = ms_since(t0);

  auto feeds = load_inputs(a.inputs, *session);
  std::mt19937_64 rng(a.seed);
  for (const auto& [name, s] : shapes) {
    bool known = false;
    for (const auto& in : session->inputs()) known |= in.name == name;
    HODU_CHECK(known, ErrorCode::InvalidArgument, "--shape {}: not an input of the model", name);
  }
  for (const auto& in : session->inputs()) {
    if (feeds.count(in.name)) continue;
    HODU_CHECK(in.type.is_tensor(), ErrorCode::Unsupported, "input '{}' is a {}: give it with -i NAME=PATH", in.name,
               in.type.to_string());
    std::vector<int64_t> shape;
    if (auto it = shapes.find(in.name); it != shapes.end()) {
      shape = it->second;
    } else {
      HODU_CHECK(in.type.shape.rank_known(), ErrorCode::InvalidArgument,
                 "input '{}' has unknown rank: give its shape with --shape {}=DxD...", in.name, in.name);
      for (const auto& d : in.type.shape.dims()) {
        if (d.is_known()) shape.push_back(d.value);
        else if (auto it2 = dims.find(d.symbol); !d.symbol.empty() && it2 != dims.end()) shape.push_back(it2->second);
        else shape.push_back(1);  // an unnamed or unbound dim
      }
    }
    feeds[in.name] = RuntimeValue(synthesize(in, shape, rng));
  }

  t0 = std::chrono::steady_clock::now();
  session->run(feeds);
  double first_ms = ms_since(t0);
  for (int i = 0; i < a.warmup; ++i) session->run(feeds);
  std::vector<double> times;
  Profiler profiler;
  const double cpu0 = process_cpu_ms();
  if (!a.profile.empty()) profiler.start();  // the timed runs only: steady state, no load or first run
  for (int i = 0; i < a.iters; ++i) {
    t0 = std::chrono::steady_clock::now();
    session->run(feeds);
    times.push_back(ms_since(t0));
  }
  // CPU time of the process per timed run (every thread's): on a machine others load, what a
  // run cost, where the wall time also counts the time the threads waited for a core.
  const double cpu_ms = (process_cpu_ms() - cpu0) / a.iters;
  std::vector<FallbackNode> fallbacks;
  if (!a.profile.empty()) {
    profiler.stop();
    profiler.write_chrome_trace(a.profile);
    std::fprintf(stderr, "%sper-op totals over %d timed runs (timings include the profiler's per-node sync)\nwrote profile %s\n",
                 profiler.summary_table().c_str(), a.iters, a.profile.c_str());
    fallbacks = fallback_nodes(profiler);
  } else if (a.verbose || a.json) {
    // One more run, profiled and not timed, says which nodes ran on the interpreter's kernel.
    Profiler p;
    p.start();
    session->run(feeds);
    p.stop();
    fallbacks = fallback_nodes(p);
  }
  if (a.verbose || !a.profile.empty()) std::fprintf(stderr, "%s", fallback_table(fallbacks).c_str());
  double mean = 0;
  for (double t : times) mean += t;
  mean /= times.size();
  double peak_rss_mb = static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0);
  double median = percentile(times, 0.5), p90 = percentile(times, 0.9),
         mn = *std::min_element(times.begin(), times.end());
  if (a.json) {
    nlohmann::json j = {{"model", a.model},          {"engine", session->engine_name()},
                        {"device", a.device},        {"threads", session->threads()},
                        {"load_ms", load_ms},        {"first_run_ms", first_ms},
                        {"median_ms", median},       {"p90_ms", p90},
                        {"min_ms", mn},              {"mean_ms", mean},
                        {"iters", a.iters},          {"warmup", a.warmup},
                        {"peak_rss_mb", peak_rss_mb}, {"cpu_ms", cpu_ms},
                        {"fallback_nodes", fallback_json(fallbacks)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s on %s (engine %s, %d threads)\n", a.model.c_str(), a.device.c_str(),
                session->engine_name().c_str(), session->threads());
    std::printf("  load        %9.2f ms\n  first run   %9.2f ms\n", load_ms, first_ms);
    std::printf("  median      %9.2f ms   (%d iterations after %d warm-up)\n", median, a.iters, a.warmup);
    std::printf("  p90         %9.2f ms\n  min         %9.2f ms\n  mean        %9.2f ms\n", p90, mn, mean);
    std::printf("  CPU time    %9.2f ms   (per timed run, all threads)\n", cpu_ms);
    std::printf("  peak RSS    %9.1f MB\n", peak_rss_mb);
  }
  return 0;
}

}  // namespace

CommandFn add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("model", a->model, "model file (.onnx, .hdss, .hodu)")->required();
  app.add_option("-d,--device", a->device, "device: cpu or cuda:N")->capture_default_str();
  app.add_option("--engine", a->engine, "engine (default: best for the device)");
  app.add_option("--threads", a->threads,
                 "threads (default: physical cores); the cpu engine runs on one while other processes keep the "
                 "cores busy (HODU_THREAD_POLICY=fixed: always all)");
  app.add_option("--max-isa", a->max_isa,
                 "highest instruction set the kernels may use: baseline, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16, amx "
                 "(sets HODU_MAX_ISA; default: the CPU's)");
  app.add_option("--warmup", a->warmup, "untimed runs after the first")->capture_default_str();
  app.add_option("--iters", a->iters, "timed runs")->capture_default_str();
  app.add_option("--shape", a->shapes, "input shape NAME=1x3x224x224; repeatable");
  app.add_option("--dim", a->dims, "value of a symbolic dim NAME=V (e.g. batch=4); repeatable");
  app.add_option("-i,--input", a->inputs, "input NAME=PATH instead of synthesized data; repeatable");
  app.add_option("--seed", a->seed, "seed of the synthesized inputs")->capture_default_str();
  app.add_flag("--json", a->json, "print one JSON object");
  app.add_option("--profile", a->profile,
                 "write a chrome trace of the timed runs here; per-op summary and interpreter fallbacks to stderr");
  app.add_flag("-v,--verbose", a->verbose,
               "say which nodes ran on the interpreter's kernel (op, node, count, share of the run), from one more "
               "profiled run after the timed ones");
  return [a] { return run_bench(*a); };
}

}  // namespace hodu::cli
