// PluginManager: finds, loads and looks up plugins.
//
// Search path, in order (earlier wins a name clash; the later one is refused):
//   1. $HODU_PLUGIN_PATH (colon-separated folders)
//   2. $HODU_HOME/plugins (default ~/.hodu/plugins; `hodu plugin add` copies there)
//   3. config.toml's plugin_dirs
//   4. the plugins shipped with hodu: <bin>/../lib/hodu/plugins (installed) and
//      <bin>/../plugins (build tree)
// plus the engines built into libhodu (interp, cpu, native), registered by
// register_builtin(). In a folder, every `*.so` is tried; a file that is not a
// library, or a plugin that fails its checks, is recorded in errors() and
// never stops the others.
//
// Thread-safe. Plugins are shared_ptrs: unload() forgets one, and its library
// closes when the last engine or model using it is gone.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plugins/plugin.h"

namespace hodu::plugins {

struct PluginLoadError {
  std::string path;
  std::string message;
};

class PluginManager {
 public:
  // Process-wide: register_builtin() and load_all() run once on first use.
  static PluginManager& instance();

  // An empty manager over `search_path` (tests give their own).
  explicit PluginManager(std::vector<std::string> search_path);

  // Folders of the default search path that are set (they need not exist).
  static std::vector<std::string> default_search_path();
  // Folders hodu ships its own plugins in (the last entries of the search path).
  static std::vector<std::string> shipped_plugin_dirs();

  const std::vector<std::string>& search_path() const { return search_path_; }

  // Loads one library. Throws (naming the file) on any failure, including a
  // name already taken by a plugin of the same kind.
  std::shared_ptr<Plugin> load(const std::string& path);
  // Every `*.so` in the search path; failures go to errors(). Returns how many loaded.
  int load_all();
  // The engines of EngineRegistry (interp, cpu, native) as built-in runtime entries.
  void register_builtin();
  // Forgets the plugin(s) with this name; false when none.
  bool unload(const std::string& name);

  // By name: of that kind (null when none).
  std::shared_ptr<Plugin> find(const std::string& name, PluginKind kind) const;
  // Every plugin of `kind` that runs on `device`, in search order (built-ins last).
  std::vector<std::shared_ptr<Plugin>> find_for_device(const Device& device, PluginKind kind) const;
  // The compiler or runtime of a pack (`pack` field, or the plugin's name).
  std::shared_ptr<Plugin> find_in_pack(const std::string& pack, PluginKind kind) const;
  std::vector<std::shared_ptr<Plugin>> plugins() const;
  std::vector<PluginLoadError> errors() const;

 private:
  std::shared_ptr<Plugin> add_locked(std::shared_ptr<Plugin> plugin);
  std::shared_ptr<Plugin> find_locked(const std::string& name, PluginKind kind) const;
  std::vector<std::string> search_path_;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Plugin>> plugins_;
  std::vector<PluginLoadError> errors_;
};

// `text` split at ':' with empty parts dropped.
std::vector<std::string> split_search_path(const std::string& text);

}  // namespace hodu::plugins
