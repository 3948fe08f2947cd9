// The optimizer options shared by `hodu grad --optimizer` and `hodugaki train`:
// --optimizer sgd|adam|adamw and its hyperparameters, as a passes::OptimizerSpec
// (PyTorch 1.13's defaults: AdamW's weight decay 0.01, the others' 0).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "passes/autodiff.h"

namespace hodu::cli {

struct OptimizerArgs {
  std::string optimizer;
  float momentum = 0, dampening = 0, weight_decay = -1, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  bool nesterov = false, amsgrad = false, maximize = false;
};

// Registers --optimizer (with `optimizer_help`) and the hyperparameters' options.
void add_optimizer_options(CLI::App& app, OptimizerArgs& a, const std::string& optimizer_help);
passes::OptimizerSpec optimizer_spec(const OptimizerArgs& a);

}  // namespace hodu::cli
