// Unary elementwise kernels: math, activations, IsNaN/IsInf, Not, BitwiseNot.
// Narrow floats (f16, bf16, f8) are computed in f32 and rounded back; double in double.
#include <cmath>
#include <limits>
#include <string>

#include "engines/interp/ops/elementwise_common.h"

namespace hodu::interp {
namespace {

// y = f(x) for float inputs (f is a generic lambda called with float or double).
template <typename F>
void unary_float(KernelContext& ctx, F&& f) {
  const Tensor& x0 = ctx.input(0);
  const DType dt = x0.dtype();
  if (!dtype_is_float(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op (needs a float type)", dtype_name(dt));
  Tensor x = widen(x0).contiguous();
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(ctx, x.dtype(), [&]<typename T>() {
    map_unary(ctx.threads, elems<T>(x), elems<T>(y), x.numel(), [&](T v) { return static_cast<T>(f(v)); });
  });
  ctx.set_output(0, narrow_to(y, dt));
}

// y = f(x) for floats and (signed and unsigned) integers.
template <typename F>
void unary_numeric(KernelContext& ctx, F&& f) {
  const Tensor& x0 = ctx.input(0);
  const DType dt = x0.dtype();
  Tensor x = widen(x0).contiguous();
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_arith(ctx, x.dtype(), [&]<typename T>() {
    map_unary(ctx.threads, elems<T>(x), elems<T>(y), x.numel(), [&](T v) { return static_cast<T>(f(v)); });
  });
  ctx.set_output(0, narrow_to(y, dt));
}

// y = pred(x) → bool, floats only.
template <typename F>
void unary_float_predicate(KernelContext& ctx, F&& pred) {
  const Tensor& x0 = ctx.input(0);
  if (!dtype_is_float(x0.dtype()))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op (needs a float type)",
             dtype_name(x0.dtype()));
  Tensor x = widen(x0).contiguous();
  Tensor y = Tensor::empty(DType::Bool, x.shape());
  dispatch_float(ctx, x.dtype(), [&]<typename T>() {
    map_unary(ctx.threads, elems<T>(x), elems<bool>(y), x.numel(), [&](T v) { return static_cast<bool>(pred(v)); });
  });
  ctx.set_output(0, y);
}

// ---- math ----------------------------------------------------------------------

void k_abs(KernelContext& ctx) {
  unary_numeric(ctx, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_unsigned_v<T>) return v;
    else if constexpr (std::is_floating_point_v<T>) return std::fabs(v);
    else return static_cast<T>(v < 0 ? static_cast<T>(wrap_uint_t<T>(0) - static_cast<wrap_uint_t<T>>(v)) : v);
  });
}
void k_neg(KernelContext& ctx) {
  unary_numeric(ctx, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) return -v;
    else return static_cast<T>(wrap_uint_t<T>(0) - static_cast<wrap_uint_t<T>>(v));
  });
}
void k_sign(KernelContext& ctx) {
  unary_numeric(ctx, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(v)) return v;
      return static_cast<T>(v > 0 ? 1 : (v < 0 ? -1 : 0));
    } else if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(v > 0 ? 1 : 0);
    } else {
      return static_cast<T>(v > 0 ? 1 : (v < 0 ? -1 : 0));
    }
  });
}
void k_relu(KernelContext& ctx) {
  unary_numeric(ctx, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) return std::isnan(v) ? v : (v > T(0) ? v : T(0));
    else return v > T(0) ? v : T(0);
  });
}
void k_reciprocal(KernelContext& ctx) { unary_float(ctx, [](auto v) { return decltype(v)(1) / v; }); }
void k_sqrt(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::sqrt(v); }); }
void k_exp(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::exp(v); }); }
void k_log(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::log(v); }); }
void k_ceil(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::ceil(v); }); }
void k_floor(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::floor(v); }); }
// Round half to even (numpy.round), independent of the current rounding mode.
void k_round(KernelContext& ctx) {
  unary_float(ctx, [](auto v) {
    using T = decltype(v);
    T r = std::round(v);  // half away from zero
    if (std::fabs(v - std::trunc(v)) == T(0.5)) r = T(2) * std::round(v / T(2));
    return r;
  });
}
void k_sin(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::sin(v); }); }
void k_cos(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::cos(v); }); }
void k_tan(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::tan(v); }); }
void k_asin(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::asin(v); }); }
void k_acos(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::acos(v); }); }
void k_atan(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::atan(v); }); }
void k_sinh(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::sinh(v); }); }
void k_cosh(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::cosh(v); }); }
void k_tanh(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::tanh(v); }); }
void k_asinh(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::asinh(v); }); }
void k_acosh(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::acosh(v); }); }
void k_atanh(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::atanh(v); }); }
void k_erf(KernelContext& ctx) { unary_float(ctx, [](auto v) { return std::erf(v); }); }

// ---- activations ---------------------------------------------------------------

void k_sigmoid(KernelContext& ctx) { unary_float(ctx, [](auto v) { return sigmoid(v); }); }
void k_hard_sigmoid(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 0.2f), beta = ctx.node.get_float("beta", 0.5f);
  unary_float(ctx, [=](auto v) {
    using T = decltype(v);
    T y = T(alpha) * v + T(beta);
    return std::max(T(0), std::min(T(1), y));
  });
}
void k_hard_swish(KernelContext& ctx) {
  unary_float(ctx, [](auto v) {
    using T = decltype(v);
    T y = v * T(1.0 / 6.0) + T(0.5);
    return v * std::max(T(0), std::min(T(1), y));
  });
}
void k_leaky_relu(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 0.01f);
  unary_float(ctx, [=](auto v) { return v >= 0 ? v : v * decltype(v)(alpha); });
}
void k_elu(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 1.0f);
  unary_float(ctx, [=](auto v) {
    using T = decltype(v);
    return v > T(0) ? v : (std::exp(v) - T(1)) * T(alpha);
  });
}
void k_selu(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 1.67326319217681884765625f);
  const float gamma = ctx.node.get_float("gamma", 1.05070102214813232421875f);
  unary_float(ctx, [=](auto v) {
    using T = decltype(v);
    return v > T(0) ? T(gamma) * v : T(gamma) * (std::exp(v) * T(alpha) - T(alpha));
  });
}
void k_celu(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 1.0f);
  if (alpha == 0.0f) ctx.fail(ErrorCode::InvalidArgument, "alpha must not be 0");
  unary_float(ctx, [=](auto v) {
    using T = decltype(v);
    return std::max(T(0), v) + std::min(T(0), T(alpha) * (std::exp(v / T(alpha)) - T(1)));
  });
}
void k_gelu(KernelContext& ctx) {
  const std::string approx = ctx.node.get_string("approximate", "none");
  if (approx == "none") {
    unary_float(ctx, [](auto v) {
      using T = decltype(v);
      return T(0.5) * v * (T(1) + std::erf(v * T(0.70710678118654752440)));
    });
  } else if (approx == "tanh") {
    unary_float(ctx, [](auto v) {
      using T = decltype(v);
      const T k = T(0.79788456080286535588);  // sqrt(2 / pi)
      return T(0.5) * v * (T(1) + std::tanh(k * (v + T(0.044715) * v * v * v)));
    });
  } else {
    ctx.fail(ErrorCode::InvalidArgument, "approximate must be 'none' or 'tanh', got '{}'", approx);
  }
}
void k_mish(KernelContext& ctx) { unary_float(ctx, [](auto v) { return v * std::tanh(softplus(v)); }); }
void k_softplus(KernelContext& ctx) { unary_float(ctx, [](auto v) { return softplus(v); }); }
void k_softsign(KernelContext& ctx) {
  unary_float(ctx, [](auto v) { return v / (decltype(v)(1) + std::fabs(v)); });
}
void k_thresholded_relu(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 1.0f);
  unary_float(ctx, [=](auto v) {
    using T = decltype(v);
    return v > T(alpha) ? v : T(0);
  });
}
void k_swish(KernelContext& ctx) {
  const float alpha = ctx.node.get_float("alpha", 1.0f);
  unary_float(ctx, [=](auto v) {
    using T = decltype(v);
    return v * sigmoid(T(alpha) * v);
  });
}
// Shrink allows every numeric type; computed in double for integers, cast back.
void k_shrink(KernelContext& ctx) {
  const float lambd = ctx.node.get_float("lambd", 0.5f), bias = ctx.node.get_float("bias", 0.0f);
  unary_numeric(ctx, [=](auto v) {
    using T = decltype(v);
    using C = std::conditional_t<std::is_same_v<T, float>, float, double>;
    C x = static_cast<C>(v);
    C y = x < -C(lambd) ? x + C(bias) : (x > C(lambd) ? x - C(bias) : C(0));
    if constexpr (std::is_floating_point_v<T>) return static_cast<T>(y);
    else {
      // Out-of-range results wrap like numpy's astype from float64 (via int64).
      if (!std::isfinite(y) || std::fabs(y) >= 9.2e18) return static_cast<T>(0);
      return static_cast<T>(static_cast<int64_t>(y));
    }
  });
}

// ---- predicates and logic ------------------------------------------------------

void k_isnan(KernelContext& ctx) { unary_float_predicate(ctx, [](auto v) { return std::isnan(v); }); }
void k_isinf(KernelContext& ctx) {
  const bool neg = ctx.node.get_int("detect_negative", 1) != 0, pos = ctx.node.get_int("detect_positive", 1) != 0;
  unary_float_predicate(ctx, [=](auto v) { return std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)); });
}
void k_not(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  if (x0.dtype() != DType::Bool)
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Not (needs bool)", dtype_name(x0.dtype()));
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(DType::Bool, x.shape());
  map_unary(ctx.threads, elems<uint8_t>(x), elems<uint8_t>(y), x.numel(),
            [](uint8_t v) { return static_cast<uint8_t>(v ? 0 : 1); });
  ctx.set_output(0, y);
}
void k_bitwise_not(KernelContext& ctx) {
  Tensor x = ctx.input(0).contiguous();
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_integer(ctx, x.dtype(), [&]<typename T>() {
    map_unary(ctx.threads, elems<T>(x), elems<T>(y), x.numel(), [](T v) { return static_cast<T>(~v); });
  });
  ctx.set_output(0, y);
}

}  // namespace

void register_elementwise_unary_ops(OpTable& t) {
  t.add("", "Abs", k_abs);
  t.add("", "Neg", k_neg);
  t.add("", "Sign", k_sign);
  t.add("", "Relu", k_relu);
  t.add("", "Reciprocal", k_reciprocal);
  t.add("", "Sqrt", k_sqrt);
  t.add("", "Exp", k_exp);
  t.add("", "Log", k_log);
  t.add("", "Ceil", k_ceil);
  t.add("", "Floor", k_floor);
  t.add("", "Round", k_round);
  t.add("", "Sin", k_sin);
  t.add("", "Cos", k_cos);
  t.add("", "Tan", k_tan);
  t.add("", "Asin", k_asin);
  t.add("", "Acos", k_acos);
  t.add("", "Atan", k_atan);
  t.add("", "Sinh", k_sinh);
  t.add("", "Cosh", k_cosh);
  t.add("", "Tanh", k_tanh);
  t.add("", "Asinh", k_asinh);
  t.add("", "Acosh", k_acosh);
  t.add("", "Atanh", k_atanh);
  t.add("", "Erf", k_erf);
  t.add("", "Sigmoid", k_sigmoid);
  t.add("", "HardSigmoid", k_hard_sigmoid);
  t.add("", "HardSwish", k_hard_swish);
  t.add("", "LeakyRelu", k_leaky_relu);
  t.add("", "Elu", k_elu);
  t.add("", "Selu", k_selu);
  t.add("", "Celu", k_celu);
  t.add("", "Gelu", k_gelu);
  t.add("", "Mish", k_mish);
  t.add("", "Softplus", k_softplus);
  t.add("", "Softsign", k_softsign);
  t.add("", "ThresholdedRelu", k_thresholded_relu);
  t.add("", "Swish", k_swish);
  t.add("", "Shrink", k_shrink);
  t.add("", "IsNaN", k_isnan);
  t.add("", "IsInf", k_isinf);
  t.add("", "Not", k_not);
  t.add("", "BitwiseNot", k_bitwise_not);
}

}  // namespace hodu::interp
