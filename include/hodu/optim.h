/* hodu/optim.h — optimizers, gradient clipping, learning-rate schedules (public).
 *
 *   hodu::optim::Adam opt(model.parameters(), hodu::optim::AdamOptions{.lr = 1e-3});
 *   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
 *
 * Updates follow PyTorch 1.13's single-tensor implementations operation by
 * operation (same order, f32 arithmetic for f32 parameters), so that with the
 * same gradients the parameters match PyTorch's to rounding. A parameter
 * without a gradient is skipped. Parameter groups carry their own options;
 * schedulers change each group's lr. */
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hodu/tensor.h"

namespace hodu::eager::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: added to the gradient; AdamW: decoupled (default 1e-2 there)
  bool amsgrad = false;
  bool maximize = false;
};

// A group of parameters with its own options (lr, weight decay, ...).
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  virtual void step() = 0;
  // Sets every parameter's grad to undefined (set_to_none) or to zeros (PyTorch 1.13's default).
  void zero_grad(bool set_to_none = false);
  size_t num_groups() const { return lrs_.size(); }
  double lr(size_t group = 0) const { return lrs_.at(group); }
  void set_lr(double lr);                // every group
  void set_lr(size_t group, double lr);
  const std::vector<double>& initial_lrs() const { return initial_lrs_; }
  // Every parameter, in group order (the order state and checkpoints use).
  std::vector<Tensor> parameters() const;

  // The whole state (options, step counts, per-parameter buffers) as JSON text, and back:
  // load_state restores it exactly (the same parameters, in the same order, must be attached).
  virtual std::string state_json() const = 0;
  virtual void load_state_json(const std::string& json) = 0;
  void save_state(const std::string& path) const;  // writes state_json() to a file
  void load_state(const std::string& path);

 protected:
  std::vector<std::vector<Tensor>> groups_;
  std::vector<double> lrs_, initial_lrs_;
  void add_group(std::vector<Tensor> params, double lr);
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);
  void step() override;
  const SGDOptions& options(size_t group = 0) const { return options_.at(group); }
  std::string state_json() const override;
  void load_state_json(const std::string& json) override;

 private:
  std::vector<SGDOptions> options_;
  std::vector<std::vector<Tensor>> momentum_;  // per group, per parameter (undefined until first step)
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups);
  void step() override;
  const AdamOptions& options(size_t group = 0) const { return options_.at(group); }
  bool decoupled_weight_decay() const { return decoupled_; }  // AdamW
  std::string state_json() const override;
  void load_state_json(const std::string& json) override;

 protected:
  Adam(std::vector<ParamGroup<AdamOptions>> groups, bool decoupled);
  struct State {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  std::vector<AdamOptions> options_;
  std::vector<std::vector<State>> state_;
  bool decoupled_ = false;  // AdamW
};

// AdamW's defaults: Adam's with weight_decay 1e-2.
inline AdamOptions adamw_options(double weight_decay = 1e-2) {
  AdamOptions o;
  o.weight_decay = weight_decay;
  return o;
}

// Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * wd before the update.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = adamw_options());
  explicit AdamW(std::vector<ParamGroup<AdamOptions>> groups);
};

// Scales the gradients so that their global norm is at most max_norm; returns the norm
// before clipping. norm_type: 2, 1, or infinity. error_if_nonfinite: InvalidArgument when
// the norm is NaN or infinite.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

// ---- learning-rate schedules (step() once per epoch or per iteration, after optimizer.step())

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler();
  void step();  // advances one step and sets each group's lr
  int64_t last_step() const { return step_; }
  std::vector<double> last_lr() const;
  // Sets the step count (checkpoints) and the lrs for it.
  void set_step(int64_t step);

 protected:
  // The lr of a group with initial lr `base` at step t.
  virtual double lr_at(double base, int64_t t) const = 0;
  void apply();
  Optimizer& opt_;
  int64_t step_ = 0;
};

// lr = base * gamma^(floor(t / step_size)).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  int64_t step_size;
  double gamma;

 protected:
  double lr_at(double base, int64_t t) const override;
};

// lr = eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  int64_t T_max;
  double eta_min;

 protected:
  double lr_at(double base, int64_t t) const override;
};

// Linear warmup: lr = base * (start + (end - start) * min(t, total) / total).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double start_factor, end_factor;
  int64_t total_iters;

 protected:
  double lr_at(double base, int64_t t) const override;
};

// Linear warmup over warmup_steps, then cosine decay to eta_min at total_steps.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double eta_min = 0.0);
  int64_t warmup_steps, total_steps;
  double eta_min;

 protected:
  double lr_at(double base, int64_t t) const override;
};

}  // namespace hodu::eager::optim
