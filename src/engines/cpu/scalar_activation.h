// A FusedConv activation (its "activation" and "activation_params") applied to single values:
// the hand-written conv steps (hand_conv_step.h) that write a few outputs at a time.
#pragma once
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

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

}  // namespace hodu::cpu
