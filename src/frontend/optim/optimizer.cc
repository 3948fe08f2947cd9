// The optimizer base: groups, lrs, zero_grad, state files; gradient clipping.
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/shape.h"
#include "hodu/autograd.h"
#include "hodu/optim.h"

namespace hodu::eager::optim {

Optimizer::~Optimizer() = default;

void Optimizer::add_group(std::vector<Tensor> params, double lr) {
  HODU_CHECK(lr >= 0.0 && std::isfinite(lr), ErrorCode::InvalidArgument, "optimizer: learning rate {} (must be >= 0)", lr);
  for (size_t i = 0; i < params.size(); ++i) {
    HODU_CHECK(params[i].defined() && params[i].is_floating_point(), ErrorCode::InvalidArgument,
               "optimizer: parameter {} of group {} is {} (a floating-point tensor is needed)", i, groups_.size(),
               params[i].type_string());
    HODU_CHECK(params[i].is_leaf(), ErrorCode::InvalidArgument,
               "optimizer: parameter {} of group {} is not a leaf (made by {}); optimize leaves", i, groups_.size(),
               params[i].grad_fn_name());
  }
  groups_.push_back(std::move(params));
  lrs_.push_back(lr);
  initial_lrs_.push_back(lr);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (auto& g : groups_)
    for (Tensor& p : g) {
      Tensor gr = p.grad();
      if (!gr.defined()) continue;
      if (set_to_none) p.set_grad(Tensor());
      else gr.detach().zero_();
    }
}

void Optimizer::set_lr(double lr) {
  for (size_t i = 0; i < lrs_.size(); ++i) set_lr(i, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  HODU_CHECK(group < lrs_.size(), ErrorCode::InvalidArgument, "optimizer: group {} of {}", group, lrs_.size());
  HODU_CHECK(lr >= 0.0 && std::isfinite(lr), ErrorCode::InvalidArgument, "optimizer: learning rate {}", lr);
  lrs_[group] = lr;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.begin(), g.end());
  return out;
}

void Optimizer::save_state(const std::string& path) const {
  std::ofstream f(path, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot write", path);
  f << state_json();
  HODU_CHECK(f.good(), ErrorCode::Io, "{}: write failed", path);
}

void Optimizer::load_state(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HODU_CHECK(f.good(), ErrorCode::Io, "{}: cannot read", path);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    load_state_json(ss.str());
  } catch (const Error& e) {
    throw e.with_context(path + ": ");
  }
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard guard;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  // PyTorch 1.13: the norm of the per-tensor norms; clip_coef = max_norm / (total + 1e-6), clamped to 1.
  Tensor total;
  if (std::isinf(norm_type)) {
    std::vector<Tensor> maxes;
    for (const Tensor& g : grads) maxes.push_back(g.detach().abs().max().reshape({1}));
    total = cat(maxes).max();
  } else {
    std::vector<Tensor> norms;
    for (const Tensor& g : grads) norms.push_back(g.detach().norm(norm_type).reshape({1}));
    total = cat(norms).norm(norm_type);
  }
  const double t = total.item();
  HODU_CHECK(!error_if_nonfinite || std::isfinite(t), ErrorCode::InvalidArgument,
             "clip_grad_norm_: the total norm of order {} of the gradients is {}", norm_type, t);
  Tensor coef = (total.reciprocal() * 0.0 + max_norm) / (total + 1e-6);
  coef = coef.clamp_max(1.0);
  for (Tensor& g : grads) {
    Tensor gg = g;
    gg.mul_(coef.to(g.dtype()));
  }
  return t;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  NoGradGuard guard;
  HODU_CHECK(clip_value >= 0, ErrorCode::InvalidArgument, "clip_grad_value_: clip value {}", clip_value);
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) {
      Tensor g = p.grad();
      g.clamp_(-clip_value, clip_value);
    }
}

// ---- schedulers -----------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {}
LRScheduler::~LRScheduler() = default;

void LRScheduler::apply() {
  for (size_t g = 0; g < opt_.num_groups(); ++g) opt_.set_lr(g, lr_at(opt_.initial_lrs()[g], step_));
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::set_step(int64_t s) {
  HODU_CHECK(s >= 0, ErrorCode::InvalidArgument, "scheduler: step {}", s);
  step_ = s;
  apply();
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < opt_.num_groups(); ++g) out.push_back(opt_.lr(g));
  return out;
}

StepLR::StepLR(Optimizer& o, int64_t s, double g) : LRScheduler(o), step_size(s), gamma(g) {
  HODU_CHECK(s > 0, ErrorCode::InvalidArgument, "StepLR: step_size {}", s);
}
double StepLR::lr_at(double base, int64_t t) const { return base * std::pow(gamma, static_cast<double>(t / step_size)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& o, int64_t T, double e) : LRScheduler(o), T_max(T), eta_min(e) {
  HODU_CHECK(T > 0, ErrorCode::InvalidArgument, "CosineAnnealingLR: T_max {}", T);
}
double CosineAnnealingLR::lr_at(double base, int64_t t) const {
  return eta_min + (base - eta_min) * (1.0 + std::cos(M_PI * static_cast<double>(t) / static_cast<double>(T_max))) / 2.0;
}

LinearLR::LinearLR(Optimizer& o, double s, double e, int64_t n)
    : LRScheduler(o), start_factor(s), end_factor(e), total_iters(n) {
  HODU_CHECK(s > 0 && s <= 1 && e >= 0 && e <= 1 && n > 0, ErrorCode::InvalidArgument,
             "LinearLR: start_factor {} must be in (0, 1], end_factor {} in [0, 1], total_iters {} positive", s, e, n);
  apply();  // PyTorch applies the start factor at construction
}
double LinearLR::lr_at(double base, int64_t t) const {
  const double f = start_factor + (end_factor - start_factor) * static_cast<double>(std::min(t, total_iters)) /
                                      static_cast<double>(total_iters);
  return base * f;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& o, int64_t w, int64_t total, double e)
    : LRScheduler(o), warmup_steps(w), total_steps(total), eta_min(e) {
  HODU_CHECK(w >= 0 && total > w, ErrorCode::InvalidArgument,
             "WarmupCosineLR: warmup_steps {} must be >= 0 and below total_steps {}", w, total);
  apply();
}
double WarmupCosineLR::lr_at(double base, int64_t t) const {
  if (t < warmup_steps) return base * static_cast<double>(t + 1) / static_cast<double>(warmup_steps + 1);
  const double progress = std::min(1.0, static_cast<double>(t - warmup_steps) / static_cast<double>(total_steps - warmup_steps));
  return eta_min + (base - eta_min) * (1.0 + std::cos(M_PI * progress)) / 2.0;
}

}  // namespace hodu::eager::optim
