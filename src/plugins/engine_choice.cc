#include "plugins/engine_choice.h"

#include <fmt/ranges.h>

#include "core/error.h"
#include "plugins/artifact_cache.h"
#include "plugins/hodu_config.h"
#include "plugins/plugin_engine.h"
#include "runtime/engine.h"

namespace hodu::plugins {
namespace {

std::string installed(PluginManager& manager, PluginKind kind) {
  std::string s;
  for (const auto& p : manager.plugins())
    if (p->info().is(kind)) s += (s.empty() ? "" : ", ") + p->name() + (p->info().pack.empty() ? "" : " (pack " + p->info().pack + ")");
  return s.empty() ? "none" : s;
}

std::shared_ptr<Plugin> find_plugin(PluginManager& manager, const std::string& name, PluginKind kind) {
  if (auto p = manager.find(name, kind)) return p;
  if (auto p = manager.find_in_pack(name, kind)) return p;
  fail(ErrorCode::InvalidArgument, "no {} plugin or pack named '{}' (installed: {}; see hodu plugin list)",
       plugin_kind_name(kind), name, installed(manager, kind));
}

// A library given by path is used as is, even when an installed plugin has its name.
std::shared_ptr<Plugin> open_kind(const std::string& path, PluginKind kind, const char* flag) {
  auto p = Plugin::open(path);
  HODU_CHECK(p->info().is(kind), ErrorCode::InvalidArgument, "{} {}: plugin '{}' is a {} plugin, not a {}", flag, path,
             p->name(), p->info().kinds_string(), plugin_kind_name(kind));
  return p;
}

std::string describe(const Plugin& p) {
  return fmt::format("{} {}{}", p.name(), p.info().version, p.info().builtin() ? " (built in)" : "");
}

}  // namespace

std::shared_ptr<Plugin> find_compiler(PluginManager& manager, const std::string& name) {
  return find_plugin(manager, name, PluginKind::Compiler);
}
std::shared_ptr<Plugin> find_runtime(PluginManager& manager, const std::string& name) {
  return find_plugin(manager, name, PluginKind::Runtime);
}

EngineChoice choose_engine(const EngineRequest& r, PluginManager& manager) {
  bool any_plugin = !r.compiler.empty() || !r.runtime.empty() || !r.compiler_plugin.empty() ||
                    !r.runtime_plugin.empty() || !r.pack.empty();
  HODU_CHECK(r.engine.empty() || !any_plugin, ErrorCode::InvalidArgument,
             "--engine cannot be combined with --compiler, --runtime, their -plugin forms or --pack");
  HODU_CHECK(r.compiler.empty() || r.compiler_plugin.empty(), ErrorCode::InvalidArgument,
             "give --compiler or --compiler-plugin, not both");
  HODU_CHECK(r.runtime.empty() || r.runtime_plugin.empty(), ErrorCode::InvalidArgument,
             "give --runtime or --runtime-plugin, not both");
  HODU_CHECK(r.pack.empty() || (r.compiler.empty() && r.compiler_plugin.empty() && r.runtime.empty() &&
                                r.runtime_plugin.empty()),
             ErrorCode::InvalidArgument, "--pack names both the compiler and the runtime; drop the other flags");
  if (!any_plugin) {
    if (!r.engine.empty()) return {r.engine, "engine " + r.engine, false};
    if (r.use_config_default) {
      HoduConfig c = load_config();
      if (!c.default_engine.empty()) return {c.default_engine, "engine " + c.default_engine + " (config.toml)", false};
    }
    auto e = EngineRegistry::instance().pick(r.device);
    return {e->name(), "engine " + e->name(), true};
  }

  std::shared_ptr<Plugin> compiler, runtime;
  if (!r.pack.empty()) {
    compiler = manager.find_in_pack(r.pack, PluginKind::Compiler);
    runtime = manager.find_in_pack(r.pack, PluginKind::Runtime);
    HODU_CHECK(compiler || runtime, ErrorCode::InvalidArgument,
               "--pack {}: no plugin of that pack is installed (compilers: {}; runtimes: {})", r.pack,
               installed(manager, PluginKind::Compiler), installed(manager, PluginKind::Runtime));
  }
  if (!r.compiler_plugin.empty()) compiler = open_kind(r.compiler_plugin, PluginKind::Compiler, "--compiler-plugin");
  if (!r.compiler.empty()) compiler = find_compiler(manager, r.compiler);
  if (!r.runtime_plugin.empty()) runtime = open_kind(r.runtime_plugin, PluginKind::Runtime, "--runtime-plugin");
  if (!r.runtime.empty()) runtime = find_runtime(manager, r.runtime);

  if (compiler && !runtime) {  // the runtime of the compiler's pack, else any plugin runtime that loads its output
    if (!compiler->info().pack.empty()) runtime = manager.find_in_pack(compiler->info().pack, PluginKind::Runtime);
    for (const auto& p : manager.find_for_device(r.device, PluginKind::Runtime)) {
      if (runtime) break;
      if (p->info().builtin()) continue;
      try {
        common_format(compiler->info(), p->info());
        runtime = p;
      } catch (const Error&) {
      }
    }
    HODU_CHECK(runtime, ErrorCode::InvalidArgument,
               "compiler '{}' needs a runtime plugin that loads what it writes; give --runtime NAME (installed: {})",
               compiler->name(), installed(manager, PluginKind::Runtime));
  }
  HODU_CHECK(runtime, ErrorCode::InvalidArgument, "--pack {} has no runtime plugin", r.pack);
  HODU_CHECK(runtime->info().supports(r.device), ErrorCode::Unsupported, "runtime '{}' does not run on {} (it runs on: {})",
             runtime->name(), r.device.to_string(), fmt::join(runtime->info().devices, ", "));

  if (!compiler) {
    if (runtime->info().builtin()) return {runtime->name(), "engine " + runtime->name(), false};
    register_engine(make_runtime_engine(runtime, runtime->name()), runtime->info());
    return {runtime->name(), "runtime " + describe(*runtime), false};
  }
  HODU_CHECK(!runtime->info().builtin(), ErrorCode::InvalidArgument,
             "runtime '{}' is built into hodu and takes no compiled artifacts; pair compiler '{}' with a runtime "
             "plugin (installed: {})",
             runtime->name(), compiler->name(), installed(manager, PluginKind::Runtime));
  HODU_CHECK(compiler->info().supports(r.device), ErrorCode::Unsupported, "compiler '{}' does not compile for {}",
             compiler->name(), r.device.to_string());
  CompiledEngineSettings settings{r.build, ArtifactCache::from_config()};
  std::string name = compiler->name() + "+" + runtime->name();
  register_engine(make_compiled_engine(compiler, runtime, name, std::move(settings)), runtime->info());
  std::string pack = !r.pack.empty() ? " (pack " + r.pack + ")" : "";
  return {name, "compiler " + describe(*compiler) + " + runtime " + describe(*runtime) + pack, false};
}

}  // namespace hodu::plugins
