// Checkpoints: model.safetensors + training.json in a folder.
#include "hodu/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/shape.h"

namespace hodu::eager {

namespace fs = std::filesystem;
using Json = nlohmann::json;

void save_checkpoint(const std::string& dir, const Checkpoint& c) {
  HODU_CHECK(c.model != nullptr, ErrorCode::InvalidArgument, "save_checkpoint: no model");
  std::error_code ec;
  fs::create_directories(dir, ec);
  HODU_CHECK(!ec, ErrorCode::Io, "save_checkpoint: cannot create {}: {}", dir, ec.message());
  c.model->save((fs::path(dir) / "model.safetensors").string());
  Json j = {{"format", "hodu.checkpoint"}, {"version", 1}, {"counters", c.counters}};
  if (c.optimizer) j["optimizer"] = Json::parse(c.optimizer->state_json());
  if (c.scheduler) j["scheduler"] = {{"step", c.scheduler->last_step()}};
  if (c.loader) j["loader"] = c.loader->state();
  const std::string path = (fs::path(dir) / "training.json").string();
  std::ofstream f(path);
  HODU_CHECK(f.good(), ErrorCode::Io, "save_checkpoint: cannot write {}", path);
  f << j.dump(1) << "\n";
  HODU_CHECK(f.good(), ErrorCode::Io, "save_checkpoint: write to {} failed", path);
}

void load_checkpoint(const std::string& dir, Checkpoint& c) {
  HODU_CHECK(c.model != nullptr, ErrorCode::InvalidArgument, "load_checkpoint: no model");
  const std::string path = (fs::path(dir) / "training.json").string();
  std::ifstream f(path);
  HODU_CHECK(f.good(), ErrorCode::Io, "load_checkpoint: cannot read {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  Json j;
  try {
    j = Json::parse(ss.str());
  } catch (const std::exception& e) {
    fail(ErrorCode::InvalidArgument, "load_checkpoint: {} is not JSON ({})", path, e.what());
  }
  HODU_CHECK(j.value("format", "") == "hodu.checkpoint" && j.value("version", 0) == 1, ErrorCode::InvalidArgument,
             "load_checkpoint: {} is not a hodu checkpoint (version 1)", path);
  c.model->load((fs::path(dir) / "model.safetensors").string());
  if (c.optimizer) {
    HODU_CHECK(j.contains("optimizer"), ErrorCode::InvalidArgument, "load_checkpoint: {} has no optimizer state", path);
    try {
      c.optimizer->load_state_json(j["optimizer"].dump());
    } catch (const Error& e) {
      throw e.with_context(path + ": ");
    }
  }
  if (c.scheduler) {
    HODU_CHECK(j.contains("scheduler"), ErrorCode::InvalidArgument, "load_checkpoint: {} has no scheduler state", path);
    c.scheduler->set_step(j["scheduler"]["step"].get<int64_t>());
  }
  if (c.loader) {
    HODU_CHECK(j.contains("loader"), ErrorCode::InvalidArgument, "load_checkpoint: {} has no data loader state", path);
    c.loader->set_state(j["loader"].get<std::string>());
  }
  c.counters = j["counters"].get<std::map<std::string, int64_t>>();
}

}  // namespace hodu::eager
