#include "distributed/training/module_data_parallel.h"

#include "core/error.h"
#include "frontend/capture/loss_capture.h"

namespace hodu::distributed {

struct ModuleDataParallel::State {
  eager::nn::Module* module = nullptr;
  eager::optim::Optimizer* optimizer = nullptr;
  eager::LossCapture capture;
  std::unique_ptr<DataParallel> dp;
  int64_t synced_steps = 0, base_steps = 0;
};

ModuleDataParallel DataParallel::from_module(eager::nn::Module& module, eager::LossFn loss,
                                             eager::optim::Optimizer& optimizer,
                                             const std::vector<eager::Tensor>& example_inputs,
                                             const std::vector<eager::Tensor>& example_targets,
                                             DataParallelOptions options) {
  return ModuleDataParallel(module, std::move(loss), optimizer, example_inputs, example_targets, std::move(options));
}

ModuleDataParallel::ModuleDataParallel(eager::nn::Module& module, eager::LossFn loss, eager::optim::Optimizer& optimizer,
                                       const std::vector<eager::Tensor>& example_inputs,
                                       const std::vector<eager::Tensor>& example_targets, DataParallelOptions options,
                                       const eager::CaptureOptions& capture, Communicator comm)
    : s_(std::make_unique<State>()) {
  const char* who = "DataParallel::from_module";
  HODU_CHECK(options.loss.empty() && options.params.empty(), ErrorCode::InvalidArgument,
             "{}: leave DataParallelOptions' loss and params empty (the capture names them)", who);
  s_->module = &module;
  s_->optimizer = &optimizer;
  s_->capture = eager::capture_loss(module, loss, optimizer, example_inputs, example_targets, capture, who);
  options.loss = "loss";
  options.params = s_->capture.param_names;
  options.optimizer = s_->capture.optimizer;
  s_->dp = std::make_unique<DataParallel>(*s_->capture.forward.model(), std::move(options), std::move(comm));
  // The optimizer's state so far (the same on every rank), into the step's state.
  std::map<std::string, Tensor> state = s_->dp->state();
  s_->base_steps = eager::load_optimizer_state(optimizer, s_->capture, state);
  s_->dp->load_state(state, 0);
}

ModuleDataParallel::~ModuleDataParallel() = default;
ModuleDataParallel::ModuleDataParallel(ModuleDataParallel&&) noexcept = default;
ModuleDataParallel& ModuleDataParallel::operator=(ModuleDataParallel&&) noexcept = default;

double ModuleDataParallel::step(const std::vector<eager::Tensor>& inputs, const std::vector<eager::Tensor>& targets) {
  const auto feeds = eager::batch_feeds(s_->capture, inputs, targets, "DataParallel step");
  return s_->dp->step(feeds, static_cast<float>(s_->optimizer->lr()));
}

void ModuleDataParallel::sync() {
  const int64_t steps = s_->dp->steps_taken();
  eager::sync_training_state(*s_->module, *s_->optimizer, s_->capture, s_->dp->state(), steps - s_->synced_steps,
                             s_->base_steps + steps);
  s_->synced_steps = steps;
}

int64_t ModuleDataParallel::steps_taken() const { return s_->dp->steps_taken(); }
const eager::CapturedGraph& ModuleDataParallel::forward() const { return s_->capture.forward; }
DataParallel& ModuleDataParallel::data_parallel() { return *s_->dp; }

}  // namespace hodu::distributed
