// A FusedConv activation (its "activation" and "activation_params") applied to single values,
// and what the hand-written conv steps that use it share (GEMV convs in dnnl_conv.cc, 1-D
// depthwise convs in depthwise_conv1d.cc): weights and bias copied once, the residual Z.
#pragma once
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

struct ScalarActivation {
  enum class Kind { None, Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSigmoid, Silu, Gelu, GeluTanh } kind = Kind::None;
  float a = 0, b = 0;

  static std::optional<ScalarActivation> of(const std::string& act, const std::vector<float>& p) {
    auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
    constexpr float inf = std::numeric_limits<float>::infinity();
    ScalarActivation r;
    if (act.empty()) r.kind = Kind::None;
    else if (act == "Relu") r.kind = Kind::Relu;
    else if (act == "LeakyRelu") r = {Kind::LeakyRelu, param(0, 0.01f), 0};
    else if (act == "Sigmoid") r.kind = Kind::Sigmoid;
    else if (act == "Tanh") r.kind = Kind::Tanh;
    else if (act == "Clip") r = {Kind::Clip, param(0, -inf), param(1, inf)};
    else if (act == "HardSigmoid") r = {Kind::HardSigmoid, param(0, 0.2f), param(1, 0.5f)};
    else if (act == "Silu") r.kind = Kind::Silu;
    else if (act == "Gelu") r.kind = Kind::Gelu;
    else if (act == "GeluTanh") r.kind = Kind::GeluTanh;
    else return std::nullopt;
    return r;
  }
  float operator()(float v) const {
    switch (kind) {
      case Kind::None: return v;
      case Kind::Relu: return v > 0 ? v : 0.0f;
      case Kind::LeakyRelu: return v > 0 ? v : a * v;
      case Kind::Sigmoid: return 1.0f / (1.0f + std::exp(-v));
      case Kind::Tanh: return std::tanh(v);
      case Kind::Clip: return std::fmin(std::fmax(v, a), b);
      case Kind::HardSigmoid: return std::fmin(std::fmax(a * v + b, 0.0f), 1.0f);
      case Kind::Silu: return v / (1.0f + std::exp(-v));
      case Kind::Gelu: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
      case Kind::GeluTanh:
        return 0.5f * v * (1.0f + std::tanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    }
    return v;
  }
};

// A conv step of hodu's own over plain tensors: reads[0] the input, reads[1] the residual Z
// (has_z_), writes[0] the output.
struct HandConvStep : Step {
  std::vector<float> weights_, bias_;  // as the node's weights, [cout] or empty
  ScalarActivation act_;
  bool has_z_ = false;
};

// Fills the shared part of `step` for conv node `n` (output shape ys) and adds it to the plan,
// labelled with `kernel`.
template <class S>
void add_hand_conv(PlanBuilder& b, const Node& n, std::unique_ptr<S> step, const Tensor& w, const Tensor* bias,
                   const ScalarActivation& act, bool has_z, const std::vector<int64_t>& ys, const std::string& kernel) {
  const float* wd = w.data<float>();
  step->weights_.assign(wd, wd + w.numel());
  if (bias) step->bias_.assign(bias->data<float>(), bias->data<float>() + bias->numel());
  step->act_ = act;
  step->reads = {b.plain(n.inputs[0])};
  if (has_z) {
    step->has_z_ = true;
    step->reads.push_back(b.plain(n.inputs[3]));
  }
  step->writes = {b.define(n.outputs[0], DType::F32, ys)};
  step->label = n.describe() + ": " + kernel;
  b.add(std::move(step));
}

}  // namespace hodu::cpu
