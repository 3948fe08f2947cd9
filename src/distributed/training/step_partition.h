// A training step cut for data-parallel training. passes::build_training_step
// gives forward + backward + optimizer update as one graph; each rank must
// average the gradients with the other ranks between the backward and the
// update. The cut:
//   stages:  the gradient part (forward + backward) in pieces, stage i being
//            what bucket i's gradients need that earlier stages did not compute,
//            so bucket i is all-reduced while stage i+1 runs;
//   buckets: the gradients grouped in the order the backward produces them
//            (reverse parameter order for a sequential model) up to a size each,
//            one dtype per bucket; the last bucket of the loss's dtype also
//            carries the loss and the batch-norm running statistics' new values,
//            averaged like the gradients;
//   update:  the optimizer update (the rest of the step), fed the averaged values.
// Running the stages, then the update, on one rank with nothing to average gives
// the step's own results: the cut changes what runs where, not what is computed.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/autodiff.h"

namespace hodu::distributed {

struct GradientBucket {
  DType dtype = DType::F32;
  std::vector<std::string> values;  // grad.<param> (and for the last bucket the loss, statistics)
  std::vector<std::vector<int64_t>> shapes;  // per value
  std::vector<int64_t> elements;    // per value
  int64_t total_elements = 0;
  size_t bytes() const { return static_cast<size_t>(total_elements) * static_cast<size_t>(dtype_bits(dtype) / 8); }
};

struct PartitionedStep {
  Model step;                           // the whole step, as build_training_step made it
  std::vector<Model> stages;            // stage i makes bucket i ready; a stage may have no nodes
  std::vector<GradientBucket> buckets;  // one per stage
  Model update;                         // inputs: averaged values, lr, params, state; outputs "<x>.next"
  std::string loss;
  std::vector<std::string> params;      // in the step's input order
  std::vector<std::string> statistics;  // batch-norm running statistics (state that is averaged, not trained)
  std::vector<std::string> averaged;    // every bucket value (names as the update's inputs)
};

// InvalidArgument naming the problem for a loss that is not a float value of the graph or not
// a single element, an unknown param, a dtype the all-reduce cannot sum (f32/f64 only).
// `bucket_bytes` <= 0 puts every gradient in one bucket.
PartitionedStep partition_training_step(const Model& forward, const std::string& loss,
                                        const std::vector<std::string>& params,
                                        const passes::OptimizerSpec& optimizer, int64_t bucket_bytes);

}  // namespace hodu::distributed
