// TrainingStep: a module's forward and loss captured, differentiated and given
// the optimizer's update by passes::build_training_step, run on the cpu engine.
#include <nlohmann/json.hpp>

#include "formats/tensor_io.h"
#include "frontend/capture/capture_internal.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"
#include "hodu/autograd.h"
#include "hodu/capture.h"
#include "passes/autodiff.h"
#include "runtime/session.h"

namespace hodu::eager {

using Json = nlohmann::json;

struct TrainingStep::State {
  nn::Module* module = nullptr;
  optim::Optimizer* optimizer = nullptr;
  CapturedGraph graph;
  std::unique_ptr<Session> session;
  std::vector<std::string> batch_names;   // inputs, then targets
  std::vector<std::string> param_names;   // in the optimizer's order
  std::map<std::string, hodu::Tensor> state;  // params, optimizer state, BatchNorm statistics
  std::string loss_output;
  int64_t steps = 0, synced_steps = 0, base_steps = 0;
};

namespace {

passes::OptimizerSpec spec_of(optim::Optimizer& opt) {
  HODU_CHECK(opt.num_groups() == 1, ErrorCode::Unsupported,
             "TrainingStep: an optimizer with {} parameter groups (one group: the step has one set of options)",
             opt.num_groups());
  if (auto* sgd = dynamic_cast<optim::SGD*>(&opt)) {
    const auto& o = sgd->options();
    passes::OptimizerSpec s = passes::OptimizerSpec::sgd(static_cast<float>(o.momentum), static_cast<float>(o.dampening),
                                                         o.nesterov, static_cast<float>(o.weight_decay));
    s.maximize = o.maximize;
    return s;
  }
  if (auto* adam = dynamic_cast<optim::Adam*>(&opt)) {
    const auto& o = adam->options();
    passes::OptimizerSpec s =
        adam->decoupled_weight_decay()
            ? passes::OptimizerSpec::adamw(static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                                           static_cast<float>(o.eps), static_cast<float>(o.weight_decay))
            : passes::OptimizerSpec::adam(static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                                          static_cast<float>(o.eps), static_cast<float>(o.weight_decay));
    s.amsgrad = o.amsgrad;
    s.maximize = o.maximize;
    return s;
  }
  fail(ErrorCode::Unsupported, "TrainingStep: the optimizer is not SGD, Adam or AdamW");
}

// The optimizer's per-parameter state names of the step graph, and the key in hodu's JSON state.
const std::vector<std::pair<std::string, std::string>>& state_keys(bool sgd) {
  static const std::vector<std::pair<std::string, std::string>> s = {{".momentum_buffer", "momentum_buffer"}};
  static const std::vector<std::pair<std::string, std::string>> a = {
      {".exp_avg", "exp_avg"}, {".exp_avg_sq", "exp_avg_sq"}, {".max_exp_avg_sq", "max_exp_avg_sq"}};
  return sgd ? s : a;
}

}  // namespace

TrainingStep::TrainingStep(nn::Module& module, LossFn loss, optim::Optimizer& optimizer,
                           const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                           const CaptureOptions& options)
    : s_(std::make_unique<State>()) {
  s_->module = &module;
  s_->optimizer = &optimizer;
  HODU_CHECK(loss != nullptr, ErrorCode::InvalidArgument, "TrainingStep: no loss function");
  const passes::OptimizerSpec spec = spec_of(optimizer);
  const bool sgd = dynamic_cast<optim::SGD*>(&optimizer) != nullptr;

  CaptureOptions o = options;
  o.input_names.clear();
  for (size_t i = 0; i < inputs.size(); ++i)
    o.input_names.push_back(i < options.input_names.size() ? options.input_names[i]
                                                          : (i == 0 ? "input" : "input_" + std::to_string(i)));
  for (size_t i = 0; i < targets.size(); ++i) o.input_names.push_back(i == 0 ? "target" : "target_" + std::to_string(i));
  o.output_names = {"loss"};
  s_->batch_names = o.input_names;
  s_->loss_output = "loss";
  std::vector<Tensor> batch = inputs;
  batch.insert(batch.end(), targets.begin(), targets.end());
  const size_t n_inputs = inputs.size();
  auto fn = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> in(xs.begin(), xs.begin() + n_inputs), tg(xs.begin() + n_inputs, xs.end());
    Tensor l = loss(module.forward_all(in), tg);
    HODU_CHECK(l.defined() && l.numel() == 1 && l.is_floating_point(), ErrorCode::InvalidArgument,
               "TrainingStep: the loss function must give a one-element float tensor, not {}", l.type_string());
    // A one-element loss of rank > 0 becomes a scalar. (Not a Reshape of an already scalar loss:
    // the cpu engine let later nodes overwrite an output that is a view of a dying value.)
    return std::vector<Tensor>{l.dim() == 0 ? l : l.reshape({})};
  };
  CapturedGraph forward = capture_graph(fn, module.named_parameters(), module.named_buffers(), batch, o);

  // The optimizer's parameters by their module names (the step graph's param inputs).
  std::map<const TensorImpl*, std::string> name_of;
  for (auto& [n, t] : module.named_parameters()) name_of[t.impl().get()] = n;
  for (const Tensor& p : optimizer.parameters()) {
    auto it = name_of.find(p.impl().get());
    HODU_CHECK(it != name_of.end(), ErrorCode::InvalidArgument,
               "TrainingStep: the optimizer has a parameter ({}) that is not one of the module's", p.type_string());
    HODU_CHECK(forward.model()->graph.initializer(it->second) != nullptr, ErrorCode::InvalidArgument,
               "TrainingStep: parameter '{}' is not used by the forward and loss", it->second);
    s_->param_names.push_back(it->second);
  }
  Graph step = passes::build_training_step(forward.model()->graph, "loss", s_->param_names, spec);
  for (auto& [name, t] : passes::initial_training_state(forward.model()->graph, step)) s_->state[name] = t;

  // An optimizer that has stepped already hands over its state.
  Json st = Json::parse(optimizer.state_json());
  const Json& params = st["groups"][0]["params"];
  for (size_t i = 0; i < s_->param_names.size(); ++i) {
    const Json& pj = params[i];
    for (const auto& [suffix, key] : state_keys(sgd)) {
      const std::string name = s_->param_names[i] + suffix;
      if (!pj.contains(key) || pj[key].is_null() || !s_->state.count(name)) continue;
      s_->state[name] = tensor_from_json(pj[key].dump(), "optimizer state " + key);
      if (sgd) s_->base_steps = 1;
    }
    if (!sgd) s_->base_steps = pj["step"].get<int64_t>();
  }
  if (s_->state.count("optimizer.step"))
    s_->state["optimizer.step"] = hodu::Tensor::scalar(DType::F32, static_cast<float>(s_->base_steps));

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
  HODU_CHECK(inputs.size() + targets.size() == s_->batch_names.size(), ErrorCode::InvalidArgument,
             "TrainingStep::step: {} inputs and {} targets for a step captured with {} in all", inputs.size(),
             targets.size(), s_->batch_names.size());
  std::map<std::string, RuntimeValue> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[s_->batch_names[i]] = kernels::contiguous(core(inputs[i], "step"));
  for (size_t i = 0; i < targets.size(); ++i)
    feeds[s_->batch_names[inputs.size() + i]] = kernels::contiguous(core(targets[i], "step"));
  feeds[passes::kLearningRateInput] = hodu::Tensor::scalar(DType::F32, static_cast<float>(s_->optimizer->lr()));
  for (auto& [name, t] : s_->state) feeds[name] = t;
  double loss = 0;
  for (auto& nv : s_->session->run(feeds))  // the state's ".next" outputs were written into s_->state
    if (nv.name == s_->loss_output) loss = nv.value.tensor.get_double(0);
  ++s_->steps;
  return loss;
}

void TrainingStep::sync() {
  NoGradGuard guard;
  nn::NamedTensors sd = s_->module->state_dict();
  for (auto& [name, t] : sd) {
    auto it = s_->state.find(name);
    if (it == s_->state.end()) continue;
    Tensor dst = t;
    dst.copy_(make_tensor(it->second));
    if (name.size() >= 12 && name.compare(name.size() - 12, 12, "running_mean") == 0) {
      // The BatchNorm's step count lives beside its statistics.
      const std::string counter = name.substr(0, name.size() - 12) + "num_batches_tracked";
      for (auto& [n2, t2] : sd)
        if (n2 == counter) t2.add_(static_cast<double>(s_->steps - s_->synced_steps));
    }
  }
  const bool sgd = dynamic_cast<optim::SGD*>(s_->optimizer) != nullptr;
  Json st = Json::parse(s_->optimizer->state_json());
  Json& params = st["groups"][0]["params"];
  for (size_t i = 0; i < s_->param_names.size(); ++i) {
    for (const auto& [suffix, key] : state_keys(sgd)) {
      auto it = s_->state.find(s_->param_names[i] + suffix);
      if (it != s_->state.end() && s_->steps + s_->base_steps > 0) params[i][key] = Json::parse(tensor_to_json(it->second));
    }
    if (!sgd) params[i]["step"] = s_->base_steps + s_->steps;
  }
  s_->optimizer->load_state_json(st.dump());
  s_->synced_steps = s_->steps;
}

}  // namespace hodu::eager
