// hodu::distributed::DataParallel: data-parallel training of a forward graph
// with a loss over MPI. Every rank holds the whole model and runs the same
// steps on its own slice of each global batch:
//
//   hodu::distributed::Environment mpi(&argc, &argv);
//   hodu::distributed::DataParallel dp(load_model("model.onnx"), {.loss = "loss",
//       .optimizer = hodu::passes::OptimizerSpec::sgd(0.9f)});
//   for (int64_t s = 0; s < steps; ++s)
//     double loss = dp.step({{"x", x_shard}, {"labels", y_shard}}, 0.05f);   // every rank, same lr
//   if (dp.communicator().rank() == 0) save_model(dp.trained_model(), "trained.onnx");
//
// A step runs the gradient part of passes::build_training_step's graph in
// stages (partition_training_step), all-reduces each gradient bucket while the
// next stage runs, then runs the optimizer update on the averaged gradients,
// the params and optimizer state updated in place. Every rank applies the same
// update to the same values, so the params stay identical on every rank; with
// a loss that is a mean over the batch the step equals one process's step on
// the ranks' batches together (up to the order of the sums).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/training/communicator.h"
#include "distributed/training/gradient_reducer.h"
#include "distributed/training/step_partition.h"
#include "ir/graph.h"
#include "passes/autodiff.h"

namespace hodu {
class Session;
}
namespace hodu::eager {
class Tensor;
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace hodu::eager

namespace hodu::distributed {

struct DataParallelOptions {
  std::string loss;                  // a value of the model holding one number (the batch's mean loss)
  std::vector<std::string> params;   // empty: passes::trainable_initializers
  passes::OptimizerSpec optimizer;
  double bucket_mb = 25;             // gradient bucket size in MB (10^6 bytes); 0: one bucket
  bool overlap = true;               // all-reduce a bucket while the next stage computes
  std::string engine = "cpu";
  int threads = 0;                   // kernel threads per rank; 0: physical cores / ranks on this host
  uint64_t seed = 0;                 // random ops (Dropout): rank r draws from seed + r, anew each step
};

class ModuleDataParallel;  // the module form: module_data_parallel.h

struct StepTimes {
  int64_t steps = 0;
  double compute_ms = 0;  // the stages (forward and backward)
  double update_ms = 0;   // the optimizer update
  double step_ms = 0;     // whole steps
};

class DataParallel {
 public:
  // InvalidArgument naming the problem (loss, params, optimizer); the rank's sessions are
  // prepared here. Every rank must construct it with the same model and options.
  DataParallel(const Model& forward, DataParallelOptions options, Communicator comm = Communicator::world());
  ~DataParallel();
  // A frontend module trained with its loss and optimizer (module_data_parallel.h, which the caller
  // includes): from_module(model, loss_fn, optimizer, {x_example}, {y_example}).
  static ModuleDataParallel from_module(
      eager::nn::Module& module,
      std::function<eager::Tensor(const std::vector<eager::Tensor>&, const std::vector<eager::Tensor>&)> loss,
      eager::optim::Optimizer& optimizer, const std::vector<eager::Tensor>& example_inputs,
      const std::vector<eager::Tensor>& example_targets, DataParallelOptions options = {});
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The model inputs each step feeds (forward's graph inputs), with their types.
  const std::vector<Value>& data_inputs() const { return data_inputs_; }
  // One step on this rank's feeds (every data input, this rank's rows). Every rank calls it, with
  // the same lr. Returns the loss averaged over the ranks.
  double step(const std::map<std::string, Tensor>& feeds, float lr);
  int64_t steps_taken() const { return steps_; }

  // Params, batch-norm statistics and optimizer state by name (the step's state inputs,
  // passes::training_state_names): the tensors each step updates in place.
  const std::map<std::string, Tensor>& state() const { return state_; }
  // Copies values into the state (a checkpoint's): every name must be a state name with the same
  // dtype and shape; InvalidArgument naming the first that is not. `steps_taken` continues the
  // step count.
  void load_state(const std::map<std::string, Tensor>& values, int64_t steps_taken);
  // The names of the params, of the statistics (model state that is not trained) and of the
  // optimizer's own state.
  const std::vector<std::string>& params() const { return partition_.params; }
  const std::vector<std::string>& statistics() const { return partition_.statistics; }
  std::vector<std::string> optimizer_state() const;
  // The forward model with the trained params and statistics as its initializers.
  Model trained_model() const;
  // A hash of the params and statistics: equal on every rank while they agree bit for bit.
  uint64_t state_fingerprint() const;

  const PartitionedStep& partition() const { return partition_; }
  const Communicator& communicator() const { return comm_; }
  int threads() const { return threads_; }
  bool overlapping() const { return reducer_->overlapping(); }
  const ReduceStats& reduce_stats() const { return reducer_->stats(); }
  const StepTimes& times() const { return times_; }

 private:
  Model forward_;
  DataParallelOptions options_;
  Communicator comm_;
  PartitionedStep partition_;
  std::vector<std::unique_ptr<Session>> stages_;  // null for a stage without nodes
  std::unique_ptr<Session> update_;
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<Value> data_inputs_;
  std::map<std::string, Tensor> state_;
  int threads_ = 1;
  int64_t steps_ = 0;
  StepTimes times_;
};

}  // namespace hodu::distributed
