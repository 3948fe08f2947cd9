// SGD (momentum, Nesterov, weight decay), Adam and AdamW: fused loops over
// each parameter (update_kernels.h), and their state as JSON.
#include <cmath>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "formats/tensor_io.h"
#include "frontend/optim/update_kernels.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"
#include "hodu/autograd.h"
#include "hodu/optim.h"

namespace hodu::eager::optim {
namespace {

using Json = nlohmann::json;

// The parameter and its gradient as one row-major buffer each, in the parameter's dtype
// (written back into a non-contiguous parameter after the update).
struct Slot {
  hodu::Tensor p, g;
  bool copied = false;
};

Slot slot(Tensor& param, const char* opt) {
  Slot s;
  const hodu::Tensor& pc = core(param);
  HODU_CHECK(pc.dtype() == DType::F32 || pc.dtype() == DType::F64, ErrorCode::Unsupported,
             "{}: parameters of dtype {} (f32 or f64)", opt, dtype_name(pc.dtype()));
  Tensor grad = param.grad();
  HODU_CHECK(grad.shape() == param.shape(), ErrorCode::InvalidArgument, "{}: a gradient {} for a parameter {}", opt,
             grad.type_string(), param.type_string());
  s.g = kernels::contiguous(kernels::cast(core(grad), pc.dtype()));
  s.copied = !pc.is_contiguous();
  s.p = s.copied ? kernels::contiguous(pc) : pc;
  return s;
}

void write_back(Tensor& param, const Slot& s) {
  if (s.copied) {
    hodu::Tensor dst = param.impl()->data;
    kernels::copy_into(dst, s.p);
  }
  bump_version(param);
}

Tensor zeros_of(const Tensor& p) { return zeros(p.shape(), p.dtype()); }

Json tensor_json(const Tensor& t) {
  if (!t.defined()) return nullptr;
  return Json::parse(tensor_to_json(kernels::contiguous(core(t))));
}

Tensor tensor_of(const Json& j, const Tensor& like, const std::string& what) {
  if (j.is_null()) return Tensor();
  Tensor t = make_tensor(tensor_from_json(j.dump(), what));
  HODU_CHECK(t.shape() == like.shape(), ErrorCode::InvalidArgument, "{}: a state of shape {} for a parameter {}", what,
             shape_to_string(t.shape()), like.type_string());
  return t.to(like.dtype());
}

// The state JSON of `type`, checked to hold as many groups, each of as many parameters, as `groups`.
Json parse(const std::string& text, const std::string& type, const std::vector<std::vector<Tensor>>& groups) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception& e) {
    fail(ErrorCode::InvalidArgument, "{} state: not JSON ({})", type, e.what());
  }
  HODU_CHECK(j.is_object() && j.value("type", "") == type, ErrorCode::InvalidArgument,
             "{} state: the JSON is a state of '{}'", type, j.is_object() ? j.value("type", "?") : "?");
  const auto gs = j.find("groups");
  HODU_CHECK(gs != j.end() && gs->is_array() && gs->size() == groups.size(), ErrorCode::InvalidArgument,
             "{} state: {} groups for {}", type, gs != j.end() && gs->is_array() ? gs->size() : 0, groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Json& g = (*gs)[gi];
    const auto ps = g.is_object() ? g.find("params") : g.end();
    HODU_CHECK(g.is_object() && ps != g.end() && ps->is_array() && ps->size() == groups[gi].size(),
               ErrorCode::InvalidArgument, "{} state: group {} has {} parameters, the optimizer {}", type, gi,
               g.is_object() && ps != g.end() && ps->is_array() ? ps->size() : 0, groups[gi].size());
    for (const Json& p : *ps)
      HODU_CHECK(p.is_object(), ErrorCode::InvalidArgument, "{} state: group {} holds a parameter that is not an object",
                 type, gi);
  }
  return j;
}

// The value of `key` in a state object, as T; a missing key or one of another type is an error
// naming it (a hand-edited checkpoint must not reach nlohmann's asserts).
template <typename T>
T field(const Json& obj, const char* key, const std::string& what) {
  const auto it = obj.find(key);
  HODU_CHECK(it != obj.end(), ErrorCode::InvalidArgument, "{}: no '{}'", what, key);
  const bool fits = std::is_same_v<T, bool> ? it->is_boolean() : it->is_number();
  HODU_CHECK(fits, ErrorCode::InvalidArgument, "{}: '{}' is a {}, not a {}", what, key, it->type_name(),
             std::is_same_v<T, bool> ? "boolean" : "number");
  return it->get<T>();
}

// A group's learning rate and the one its schedule started from (older states lack the latter).
void read_lrs(const Json& g, const std::string& where, double& lr, double& initial) {
  lr = field<double>(g, "lr", where);
  initial = g.contains("initial_lr") ? field<double>(g, "initial_lr", where) : lr;
}

// A state tensor of a parameter: a missing key is an error, null means "no state yet".
Tensor state_tensor(const Json& obj, const char* key, const Tensor& like, const std::string& what) {
  const auto it = obj.find(key);
  HODU_CHECK(it != obj.end(), ErrorCode::InvalidArgument, "{}: no '{}'", what, key);
  return tensor_of(*it, like, what);
}

}  // namespace

// ---- SGD ------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(std::vector<ParamGroup<SGDOptions>>{{std::move(params), o}}) {}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) {
  for (auto& g : groups) {
    const SGDOptions& o = g.options;
    HODU_CHECK(o.momentum >= 0 && o.weight_decay >= 0, ErrorCode::InvalidArgument,
               "SGD: momentum {} and weight_decay {} must be >= 0", o.momentum, o.weight_decay);
    HODU_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ErrorCode::InvalidArgument,
               "SGD: Nesterov momentum requires a momentum and zero dampening");
    momentum_.emplace_back(g.params.size());
    options_.push_back(o);
    add_group(std::move(g.params), o.lr);
  }
}

void SGD::step() {
  NoGradGuard guard;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const SGDOptions& o = options_[gi];
    for (size_t i = 0; i < groups_[gi].size(); ++i) {
      Tensor& p = groups_[gi][i];
      if (!p.grad().defined()) continue;
      Slot s = slot(p, "SGD");
      Tensor& buf = momentum_[gi][i];
      const bool first = !buf.defined();
      if (o.momentum != 0 && first) buf = zeros_of(p);
      dispatch_float(s.p.dtype(), "SGD", [&](auto tag) {
        using T = typename decltype(tag)::type;
        SgdStep<T> step{T(lrs_[gi]), T(o.momentum), T(o.dampening), T(o.weight_decay), o.nesterov, o.maximize, first};
        step(static_cast<T*>(s.p.raw_data()), static_cast<const T*>(s.g.raw_data()),
             o.momentum != 0 ? static_cast<T*>(buf.data_ptr()) : nullptr, s.p.numel());
      });
      write_back(p, s);
    }
  }
}

std::string SGD::state_json() const {
  Json j = {{"type", "SGD"}, {"groups", Json::array()}};
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const SGDOptions& o = options_[gi];
    Json g = {{"lr", lrs_[gi]},           {"initial_lr", initial_lrs_[gi]}, {"momentum", o.momentum},
              {"dampening", o.dampening}, {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov},
              {"maximize", o.maximize},   {"params", Json::array()}};
    for (size_t i = 0; i < groups_[gi].size(); ++i)
      g["params"].push_back({{"shape", groups_[gi][i].shape()}, {"momentum_buffer", tensor_json(momentum_[gi][i])}});
    j["groups"].push_back(g);
  }
  return j.dump(1);
}

void SGD::load_state_json(const std::string& text) {
  Json j = parse(text, "SGD", groups_);
  // Read everything first, assign after: a bad state leaves the optimizer as it was.
  std::vector<double> lrs = lrs_, initial_lrs = initial_lrs_;
  std::vector<SGDOptions> options = options_;
  std::vector<std::vector<Tensor>> momentum = momentum_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Json& g = j["groups"][gi];
    const std::string where = "SGD state: group " + std::to_string(gi);
    read_lrs(g, where, lrs[gi], initial_lrs[gi]);
    SGDOptions& o = options[gi];
    o.momentum = field<double>(g, "momentum", where);
    o.dampening = field<double>(g, "dampening", where);
    o.weight_decay = field<double>(g, "weight_decay", where);
    o.nesterov = field<bool>(g, "nesterov", where);
    o.maximize = field<bool>(g, "maximize", where);
    for (size_t i = 0; i < groups_[gi].size(); ++i)
      momentum[gi][i] = state_tensor(g["params"][i], "momentum_buffer", groups_[gi][i],
                                     where + " parameter " + std::to_string(i));
  }
  lrs_ = std::move(lrs);
  initial_lrs_ = std::move(initial_lrs);
  options_ = std::move(options);
  momentum_ = std::move(momentum);
}

// ---- Adam / AdamW -------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : Adam(std::vector<ParamGroup<AdamOptions>>{{std::move(params), o}}, false) {}
Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups) : Adam(std::move(groups), false) {}

Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups, bool decoupled) : decoupled_(decoupled) {
  const char* name = decoupled ? "AdamW" : "Adam";
  for (auto& g : groups) {
    const AdamOptions& o = g.options;
    HODU_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps >= 0 && o.weight_decay >= 0,
               ErrorCode::InvalidArgument, "{}: betas ({}, {}) must be in [0, 1), eps {} and weight_decay {} >= 0",
               name, o.beta1, o.beta2, o.eps, o.weight_decay);
    state_.emplace_back(g.params.size());
    options_.push_back(o);
    add_group(std::move(g.params), o.lr);
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions o)
    : Adam(std::vector<ParamGroup<AdamOptions>>{{std::move(params), o}}, true) {}
AdamW::AdamW(std::vector<ParamGroup<AdamOptions>> groups) : Adam(std::move(groups), true) {}

void Adam::step() {
  NoGradGuard guard;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const AdamOptions& o = options_[gi];
    const double lr = lrs_[gi];
    for (size_t i = 0; i < groups_[gi].size(); ++i) {
      Tensor& p = groups_[gi][i];
      if (!p.grad().defined()) continue;
      Slot s = slot(p, decoupled_ ? "AdamW" : "Adam");
      State& st = state_[gi][i];
      if (!st.exp_avg.defined()) {
        st.exp_avg = zeros_of(p);
        st.exp_avg_sq = zeros_of(p);
        if (o.amsgrad) st.max_exp_avg_sq = zeros_of(p);
      }
      ++st.step;
      const double step = static_cast<double>(st.step);
      const double bc1 = 1.0 - std::pow(o.beta1, step), bc2 = 1.0 - std::pow(o.beta2, step);
      dispatch_float(s.p.dtype(), "Adam", [&](auto tag) {
        using T = typename decltype(tag)::type;
        AdamStep<T> update{T(o.beta1),          T(1.0 - o.beta1),
                           T(o.beta2),          T(1.0 - o.beta2),
                           T(std::sqrt(bc2)),   T(o.eps),
                           T(-(lr / bc1)),      T(o.weight_decay),
                           T(1.0 - lr * o.weight_decay),
                           decoupled_,          o.amsgrad,
                           o.maximize};
        update(static_cast<T*>(s.p.raw_data()), static_cast<const T*>(s.g.raw_data()),
               static_cast<T*>(st.exp_avg.data_ptr()), static_cast<T*>(st.exp_avg_sq.data_ptr()),
               o.amsgrad ? static_cast<T*>(st.max_exp_avg_sq.data_ptr()) : nullptr, s.p.numel());
      });
      write_back(p, s);
    }
  }
}

std::string Adam::state_json() const {
  Json j = {{"type", decoupled_ ? "AdamW" : "Adam"}, {"groups", Json::array()}};
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const AdamOptions& o = options_[gi];
    Json g = {{"lr", lrs_[gi]},     {"initial_lr", initial_lrs_[gi]}, {"beta1", o.beta1},
              {"beta2", o.beta2},   {"eps", o.eps},                   {"weight_decay", o.weight_decay},
              {"amsgrad", o.amsgrad}, {"maximize", o.maximize},       {"params", Json::array()}};
    for (size_t i = 0; i < groups_[gi].size(); ++i) {
      const State& s = state_[gi][i];
      g["params"].push_back({{"shape", groups_[gi][i].shape()},
                             {"step", s.step},
                             {"exp_avg", tensor_json(s.exp_avg)},
                             {"exp_avg_sq", tensor_json(s.exp_avg_sq)},
                             {"max_exp_avg_sq", tensor_json(s.max_exp_avg_sq)}});
    }
    j["groups"].push_back(g);
  }
  return j.dump(1);
}

void Adam::load_state_json(const std::string& text) {
  const std::string type = decoupled_ ? "AdamW" : "Adam";
  Json j = parse(text, type, groups_);
  // Read everything first, assign after: a bad state leaves the optimizer as it was.
  std::vector<double> lrs = lrs_, initial_lrs = initial_lrs_;
  std::vector<AdamOptions> options = options_;
  auto state = state_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Json& g = j["groups"][gi];
    const std::string where = type + " state: group " + std::to_string(gi);
    read_lrs(g, where, lrs[gi], initial_lrs[gi]);
    AdamOptions& o = options[gi];
    o.beta1 = field<double>(g, "beta1", where);
    o.beta2 = field<double>(g, "beta2", where);
    o.eps = field<double>(g, "eps", where);
    o.weight_decay = field<double>(g, "weight_decay", where);
    o.amsgrad = field<bool>(g, "amsgrad", where);
    o.maximize = field<bool>(g, "maximize", where);
    for (size_t i = 0; i < groups_[gi].size(); ++i) {
      const Json& pj = g["params"][i];
      const std::string what = where + " parameter " + std::to_string(i);
      State& s = state[gi][i];
      s.step = field<int64_t>(pj, "step", what);
      s.exp_avg = state_tensor(pj, "exp_avg", groups_[gi][i], what);
      s.exp_avg_sq = state_tensor(pj, "exp_avg_sq", groups_[gi][i], what);
      s.max_exp_avg_sq = state_tensor(pj, "max_exp_avg_sq", groups_[gi][i], what);
    }
  }
  lrs_ = std::move(lrs);
  initial_lrs_ = std::move(initial_lrs);
  options_ = std::move(options);
  state_ = std::move(state);
}

}  // namespace hodu::eager::optim
