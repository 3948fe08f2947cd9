// A module's forward and loss captured for training, and the hand-over of
// params, BatchNorm statistics and optimizer state between the module/optimizer
// and a step graph's state. Shared by TrainingStep (training_step.cc) and
// hodu::distributed::ModuleDataParallel (src/distributed/training). Internal.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "hodu/capture.h"
#include "passes/autodiff.h"

namespace hodu::eager {

struct LossCapture {
  CapturedGraph forward;                  // the batch (inputs, then targets) -> "loss", a float scalar
  std::vector<std::string> batch_names;   // the forward's inputs: inputs, then targets
  std::vector<std::string> param_names;   // the optimizer's params by their module names, in its order
  passes::OptimizerSpec optimizer;
  bool sgd = false;                       // SGD (momentum state) or Adam/AdamW (moments and a step count)
};

// InvalidArgument/Unsupported prefixed with `who` for: no loss, a loss that is not one float,
// an optimizer that is not SGD/Adam/AdamW or has several groups, a param not the module's or unused.
LossCapture capture_loss(nn::Module& module, const LossFn& loss, optim::Optimizer& optimizer,
                         const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                         const CaptureOptions& options, const char* who);

// The batch as the forward's feeds (contiguous core tensors by batch_names); InvalidArgument
// prefixed with `who` when the counts differ from the capture's.
std::map<std::string, hodu::Tensor> batch_feeds(const LossCapture& c, const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& targets, const char* who);

// An optimizer that has stepped already hands over its state (momentum, moments, "optimizer.step")
// into `state` (passes::initial_training_state's names); returns the steps it had taken.
int64_t load_optimizer_state(optim::Optimizer& optimizer, const LossCapture& c, std::map<std::string, hodu::Tensor>& state);

// The step's state back into the module (params, BatchNorm statistics; num_batches_tracked grows
// by `new_steps`) and the optimizer (its state after `total_steps` steps).
void sync_training_state(nn::Module& module, optim::Optimizer& optimizer, const LossCapture& c,
                         const std::map<std::string, hodu::Tensor>& state, int64_t new_steps, int64_t total_steps);

}  // namespace hodu::eager
