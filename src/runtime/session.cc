#include "runtime/session.h"

#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"
#include "formats/package.h"
#include "passes/passes.h"
#include "runtime/log.h"
#include "runtime/memory/memory_manager.h"
#include "runtime/profiler.h"

namespace hodu {

int physical_core_count() {
  // Count distinct (physical id, core id) pairs; hyperthreads share a core.
  std::ifstream f("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int phys = 0, core = -1;
  while (std::getline(f, line)) {
    if (line.rfind("physical id", 0) == 0) phys = std::atoi(line.substr(line.find(':') + 1).c_str());
    else if (line.rfind("core id", 0) == 0) core = std::atoi(line.substr(line.find(':') + 1).c_str());
    else if (line.empty() && core >= 0) { cores.insert({phys, core}); core = -1; }
  }
  if (core >= 0) cores.insert({phys, core});
  int n = static_cast<int>(cores.size());
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(n, 1);
}

namespace {

void dispatch_graph(Dispatcher& d, const Graph& g, const std::string& engine) {
  for (const auto& n : g.nodes) {
    d.choose(n, dispatch_dtype(g, n), engine);
    for (const auto& a : n.attributes) {
      if (a.g) dispatch_graph(d, *a.g, engine);
      for (const auto& sg : a.graphs) dispatch_graph(d, *sg, engine);
    }
  }
}

}  // namespace

std::unique_ptr<Session> Session::load(const std::string& path, const SessionOptions& options) {
  // A .hodupkg runs its library for this host when it has one (docs/hodupkg.md).
  if (pkg::is_package_path(path))
    return std::unique_ptr<Session>(new Session(std::make_unique<Model>(pkg::Package::open(path)->runnable_model()),
                                                options, true));
  return std::unique_ptr<Session>(new Session(std::make_unique<Model>(load_model(path)), options, true));
}

std::unique_ptr<Session> Session::from_bytes(std::string_view bytes, const SessionOptions& options) {
  auto model = std::make_unique<Model>(load_model_from_bytes(bytes, model_format_from_bytes(bytes)));
  if (pkg::is_package_bytes(bytes))
    model->metadata.push_back({pkg::kEngineReasonKey, "a package given as bytes runs its graph on the default "
                                                      "engine (its libraries are used when it is loaded from a file)"});
  return std::unique_ptr<Session>(new Session(std::move(model), options, true));
}

std::unique_ptr<Session> Session::from_model(Model model, const SessionOptions& options) {
  // The caller's Model shares its initializers' storage with this copy: they stay as they are.
  return std::unique_ptr<Session>(new Session(std::make_unique<Model>(std::move(model)), options, false));
}

Session::Session(std::unique_ptr<Model> model, const SessionOptions& options, bool owns_weights)
    : model_(std::move(model)) {
  HODU_CHECK(options.opt_level >= -1 && options.opt_level <= 3, ErrorCode::InvalidArgument,
             "optimization level {} is out of range (0..3, or -1 for the engine's default)", options.opt_level);
  MemoryManager::instance();  // tensors allocated from here on are counted in memory_stats("cpu")
  // A model the session loaded itself: initializers nothing reads (exporters leave a quantized
  // model's float weights beside its integer ones: 87 of a dynamically quantized ResNet-34's
  // 108 MB) are dropped, their bytes freed before the engine packs the others (ONNX Runtime
  // drops them at load too). A caller's Model (from_model) is left as it is.
  if (owns_weights) passes::drop_unread_initializers(model_->graph);
  for (const auto& in : model_->graph.inputs)
    if (!model_->graph.initializer(in.name)) inputs_.push_back(in);
  Policy policy;
  if (options.policy) {
    policy = *options.policy;
  } else {
    policy.execution.engine = options.engine;
    policy.execution.device = options.device;
    policy.execution.threads = options.threads;
  }
  threads_ = policy.execution.threads > 0 ? policy.execution.threads : physical_core_count();
  // Engines register their kernels when the engine registry is built: touch it first.
  auto& registry = EngineRegistry::instance();
  // The engine a model asks for (a .hodupkg with a library for this host: native), when
  // nothing else names one; if it cannot prepare the model, the default engine runs it.
  std::string preferred, reason;
  for (const auto& [k, v] : model_->metadata) {
    if (k == pkg::kPreferredEngineKey) preferred = v;
    if (k == pkg::kEngineReasonKey) reason = v;
  }
  auto wanted = preferred.empty() ? nullptr : registry.find(preferred);
  const bool from_model =
      policy.execution.engine.empty() && wanted && wanted->supports(policy.execution.device);
  if (from_model) policy.execution.engine = preferred;
  if (!reason.empty() && (from_model || preferred.empty())) log_verbose("{}", reason);
  auto start = [&](Policy p) {
    dispatcher_ = std::make_shared<Dispatcher>(KernelRegistry::instance(), std::move(p));
    std::shared_ptr<Engine> engine = dispatcher_->choose_engine(registry);
    engine_name_ = engine->name();
    // Choose every node's kernel up front: an impossible kernel policy fails here, before any run.
    dispatch_graph(*dispatcher_, model_->graph, engine_name_);
    EngineOptions eo{dispatcher_->execution().device, threads_, options.seed, dispatcher_, owns_weights,
                     options.update_state_in_place, options.reseed_each_run, options.opt_level};
    executable_ = engine->prepare(*model_, eo);
  };
  update_state_in_place_ = options.update_state_in_place;
  if (!from_model) {
    start(std::move(policy));
    return;
  }
  try {
    start(policy);
  } catch (const Error& e) {
    log_line(fmt::format("warning: {}; running the graph on the default engine instead", e.what()));
    policy.execution.engine.clear();
    start(std::move(policy));
  }
}

namespace {

std::string type_name(const ValueType& t) {
  return t.kind == ValueType::Kind::Tensor ? std::string(dtype_onnx_name(t.dtype)) : t.to_string();
}

}  // namespace

void Session::check_inputs(const std::map<std::string, RuntimeValue>& feeds) const {
  for (const auto& [name, v] : feeds) {
    bool known = false;
    for (const auto& in : model_->graph.inputs) known |= in.name == name;
    if (!known) {
      std::string names;
      for (const auto& in : inputs_) names += (names.empty() ? "'" : ", '") + in.name + "'";
      fail(ErrorCode::InvalidArgument, "'{}' is not an input of the model (inputs: {})", name, names);
    }
  }
  std::map<std::string, std::pair<int64_t, std::string>> bound;  // symbol → (size, where)
  for (const auto& in : inputs_) {
    auto it = feeds.find(in.name);
    if (it == feeds.end()) fail(ErrorCode::InvalidArgument, "missing input '{}' ({})", in.name, in.type.to_string());
    const RuntimeValue& v = it->second;
    const ValueType& t = in.type;
    if (t.kind == ValueType::Kind::Tensor) {
      if (!v.is_tensor())
        fail(ErrorCode::InvalidArgument, "input '{}' must be a tensor ({})", in.name, t.to_string());
      const Tensor& x = v.tensor;
      if (t.dtype != DType::Undefined && x.dtype() != t.dtype)
        fail(ErrorCode::InvalidArgument, "input '{}': dtype {} does not match the model's {}", in.name,
             dtype_onnx_name(x.dtype()), type_name(t));
      if (!t.shape.rank_known()) continue;
      if (x.rank() != t.shape.rank())
        fail(ErrorCode::InvalidArgument, "input '{}': rank {} (shape {}) does not match the model's rank {} ({})",
             in.name, x.rank(), x.shape_string(), t.shape.rank(), t.shape.to_string());
      for (int64_t d = 0; d < x.rank(); ++d) {
        const Dim& dim = t.shape[d];
        int64_t got = x.shape()[d];
        if (dim.is_known() && dim.value != got)
          fail(ErrorCode::InvalidArgument, "input '{}': dim {} is {} but the model expects {} (shape {} vs {})",
               in.name, d, got, dim.value, x.shape_string(), t.shape.to_string());
        if (dim.is_symbolic()) {
          auto [b, inserted] = bound.emplace(dim.symbol, std::make_pair(got, in.name));
          if (!inserted && b->second.first != got)
            fail(ErrorCode::InvalidArgument,
                 "input '{}': dim {} ('{}') is {} but input '{}' binds '{}' to {}", in.name, d, dim.symbol, got,
                 b->second.second, dim.symbol, b->second.first);
        }
      }
    } else if (t.kind == ValueType::Kind::Sequence && !v.is_sequence()) {
      fail(ErrorCode::InvalidArgument, "input '{}' must be a sequence ({})", in.name, t.to_string());
    }
  }
}

void Session::write_state_back(const std::map<std::string, RuntimeValue>& feeds, std::vector<RuntimeValue>& values) {
  const std::string suffix = ".next";
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string& name = model_->graph.outputs[i].name;
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    auto it = feeds.find(name.substr(0, name.size() - suffix.size()));
    if (it == feeds.end() || !it->second.is_tensor() || !values[i].is_tensor()) continue;
    Tensor state = it->second.tensor;  // shares the caller's storage, written as asked
    const Tensor& next = values[i].tensor;
    if (state.dtype() != next.dtype() || state.shape() != next.shape())
      fail(ErrorCode::InvalidArgument, "'{}' ({}) cannot be updated in place with '{}' ({})", it->first,
           state.type_string(), name, next.type_string());
    if (state.raw_data() != next.raw_data()) {
      if (!state.is_contiguous() || !next.is_contiguous())
        fail(ErrorCode::InvalidArgument, "'{}' must be contiguous to be updated in place", it->first);
      std::memcpy(state.raw_data(), next.raw_data(), next.nbytes());
    }
    values[i] = it->second;
  }
}

std::vector<NamedValue> Session::run(const std::map<std::string, RuntimeValue>& feeds) {
  check_inputs(feeds);
  Profiler* profiler = Profiler::active();
  double start = profiler ? profiler->now_us() : 0;
  std::vector<RuntimeValue> values;
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    values = executable_->run(feeds);
  }
  if (profiler) profiler->add_run(start, profiler->now_us());
  if (update_state_in_place_) write_state_back(feeds, values);
  std::vector<NamedValue> out;
  out.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) out.push_back({model_->graph.outputs[i].name, std::move(values[i])});
  return out;
}

}  // namespace hodu
