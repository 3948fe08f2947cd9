#include "distributed/training/trainer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "distributed/training/checkpoint.h"

namespace hodu::distributed {

nlohmann::json optimizer_json(const passes::OptimizerSpec& o) {
  using K = passes::OptimizerSpec::Kind;
  nlohmann::json j;
  j["kind"] = o.kind == K::SGD ? "sgd" : o.kind == K::Adam ? "adam" : "adamw";
  j["weight_decay"] = o.weight_decay;
  j["maximize"] = o.maximize;
  if (o.kind == K::SGD) {
    j["momentum"] = o.momentum;
    j["dampening"] = o.dampening;
    j["nesterov"] = o.nesterov;
  } else {
    j["beta1"] = o.beta1;
    j["beta2"] = o.beta2;
    j["eps"] = o.eps;
    j["amsgrad"] = o.amsgrad;
  }
  return j;
}

Trainer::Trainer(const Model& forward, const ArrayData& data, TrainOptions options, Communicator comm)
    : data_(data),
      options_(std::move(options)),
      comm_(comm),
      dp_(forward, options_.model, comm),
      sampler_(data.rows(), options_.batch, comm.size(), comm.rank(), options_.data_seed, options_.shuffle) {
  HODU_CHECK(options_.steps > 0, ErrorCode::InvalidArgument, "--steps must be at least 1 (got {})", options_.steps);
  HODU_CHECK(options_.every >= 0, ErrorCode::InvalidArgument, "--every must be >= 0 (got {})", options_.every);
  HODU_CHECK(options_.every == 0 || !options_.checkpoint_dir.empty(), ErrorCode::InvalidArgument,
             "--every needs --checkpoint DIR");
  HODU_CHECK(!options_.resume || !options_.checkpoint_dir.empty(), ErrorCode::InvalidArgument,
             "--resume needs --checkpoint DIR (the folder of the run to continue)");
}

nlohmann::json Trainer::run_signature() const {
  nlohmann::json j;
  j["loss"] = options_.model.loss;
  j["global_batch"] = sampler_.global_batch();
  j["data_rows"] = data_.rows();
  j["data_seed"] = options_.data_seed;
  j["shuffle"] = options_.shuffle;
  j["optimizer"] = optimizer_json(options_.model.optimizer);
  j["params"] = dp_.params();
  return j;
}

int64_t Trainer::restore() {
  const bool root = comm_.rank() == 0;
  std::optional<CheckpointData> ckpt;
  run_agreed(comm_, [&] {
    if (!root || options_.checkpoint_dir.empty()) return;
    // A folder that cannot be written fails now, not at the first checkpoint hours later.
    std::error_code ec;
    std::filesystem::create_directories(options_.checkpoint_dir, ec);
    HODU_CHECK(!ec && access(options_.checkpoint_dir.c_str(), W_OK) == 0, ErrorCode::Io,
               "--checkpoint '{}': cannot create or write the folder: {}", options_.checkpoint_dir,
               ec ? ec.message() : std::string(std::strerror(errno)));
    auto latest = latest_checkpoint(options_.checkpoint_dir);
    if (!options_.resume) {
      HODU_CHECK(!latest, ErrorCode::InvalidArgument,
                 "--checkpoint '{}' already holds checkpoints ({}): pass --resume to continue that run, or choose "
                 "another folder",
                 options_.checkpoint_dir, std::filesystem::path(*latest).filename().string());
      return;
    }
    if (!latest) return;
    ckpt = read_checkpoint(*latest);
    const nlohmann::json want = run_signature();
    for (const auto& [key, value] : want.items()) {
      auto have = ckpt->info.find(key);
      HODU_CHECK(have != ckpt->info.end() && *have == value, ErrorCode::InvalidArgument,
                 "cannot resume from '{}': it was written by a run with {} {}, this run has {}{}", *latest, key,
                 have == ckpt->info.end() ? "(none)" : have->dump(), value.dump(),
                 key == "global_batch" ? " (the global batch is --batch x the number of ranks)" : "");
    }
    HODU_CHECK(ckpt->step <= options_.steps, ErrorCode::InvalidArgument,
               "cannot resume from '{}': it is at step {}, past --steps {}", *latest, ckpt->step, options_.steps);
    std::map<std::string, Tensor> values;
    for (const auto* part : {&ckpt->model, &ckpt->optimizer})
      for (const auto& [name, t] : *part) values[name] = t;
    dp_.load_state(values, ckpt->step);  // validates names, dtypes and shapes on rank 0
    if (ckpt->info.contains("losses") && ckpt->info["losses"].is_array())
      losses_ = ckpt->info["losses"].get<std::vector<double>>();
    restored_from_ = *latest;
  });
  int64_t step = root && ckpt ? ckpt->step : -1;
  comm_.broadcast(&step, sizeof(step));
  if (step < 0) return 0;
  // Rank 0's state to every rank, in the state's name order (the same on every rank).
  std::map<std::string, Tensor> values;
  for (const auto& [name, t] : dp_.state()) {
    Tensor copy = t.clone();
    comm_.broadcast(copy.raw_data(), static_cast<int64_t>(copy.nbytes()));
    values[name] = copy;
  }
  if (!root) dp_.load_state(values, step);
  return step;
}

void Trainer::checkpoint() {
  // The ranks' params must still agree bit for bit (every rank applies the same update to the
  // same averaged gradients); a difference would mean an all-reduce that rounds per rank.
  run_agreed(comm_, [&] {
    const auto fp = static_cast<int64_t>(dp_.state_fingerprint());
    bool same = comm_.min(fp) == comm_.max(fp);
    HODU_CHECK(same, ErrorCode::Internal,
               "after step {} the ranks' params differ (the all-reduce gave ranks different sums); not writing a "
               "checkpoint",
               dp_.steps_taken());
    if (comm_.rank() != 0) return;
    CheckpointData d;
    d.step = dp_.steps_taken();
    for (const auto* names : {&dp_.params(), &dp_.statistics()})
      for (const auto& n : *names) d.model.emplace_back(n, dp_.state().at(n));
    for (const auto& n : dp_.optimizer_state()) d.optimizer.emplace_back(n, dp_.state().at(n));
    d.info = options_.info;
    const nlohmann::json signature = run_signature();  // a named value: items() would outlive a temporary
    for (const auto& [key, value] : signature.items()) d.info[key] = value;
    d.info["ranks"] = comm_.size();
    d.info["lr"] = options_.lr;
    d.info["losses"] = losses_;
    written_.push_back(write_checkpoint(options_.checkpoint_dir, d, options_.keep));
  });
}

void Trainer::run(const std::function<void(int64_t, double)>& on_step) {
  for (int64_t step = dp_.steps_taken(); step < options_.steps; ++step) {
    double loss = dp_.step(data_.batch(sampler_.rows(step)), options_.lr);
    losses_.push_back(loss);
    if (on_step) on_step(step, loss);
    const int64_t done = step + 1;
    if (!options_.checkpoint_dir.empty() &&
        (done == options_.steps || (options_.every > 0 && done % options_.every == 0)))
      checkpoint();
  }
}

}  // namespace hodu::distributed
