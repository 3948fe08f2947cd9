#include "plugins/plugin_manager.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "plugins/hodu_config.h"
#include "plugins/plugin_engine.h"
#include "runtime/engine.h"

namespace fs = std::filesystem;

namespace hodu::plugins {

std::vector<std::string> split_search_path(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t colon = text.find(':', at);
    std::string part = text.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    if (!part.empty()) out.push_back(part);
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  return out;
}

std::vector<std::string> PluginManager::shipped_plugin_dirs() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path root = exe.parent_path().parent_path();
  return {(root / "lib" / "hodu" / "plugins").string(), (root / "plugins").string()};
}

std::vector<std::string> PluginManager::default_search_path() {
  std::vector<std::string> path;
  if (const char* env = std::getenv("HODU_PLUGIN_PATH")) path = split_search_path(env);
  path.push_back((hodu_home() / "plugins").string());
  for (auto& d : load_config().plugin_dirs) path.push_back(d);
  for (auto& d : shipped_plugin_dirs()) path.push_back(d);
  return path;
}

PluginManager& PluginManager::instance() {
  static PluginManager* manager = [] {
    auto* m = new PluginManager(default_search_path());
    m->register_builtin();  // first: a library cannot take a built-in engine's name
    m->load_all();
    return m;
  }();
  return *manager;
}

PluginManager::PluginManager(std::vector<std::string> search_path) : search_path_(std::move(search_path)) {}

std::shared_ptr<Plugin> PluginManager::find_locked(const std::string& name, PluginKind kind) const {
  for (const auto& p : plugins_)
    if (p->name() == name && p->info().is(kind)) return p;
  return nullptr;
}

std::shared_ptr<Plugin> PluginManager::add_locked(std::shared_ptr<Plugin> plugin) {
  for (PluginKind k : {PluginKind::Compiler, PluginKind::Runtime}) {
    if (!plugin->info().is(k)) continue;
    if (auto other = find_locked(plugin->name(), k))
      fail(ErrorCode::InvalidArgument, "{}: a {} plugin named '{}' is already loaded from {}", plugin->info().path,
           plugin_kind_name(k), plugin->name(), other->info().builtin() ? "hodu (built in)" : other->info().path);
  }
  plugins_.push_back(plugin);
  return plugin;
}

std::shared_ptr<Plugin> PluginManager::load(const std::string& path) {
  auto plugin = Plugin::open(path);  // outside the lock: dlopen runs the library's constructors
  std::lock_guard lock(mutex_);
  for (const auto& p : plugins_)
    if (!p->info().builtin() && p->info().path == plugin->info().path) return p;  // already loaded
  return add_locked(std::move(plugin));
}

int PluginManager::load_all() {
  int loaded = 0;
  for (const auto& dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".so") files.push_back(entry.path());
    std::sort(files.begin(), files.end());  // a stable order: the same plugin wins every time
    for (const auto& f : files) {
      try {
        load(f.string());
        ++loaded;
      } catch (const Error& e) {
        std::lock_guard lock(mutex_);
        errors_.push_back({f.string(), e.what()});
      }
    }
  }
  return loaded;
}

void PluginManager::register_builtin() {
  for (const auto& engine : EngineRegistry::instance().all()) {
    if (is_plugin_engine(engine->name())) continue;  // a plugin already, not a built-in
    PluginInfo info;
    info.name = engine->name();
    info.version = HODU_VERSION;
    info.description = engine->description();
    info.kinds = HODU_PLUGIN_RUNTIME;
    if (engine->supports(Device::cpu())) info.devices.push_back("cpu");
    if (engine->supports(Device::parse("cuda:0"))) info.devices.push_back("cuda");
    info.loadable_formats = {"onnx", "hdss", "hodu"};
    if (info.name == "native") info.loadable_formats.push_back("so");
    std::lock_guard lock(mutex_);
    if (!find_locked(info.name, PluginKind::Runtime)) add_locked(Plugin::builtin(std::move(info)));
  }
}

bool PluginManager::unload(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto removed = std::erase_if(plugins_, [&](const auto& p) { return p->name() == name && !p->info().builtin(); });
  return removed > 0;
}

std::shared_ptr<Plugin> PluginManager::find(const std::string& name, PluginKind kind) const {
  std::lock_guard lock(mutex_);
  return find_locked(name, kind);
}

std::vector<std::shared_ptr<Plugin>> PluginManager::find_for_device(const Device& device, PluginKind kind) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Plugin>> out;
  for (const auto& p : plugins_)
    if (p->info().is(kind) && p->info().supports(device)) out.push_back(p);
  std::stable_partition(out.begin(), out.end(), [](const auto& p) { return !p->info().builtin(); });
  return out;
}

std::shared_ptr<Plugin> PluginManager::find_in_pack(const std::string& pack, PluginKind kind) const {
  std::lock_guard lock(mutex_);
  for (const auto& p : plugins_)
    if (p->info().is(kind) && p->info().pack == pack) return p;
  return find_locked(pack, kind);
}

std::vector<std::shared_ptr<Plugin>> PluginManager::plugins() const {
  std::lock_guard lock(mutex_);
  return plugins_;
}

std::vector<PluginLoadError> PluginManager::errors() const {
  std::lock_guard lock(mutex_);
  return errors_;
}

}  // namespace hodu::plugins
