// hodu plugin list [--json] | info NAME | add PATH | remove NAME
// The plugins hodu finds (src/plugins/plugin_manager.h), and the user's plugin
// folder $HODU_HOME/plugins (docs/plugins.md).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "plugins/hodu_config.h"
#include "plugins/plugin_manager.h"

namespace fs = std::filesystem;

namespace hodu::cli {
namespace {

using plugins::Plugin;
using plugins::PluginManager;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

nlohmann::json to_json(const Plugin& p) {
  const auto& i = p.info();
  return {{"name", i.name},         {"version", i.version},
          {"kind", i.kinds_string()}, {"devices", i.devices},
          {"output_formats", i.output_formats}, {"loadable_formats", i.loadable_formats},
          {"pack", i.pack},         {"builtin", i.builtin()},
          {"path", i.path},         {"description", i.description}};
}

int run_list(bool json, bool verbose) {
  auto& m = PluginManager::instance();
  auto all = m.plugins();
  if (json) {
    nlohmann::json out = {{"plugins", nlohmann::json::array()}, {"errors", nlohmann::json::array()},
                          {"search_path", m.search_path()}};
    for (const auto& p : all) out["plugins"].push_back(to_json(*p));
    for (const auto& e : m.errors()) out["errors"].push_back({{"path", e.path}, {"message", e.message}});
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-22s %-9s %-17s %-8s %-24s %s\n", "NAME", "VERSION", "KIND", "DEVICES", "FORMATS", "FROM");
  for (const auto& p : all) {
    const auto& i = p->info();
    std::string formats = i.is(plugins::PluginKind::Compiler) ? joined(i.output_formats) : joined(i.loadable_formats);
    std::printf("%-22s %-9s %-17s %-8s %-24s %s\n", i.name.c_str(), i.version.c_str(), i.kinds_string().c_str(),
                joined(i.devices).c_str(), formats.c_str(), i.builtin() ? "builtin" : i.path.c_str());
  }
  auto errors = m.errors();
  if (!errors.empty()) {
    std::printf("\n%zu file(s) could not be loaded%s\n", errors.size(), verbose ? ":" : " (-v shows why)");
    if (verbose)
      for (const auto& e : errors) std::printf("  %s\n", e.message.c_str());
  }
  if (verbose) {
    std::printf("\nsearch path:\n");
    for (const auto& d : m.search_path()) std::printf("  %s\n", d.c_str());
  }
  return 0;
}

int run_info(const std::string& name) {
  auto& m = PluginManager::instance();
  std::vector<std::shared_ptr<Plugin>> found;
  for (const auto& p : m.plugins())
    if (p->name() == name) found.push_back(p);
  if (found.empty()) {
    std::string names;
    for (const auto& p : m.plugins()) names += (names.empty() ? "" : ", ") + p->name();
    fail(ErrorCode::InvalidArgument, "no plugin named '{}' (installed: {})", name, names);
  }
  for (const auto& p : found) {
    const auto& i = p->info();
    std::printf("name:        %s\nversion:     %s\nkind:        %s\ndescription: %s\ndevices:     %s\n", i.name.c_str(),
                i.version.c_str(), i.kinds_string().c_str(), i.description.c_str(), joined(i.devices).c_str());
    if (i.is(plugins::PluginKind::Compiler)) std::printf("writes:      %s\n", joined(i.output_formats).c_str());
    if (i.is(plugins::PluginKind::Runtime)) std::printf("loads:       %s\n", joined(i.loadable_formats).c_str());
    if (!i.pack.empty()) std::printf("pack:        %s\n", i.pack.c_str());
    std::printf("from:        %s\n", i.builtin() ? "built into hodu" : i.path.c_str());
    if (!i.builtin()) std::printf("abi:         %d\n", HODU_PLUGIN_ABI_VERSION);
  }
  return 0;
}

int run_add(const std::string& path) {
  // Validate by loading into a manager of its own: a bad file never reaches the folder.
  PluginManager probe({});
  auto plugin = probe.load(path);
  fs::path dir = plugins::hodu_home() / "plugins";
  fs::path target = dir / fs::path(path).filename();
  for (const auto& other : PluginManager::instance().plugins()) {
    if (other->name() != plugin->name() || (other->info().kinds & plugin->info().kinds) == 0) continue;
    std::error_code ec;
    if (!other->info().builtin() && fs::equivalent(other->info().path, target, ec)) continue;  // an update in place
    fail(ErrorCode::InvalidArgument, "a {} plugin named '{}' is already installed ({}){}", other->info().kinds_string(),
         plugin->name(), other->info().builtin() ? "built in" : other->info().path,
         other->info().builtin() ? "" : "; remove it first (hodu plugin remove NAME)");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  HODU_CHECK(fs::is_directory(dir), ErrorCode::Io, "cannot create {}: {}", dir.string(), ec.message());
  fs::path tmp = dir / ("." + target.filename().string() + ".tmp");
  fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "cannot copy {} to {}: {}", path, tmp.string(), ec.message());
  fs::rename(tmp, target);
  std::printf("added %s %s (%s) as %s\n", plugin->name().c_str(), plugin->info().version.c_str(),
              plugin->info().kinds_string().c_str(), target.string().c_str());
  return 0;
}

int run_remove(const std::string& name) {
  fs::path dir = plugins::hodu_home() / "plugins";
  int removed = 0;
  for (const auto& p : PluginManager::instance().plugins()) {
    if (p->name() != name) continue;
    HODU_CHECK(!p->info().builtin(), ErrorCode::InvalidArgument, "'{}' is built into hodu and cannot be removed", name);
    std::error_code ec;
    HODU_CHECK(fs::weakly_canonical(fs::path(p->info().path).parent_path(), ec) == fs::weakly_canonical(dir, ec),
               ErrorCode::InvalidArgument,
               "plugin '{}' comes from {}, outside {}; remove it there (or from $HODU_PLUGIN_PATH)", name,
               p->info().path, dir.string());
    fs::remove(p->info().path, ec);
    HODU_CHECK(!ec, ErrorCode::Io, "cannot remove {}: {}", p->info().path, ec.message());
    std::printf("removed %s (%s)\n", name.c_str(), p->info().path.c_str());
    ++removed;
  }
  HODU_CHECK(removed > 0, ErrorCode::InvalidArgument, "no plugin named '{}' in {}", name, dir.string());
  return 0;
}

}  // namespace

CommandFn add_plugin_command(CLI::App& app) {
  app.require_subcommand(1);
  app.footer("Plugins are found in $HODU_PLUGIN_PATH, $HODU_HOME/plugins (default ~/.hodu/plugins), config.toml's "
             "plugin_dirs and hodu's own plugin folder. See docs/plugins.md.");
  struct Args {
    bool json = false, verbose = false;
    std::string name, path;
  };
  auto a = std::make_shared<Args>();
  auto* list = app.add_subcommand("list", "list plugins and built-in engines: name, version, kind, devices, formats");
  list->add_flag("--json", a->json, "print JSON (plugins, load errors, search path)");
  list->add_flag("-v,--verbose", a->verbose, "also show why files failed to load, and the search path");
  auto* info = app.add_subcommand("info", "describe one plugin");
  info->add_option("name", a->name, "plugin name")->required();
  auto* add = app.add_subcommand("add", "check a plugin library by loading it, then copy it into $HODU_HOME/plugins");
  add->add_option("path", a->path, "plugin shared library (.so)")->required();
  auto* remove = app.add_subcommand("remove", "delete a plugin from $HODU_HOME/plugins");
  remove->add_option("name", a->name, "plugin name")->required();
  return [a, list, info, add, remove] {
    if (list->parsed()) return run_list(a->json, a->verbose);
    if (info->parsed()) return run_info(a->name);
    if (add->parsed()) return run_add(a->path);
    if (remove->parsed()) return run_remove(a->name);
    return 1;
  };
}

}  // namespace hodu::cli
