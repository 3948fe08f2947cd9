/* hodu/capture.h — tracing a module into hodu's graph IR (public).
 *
 *   model.eval();
 *   hodu::CapturedGraph g = hodu::capture(model, {hodu::randn({2, 1, 8, 8})});
 *   g.save("digits.onnx");          // then: hodu build digits.onnx -o libdigits.so
 *   auto y = g.run({x});            // on hodu's cpu engine
 *
 * capture runs the forward on the example inputs and records every op into a
 * Graph: parameters become initializers (named as in state_dict), tensors
 * made inside the forward become constants. With dynamic_batch, dim 0 of every
 * input is the symbol "batch": the forward is traced a second time with one
 * more row and every constant that changed with it (a reshape's size) is made
 * batch-independent, or the capture fails naming the op. Module state that the
 * tracing runs change (BatchNorm's running statistics in training mode) is
 * restored afterwards. */
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hodu/nn.h"
#include "hodu/optim.h"
#include "hodu/tensor.h"

namespace hodu {
struct Model;  // the IR (src/ir/graph.h)
}

namespace hodu::eager {

struct CaptureOptions {
  bool dynamic_batch = true;
  std::string batch_symbol = "batch";
  std::vector<std::string> input_names = {};   // default input, input_1, ...
  std::vector<std::string> output_names = {};  // default output, output_1, ...
  std::string graph_name = "captured";
};

class CapturedGraph {
 public:
  CapturedGraph();
  explicit CapturedGraph(std::shared_ptr<Model> model);
  // .onnx, .hdss or .hodu (HoduScript text), by extension.
  void save(const std::string& path) const;
  // HoduScript text of the graph.
  std::string to_text() const;
  // Runs the graph on hodu's cpu engine (prepared once, re-planned per input shape).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  int64_t node_count() const;
  const std::shared_ptr<Model>& model() const { return model_; }

 private:
  std::shared_ptr<Model> model_;
  struct Runner;
  std::shared_ptr<Runner> runner_;
};

// ---- captured training steps ----------------------------------------------------------

// The loss of a batch from the module's outputs and the targets.
using LossFn = std::function<Tensor(const std::vector<Tensor>& outputs, const std::vector<Tensor>& targets)>;

// A whole training step — forward, loss, backward and the optimizer's update — as one graph
// (passes::build_training_step) planned once on hodu's cpu engine. The module (in training
// mode) and the loss are traced on example batches; the optimizer (SGD, Adam or AdamW, one
// parameter group) gives the update rule, its options and, if it has already stepped, its
// state. step() then trains on the engine: parameters and optimizer state live in the step
// until sync() writes them back into the module and the optimizer. The learning rate is read
// from the optimizer at every step, so schedulers driving it work unchanged.
class TrainingStep {
 public:
  TrainingStep(nn::Module& module, LossFn loss, optim::Optimizer& optimizer, const std::vector<Tensor>& example_inputs,
               const std::vector<Tensor>& example_targets, const CaptureOptions& options = {});
  ~TrainingStep();
  TrainingStep(const TrainingStep&) = delete;
  TrainingStep& operator=(const TrainingStep&) = delete;

  // One update on a batch; returns the loss (before the update, as in eager training).
  double step(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets);
  // The module's parameters and BatchNorm statistics, and the optimizer's state, from the step.
  void sync();
  int64_t steps_taken() const;
  // The forward + backward + update graph (inputs: the batch, "lr", parameters, state).
  const CapturedGraph& graph() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

CapturedGraph capture(nn::Module& module, const std::vector<Tensor>& example_inputs, const CaptureOptions& options = {});
// A function of inputs; `parameters` are the tensors it reads that become named initializers.
CapturedGraph capture(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                      const nn::NamedTensors& parameters, const std::vector<Tensor>& example_inputs,
                      const CaptureOptions& options = {});

}  // namespace hodu::eager
