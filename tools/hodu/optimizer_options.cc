#include "optimizer_options.h"

namespace hodu::cli {

void add_optimizer_options(CLI::App& app, OptimizerArgs& a, const std::string& optimizer_help) {
  app.add_option("--optimizer", a.optimizer, optimizer_help)->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--momentum", a.momentum, "SGD momentum (0)");
  app.add_option("--dampening", a.dampening, "SGD dampening (0)");
  app.add_flag("--nesterov", a.nesterov, "SGD with Nesterov momentum");
  app.add_option("--weight-decay", a.weight_decay, "weight decay (SGD/Adam 0, AdamW 0.01)");
  app.add_option("--beta1", a.beta1, "Adam/AdamW beta1 (0.9)");
  app.add_option("--beta2", a.beta2, "Adam/AdamW beta2 (0.999)");
  app.add_option("--eps", a.eps, "Adam/AdamW eps (1e-8)");
  app.add_flag("--amsgrad", a.amsgrad, "Adam/AdamW with amsgrad");
  app.add_flag("--maximize", a.maximize, "ascend instead of descend");
}

passes::OptimizerSpec optimizer_spec(const OptimizerArgs& a) {
  passes::OptimizerSpec o;
  if (a.optimizer == "sgd") {
    o = passes::OptimizerSpec::sgd(a.momentum, a.dampening, a.nesterov, a.weight_decay < 0 ? 0 : a.weight_decay);
  } else {
    float wd = a.weight_decay >= 0 ? a.weight_decay : a.optimizer == "adamw" ? 1e-2f : 0.f;
    o = a.optimizer == "adam" ? passes::OptimizerSpec::adam(a.beta1, a.beta2, a.eps, wd)
                              : passes::OptimizerSpec::adamw(a.beta1, a.beta2, a.eps, wd);
    o.amsgrad = a.amsgrad;
  }
  o.maximize = a.maximize;
  return o;
}

}  // namespace hodu::cli
