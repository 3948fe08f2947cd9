// The user's hodu folder and its config.toml.
//
//   $HODU_HOME (default $HOME/.hodu)
//     config.toml   defaults (keys below)
//     plugins/      plugins added with `hodu plugin add`
//     cache/        compiled artifacts (artifact_cache.h)
//
// config.toml:
//   plugin_dirs = ["/opt/hodu/plugins"]   # searched after $HODU_PLUGIN_PATH and $HODU_HOME/plugins
//   default_device = "cpu"                # hodu run -d when not given
//   default_engine = "cpu"                # hodu run --engine when no engine/plugin flag is given
//   [cache]
//   enabled = true
//   max_size_mb = 1024                    # oldest artifacts are removed beyond this
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hodu::plugins {

std::filesystem::path hodu_home();

struct HoduConfig {
  std::vector<std::string> plugin_dirs;
  std::string default_device;
  std::string default_engine;
  bool cache_enabled = true;
  int64_t cache_max_bytes = int64_t{1024} << 20;
  std::string path;  // the file read ("" when there is none)
};

// hodu_home()/config.toml, or `path` when given; defaults when the file does not
// exist. InvalidArgument naming the file, line and key for a malformed file.
HoduConfig load_config(const std::filesystem::path& path = {});

}  // namespace hodu::plugins
