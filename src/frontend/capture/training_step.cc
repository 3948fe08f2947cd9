// TrainingStep: a module's forward and loss captured, differentiated and given
// the optimizer's update by passes::build_training_step, run on the cpu engine.
#include "frontend/capture/loss_capture.h"
#include "hodu/capture.h"
#include "passes/autodiff.h"
#include "runtime/session.h"

namespace hodu::eager {

struct TrainingStep::State {
  nn::Module* module = nullptr;
  optim::Optimizer* optimizer = nullptr;
  LossCapture capture;
  CapturedGraph graph;
  std::unique_ptr<Session> session;
  std::map<std::string, hodu::Tensor> state;  // params, optimizer state, BatchNorm statistics
  int64_t steps = 0, synced_steps = 0, base_steps = 0;
};

TrainingStep::TrainingStep(nn::Module& module, LossFn loss, optim::Optimizer& optimizer,
                           const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                           const CaptureOptions& options)
    : s_(std::make_unique<State>()) {
  s_->module = &module;
  s_->optimizer = &optimizer;
  s_->capture = capture_loss(module, loss, optimizer, inputs, targets, options, "TrainingStep");
  const CapturedGraph& forward = s_->capture.forward;
  Graph step = passes::build_training_step(forward.model()->graph, "loss", s_->capture.param_names,
                                           s_->capture.optimizer);
  for (auto& [name, t] : passes::initial_training_state(forward.model()->graph, step)) s_->state[name] = t;
  s_->base_steps = load_optimizer_state(optimizer, s_->capture, s_->state);

  auto model = std::make_shared<Model>(*forward.model());
  model->graph = std::move(step);
  s_->graph = CapturedGraph(model);
  SessionOptions so;
  so.engine = "cpu";
  so.threads = get_num_threads();
  // Parameters and optimizer state are updated in the tensors fed (the cpu engine writes the
  // update there, no copy); Dropout draws a new mask every step, from a seed the default
  // generator gives (manual_seed makes captured training reproducible).
  so.update_state_in_place = true;
  so.reseed_each_run = true;
  so.seed = static_cast<uint64_t>(randint(0, int64_t{1} << 52, {}).item());
  s_->session = Session::from_model(*model, so);
}

TrainingStep::~TrainingStep() = default;

const CapturedGraph& TrainingStep::graph() const { return s_->graph; }
int64_t TrainingStep::steps_taken() const { return s_->steps; }

double TrainingStep::step(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets) {
  std::map<std::string, RuntimeValue> feeds;
  for (auto& [name, t] : batch_feeds(s_->capture, inputs, targets, "TrainingStep::step")) feeds[name] = t;
  feeds[passes::kLearningRateInput] = hodu::Tensor::scalar(DType::F32, static_cast<float>(s_->optimizer->lr()));
  for (auto& [name, t] : s_->state) feeds[name] = t;
  double loss = 0;
  for (auto& nv : s_->session->run(feeds))  // the state's ".next" outputs were written into s_->state
    if (nv.name == "loss") loss = nv.value.tensor.get_double(0);
  ++s_->steps;
  return loss;
}

void TrainingStep::sync() {
  sync_training_state(*s_->module, *s_->optimizer, s_->capture, s_->state, s_->steps - s_->synced_steps,
                      s_->base_steps + s_->steps);
  s_->synced_steps = s_->steps;
}

}  // namespace hodu::eager
