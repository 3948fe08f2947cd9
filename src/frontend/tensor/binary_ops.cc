// Binary ops with broadcasting and type promotion, their gradients, where,
// comparisons, and the in-place arithmetic.
#include <cmath>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "frontend/tensor/inplace.h"
#include "kernels/cpu/tensor/kernels.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {

using kernels::BinaryOp;

int category(DType d) { return d == DType::Bool ? 0 : kernels::is_float(d) ? 2 : 1; }

DType promote_ints(DType a, DType b) {
  if (a == b) return a;
  const int ba = dtype_bits(a), bb = dtype_bits(b);
  const bool sa = dtype_is_signed(a), sb = dtype_is_signed(b);
  if (sa == sb) return ba >= bb ? a : b;
  // Signed with unsigned: a signed type wider than the unsigned one.
  const DType s = sa ? a : b, u = sa ? b : a;
  const int need = std::max(dtype_bits(s), dtype_bits(u) * 2);
  return need <= 16 ? DType::I16 : need <= 32 ? DType::I32 : DType::I64;
}

DType promote_floats(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::F64 || b == DType::F64) return DType::F64;
  return DType::F32;  // f32 with anything narrower; f16 with bf16
}

const char* onnx_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "Add";
    case BinaryOp::Sub: return "Sub";
    case BinaryOp::Mul: return "Mul";
    case BinaryOp::Div: return "Div";
    case BinaryOp::Pow: return "Pow";
    case BinaryOp::Max: return "Max";
    case BinaryOp::Min: return "Min";
    case BinaryOp::Eq: return "Equal";
    case BinaryOp::Ne: return "Equal";  // + Not
    case BinaryOp::Lt: return "Less";
    case BinaryOp::Le: return "LessOrEqual";
    case BinaryOp::Gt: return "Greater";
    case BinaryOp::Ge: return "GreaterOrEqual";
    case BinaryOp::And: return "And";
    case BinaryOp::Or: return "Or";
  }
  return "";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Max: return "maximum";
    case BinaryOp::Min: return "minimum";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
    case BinaryOp::And: return "logical_and";
    case BinaryOp::Or: return "logical_or";
  }
  return "";
}

// The gradient for input `t`: broadcast dims summed away, in t's dtype.
Tensor fit(const Tensor& g, const Tensor& t) {
  Tensor r = sum_to(g, t.shape());
  return r.dtype() == t.dtype() ? r : r.to(t.dtype());
}

void record_grad(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (op) {
    case BinaryOp::Add:
      record("AddBackward", {a, b}, {&out}, [a_ = a.shape(), b_ = b.shape(), ad = a.dtype(), bd = b.dtype()](
                                                const std::vector<Tensor>& g, const FunctionNode& n) {
        std::vector<Tensor> r(2);
        if (n.needs_input_grad(0)) r[0] = sum_to(g[0], a_).to(ad);
        if (n.needs_input_grad(1)) r[1] = sum_to(g[0], b_).to(bd);
        return r;
      });
      return;
    case BinaryOp::Sub:
      record("SubBackward", {a, b}, {&out}, [a_ = a.shape(), b_ = b.shape(), ad = a.dtype(), bd = b.dtype()](
                                                const std::vector<Tensor>& g, const FunctionNode& n) {
        std::vector<Tensor> r(2);
        if (n.needs_input_grad(0)) r[0] = sum_to(g[0], a_).to(ad);
        if (n.needs_input_grad(1)) r[1] = sum_to(-g[0], b_).to(bd);
        return r;
      });
      return;
    case BinaryOp::Mul:
      record("MulBackward", {a, b}, {&out},
             [sa = Saved(a), sb = Saved(b)](const std::vector<Tensor>& g, const FunctionNode& n) {
               Tensor a = sa.get(), b = sb.get();
               std::vector<Tensor> r(2);
               if (n.needs_input_grad(0)) r[0] = fit(g[0] * b, a);
               if (n.needs_input_grad(1)) r[1] = fit(g[0] * a, b);
               return r;
             });
      return;
    case BinaryOp::Div:
      record("DivBackward", {a, b}, {&out},
             [sa = Saved(a), sb = Saved(b)](const std::vector<Tensor>& g, const FunctionNode& n) {
               Tensor a = sa.get(), b = sb.get();
               std::vector<Tensor> r(2);
               if (n.needs_input_grad(0)) r[0] = fit(g[0] / b, a);
               if (n.needs_input_grad(1)) r[1] = fit(-g[0] * a / (b * b), b);
               return r;
             });
      return;
    case BinaryOp::Pow:
      record("PowBackward", {a, b}, {&out},
             [sa = Saved(a), sb = Saved(b), so = Saved(out, true)](const std::vector<Tensor>& g,
                                                                   const FunctionNode& n) {
               Tensor a = sa.get(), b = sb.get();
               std::vector<Tensor> r(2);
               if (n.needs_input_grad(0)) {
                 // b * a^(b-1), 0 where b == 0 (as PyTorch).
                 Tensor d = where(b.eq(0.0), zeros_like(a), b * pow(a, b - 1.0));
                 r[0] = fit(g[0] * d, a);
               }
               if (n.needs_input_grad(1)) {
                 // a^b * log(a); 0 where a == 0 and b >= 0.
                 Tensor d = so.get(n) * a.log();
                 d = where(logical_and(a.eq(0.0), b.ge(0.0)), zeros_like(d), d);
                 r[1] = fit(g[0] * d, b);
               }
               return r;
             });
      return;
    case BinaryOp::Max:
    case BinaryOp::Min: {
      const bool mx = op == BinaryOp::Max;
      record(mx ? "MaximumBackward" : "MinimumBackward", {a, b}, {&out},
             [sa = Saved(a), sb = Saved(b), mx](const std::vector<Tensor>& g, const FunctionNode& n) {
               Tensor a = sa.get(), b = sb.get();
               // Ties split the gradient evenly (PyTorch 1.13).
               Tensor tie = a.eq(b);
               Tensor half = where(tie, g[0] * 0.5, g[0]);
               std::vector<Tensor> r(2);
               if (n.needs_input_grad(0)) r[0] = fit(where(mx ? a.lt(b) : a.gt(b), zeros_like(half), half), a);
               if (n.needs_input_grad(1)) r[1] = fit(where(mx ? a.gt(b) : a.lt(b), zeros_like(half), half), b);
               return r;
             });
      return;
    }
    default: return;
  }
}

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  core(a, name);
  core(b, name);
  DType rt = result_type(a, b);
  const bool logical = op == BinaryOp::And || op == BinaryOp::Or;
  if (logical) rt = DType::Bool;
  if (op == BinaryOp::Div && !kernels::is_float(rt)) rt = DType::F32;  // true division, as PyTorch
  if (!kernels::is_comparison(op))
    HODU_CHECK(rt != DType::Bool || logical, ErrorCode::InvalidArgument, "{}: arithmetic on two bool tensors", name);
  // Inputs of another dtype are converted through to() (recorded, so a capture has its Cast).
  Tensor ax = logical || a.dtype() == rt ? a : a.to(rt);
  Tensor bx = logical || b.dtype() == rt ? b : b.to(rt);
  const DType ct = logical ? DType::I64 : kernels::compute_dtype(rt);
  hodu::Tensor out = kernels::binary(op, kernels::cast(core(ax), ct), kernels::cast(core(bx), ct), name);
  if (!kernels::is_comparison(op) && out.dtype() != rt) out = kernels::cast(out, rt);
  Tensor r = make_tensor(std::move(out));
  if (!kernels::is_comparison(op) && needs_grad({&ax, &bx})) record_grad(op, ax, bx, r);
  if (trace::active()) {
    if (op == BinaryOp::Ne) {
      Tensor eq;
      {
        trace::Pause p;
        eq = ax.eq(bx);
      }
      trace::record("Equal", {ax, bx}, {eq});
      trace::record("Not", {eq}, {r});
    } else {
      trace::record(onnx_name(op), {ax, bx}, {r});
    }
  }
  return r;
}

// The dtype of a scalar operand next to tensor t (PyTorch's rules for Python numbers).
DType scalar_dtype(const Tensor& t, double s) {
  const DType d = t.dtype();
  if (kernels::is_float(d)) return d;
  const bool integral = std::floor(s) == s && std::isfinite(s);
  if (!integral) return DType::F32;
  return d == DType::Bool ? DType::I64 : d;
}

Tensor scalar_op(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  core(a, op_name(op));
  Tensor b = scalar_tensor(s, scalar_dtype(a, s));
  return scalar_first ? binary_op(op, b, a) : binary_op(op, a, b);
}

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  const DType da = core(a, "result_type").dtype(), db = core(b, "result_type").dtype();
  if (da == db) return da;
  const int ca = category(da), cb = category(db);
  if (ca != cb) return ca > cb ? da : db;
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za != zb) return za ? db : da;  // a 0-dim operand does not widen its own kind
  return ca == 2 ? promote_floats(da, db) : ca == 1 ? promote_ints(da, db) : DType::Bool;
}

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  return alpha == 1.0 ? binary_op(BinaryOp::Add, a, b) : binary_op(BinaryOp::Add, a, b * alpha);
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  return alpha == 1.0 ? binary_op(BinaryOp::Sub, a, b) : binary_op(BinaryOp::Sub, a, b * alpha);
}
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Max, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Min, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::And, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Or, a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Add, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Sub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Mul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Div, a, b); }
Tensor operator+(const Tensor& a, double b) { return scalar_op(BinaryOp::Add, a, b, false); }
Tensor operator-(const Tensor& a, double b) { return scalar_op(BinaryOp::Sub, a, b, false); }
Tensor operator*(const Tensor& a, double b) { return scalar_op(BinaryOp::Mul, a, b, false); }
Tensor operator/(const Tensor& a, double b) { return scalar_op(BinaryOp::Div, a, b, false); }
Tensor operator+(double a, const Tensor& b) { return scalar_op(BinaryOp::Add, b, a, true); }
Tensor operator-(double a, const Tensor& b) { return scalar_op(BinaryOp::Sub, b, a, true); }
Tensor operator*(double a, const Tensor& b) { return scalar_op(BinaryOp::Mul, b, a, true); }
Tensor operator/(double a, const Tensor& b) { return scalar_op(BinaryOp::Div, b, a, true); }

Tensor Tensor::pow(const Tensor& e) const { return binary_op(BinaryOp::Pow, *this, e); }
Tensor Tensor::eq(const Tensor& o) const { return binary_op(BinaryOp::Eq, *this, o); }
Tensor Tensor::ne(const Tensor& o) const { return binary_op(BinaryOp::Ne, *this, o); }
Tensor Tensor::lt(const Tensor& o) const { return binary_op(BinaryOp::Lt, *this, o); }
Tensor Tensor::le(const Tensor& o) const { return binary_op(BinaryOp::Le, *this, o); }
Tensor Tensor::gt(const Tensor& o) const { return binary_op(BinaryOp::Gt, *this, o); }
Tensor Tensor::ge(const Tensor& o) const { return binary_op(BinaryOp::Ge, *this, o); }
Tensor Tensor::eq(double o) const { return scalar_op(BinaryOp::Eq, *this, o, false); }
Tensor Tensor::ne(double o) const { return scalar_op(BinaryOp::Ne, *this, o, false); }
Tensor Tensor::lt(double o) const { return scalar_op(BinaryOp::Lt, *this, o, false); }
Tensor Tensor::le(double o) const { return scalar_op(BinaryOp::Le, *this, o, false); }
Tensor Tensor::gt(double o) const { return scalar_op(BinaryOp::Gt, *this, o, false); }
Tensor Tensor::ge(double o) const { return scalar_op(BinaryOp::Ge, *this, o, false); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const hodu::Tensor& cc = core(cond, "where");
  HODU_CHECK(cc.dtype() == DType::Bool, ErrorCode::InvalidArgument, "where: the condition is {}, not bool",
             dtype_name(cc.dtype()));
  const DType rt = result_type(a, b);
  Tensor ax = a.dtype() == rt ? a : a.to(rt), bx = b.dtype() == rt ? b : b.to(rt);
  Tensor r = make_tensor(kernels::where(cc, core(ax), core(bx)));
  if (needs_grad({&ax, &bx})) {
    record("WhereBackward", {ax, bx}, {&r},
           [sc = Saved(cond), a_ = ax.shape(), b_ = bx.shape()](const std::vector<Tensor>& g, const FunctionNode& n) {
             Tensor c = sc.get(), z = zeros({}, g[0].dtype());
             std::vector<Tensor> out(2);
             if (n.needs_input_grad(0)) out[0] = sum_to(where(c, g[0], z), a_);
             if (n.needs_input_grad(1)) out[1] = sum_to(where(c, z, g[0]), b_);
             return out;
           });
  }
  if (trace::active()) trace::record("Where", {cond, ax, bx}, {r});
  return r;
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar_tensor(b, scalar_dtype(a, b)));
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  return where(mask, scalar_tensor(value, scalar_dtype(*this, value)), *this);
}

Tensor Tensor::logical_not() const {
  const hodu::Tensor& c = core(*this, "logical_not");
  hodu::Tensor b = c.dtype() == DType::Bool ? c : kernels::binary(BinaryOp::Ne, kernels::cast(c, kernels::compute_dtype(c.dtype())), kernels::cast(core(zeros({}, c.dtype())), kernels::compute_dtype(c.dtype())), "logical_not");
  Tensor r = make_tensor(kernels::unary(kernels::UnaryOp::Not, kernels::cast(b, DType::I64)));
  r = make_tensor(kernels::cast(core(r), DType::Bool));
  if (trace::active()) trace::record("Not", {*this}, {r});
  return r;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  NoGradGuard guard;
  trace::Pause pause;
  Tensor x = a.to(DType::F64), y = b.to(DType::F64);
  Tensor diff = (x - y).abs();
  Tensor tol = y.abs() * rtol + atol;
  // NaN never matches.
  return diff.le(tol).all().item() != 0.0;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.shape() != b.shape()) return false;
  NoGradGuard guard;
  trace::Pause pause;
  return a.eq(b).all().item() != 0.0;
}

// ---- in-place arithmetic ---------------------------------------------------

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  return inplace_binary(*this, BinaryOp::Add, alpha == 1.0 ? o : o * alpha, "add_");
}
Tensor& Tensor::sub_(const Tensor& o, double alpha) {
  return inplace_binary(*this, BinaryOp::Sub, alpha == 1.0 ? o : o * alpha, "sub_");
}
Tensor& Tensor::mul_(const Tensor& o) { return inplace_binary(*this, BinaryOp::Mul, o, "mul_"); }
Tensor& Tensor::div_(const Tensor& o) { return inplace_binary(*this, BinaryOp::Div, o, "div_"); }
Tensor& Tensor::add_(double o) { return inplace_binary(*this, BinaryOp::Add, scalar_tensor(o, scalar_dtype(*this, o)), "add_"); }
Tensor& Tensor::sub_(double o) { return inplace_binary(*this, BinaryOp::Sub, scalar_tensor(o, scalar_dtype(*this, o)), "sub_"); }
Tensor& Tensor::mul_(double o) { return inplace_binary(*this, BinaryOp::Mul, scalar_tensor(o, scalar_dtype(*this, o)), "mul_"); }
Tensor& Tensor::div_(double o) { return inplace_binary(*this, BinaryOp::Div, scalar_tensor(o, scalar_dtype(*this, o)), "div_"); }

Tensor& inplace_binary(Tensor& self, BinaryOp op, const Tensor& other, const char* name) {
  return apply_inplace(self, name, {&other}, [&](const Tensor& s) { return binary_op(op, s, other); },
                       [&](hodu::Tensor& dst) -> bool {
                         // Direct kernel into the storage when the dtypes agree with the compute dtype.
                         const hodu::Tensor& oc = core(other, name);
                         if (dst.dtype() != kernels::compute_dtype(dst.dtype()) || oc.dtype() != dst.dtype())
                           return false;
                         if (op == BinaryOp::Div && !kernels::is_float(dst.dtype())) return false;
                         kernels::binary_into(op, dst, dst, oc, name);
                         return true;
                       });
}

}  // namespace hodu::eager
