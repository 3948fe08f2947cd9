// hodu::distributed::ModuleDataParallel: data-parallel training of a frontend
// module (include/hodu/nn.h) over MPI, the module form of DataParallel:
//
//   hodu::distributed::Environment mpi(&argc, &argv);
//   auto dp = hodu::distributed::DataParallel::from_module(model, loss_fn, optimizer, {x_example}, {y_example});
//   for (...) double loss = dp.step({x_shard}, {y_shard});   // every rank, its own rows
//   dp.sync();   // params, BatchNorm statistics, optimizer state back into model and optimizer
//
// The module's forward and loss are captured as TrainingStep captures them
// (frontend/capture/loss_capture.h), and the graph is trained by DataParallel:
// every rank steps on its slice of the global batch, the gradients averaged over
// the ranks, so N ranks with B rows each step as one TrainingStep with N x B rows.
#pragma once
#include <memory>
#include <vector>

#include "distributed/training/data_parallel.h"
#include "hodu/capture.h"

namespace hodu::distributed {

class ModuleDataParallel {
 public:
  // The optimizer (SGD, Adam or AdamW with one parameter group) gives the update and, at every step,
  // the learning rate; if it has stepped already its state carries over. `options`' loss and params
  // must be left empty (they come from the capture). Every rank constructs it alike.
  ModuleDataParallel(eager::nn::Module& module, eager::LossFn loss, eager::optim::Optimizer& optimizer,
                     const std::vector<eager::Tensor>& example_inputs, const std::vector<eager::Tensor>& example_targets,
                     DataParallelOptions options = {}, const eager::CaptureOptions& capture = {},
                     Communicator comm = Communicator::world());
  ~ModuleDataParallel();
  ModuleDataParallel(ModuleDataParallel&&) noexcept;
  ModuleDataParallel& operator=(ModuleDataParallel&&) noexcept;

  // One step on this rank's rows, at the optimizer's current lr; every rank calls it. Returns the
  // loss averaged over the ranks (before the update, as in eager training).
  double step(const std::vector<eager::Tensor>& inputs, const std::vector<eager::Tensor>& targets);
  // The trained params and BatchNorm statistics into the module and the optimizer's state into the
  // optimizer (on every rank: they agree).
  void sync();
  int64_t steps_taken() const;
  // The forward + loss graph trained (inputs: the batch; output "loss").
  const eager::CapturedGraph& forward() const;
  // The graph form underneath: communicator, timings, state.
  DataParallel& data_parallel();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace hodu::distributed
