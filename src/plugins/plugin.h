// One plugin: a shared library speaking include/hodu/plugin.h, or one of the
// engines built into libhodu (listed the same way, run through EngineRegistry).
// C++ wrappers turn a plugin's status + last_error() into hodu::Error.
#pragma once
#include <hodu/plugin.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"

namespace hodu::plugins {

enum class PluginKind : uint32_t { Compiler = HODU_PLUGIN_COMPILER, Runtime = HODU_PLUGIN_RUNTIME };
const char* plugin_kind_name(PluginKind kind);

struct PluginInfo {
  std::string name, version, description, pack;
  uint32_t kinds = 0;
  std::vector<std::string> devices, output_formats, loadable_formats;
  std::string path;  // the library; "" for a built-in
  bool builtin() const { return path.empty(); }
  bool is(PluginKind k) const { return (kinds & static_cast<uint32_t>(k)) != 0; }
  bool supports(const Device& device) const;  // devices lists "cpu" / "cuda" (any cuda:N) / the exact name
  std::string kinds_string() const;           // "compiler", "runtime", "compiler+runtime"
};

struct BuildRequest {
  std::string format, target, name = "model";
  int opt_level = 2;
  std::vector<std::string> input_shapes;  // "NAME=1x3x224x224"
  std::vector<std::string> options;       // plugin-specific key=value
};

class Plugin;

// A model loaded by a runtime plugin; unloads itself. Not thread-safe: one run at a time.
class LoadedModel {
 public:
  LoadedModel(std::shared_ptr<const Plugin> plugin, hodu_model* model) : plugin_(std::move(plugin)), model_(model) {}
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  int num_inputs() const;
  int num_outputs() const;
  hodu_tensor_info input_info(int i) const;
  hodu_tensor_info output_info(int i) const;
  // Outputs in order, each owned by the caller (call its deleter).
  std::vector<DLManagedTensor*> run(const std::vector<DLTensor>& inputs);
  const Plugin& plugin() const { return *plugin_; }

 private:
  std::shared_ptr<const Plugin> plugin_;  // keeps the library loaded
  hodu_model* model_;
};

class Plugin : public std::enable_shared_from_this<Plugin> {
 public:
  // dlopens `path` and checks it: both exports present, ABI version equal to
  // ours, a consistent table. Errors (InvalidArgument / Unsupported) name the file.
  static std::shared_ptr<Plugin> open(const std::string& path);
  // A built-in engine's entry (no library).
  static std::shared_ptr<Plugin> builtin(PluginInfo info);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const PluginInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  const hodu_plugin* table() const { return table_; }  // null for built-ins

  // Throws the plugin's own message (prefixed with its name) when status != HODU_OK.
  void check(hodu_status status, std::string_view call) const;

  // Compiler calls (the plugin must be a compiler).
  std::string compile(std::string_view hdss, const BuildRequest& request) const;
  void build(std::string_view hdss, const BuildRequest& request, const std::string& out_path) const;
  // Runtime calls (the plugin must be a runtime). format "" = from the extension.
  std::unique_ptr<LoadedModel> load(std::string_view bytes, const std::string& format) const;
  std::unique_ptr<LoadedModel> load_file(const std::string& path, const std::string& format) const;

 private:
  Plugin() = default;
  const hodu_compiler_api& compiler() const;
  const hodu_runtime_api& runtime() const;
  PluginInfo info_;
  void* handle_ = nullptr;
  const hodu_plugin* table_ = nullptr;
};

}  // namespace hodu::plugins
