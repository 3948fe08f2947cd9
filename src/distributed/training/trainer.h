// The training loop of `hodugaki train` over DataParallel: each step feeds this
// rank's rows of the global batch (ShardSampler) from the arrays (ArrayData),
// averages the loss over the ranks, writes a checkpoint by rank 0 every K steps
// and after the last, and resumes from the newest checkpoint: rank 0 reads it
// and broadcasts the state, so other hosts need not see its folder.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distributed/training/array_data.h"
#include "distributed/training/data_parallel.h"
#include "distributed/training/shard_sampler.h"

namespace hodu::distributed {

struct TrainOptions {
  DataParallelOptions model;
  int64_t batch = 0;        // rows per rank per step (the global batch is batch x ranks)
  int64_t steps = 0;        // the run ends after this many steps; a resumed run counts the earlier ones
  float lr = 0.01f;
  uint64_t data_seed = 0;   // of the shuffling
  bool shuffle = true;
  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t every = 0;        // a checkpoint every K steps (and after the last one)
  bool resume = false;      // continue from the newest checkpoint in checkpoint_dir
  int keep = 2;             // checkpoints kept (0: all)
  nlohmann::json info = nlohmann::json::object();  // more fields for training.json (the model's path, ...)
};

class Trainer {
 public:
  // `data` must be bound to the model's inputs. Collective: every rank constructs one.
  Trainer(const Model& forward, const ArrayData& data, TrainOptions options, Communicator comm);
  // With options.resume: the newest checkpoint's state (rank 0 reads and validates it, every rank
  // gets it); returns the step the run continues at, or 0. Without resume, refuses a checkpoint
  // folder that already holds checkpoints. Collective.
  int64_t restore();
  std::optional<std::string> restored_from() const { return restored_from_; }
  // Steps from the current one to options.steps; `on_step(step, loss)` after each (every rank).
  // Collective.
  void run(const std::function<void(int64_t step, double loss)>& on_step = {});
  // The loss of every step so far (rank 0 also has those before a resume).
  const std::vector<double>& losses() const { return losses_; }
  const std::vector<std::string>& checkpoints_written() const { return written_; }
  DataParallel& model() { return dp_; }
  const ShardSampler& sampler() const { return sampler_; }
  // The fields a checkpoint of this run records, and must match to resume.
  nlohmann::json run_signature() const;

 private:
  void checkpoint();
  const ArrayData& data_;
  TrainOptions options_;
  Communicator comm_;
  DataParallel dp_;
  ShardSampler sampler_;
  std::vector<double> losses_;
  std::optional<std::string> restored_from_;
  std::vector<std::string> written_;
};

// The optimizer as JSON ({"kind": "sgd", "momentum": 0.9, ...}), for checkpoints.
nlohmann::json optimizer_json(const passes::OptimizerSpec& o);

}  // namespace hodu::distributed
