// Plugins as Engines, so `hodu run --runtime NAME` / `--pack NAME` go through
// the usual Session → EngineRegistry → Engine::prepare path:
//   - a runtime plugin alone gets the model as .hdss bytes;
//   - a compiler + runtime pair builds the model with the compiler (through
//     the artifact cache) and loads the artifact with the runtime.
#pragma once
#include <memory>
#include <string>

#include "plugins/artifact_cache.h"
#include "plugins/plugin.h"
#include "runtime/engine.h"

namespace hodu::plugins {

std::shared_ptr<Engine> make_runtime_engine(std::shared_ptr<const Plugin> runtime, std::string engine_name);

struct CompiledEngineSettings {
  BuildRequest request;                  // format "" = the first the compiler writes and the runtime loads
  std::shared_ptr<ArtifactCache> cache;  // null: build into a scratch folder every time
};
std::shared_ptr<Engine> make_compiled_engine(std::shared_ptr<const Plugin> compiler,
                                             std::shared_ptr<const Plugin> runtime, std::string engine_name,
                                             CompiledEngineSettings settings);

// The first format `compiler` writes that `runtime` loads; Unsupported naming both lists when none.
std::string common_format(const PluginInfo& compiler, const PluginInfo& runtime);

// Adds the engine to EngineRegistry::instance() and a "*" kernel for it to
// KernelRegistry::instance() (the Session dispatches every node before prepare).
void register_engine(std::shared_ptr<Engine> engine, const PluginInfo& runtime);
// True for an engine added by register_engine (PluginManager::register_builtin skips them).
bool is_plugin_engine(const std::string& engine_name);

}  // namespace hodu::plugins
