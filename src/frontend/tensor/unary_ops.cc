// Unary ops and activations with their gradients; conversions and copies.
#include <cmath>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "frontend/tensor/inplace.h"
#include "kernels/cpu/tensor/kernels.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {

using kernels::GradOp;
using kernels::UnaryOp;
using kernels::UnaryParams;

constexpr double kPi = 3.14159265358979323846;

// x's dtype, or f32 for an integer input of an op with a float result.
DType result_dtype(const Tensor& x, bool float_result) {
  const DType d = x.dtype();
  if (float_result && !kernels::is_float(d)) return DType::F32;
  return d;
}

// Computes op(x) in the compute dtype and converts back.
hodu::Tensor compute(UnaryOp op, const hodu::Tensor& x, DType rt, const UnaryParams& p = {}) {
  const DType ct = kernels::compute_dtype(rt);
  hodu::Tensor out = kernels::unary(op, kernels::cast(x, ct), p);
  return out.dtype() == rt ? out : kernels::cast(out, rt);
}

// g * f'(x) on the fast kernel, or through ops when the backward is itself recorded
// (create_graph): `composite` then gives the same value differentiably.
Tensor grad_of(GradOp op, const Tensor& g, const Tensor& x, const UnaryParams& p,
               const std::function<Tensor()>& composite) {
  if (is_grad_enabled()) return composite();
  const DType ct = kernels::compute_dtype(x.dtype());
  hodu::Tensor r = kernels::unary_grad(op, kernels::cast(core(g), ct), kernels::cast(core(x), ct), p);
  return make_tensor(r.dtype() == x.dtype() ? r : kernels::cast(r, x.dtype()));
}

Tensor finish(Tensor r, const Tensor& x, const char* backward_name, FunctionNode::Backward bw) {
  if (needs_grad({&x})) record(backward_name, {x}, {&r}, std::move(bw));
  return r;
}

void trace1(const char* op, const Tensor& x, const Tensor& y, std::vector<Attribute> attrs = {}) {
  if (trace::active()) trace::record(op, {x}, {y}, std::move(attrs));
}

Tensor simple(UnaryOp op, const Tensor& x, const char* name, bool float_result, const UnaryParams& p = {}) {
  const hodu::Tensor& xc = core(x, name);
  return make_tensor(compute(op, xc, result_dtype(x, float_result), p));
}

Tensor from_int(const Tensor& x, bool float_result) {
  // Integer inputs of float ops are converted first (recorded, so a capture has the Cast).
  return float_result && !kernels::is_float(x.dtype()) ? x.to(DType::F32) : x;
}

}  // namespace

Tensor Tensor::neg() const {
  Tensor r = simple(UnaryOp::Neg, *this, "neg", false);
  trace1("Neg", *this, r);
  return finish(r, *this, "NegBackward", [](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{-g[0]};
  });
}
Tensor operator-(const Tensor& a) { return a.neg(); }

Tensor Tensor::abs() const {
  Tensor r = simple(UnaryOp::Abs, *this, "abs", false);
  trace1("Abs", *this, r);
  return finish(r, *this, "AbsBackward", [s = Saved(*this)](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{g[0] * s.get().sign()};
  });
}

Tensor Tensor::exp() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Exp, x, "exp", true);
  trace1("Exp", x, r);
  return finish(r, x, "ExpBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    return std::vector<Tensor>{g[0] * y.get(n)};
  });
}

Tensor Tensor::log() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Log, x, "log", true);
  trace1("Log", x, r);
  return finish(r, x, "LogBackward", [s = Saved(x)](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{g[0] / s.get()};
  });
}

Tensor Tensor::log1p() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Log1p, x, "log1p", true);
  if (trace::active()) {
    Tensor one = trace::constant(1.0, x.dtype()), sum;
    {
      trace::Pause p;
      sum = x + 1.0;
    }
    trace::record("Add", {x, one}, {sum});
    trace::record("Log", {sum}, {r});
  }
  return finish(r, x, "Log1pBackward", [s = Saved(x)](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{g[0] / (s.get() + 1.0)};
  });
}

Tensor Tensor::sqrt() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Sqrt, x, "sqrt", true);
  trace1("Sqrt", x, r);
  return finish(r, x, "SqrtBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    return std::vector<Tensor>{g[0] / (y.get(n) * 2.0)};
  });
}

Tensor Tensor::rsqrt() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Rsqrt, x, "rsqrt", true);
  if (trace::active()) {
    Tensor s;
    {
      trace::Pause p;
      s = x.sqrt();
    }
    trace::record("Sqrt", {x}, {s});
    trace::record("Reciprocal", {s}, {r});
  }
  return finish(r, x, "RsqrtBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    Tensor v = y.get(n);
    return std::vector<Tensor>{g[0] * v * v * v * -0.5};
  });
}

Tensor Tensor::square() const {
  Tensor r = simple(UnaryOp::Square, *this, "square", false);
  if (trace::active()) trace::record("Mul", {*this, *this}, {r});
  return finish(r, *this, "SquareBackward", [s = Saved(*this)](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{g[0] * s.get() * 2.0};
  });
}

Tensor Tensor::reciprocal() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Reciprocal, x, "reciprocal", true);
  trace1("Reciprocal", x, r);
  return finish(r, x, "ReciprocalBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    Tensor v = y.get(n);
    return std::vector<Tensor>{-g[0] * v * v};
  });
}

Tensor Tensor::sin() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Sin, x, "sin", true);
  trace1("Sin", x, r);
  return finish(r, x, "SinBackward", [s = Saved(x)](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{g[0] * s.get().cos()};
  });
}

Tensor Tensor::cos() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Cos, x, "cos", true);
  trace1("Cos", x, r);
  return finish(r, x, "CosBackward", [s = Saved(x)](const std::vector<Tensor>& g, const FunctionNode&) {
    return std::vector<Tensor>{-g[0] * s.get().sin()};
  });
}

Tensor Tensor::tanh() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Tanh, x, "tanh", true);
  trace1("Tanh", x, r);
  return finish(r, x, "TanhBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    Tensor v = y.get(n);
    return std::vector<Tensor>{grad_of(GradOp::Tanh, g[0], v, {}, [&] { return g[0] * (1.0 - v * v); })};
  });
}

Tensor Tensor::sigmoid() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Sigmoid, x, "sigmoid", true);
  trace1("Sigmoid", x, r);
  return finish(r, x, "SigmoidBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    Tensor v = y.get(n);
    return std::vector<Tensor>{grad_of(GradOp::Sigmoid, g[0], v, {}, [&] { return g[0] * v * (1.0 - v); })};
  });
}

Tensor Tensor::relu() const {
  Tensor r = simple(UnaryOp::Relu, *this, "relu", false);
  trace1("Relu", *this, r);
  return finish(r, *this, "ReluBackward", [y = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
    // From the output: y > 0 exactly where x > 0.
    Tensor v = y.get(n);
    return std::vector<Tensor>{grad_of(GradOp::Relu, g[0], v, {}, [&] { return g[0] * v.gt(0.0).to(v.dtype()); })};
  });
}

Tensor Tensor::erf() const {
  Tensor x = from_int(*this, true);
  Tensor r = simple(UnaryOp::Erf, x, "erf", true);
  trace1("Erf", x, r);
  return finish(r, x, "ErfBackward", [s = Saved(x)](const std::vector<Tensor>& g, const FunctionNode&) {
    Tensor v = s.get();
    return std::vector<Tensor>{
        grad_of(GradOp::Erf, g[0], v, {}, [&] { return g[0] * (v * v).neg().exp() * (2.0 / std::sqrt(kPi)); })};
  });
}

#define HODU_ZERO_GRAD_UNARY(method, op, onnx, label)                                                   \
  Tensor Tensor::method() const {                                                                       \
    Tensor r = simple(UnaryOp::op, *this, #method, false);                                              \
    trace1(onnx, *this, r);                                                                             \
    return finish(r, *this, label, [](const std::vector<Tensor>& g, const FunctionNode&) {              \
      return std::vector<Tensor>{zeros_like(g[0])};                                                     \
    });                                                                                                 \
  }
HODU_ZERO_GRAD_UNARY(sign, Sign, "Sign", "SignBackward")
HODU_ZERO_GRAD_UNARY(floor, Floor, "Floor", "FloorBackward")
HODU_ZERO_GRAD_UNARY(ceil, Ceil, "Ceil", "CeilBackward")
HODU_ZERO_GRAD_UNARY(round, Round, "Round", "RoundBackward")
#undef HODU_ZERO_GRAD_UNARY

Tensor Tensor::pow(double e) const {
  const bool float_result = !kernels::is_float(dtype()) && (std::floor(e) != e || e < 0);
  Tensor x = from_int(*this, float_result);
  Tensor r = simple(UnaryOp::PowScalar, x, "pow", false, {e, 0});
  if (trace::active()) trace::record("Pow", {x, trace::constant(e, x.dtype())}, {r});
  return finish(r, x, "PowBackward", [s = Saved(x), e](const std::vector<Tensor>& g, const FunctionNode&) {
    if (e == 0.0) return std::vector<Tensor>{zeros_like(g[0])};
    Tensor v = s.get();
    return std::vector<Tensor>{g[0] * v.pow(e - 1.0) * e};
  });
}

Tensor Tensor::clamp(double lo, double hi) const {
  HODU_CHECK(!(lo > hi), ErrorCode::InvalidArgument, "clamp: min {} is above max {}", lo, hi);
  Tensor r = simple(UnaryOp::Clamp, *this, "clamp", false, {lo, hi});
  if (trace::active()) {
    const bool lo_set = std::isfinite(lo) || lo > 0, hi_set = std::isfinite(hi) || hi < 0;
    trace::record("Clip", {*this, lo_set ? trace::constant(lo, dtype()) : Tensor(),
                           hi_set ? trace::constant(hi, dtype()) : Tensor()},
                  {r});
  }
  return finish(r, *this, "ClampBackward", [s = Saved(*this), lo, hi](const std::vector<Tensor>& g, const FunctionNode&) {
    Tensor v = s.get();
    return std::vector<Tensor>{grad_of(GradOp::Clamp, g[0], v, {lo, hi},
                                       [&] { return g[0] * logical_and(v.ge(lo), v.le(hi)).to(v.dtype()); })};
  });
}
Tensor Tensor::clamp_min(double lo) const { return clamp(lo, std::numeric_limits<double>::infinity()); }
Tensor Tensor::clamp_max(double hi) const { return clamp(-std::numeric_limits<double>::infinity(), hi); }
Tensor hardtanh(const Tensor& x, double lo, double hi) { return x.clamp(lo, hi); }

Tensor relu(const Tensor& x) { return x.relu(); }
Tensor sigmoid(const Tensor& x) { return x.sigmoid(); }
Tensor tanh(const Tensor& x) { return x.tanh(); }
Tensor exp(const Tensor& x) { return x.exp(); }
Tensor log(const Tensor& x) { return x.log(); }
Tensor sqrt(const Tensor& x) { return x.sqrt(); }
Tensor abs(const Tensor& x) { return x.abs(); }

Tensor gelu(const Tensor& x0, const std::string& approximate) {
  HODU_CHECK(approximate == "none" || approximate == "tanh", ErrorCode::InvalidArgument,
             "gelu: approximate is \"none\" or \"tanh\", not \"{}\"", approximate);
  const bool th = approximate == "tanh";
  Tensor x = from_int(x0, true);
  Tensor r = simple(th ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, "gelu", true);
  trace1("Gelu", x, r, {Attribute::make_string("approximate", approximate)});
  return finish(r, x, "GeluBackward", [s = Saved(x), th](const std::vector<Tensor>& g, const FunctionNode&) {
    Tensor v = s.get();
    return std::vector<Tensor>{grad_of(th ? GradOp::GeluTanh : GradOp::Gelu, g[0], v, {}, [&] {
      if (th) {
        const double c = std::sqrt(2.0 / kPi);
        Tensor inner = (v + v * v * v * 0.044715) * c;
        Tensor t = inner.tanh();
        Tensor dinner = (v * v * (3 * 0.044715) + 1.0) * c;
        return g[0] * ((t + 1.0) * 0.5 + v * 0.5 * (1.0 - t * t) * dinner);
      }
      Tensor cdf = ((v * (1.0 / std::sqrt(2.0))).erf() + 1.0) * 0.5;
      Tensor pdf = (v * v * -0.5).exp() * (1.0 / std::sqrt(2.0 * kPi));
      return g[0] * (cdf + v * pdf);
    })};
  });
}

Tensor silu(const Tensor& x0) {
  Tensor x = from_int(x0, true);
  Tensor r = simple(UnaryOp::Silu, x, "silu", true);
  if (trace::active()) {
    Tensor s;
    {
      trace::Pause p;
      s = x.sigmoid();
    }
    trace::record("Sigmoid", {x}, {s});
    trace::record("Mul", {x, s}, {r});
  }
  return finish(r, x, "SiluBackward", [s = Saved(x)](const std::vector<Tensor>& g, const FunctionNode&) {
    Tensor v = s.get();
    return std::vector<Tensor>{grad_of(GradOp::Silu, g[0], v, {}, [&] {
      Tensor sg = v.sigmoid();
      return g[0] * sg * (v * (1.0 - sg) + 1.0);
    })};
  });
}

Tensor leaky_relu(const Tensor& x0, double slope) {
  Tensor x = from_int(x0, true);
  Tensor r = simple(UnaryOp::LeakyRelu, x, "leaky_relu", true, {slope, 0});
  trace1("LeakyRelu", x, r, {Attribute::make_float("alpha", static_cast<float>(slope))});
  return finish(r, x, "LeakyReluBackward", [s = Saved(x), slope](const std::vector<Tensor>& g, const FunctionNode&) {
    Tensor v = s.get();
    return std::vector<Tensor>{grad_of(GradOp::LeakyRelu, g[0], v, {slope, 0},
                                       [&] { return where(v.gt(0.0), g[0], g[0] * slope); })};
  });
}

Tensor elu(const Tensor& x0, double alpha) {
  Tensor x = from_int(x0, true);
  Tensor r = simple(UnaryOp::Elu, x, "elu", true, {alpha, 0});
  trace1("Elu", x, r, {Attribute::make_float("alpha", static_cast<float>(alpha))});
  return finish(r, x, "EluBackward", [s = Saved(x), alpha](const std::vector<Tensor>& g, const FunctionNode&) {
    Tensor v = s.get();
    return std::vector<Tensor>{grad_of(GradOp::Elu, g[0], v, {alpha, 0},
                                       [&] { return where(v.gt(0.0), g[0], g[0] * v.exp() * alpha); })};
  });
}

Tensor softplus(const Tensor& x0, double beta, double threshold) {
  Tensor x = from_int(x0, true);
  Tensor r = simple(UnaryOp::Softplus, x, "softplus", true, {beta, threshold});
  if (trace::active()) {
    HODU_CHECK(beta == 1.0, ErrorCode::Unsupported, "capture: softplus with beta {} (ONNX Softplus has beta 1)", beta);
    trace1("Softplus", x, r);
  }
  return finish(r, x, "SoftplusBackward",
                [s = Saved(x), beta, threshold](const std::vector<Tensor>& g, const FunctionNode&) {
                  Tensor v = s.get();
                  return std::vector<Tensor>{grad_of(GradOp::Softplus, g[0], v, {beta, threshold}, [&] {
                    return where((v * beta).gt(threshold), g[0], g[0] * (v * beta).sigmoid());
                  })};
                });
}

// ---- conversions and copies -------------------------------------------------

Tensor Tensor::to(DType dt) const {
  const hodu::Tensor& c = core(*this, "to");
  if (c.dtype() == dt) return *this;
  Tensor r = make_tensor(kernels::cast(c, dt));
  if (kernels::is_float(dt) && kernels::is_float(c.dtype()) && needs_grad({this}))
    record("ToBackward", {*this}, {&r}, [from = c.dtype()](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{g[0].to(from)};
    });
  if (trace::active())
    trace::record("Cast", {*this}, {r}, {Attribute::make_int("to", dtype_to_onnx(dt))});
  return r;
}

Tensor Tensor::contiguous() const {
  if (core(*this, "contiguous").is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  const hodu::Tensor& c = core(*this, "clone");
  hodu::Tensor out = kernels::empty(c.dtype(), c.shape());
  kernels::copy_into(out, c);
  Tensor r = make_tensor(std::move(out));
  if (needs_grad({this}))
    record("CloneBackward", {*this}, {&r}, [](const std::vector<Tensor>& g, const FunctionNode&) {
      return std::vector<Tensor>{g[0]};
    });
  if (trace::active()) trace::record("Identity", {*this}, {r});
  return r;
}

namespace {
void refuse_grad_fill(const Tensor& t, const char* name) {
  HODU_CHECK(!(is_grad_enabled() && t.requires_grad()), ErrorCode::InvalidArgument,
             "{}: a tensor that requires grad is overwritten in place while autograd records (wrap it in "
             "NoGradGuard)",
             name);
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  refuse_grad_fill(*this, "fill_");
  kernels::fill(impl()->data, value);
  bump_version(*this);
  if (trace::active()) {
    Tensor v = trace::constant(value, dtype()), r;
    {
      trace::Pause p;
      r = full(shape(), value, dtype());
    }
    trace::record("Expand", {v, trace::ints(shape())}, {r});
    trace::alias(*this, r);
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  core(src, "copy_");
  return apply_inplace(*this, "copy_", {&src}, [&](const Tensor& self) {
    // The new value: src broadcast to this shape in this dtype; self's old value gets no gradient.
    Tensor s = src.dtype() == self.dtype() ? src : src.to(self.dtype());
    Tensor r = s.shape() == self.shape() ? s.clone() : (s + zeros(self.shape(), self.dtype()));
    return r;
  }, [&](hodu::Tensor& dst) {
    kernels::copy_into(dst, core(src));
    return true;
  });
}

Tensor& Tensor::clamp_(double lo, double hi) {
  return apply_inplace(*this, "clamp_", {}, [&](const Tensor& s) { return s.clamp(lo, hi); }, [&](hodu::Tensor& dst) {
    if (dst.dtype() != kernels::compute_dtype(dst.dtype())) return false;
    kernels::unary_into(UnaryOp::Clamp, dst, dst, {lo, hi});
    return true;
  });
}

Tensor& Tensor::relu_() {
  return apply_inplace(*this, "relu_", {}, [&](const Tensor& s) { return s.relu(); }, [&](hodu::Tensor& dst) {
    if (dst.dtype() != kernels::compute_dtype(dst.dtype())) return false;
    kernels::unary_into(UnaryOp::Relu, dst, dst);
    return true;
  });
}

}  // namespace hodu::eager
