// hodu run MODEL [-i NAME=PATH]... [-I list] [-f pretty|json|npy|hdt] [-o DIR]
//               [--remote URL [--remote-model NAME] [--remote-from VALUE] [--remote-timeout-ms N]]
//               [-d DEVICE] [--threads N] [--engine NAME] [--seed N]
//               [--policy P.json] [--profile TRACE.json] [-v] [--max-isa avx2] [-O0..-O3] [--dump-graph]
//               [--compiler NAME | --compiler-plugin PATH] [--runtime NAME | --runtime-plugin PATH] [--pack NAME]
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "fallback_report.h"
#include "core/error.h"
#include "engines/cpu/cpu_engine.h"
#include "engines/native/native_engine.h"
#include "ir/hoduscript.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"
#include "plugins/engine_choice.h"
#include "plugins/hodu_config.h"
#include "formats/package.h"
#include "formats/tensor_io.h"
#include "input_files.h"
#include "runtime/differential_check.h"
#include "runtime/log.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "output_writer.h"
#include "remote_run.h"

namespace hodu::cli {
namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> input_lists;
  std::string format = "pretty";
  std::string out_dir;
  std::string device = "cpu";
  int threads = 0;
  std::string engine;
  uint64_t seed = 0;
  std::string policy;   // JSON policy file; -d/--threads/--engine given explicitly override it
  std::string profile;  // chrome-trace output
  bool verbose = false;
  std::string max_isa;  // HODU_MAX_ISA for this process
  CLI::App* app = nullptr;
  int opt_level = -1;       // -O: passes applied before the engine (-1: the engine's default)
  bool dump_graph = false;  // print the optimized graph as HoduScript instead of running
  bool check = false;       // run the interpreter beside the engine; bisect to the first differing node
  double check_tol = 1e-4;
  std::string check_save;   // --check: write the smallest differing prefix model here
  // Plugins (docs/plugins.md): names, library paths, or a pack (compiler + runtime).
  std::string compiler, runtime, compiler_plugin, runtime_plugin, pack;
  std::string remote;            // run on this KServe v2 server, the local model as the fallback
  std::string remote_model;      // its name there (default: the file name without extension)
  std::string remote_from;       // run up to this value here, the rest there
  int64_t remote_timeout_ms = 10000;
};

// Runs on the server of --remote; false (after a warning) when that fails and the
// local session should run instead.
bool run_remote(const RunArgs& a, const Session& session, const std::map<std::string, RuntimeValue>& feeds,
                std::vector<NamedValue>& outputs) {
  RemoteRun r{a.remote, a.remote_model.empty() ? std::filesystem::path(a.model).stem().string() : a.remote_model,
              a.remote_timeout_ms, a.remote_from, a.verbose};
  return remote_run(r, session, feeds, outputs);
}

// The engine for this run: from the flags, config.toml, or the best for the
// device. Says which on stderr when a person is watching (a terminal) or at -v,
// so scripts that merge stderr into their output see no change.
void choose_engine(const RunArgs& a, SessionOptions& so) {
  plugins::EngineRequest r;
  r.engine = so.engine;
  r.compiler = a.compiler;
  r.runtime = a.runtime;
  r.compiler_plugin = a.compiler_plugin;
  r.runtime_plugin = a.runtime_plugin;
  r.pack = a.pack;
  r.device = so.device;
  r.build.opt_level = a.opt_level >= 0 ? a.opt_level : 2;
  bool uses_plugins = !(a.compiler.empty() && a.runtime.empty() && a.compiler_plugin.empty() &&
                        a.runtime_plugin.empty() && a.pack.empty());
  plugins::EngineChoice choice;
  if (uses_plugins) {
    auto& manager = plugins::PluginManager::instance();
    for (const auto& e : manager.errors()) log_verbose("plugin not loaded: {}", e.message);
    choice = plugins::choose_engine(r, manager);
  } else {
    // No plugin flag: no plugin is loaded at all (a plain run stays as fast as before).
    plugins::PluginManager none({});
    choice = plugins::choose_engine(r, none);
  }
  so.engine = choice.engine;
  if (a.verbose || isatty(STDERR_FILENO))
    std::fprintf(stderr, "Using: %s%s\n", choice.summary.c_str(), choice.auto_selected ? " (auto-selected)" : "");
}

// --check: the engine against the reference interpreter on the same feeds. Prints each
// output's error and, when one differs, the first node whose result differs.
int run_check(const RunArgs& a, const SessionOptions& so) {
  HODU_CHECK(!native::is_native_library(a.model), ErrorCode::InvalidArgument,
             "--check needs a model graph (.onnx, .hdss, .hodu); a built library has none to bisect");
  Model model = load_model(a.model);
  SessionOptions ref;
  ref.engine = "interp";
  auto ref_session = Session::from_model(model, ref);
  std::vector<std::string> specs = a.inputs;
  for (const auto& l : a.input_lists)
    for (auto& s : split_comma_list(l)) specs.push_back(s);
  auto feeds = load_inputs(specs, *ref_session);
  ref_session.reset();
  DifferentialOptions o;
  o.engine = so;
  o.opt_level = a.opt_level;
  o.tolerance = a.check_tol;
  std::printf("check: engine '%s'%s against the interpreter, tolerance rel L2 %g\n",
              so.engine.empty() ? "default" : so.engine.c_str(),
              a.opt_level >= 0 ? fmt::format(" at -O{}", a.opt_level).c_str() : "", a.check_tol);
  DifferentialReport r = differential_check(model, feeds, o);
  for (const auto& v : r.outputs) std::printf("  output %s\n", v.to_string().c_str());
  if (r.ok) {
    std::printf("check: all %zu outputs match\n", r.outputs.size());
    return 0;
  }
  if (r.first) {
    std::printf("check: first difference at node #%d of %zu, %s (%d prefixes run)\n", r.first->node_index,
                model.graph.nodes.size(), r.first->node.c_str(), r.prefixes_run);
    for (const auto& v : r.first->values) std::printf("  value %s\n", v.to_string().c_str());
    if (!a.check_save.empty()) {
      save_model(prefix_model(model, r.first->node_index), a.check_save);
      std::printf("check: wrote the model up to that node to %s\n", a.check_save.c_str());
    }
  } else if (!r.note.empty()) {
    std::printf("check: %s\n", r.note.c_str());
  }
  return 1;
}

int run_run(const RunArgs& a) {
  if (!a.max_isa.empty()) setenv("HODU_MAX_ISA", a.max_isa.c_str(), 1);  // before the engine's first kernel
  SessionOptions so;
  so.device = Device::parse(a.device);
  so.threads = a.threads;
  so.engine = a.engine;
  so.seed = a.seed;
  if (a.verbose) set_log_verbosity(1);
  if (!a.policy.empty()) {
    Policy p = Policy::load(a.policy);
    if (a.app->count("--device")) p.execution.device = so.device;
    if (a.app->count("--threads")) p.execution.threads = a.threads;
    if (a.app->count("--engine")) p.execution.engine = a.engine;
    p.validate();
    so.policy = p;
  }
  Profiler profiler;
  if (!a.profile.empty()) profiler.start();  // before loading: dispatch decisions go into the trace
  check_output_format(a.format, a.out_dir);
  // A library built by `hodu build` runs on the native engine.
  if (native::is_native_library(a.model) && so.engine.empty()) so.engine = "native";
  if (!a.app->count("--device") && a.policy.empty()) {
    auto config = plugins::load_config();
    if (!config.default_device.empty()) so.device = Device::parse(config.default_device);
  }
  // A package picks its engine itself (its library for this host, else its graph on the
  // default engine) unless an engine or plugin is asked for.
  const bool package = pkg::is_package_path(a.model) && a.opt_level < 0 && !a.dump_graph && !a.check;
  const bool package_choice = package && a.policy.empty() && so.engine.empty() && a.compiler.empty() &&
                              a.runtime.empty() && a.compiler_plugin.empty() && a.runtime_plugin.empty() &&
                              a.pack.empty();
  if (a.policy.empty() && !a.dump_graph && !package_choice) choose_engine(a, so);
  if (a.check) return run_check(a, so);
  std::unique_ptr<Session> session;
  if (native::is_native_library(a.model)) {
    session = Session::from_model(native::describe_library(a.model), so);
  } else if (a.opt_level >= 0 || a.dump_graph) {
    Model m = load_model(a.model);
    // The cpu engine optimizes a model with free input dims once per input shape: passes run
    // without the shapes would fuse what needed them (a conv's residual Add into an elementwise
    // loop instead of the conv's sum post-op). It gets the level instead.
    if (!a.dump_graph && (so.engine.empty() || so.engine == "cpu") && so.device.kind == Device::Kind::CPU &&
        a.policy.empty() && !passes::all_inputs_static(m.graph))
      so.opt_level = a.opt_level;
    else
      passes::optimize(m, {a.opt_level >= 0 ? a.opt_level : cpu::kDefaultOptLevel, {}});
    if (a.dump_graph) {
      std::printf("%s", print_hoduscript(m).c_str());
      return 0;
    }
    session = Session::from_model(std::move(m), so);
  } else {
    session = Session::load(a.model, so);
  }
  if (package_choice && (a.verbose || isatty(STDERR_FILENO)))
    std::fprintf(stderr, "Using: engine %s (%s)\n", session->engine_name().c_str(),
                 session->engine_name() == "native" ? "the package's library for this host" : "the package's graph");
  std::vector<std::string> specs = a.inputs;
  for (const auto& l : a.input_lists)
    for (auto& s : split_comma_list(l)) specs.push_back(s);
  auto feeds = load_inputs(specs, *session);
  std::vector<NamedValue> outputs;
  if (!a.remote.empty() && run_remote(a, *session, feeds, outputs)) {
    emit_outputs(outputs, a.format, a.out_dir);
    return 0;
  }
  // -v: the run is profiled to say which nodes ran on the interpreter's kernel.
  if (a.verbose && a.profile.empty()) profiler.start();
  outputs = session->run(feeds);
  if (a.verbose && a.profile.empty()) {
    profiler.stop();
    std::fprintf(stderr, "%s", fallback_table(fallback_nodes(profiler)).c_str());
  }
  if (!a.profile.empty()) {
    profiler.stop();
    profiler.write_chrome_trace(a.profile);
    std::fprintf(stderr, "%swrote profile %s\n", profiler.summary_table().c_str(), a.profile.c_str());
    std::fprintf(stderr, "%s", fallback_table(fallback_nodes(profiler)).c_str());
    if (profiler.summary().empty())
      std::fprintf(stderr, "note: engine '%s' records no per-node spans (--engine interp does)\n",
                   session->engine_name().c_str());
  }

  emit_outputs(outputs, a.format, a.out_dir);
  return 0;
}

}  // namespace

CommandFn add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("model", a->model, "model file (.onnx, .hdss, .hodu), package (.hodupkg) or hodu-built library (.so)")
      ->required();
  app.add_option("-i,--input", a->inputs, "input NAME=PATH (.npy .npz .hdt .json .pb); repeatable");
  app.add_option("-I,--inputs", a->input_lists, "comma-separated NAME=PATH list");
  app.add_option("-f,--format", a->format, "output format: pretty, json, npy, hdt")->capture_default_str();
  app.add_option("-o,--output-dir", a->out_dir, "write each output to DIR/<name>.<format>");
  app.add_option("-d,--device", a->device, "device: cpu or cuda:N")->capture_default_str();
  app.add_option("--threads", a->threads,
                 "threads (default: physical cores); the cpu engine runs on one while other processes keep the "
                 "cores busy (HODU_THREAD_POLICY=fixed: always all)");
  app.add_option("--engine", a->engine, "built-in engine: cpu, interp, native (default: best for the device)");
  app.add_option("--seed", a->seed, "seed for random ops")->capture_default_str();
  app.add_option("--policy", a->policy, "policy JSON file: {\"execution\": {...}, \"kernels\": {...}}");
  app.add_option("--profile", a->profile, "write a chrome-trace profile here; per-op summary to stderr");
  app.add_flag("-v,--verbose", a->verbose, "log engine and kernel decisions to stderr, and the nodes that ran on the interpreter's kernel");
  app.add_option("--max-isa", a->max_isa,
                 "highest instruction set the kernels may use: baseline, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16, amx "
                 "(sets HODU_MAX_ISA; default: the CPU's)");
  app.add_option("-O,--opt-level", a->opt_level, "graph optimization level 0-3 (docs/passes.md; default: the engine's)")
      ->check(CLI::Range(0, 3));
  app.add_flag("--dump-graph", a->dump_graph, "print the optimized graph as HoduScript and exit");
  app.add_flag("--check", a->check,
               "run the reference interpreter beside the engine on the same inputs, compare every output and, "
               "when one differs, bisect the graph to the first node whose result differs (exit 1)");
  app.add_option("--check-tol", a->check_tol, "--check: relative L2 error allowed on floating outputs")
      ->capture_default_str();
  app.add_option("--check-save", a->check_save,
                 "--check: write the smallest model that still differs (the graph up to that node) to this file "
                 "(.onnx, .hdss, .hodu), to reproduce or report the difference");
  app.add_option("--compiler", a->compiler, "compiler plugin (or pack) to build the model with (hodu plugin list)");
  app.add_option("--runtime", a->runtime, "runtime plugin (or pack) to run the model or the compiled artifact");
  app.add_option("--compiler-plugin", a->compiler_plugin, "compiler plugin library to load and use (.so)");
  app.add_option("--runtime-plugin", a->runtime_plugin, "runtime plugin library to load and use (.so)");
  app.add_option("--pack", a->pack, "compiler + runtime of one pack, e.g. c (= hodu-compiler-c + hodu-runtime-native)");
  app.add_option("--remote", a->remote,
                 "run on this KServe v2 server (hodugaki serve) and fall back to the local model with a warning "
                 "when it cannot be reached or fails");
  app.add_option("--remote-model", a->remote_model, "the model's name on the server (default: MODEL's file name "
                 "without extension)");
  app.add_option("--remote-from", a->remote_from,
                 "with --remote: run the model up to this value here and send it to the server, which serves the "
                 "rest (hodugaki serve --tail-from VALUE)");
  app.add_option("--remote-timeout-ms", a->remote_timeout_ms, "give up on the server after this long (connect, send, "
                 "answer) and run locally")->capture_default_str();
  app.footer("Without --engine or a plugin flag, config.toml's default_engine or the best engine for the device runs "
             "the model. Compiled artifacts are cached in $HODU_HOME/cache (docs/plugins.md).");
  a->app = &app;
  return [a] { return run_run(*a); };
}

}  // namespace hodu::cli
