// nn::init: PyTorch 1.13's initializers (torch/nn/init.py), drawing from hodu's generators.
#include <cmath>

#include "core/error.h"
#include "core/shape.h"
#include "hodu/autograd.h"
#include "hodu/nn.h"

namespace hodu::eager::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  HODU_CHECK(t.defined() && t.dim() >= 2, ErrorCode::InvalidArgument,
             "fan in and fan out need a tensor of at least 2 dims, not {}", t.type_string());
  int64_t field = 1;
  for (int64_t i = 2; i < t.dim(); ++i) field *= t.size(i);
  return {t.size(1) * field, t.size(0) * field};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  fail(ErrorCode::InvalidArgument, "calculate_gain: unknown nonlinearity '{}'", nl);
}

Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  NoGradGuard guard;
  return t.uniform_(a, b, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard guard;
  return t.normal_(mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard guard;
  return t.fill_(value);
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [in, out] = fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(in + out));
  const double a = std::sqrt(3.0) * std;
  return uniform_(t, -a, a, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [in, out] = fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}

namespace {
double kaiming_std(const Tensor& t, double a, const std::string& mode, const std::string& nl) {
  HODU_CHECK(mode == "fan_in" || mode == "fan_out", ErrorCode::InvalidArgument,
             "kaiming init: mode '{}' (fan_in or fan_out)", mode);
  auto [in, out] = fan_in_and_fan_out(t);
  const int64_t fan = mode == "fan_in" ? in : out;
  HODU_CHECK(fan > 0, ErrorCode::InvalidArgument, "kaiming init of a tensor with no elements ({})", t.type_string());
  return calculate_gain(nl, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nl, Generator* gen) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode, const std::string& nl, Generator* gen) {
  return normal_(t, 0.0, kaiming_std(t, a, mode, nl), gen);
}

}  // namespace hodu::eager::nn::init
