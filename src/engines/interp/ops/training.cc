// ai.onnx.preview.training: Adagrad, Adam, Momentum (standard and Nesterov).
// Element math in double, rounded to the tensors' dtype (float or double).
#include <cmath>
#include <string>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

// Checks the layout R, T, then `groups` groups of n tensors; returns n.
int64_t optimizer_arity(const KernelContext& ctx, int64_t groups, int64_t out_groups) {
  int64_t ni = static_cast<int64_t>(ctx.num_inputs()) - 2;
  if (ni <= 0 || ni % groups != 0)
    ctx.fail(ErrorCode::InvalidModel, "expected R, T and {} groups of tensors, got {} inputs", groups,
             ctx.num_inputs());
  int64_t n = ni / groups;
  if (static_cast<int64_t>(ctx.outputs.size()) != n * out_groups)
    ctx.fail(ErrorCode::InvalidModel, "expected {} outputs, got {}", n * out_groups, ctx.outputs.size());
  for (int64_t i = 0; i < ni; ++i) {
    const Tensor& t = ctx.input(2 + i);
    const Tensor& x = ctx.input(2 + i % n);
    if (t.dtype() != DType::F32 && t.dtype() != DType::F64)
      ctx.fail(ErrorCode::Unsupported, "input {} has dtype {}; float or double needed", 2 + i, dtype_name(t.dtype()));
    if (t.shape() != x.shape() || t.dtype() != x.dtype())
      ctx.fail(ErrorCode::InvalidArgument, "input {} {} does not match its parameter {}", 2 + i, t.type_string(),
               x.type_string());
  }
  return n;
}

double scalar_of(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "{} must be a scalar, got {}", what, t.type_string());
  return t.get_double(0);
}

std::vector<double> doubles(const Tensor& t) { return t.to_doubles(); }

Tensor from_doubles(const std::vector<double>& v, const Tensor& like) {
  Tensor out = Tensor::empty(like.dtype(), like.shape());
  if (like.dtype() == DType::F32) {
    float* p = out.data<float>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  } else {
    double* p = out.data<double>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  }
  return out;
}

void adagrad_kernel(KernelContext& ctx) {
  int64_t n = optimizer_arity(ctx, 3, 2);
  double r = scalar_of(ctx, 0, "R");
  double t = scalar_of(ctx, 1, "T");
  double decay = ctx.node.get_float("decay_factor", 0.f);
  double eps = ctx.node.get_float("epsilon", 1e-6f);
  double norm = ctx.node.get_float("norm_coefficient", 0.f);
  double rr = r / (1 + t * decay);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& xt = ctx.input(2 + i);
    auto x = doubles(xt), g = doubles(ctx.input(2 + n + i)), h = doubles(ctx.input(2 + 2 * n + i));
    for (size_t k = 0; k < x.size(); ++k) {
      double gr = norm * x[k] + g[k];
      h[k] += gr * gr;
      x[k] -= rr * gr / (std::sqrt(h[k]) + eps);
    }
    ctx.set_output(i, from_doubles(x, xt));
    ctx.set_output(n + i, from_doubles(h, xt));
  }
}

void adam_kernel(KernelContext& ctx) {
  int64_t n = optimizer_arity(ctx, 4, 3);
  double r = scalar_of(ctx, 0, "R");
  double t = scalar_of(ctx, 1, "T");
  double alpha = ctx.node.get_float("alpha", 0.9f);
  double beta = ctx.node.get_float("beta", 0.999f);
  double eps = ctx.node.get_float("epsilon", 1e-6f);
  double norm = ctx.node.get_float("norm_coefficient", 0.f);
  double norm_post = ctx.node.get_float("norm_coefficient_post", 0.f);
  double ra = t > 0 ? r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : r;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& xt = ctx.input(2 + i);
    auto x = doubles(xt), g = doubles(ctx.input(2 + n + i)), v = doubles(ctx.input(2 + 2 * n + i)),
         h = doubles(ctx.input(2 + 3 * n + i));
    for (size_t k = 0; k < x.size(); ++k) {
      double gr = norm * x[k] + g[k];
      v[k] = alpha * v[k] + (1 - alpha) * gr;
      h[k] = beta * h[k] + (1 - beta) * gr * gr;
      double xn = x[k] - ra * (v[k] / (std::sqrt(h[k]) + eps));
      x[k] = (1 - norm_post) * xn;
    }
    ctx.set_output(i, from_doubles(x, xt));
    ctx.set_output(n + i, from_doubles(v, xt));
    ctx.set_output(2 * n + i, from_doubles(h, xt));
  }
}

void momentum_kernel(KernelContext& ctx) {
  int64_t n = optimizer_arity(ctx, 3, 2);
  double r = scalar_of(ctx, 0, "R");
  double t = scalar_of(ctx, 1, "T");
  double alpha = ctx.node.get_float("alpha", 0.f);
  double beta = ctx.node.get_float("beta", 0.f);
  double norm = ctx.node.get_float("norm_coefficient", 0.f);
  std::string mode = ctx.node.get_string("mode", "standard");
  if (mode != "standard" && mode != "nesterov") ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
  bool nesterov = mode == "nesterov";
  double ba = t > 0 ? beta : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& xt = ctx.input(2 + i);
    auto x = doubles(xt), g = doubles(ctx.input(2 + n + i)), v = doubles(ctx.input(2 + 2 * n + i));
    for (size_t k = 0; k < x.size(); ++k) {
      double gr = norm * x[k] + g[k];
      v[k] = alpha * v[k] + ba * gr;
      x[k] -= nesterov ? r * (gr + alpha * v[k]) : r * v[k];
    }
    ctx.set_output(i, from_doubles(x, xt));
    ctx.set_output(n + i, from_doubles(v, xt));
  }
}

}  // namespace

void register_training_ops(OpTable& t) {
  t.add("ai.onnx.preview.training", "Adagrad", adagrad_kernel);
  t.add("ai.onnx.preview.training", "Adam", adam_kernel);
  t.add("ai.onnx.preview.training", "Momentum", momentum_kernel);
}

}  // namespace hodu::interp
