#include "distributed/training/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hodu::distributed {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";

// fsync a file or folder so that a rename after it publishes complete bytes.
void sync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::optional<int64_t> step_of(const fs::path& dir) {
  std::string name = dir.filename().string();
  if (name.rfind(kPrefix, 0) != 0 || name.size() == 5) return std::nullopt;
  std::string digits = name.substr(5);
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

// Checkpoint folders under root, oldest first.
std::vector<std::pair<int64_t, fs::path>> list(const std::string& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (auto s = step_of(e.path()); s && e.is_directory() && fs::exists(e.path() / "training.json"))
      out.emplace_back(*s, e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string write_checkpoint(const std::string& root, const CheckpointData& data, int keep) {
  std::error_code ec;
  fs::create_directories(root, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "checkpoint: cannot create '{}': {}", root, ec.message());
  const std::string name = fmt::format("{}{:08d}", kPrefix, data.step);
  const fs::path final_dir = fs::path(root) / name;
  const fs::path tmp = fs::path(root) / fmt::format(".{}.tmp-{}", name, ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "checkpoint: cannot create '{}': {}", tmp.string(), ec.message());
  write_tensor_file((tmp / "model.safetensors").string(), data.model);
  write_tensor_file((tmp / "optimizer.safetensors").string(), data.optimizer);
  nlohmann::json j = data.info;
  j["format"] = "hodu.checkpoint";
  j["version"] = 1;
  j["step"] = data.step;
  {
    std::ofstream f(tmp / "training.json");
    f << j.dump(1) << "\n";
    HODU_CHECK(f.good(), ErrorCode::Io, "checkpoint: writing '{}' failed", (tmp / "training.json").string());
  }
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "training.json"}) sync_path(tmp / f);
  sync_path(tmp);
  if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);  // a checkpoint of this step from an earlier run
  fs::rename(tmp, final_dir, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "checkpoint: cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(),
             ec.message());
  sync_path(root);
  // Older checkpoints past `keep`, and temporary folders of runs that died while writing.
  auto all = list(root);
  if (keep > 0 && all.size() > static_cast<size_t>(keep))
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove_all(all[i].second, ec);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string n = e.path().filename().string();
    if (n.size() > 1 && n[0] == '.' && n.find(".tmp-") != std::string::npos && e.path() != tmp)
      fs::remove_all(e.path(), ec);
  }
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  auto all = list(root);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

CheckpointData read_checkpoint(const std::string& dir) {
  const fs::path p(dir);
  const fs::path json_path = p / "training.json";
  std::ifstream f(json_path);
  HODU_CHECK(f.good(), ErrorCode::Io, "checkpoint: cannot read '{}'", json_path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  CheckpointData d;
  try {
    d.info = nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    fail(ErrorCode::InvalidArgument, "checkpoint: '{}' is not JSON ({})", json_path.string(), e.what());
  }
  HODU_CHECK(d.info.is_object() && d.info.value("format", "") == "hodu.checkpoint" && d.info.value("version", 0) == 1 &&
                 d.info.contains("step") && d.info["step"].is_number_integer(),
             ErrorCode::InvalidArgument, "checkpoint: '{}' is not a hodu checkpoint (version 1 with a step)",
             json_path.string());
  d.step = d.info["step"].get<int64_t>();
  d.model = read_tensor_file((p / "model.safetensors").string());
  d.optimizer = read_tensor_file((p / "optimizer.safetensors").string());
  return d;
}

}  // namespace hodu::distributed
