// capture_loss, load_optimizer_state, sync_training_state (loss_capture.h).
#include "frontend/capture/loss_capture.h"

#include <nlohmann/json.hpp>

#include "formats/tensor_io.h"
#include "frontend/capture/capture_internal.h"
#include "frontend/tensor/tensor_impl.h"
#include "hodu/autograd.h"
#include "kernels/cpu/tensor/kernels.h"

namespace hodu::eager {
namespace {

using Json = nlohmann::json;

passes::OptimizerSpec spec_of(optim::Optimizer& opt, const char* who) {
  HODU_CHECK(opt.num_groups() == 1, ErrorCode::Unsupported,
             "{}: an optimizer with {} parameter groups (one group: the step has one set of options)", who,
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
  fail(ErrorCode::Unsupported, "{}: the optimizer is not SGD, Adam or AdamW", who);
}

// The optimizer's per-parameter state names of the step graph, and the key in hodu's JSON state.
const std::vector<std::pair<std::string, std::string>>& state_keys(bool sgd) {
  static const std::vector<std::pair<std::string, std::string>> s = {{".momentum_buffer", "momentum_buffer"}};
  static const std::vector<std::pair<std::string, std::string>> a = {
      {".exp_avg", "exp_avg"}, {".exp_avg_sq", "exp_avg_sq"}, {".max_exp_avg_sq", "max_exp_avg_sq"}};
  return sgd ? s : a;
}

}  // namespace

LossCapture capture_loss(nn::Module& module, const LossFn& loss, optim::Optimizer& optimizer,
                         const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                         const CaptureOptions& options, const char* who) {
  HODU_CHECK(loss != nullptr, ErrorCode::InvalidArgument, "{}: no loss function", who);
  LossCapture c;
  c.optimizer = spec_of(optimizer, who);
  c.sgd = dynamic_cast<optim::SGD*>(&optimizer) != nullptr;

  CaptureOptions o = options;
  o.input_names.clear();
  for (size_t i = 0; i < inputs.size(); ++i)
    o.input_names.push_back(i < options.input_names.size() ? options.input_names[i]
                                                          : (i == 0 ? "input" : "input_" + std::to_string(i)));
  for (size_t i = 0; i < targets.size(); ++i) o.input_names.push_back(i == 0 ? "target" : "target_" + std::to_string(i));
  o.output_names = {"loss"};
  c.batch_names = o.input_names;
  std::vector<Tensor> batch = inputs;
  batch.insert(batch.end(), targets.begin(), targets.end());
  const size_t n_inputs = inputs.size();
  auto fn = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> in(xs.begin(), xs.begin() + n_inputs), tg(xs.begin() + n_inputs, xs.end());
    Tensor l = loss(module.forward_all(in), tg);
    HODU_CHECK(l.defined() && l.numel() == 1 && l.is_floating_point(), ErrorCode::InvalidArgument,
               "{}: the loss function must give a one-element float tensor, not {}", who, l.type_string());
    // A one-element loss of rank > 0 becomes a scalar. (Not a Reshape of an already scalar loss:
    // the cpu engine let later nodes overwrite an output that is a view of a dying value.)
    return std::vector<Tensor>{l.dim() == 0 ? l : l.reshape({})};
  };
  c.forward = capture_graph(fn, module.named_parameters(), module.named_buffers(), batch, o);

  // The optimizer's parameters by their module names (the step graph's param inputs).
  std::map<const TensorImpl*, std::string> name_of;
  for (auto& [n, t] : module.named_parameters()) name_of[t.impl().get()] = n;
  for (const Tensor& p : optimizer.parameters()) {
    auto it = name_of.find(p.impl().get());
    HODU_CHECK(it != name_of.end(), ErrorCode::InvalidArgument,
               "{}: the optimizer has a parameter ({}) that is not one of the module's", who, p.type_string());
    HODU_CHECK(c.forward.model()->graph.initializer(it->second) != nullptr, ErrorCode::InvalidArgument,
               "{}: parameter '{}' is not used by the forward and loss", who, it->second);
    c.param_names.push_back(it->second);
  }
  return c;
}

std::map<std::string, hodu::Tensor> batch_feeds(const LossCapture& c, const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& targets, const char* who) {
  HODU_CHECK(inputs.size() + targets.size() == c.batch_names.size(), ErrorCode::InvalidArgument,
             "{}: {} inputs and {} targets for a step captured with {} in all", who, inputs.size(), targets.size(),
             c.batch_names.size());
  std::map<std::string, hodu::Tensor> feeds;
  for (size_t i = 0; i < c.batch_names.size(); ++i)
    feeds[c.batch_names[i]] =
        kernels::contiguous(core(i < inputs.size() ? inputs[i] : targets[i - inputs.size()], "step"));
  return feeds;
}

int64_t load_optimizer_state(optim::Optimizer& optimizer, const LossCapture& c,
                             std::map<std::string, hodu::Tensor>& state) {
  int64_t base_steps = 0;
  Json st = Json::parse(optimizer.state_json());
  const Json& params = st["groups"][0]["params"];
  for (size_t i = 0; i < c.param_names.size(); ++i) {
    const Json& pj = params[i];
    for (const auto& [suffix, key] : state_keys(c.sgd)) {
      const std::string name = c.param_names[i] + suffix;
      if (!pj.contains(key) || pj[key].is_null() || !state.count(name)) continue;
      state[name] = tensor_from_json(pj[key].dump(), "optimizer state " + key);
      if (c.sgd) base_steps = 1;
    }
    if (!c.sgd) base_steps = pj["step"].get<int64_t>();
  }
  if (state.count("optimizer.step"))
    state["optimizer.step"] = hodu::Tensor::scalar(DType::F32, static_cast<float>(base_steps));
  return base_steps;
}

void sync_training_state(nn::Module& module, optim::Optimizer& optimizer, const LossCapture& c,
                         const std::map<std::string, hodu::Tensor>& state, int64_t new_steps, int64_t total_steps) {
  NoGradGuard guard;
  nn::NamedTensors sd = module.state_dict();
  for (auto& [name, t] : sd) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor dst = t;
    dst.copy_(make_tensor(it->second));
    if (name.size() >= 12 && name.compare(name.size() - 12, 12, "running_mean") == 0) {
      // The BatchNorm's step count lives beside its statistics.
      const std::string counter = name.substr(0, name.size() - 12) + "num_batches_tracked";
      for (auto& [n2, t2] : sd)
        if (n2 == counter) t2.add_(static_cast<double>(new_steps));
    }
  }
  Json st = Json::parse(optimizer.state_json());
  Json& params = st["groups"][0]["params"];
  for (size_t i = 0; i < c.param_names.size(); ++i) {
    for (const auto& [suffix, key] : state_keys(c.sgd)) {
      auto it = state.find(c.param_names[i] + suffix);
      if (it != state.end() && total_steps > 0) params[i][key] = Json::parse(tensor_to_json(it->second));
    }
    if (!c.sgd) params[i]["step"] = total_steps;
  }
  optimizer.load_state_json(st.dump());
}

}  // namespace hodu::eager
