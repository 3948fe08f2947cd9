// Training checkpoints on disk, written by rank 0. A checkpoint is a folder
// ROOT/step-<8 digits>/ holding
//   model.safetensors      the params and batch-norm statistics (the model's names)
//   optimizer.safetensors  the optimizer's state (momentum buffers, exp_avg, optimizer.step, ...)
//   training.json          {"format": "hodu.checkpoint", "version": 1, "step": S, ...the caller's fields}
// the names and files of the frontend's checkpoints (include/hodu/checkpoint.h) where they
// overlap. It is written into a hidden temporary folder, synced, and renamed into place, so a
// run killed while writing leaves the previous checkpoints whole and no partial one under a
// final name; older checkpoints beyond `keep` are then removed.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "formats/tensor_io.h"

namespace hodu::distributed {

struct CheckpointData {
  int64_t step = 0;
  NamedTensors model, optimizer;
  nlohmann::json info = nlohmann::json::object();  // the caller's fields (kept as given)
};

// Writes ROOT/step-<step>; returns its path. keep > 0: removes all but the newest `keep`.
std::string write_checkpoint(const std::string& root, const CheckpointData& data, int keep);
// The newest complete checkpoint under ROOT, or nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& root);
// InvalidArgument / Io naming the file for a folder that is not a checkpoint.
CheckpointData read_checkpoint(const std::string& dir);

}  // namespace hodu::distributed
