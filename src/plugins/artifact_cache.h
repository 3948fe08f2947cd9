// Compiled artifacts kept between runs: $HODU_HOME/cache/<key>.<format>, where
// the key hashes the graph's .hdss bytes, the compiler (name, version, file),
// the target and every build option. A second `hodu run --pack c` of the same
// model loads the cached library instead of compiling again ("cache hit" at -v).
// Files are written under a temporary name and renamed, so concurrent runs
// never see half an artifact; beyond max_bytes the least recently used go.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "plugins/plugin.h"

namespace hodu::plugins {

class ArtifactCache {
 public:
  ArtifactCache(std::filesystem::path dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  // $HODU_HOME/cache with config.toml's limit; null when the cache is disabled there.
  static std::unique_ptr<ArtifactCache> from_config();

  static std::string key(std::string_view graph_bytes, const PluginInfo& compiler, const BuildRequest& request);

  // The artifact for `key`: the cached file, or `build(path)` writes it first.
  // `hit` (optional) tells which.
  std::filesystem::path get_or_build(const std::string& key, const std::string& extension,
                                     const std::function<void(const std::string& path)>& build, bool* hit = nullptr);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void evict(const std::filesystem::path& keep);
  std::filesystem::path dir_;
  int64_t max_bytes_;
};

}  // namespace hodu::plugins
