#include "plugins/artifact_cache.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "plugins/hodu_config.h"
#include "core/scratch_dir.h"
#include "runtime/log.h"

namespace fs = std::filesystem;

namespace hodu::plugins {
namespace {

// Two FNV-1a 64 streams with different offsets: a 128-bit key, stable across builds.
struct Hasher {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void add(std::string_view s) {
    for (unsigned char c : s) {
      a = (a ^ c) * 0x100000001b3ull;
      b = (b ^ c) * 0x100000001b3ull;
    }
    a = (a ^ 0xff) * 0x100000001b3ull;  // field separator: ("ab","c") != ("a","bc")
    b = (b ^ 0xfe) * 0x100000001b3ull;
  }
  std::string hex() const { return fmt::format("{:016x}{:016x}", a, b); }
};

}  // namespace

std::unique_ptr<ArtifactCache> ArtifactCache::from_config() {
  HoduConfig c = load_config();
  if (!c.cache_enabled) return nullptr;
  return std::make_unique<ArtifactCache>(hodu_home() / "cache", c.cache_max_bytes);
}

std::string ArtifactCache::key(std::string_view graph_bytes, const PluginInfo& compiler, const BuildRequest& r) {
  Hasher h;
  h.add(HODU_VERSION);
  h.add(graph_bytes);
  h.add(compiler.name);
  h.add(compiler.version);
  h.add(compiler.path);
  std::error_code ec;
  if (!compiler.path.empty()) h.add(std::to_string(fs::last_write_time(compiler.path, ec).time_since_epoch().count()));
  h.add(r.format);
  h.add(r.target);
  h.add(r.name);
  h.add(std::to_string(r.opt_level));
  for (const auto& s : r.input_shapes) h.add(s);
  h.add("options");
  for (const auto& o : r.options) h.add(o);
  return h.hex();
}

fs::path ArtifactCache::get_or_build(const std::string& key, const std::string& extension,
                                     const std::function<void(const std::string&)>& build, bool* hit) {
  fs::path final_path = dir_ / (key + "." + extension);
  std::error_code ec;
  if (fs::is_regular_file(final_path, ec)) {
    fs::last_write_time(final_path, fs::file_time_type::clock::now(), ec);  // recently used
    log_verbose("cache hit: {}", final_path.string());
    if (hit) *hit = true;
    return final_path;
  }
  log_verbose("cache miss: building {}", final_path.string());
  fs::create_directories(dir_, ec);
  HODU_CHECK(fs::is_directory(dir_), ErrorCode::Io, "cannot create the cache folder {}: {}", dir_.string(),
             ec.message());
  // A private scratch folder in the cache (the rename below stays on one file system):
  // compilers write companion files (headers) beside the artifact.
  ScratchDir scratch(".tmp-" + key + "-", dir_);
  fs::path built = scratch.path() / ("model." + extension);
  build(built.string());
  HODU_CHECK(fs::is_regular_file(built), ErrorCode::Io, "the compiler wrote no {}", built.string());
  fs::rename(built, final_path);  // atomic: another process sees the whole file or none
  if (hit) *hit = false;
  evict(final_path);
  return final_path;
}

void ArtifactCache::evict(const fs::path& keep) {
  struct Entry {
    fs::path path;
    fs::file_time_type time;
    int64_t size;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!e.is_regular_file(ec) || e.path().filename().string().starts_with(".")) continue;
    entries.push_back({e.path(), e.last_write_time(ec), static_cast<int64_t>(e.file_size(ec))});
    total += entries.back().size;
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.time < b.time; });
  for (const auto& e : entries) {
    if (total <= max_bytes_) break;
    if (e.path == keep) continue;
    if (fs::remove(e.path, ec)) {
      total -= e.size;
      log_verbose("cache: removed {} (over the size limit)", e.path.string());
    }
  }
}

}  // namespace hodu::plugins
