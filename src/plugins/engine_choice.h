// Which engine runs a model for `hodu run` (and anything else that takes the
// same flags): --engine NAME, --runtime NAME / --runtime-plugin PATH,
// --compiler NAME / --compiler-plugin PATH, --pack NAME, config.toml's
// default_engine, or the best engine for the device. Plugin choices are
// registered as engines (plugin_engine.h) so the Session runs them as usual.
#pragma once
#include <string>

#include "core/device.h"
#include "plugins/plugin.h"
#include "plugins/plugin_manager.h"

namespace hodu::plugins {

struct EngineRequest {
  std::string engine;                           // --engine
  std::string compiler, runtime;                // --compiler / --runtime (plugin names or packs)
  std::string compiler_plugin, runtime_plugin;  // --compiler-plugin / --runtime-plugin (library paths)
  std::string pack;                             // --pack
  Device device;
  BuildRequest build;  // for a compiler: options of the artifact (format "" = agreed with the runtime)
  bool use_config_default = true;  // config.toml default_engine when nothing is asked
};

struct EngineChoice {
  std::string engine;  // the EngineRegistry name for SessionOptions::engine
  std::string summary; // "compiler hodu-compiler-c 0.1.0 + runtime hodu-runtime-native 0.1.0 (pack c)"
  bool auto_selected = false;
};

// InvalidArgument naming the flag and what is installed when a name is unknown
// or flags conflict.
EngineChoice choose_engine(const EngineRequest& request, PluginManager& manager);

// A compiler plugin by name, else the compiler of the pack with that name.
std::shared_ptr<Plugin> find_compiler(PluginManager& manager, const std::string& name);
std::shared_ptr<Plugin> find_runtime(PluginManager& manager, const std::string& name);

}  // namespace hodu::plugins
