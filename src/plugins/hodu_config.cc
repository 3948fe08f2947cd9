#include "plugins/hodu_config.h"

#include <toml++/toml.h>

#include <cstdlib>

#include "core/error.h"

namespace hodu::plugins {

std::filesystem::path hodu_home() {
  if (const char* h = std::getenv("HODU_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  HODU_CHECK(home && *home, ErrorCode::InvalidArgument, "neither $HODU_HOME nor $HOME is set");
  return std::filesystem::path(home) / ".hodu";
}

HoduConfig load_config(const std::filesystem::path& given) {
  HoduConfig c;
  std::filesystem::path path = given.empty() ? hodu_home() / "config.toml" : given;
  if (!std::filesystem::exists(path)) return c;
  c.path = path.string();
  toml::table t;
  try {
    t = toml::parse_file(c.path);
  } catch (const toml::parse_error& e) {
    fail(ErrorCode::InvalidArgument, "{}:{}: {}", c.path, e.source().begin.line, e.description());
  }
  auto bad = [&](const char* key, const char* expected) {
    fail(ErrorCode::InvalidArgument, "{}: '{}' must be {}", c.path, key, expected);
  };
  for (auto&& [key, value] : t) {
    std::string k(key.str());
    if (k == "plugin_dirs") {
      auto* list = value.as_array();
      if (!list) bad("plugin_dirs", "an array of strings");
      for (auto&& dir : *list) {
        if (!dir.is_string()) bad("plugin_dirs", "an array of strings");
        c.plugin_dirs.push_back(*dir.value<std::string>());
      }
    } else if (k == "default_device") {
      if (!value.is_string()) bad("default_device", "a string");
      c.default_device = *value.value<std::string>();
    } else if (k == "default_engine") {
      if (!value.is_string()) bad("default_engine", "a string");
      c.default_engine = *value.value<std::string>();
    } else if (k == "cache") {
      auto* cache = value.as_table();
      if (!cache) bad("cache", "a table");
      for (auto&& [ck, cv] : *cache) {
        if (ck.str() == "enabled") {
          if (!cv.is_boolean()) bad("cache.enabled", "true or false");
          c.cache_enabled = *cv.value<bool>();
        } else if (ck.str() == "max_size_mb") {
          if (!cv.is_integer() || *cv.value<int64_t>() < 0) bad("cache.max_size_mb", "a non-negative integer");
          c.cache_max_bytes = *cv.value<int64_t>() << 20;
        } else {
          fail(ErrorCode::InvalidArgument, "{}: unknown key 'cache.{}' (known: enabled, max_size_mb)", c.path,
               ck.str());
        }
      }
    } else {
      fail(ErrorCode::InvalidArgument,
           "{}: unknown key '{}' (known: plugin_dirs, default_device, default_engine, [cache])", c.path, k);
    }
  }
  return c;
}

}  // namespace hodu::plugins
