#include "plugins/plugin_engine.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/ranges.h>

#include "core/error.h"
#include "formats/model_io.h"
#include "core/dlpack_tensor.h"
#include "core/scratch_dir.h"
#include "runtime/kernel_registry.h"
#include "runtime/log.h"

namespace fs = std::filesystem;

namespace hodu::plugins {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

class PluginExecutable : public Executable {
 public:
  explicit PluginExecutable(std::unique_ptr<LoadedModel> model) : model_(std::move(model)) {
    for (int i = 0; i < model_->num_inputs(); ++i) input_names_.push_back(model_->input_info(i).name);
    for (int i = 0; i < model_->num_outputs(); ++i) output_names_.push_back(model_->output_info(i).name);
  }

  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    std::vector<Tensor> keep;  // contiguous copies the views point into
    keep.reserve(input_names_.size());
    std::vector<DLTensor> views;
    for (const auto& name : input_names_) {
      auto it = inputs.find(name);
      HODU_CHECK(it != inputs.end() && it->second.is_tensor(), ErrorCode::InvalidArgument,
                 "plugin '{}' wants input '{}', which was not given as a tensor", model_->plugin().name(), name);
      keep.push_back(it->second.tensor.contiguous());
      views.push_back(dl_view(keep.back(), "input '" + name + "'"));
    }
    auto outputs = model_->run(views);
    std::vector<RuntimeValue> results;
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string what = fmt::format("plugin '{}' output '{}'", model_->plugin().name(), output_names_[i]);
      try {
        // from_managed owns it from here, and releases it itself when it throws.
        results.emplace_back(from_managed(std::exchange(outputs[i], nullptr), what));
      } catch (...) {
        for (auto* m : outputs)
          if (m && m->deleter) m->deleter(m);
        throw;
      }
    }
    return results;
  }

 private:
  std::unique_ptr<LoadedModel> model_;
  std::vector<std::string> input_names_, output_names_;
};

class RuntimePluginEngine : public Engine {
 public:
  RuntimePluginEngine(std::shared_ptr<const Plugin> runtime, std::string name)
      : runtime_(std::move(runtime)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return fmt::format("runtime plugin {} {} ({})", runtime_->name(), runtime_->info().version, runtime_->info().path);
  }
  bool supports(const Device& d) const override { return runtime_->info().supports(d); }
  std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions&) override {
    const auto& formats = runtime_->info().loadable_formats;
    HODU_CHECK(std::find(formats.begin(), formats.end(), "hdss") != formats.end(), ErrorCode::Unsupported,
               "runtime plugin '{}' cannot load models (it loads: {}); pair it with a compiler (--compiler NAME)",
               runtime_->name(), join(formats));
    return std::make_unique<PluginExecutable>(runtime_->load(write_hdss(model), "hdss"));
  }

 private:
  std::shared_ptr<const Plugin> runtime_;
  std::string name_;
};

// Builds a model with the compiler (through the cache when there is one) and
// loads the artifact with the runtime.
struct ArtifactBuilder {
  std::shared_ptr<const Plugin> compiler, runtime;
  CompiledEngineSettings settings;

  std::unique_ptr<LoadedModel> build_and_load(const std::string& hdss, const BuildRequest& r) const {
    auto build = [&](const std::string& path) {
      log_verbose("compiling with plugin '{}' to {}", compiler->name(), path);
      compiler->build(hdss, r, path);
    };
    if (settings.cache) {
      fs::path artifact = settings.cache->get_or_build(ArtifactCache::key(hdss, compiler->info(), r), r.format, build);
      return runtime->load_file(artifact.string(), r.format);
    }
    // No cache: a scratch folder, removed once the runtime has loaded the artifact.
    ScratchDir scratch("hodu-plugin-");
    std::string path = (scratch.path() / ("model." + r.format)).string();
    build(path);
    return runtime->load_file(path, r.format);
  }
};

// A model with symbolic input dims: compiled for the shapes of each run, one
// artifact per distinct set of shapes (the cache keeps them across processes).
class PerShapeExecutable : public Executable {
 public:
  PerShapeExecutable(ArtifactBuilder builder, std::string hdss, std::vector<std::string> symbolic_inputs)
      : builder_(std::move(builder)), hdss_(std::move(hdss)), symbolic_inputs_(std::move(symbolic_inputs)) {}

  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) override {
    std::vector<std::string> shapes;
    for (const auto& name : symbolic_inputs_) {
      auto it = inputs.find(name);
      HODU_CHECK(it != inputs.end() && it->second.is_tensor(), ErrorCode::InvalidArgument, "missing input '{}'", name);
      shapes.push_back(fmt::format("{}={}", name, fmt::join(it->second.tensor.shape(), "x")));
    }
    std::string key;
    for (const auto& s : shapes) key += s + ";";
    auto& exe = by_shape_[key];
    if (!exe) {
      BuildRequest r = builder_.settings.request;
      r.input_shapes = shapes;
      exe = std::make_unique<PluginExecutable>(builder_.build_and_load(hdss_, r));
    }
    return exe->run(inputs);
  }

 private:
  ArtifactBuilder builder_;
  std::string hdss_;
  std::vector<std::string> symbolic_inputs_;
  std::map<std::string, std::unique_ptr<PluginExecutable>> by_shape_;
};

class CompiledEngine : public Engine {
 public:
  CompiledEngine(std::shared_ptr<const Plugin> compiler, std::shared_ptr<const Plugin> runtime, std::string name,
                 CompiledEngineSettings settings)
      : builder_{std::move(compiler), std::move(runtime), std::move(settings)}, name_(std::move(name)) {
    auto& r = builder_.settings.request;
    if (r.format.empty()) r.format = common_format(builder_.compiler->info(), builder_.runtime->info());
  }
  std::string name() const override { return name_; }
  std::string description() const override {
    return fmt::format("compiler plugin {} + runtime plugin {} ({} artifacts)", builder_.compiler->name(),
                       builder_.runtime->name(), builder_.settings.request.format);
  }
  bool supports(const Device& d) const override {
    return builder_.compiler->info().supports(d) && builder_.runtime->info().supports(d);
  }
  std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions&) override {
    std::string hdss = write_hdss(model);
    std::vector<std::string> symbolic;
    for (const auto& in : model.graph.inputs)
      if (!model.graph.initializer(in.name) && in.type.kind == ValueType::Kind::Tensor && !in.type.shape.is_static())
        symbolic.push_back(in.name);
    if (!symbolic.empty()) return std::make_unique<PerShapeExecutable>(builder_, std::move(hdss), std::move(symbolic));
    return std::make_unique<PluginExecutable>(builder_.build_and_load(hdss, builder_.settings.request));
  }

 private:
  ArtifactBuilder builder_;
  std::string name_;
};

}  // namespace

std::string common_format(const PluginInfo& compiler, const PluginInfo& runtime) {
  for (const auto& f : compiler.output_formats)
    if (std::find(runtime.loadable_formats.begin(), runtime.loadable_formats.end(), f) !=
        runtime.loadable_formats.end())
      return f;
  fail(ErrorCode::Unsupported, "compiler '{}' writes [{}] but runtime '{}' loads [{}]: no format in common",
       compiler.name, join(compiler.output_formats), runtime.name, join(runtime.loadable_formats));
}

std::shared_ptr<Engine> make_runtime_engine(std::shared_ptr<const Plugin> runtime, std::string engine_name) {
  return std::make_shared<RuntimePluginEngine>(std::move(runtime), std::move(engine_name));
}

std::shared_ptr<Engine> make_compiled_engine(std::shared_ptr<const Plugin> compiler,
                                             std::shared_ptr<const Plugin> runtime, std::string engine_name,
                                             CompiledEngineSettings settings) {
  return std::make_shared<CompiledEngine>(std::move(compiler), std::move(runtime), std::move(engine_name),
                                          std::move(settings));
}

namespace {
std::mutex plugin_engines_mutex;
std::set<std::string>& plugin_engine_names() {
  static std::set<std::string> names;
  return names;
}
}  // namespace

bool is_plugin_engine(const std::string& engine_name) {
  std::lock_guard lock(plugin_engines_mutex);
  return plugin_engine_names().count(engine_name) > 0;
}

void register_engine(std::shared_ptr<Engine> engine, const PluginInfo& runtime) {
  {
    std::lock_guard lock(plugin_engines_mutex);
    plugin_engine_names().insert(engine->name());
  }
  for (const char* kind : {"cpu", "cuda"}) {
    Device d = Device::parse(std::string(kind) == "cpu" ? "cpu" : "cuda:0");
    if (!engine->supports(d)) continue;
    KernelRegistry::instance().add({.op = "*", .device = d.kind, .name = "plugin:" + runtime.name,
                                    .engine = engine->name(), .priority = -1,
                                    .description = "the whole graph, run by plugin " + runtime.name});
  }
  EngineRegistry::instance().add(std::move(engine));
}

}  // namespace hodu::plugins
