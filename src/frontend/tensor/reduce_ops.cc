// Reductions and their gradients.
#include <algorithm>
#include <cmath>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/ops_internal.h"
#include "hodu/autograd.h"

namespace hodu::eager {

Dims reduction_dims(const Dims& dims, int64_t rank, const char* op) {
  Dims out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, rank, op));
  std::sort(out.begin(), out.end());
  HODU_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ErrorCode::InvalidArgument,
             "{}: dim {} appears twice in {}", op, *std::adjacent_find(out.begin(), out.end()), shape_to_string(dims));
  if (rank == 0) out.clear();
  return out;
}

Tensor expand_reduced(const Tensor& g, const Dims& in_shape, const Dims& dims, bool keepdim) {
  Tensor r = g;
  if (!keepdim)
    for (int64_t d : dims) r = r.unsqueeze(d);
  return r.expand(in_shape);
}

namespace {

using kernels::ReduceOp;

const char* onnx_reduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "ReduceSum";
    case ReduceOp::Mean: return "ReduceMean";
    case ReduceOp::Max: return "ReduceMax";
    case ReduceOp::Min: return "ReduceMin";
    case ReduceOp::Prod: return "ReduceProd";
    default: return "";
  }
}

void trace_reduce(ReduceOp op, const Tensor& x, const Tensor& r, const Dims& dims, bool keepdim) {
  if (!trace::active()) return;
  if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) {
    trace::record(op == ReduceOp::ArgMax ? "ArgMax" : "ArgMin", {x}, {r},
                  {Attribute::make_int("axis", dims[0]), Attribute::make_int("keepdims", keepdim)});
    return;
  }
  if (dims.empty()) {  // a 0-d input: the value itself
    trace::record("Identity", {x}, {r});
    return;
  }
  trace::record(onnx_reduce(op), {x, trace::ints(dims)}, {r}, {Attribute::make_int("keepdims", keepdim)});
}

Tensor reduce_op(ReduceOp op, const Tensor& x0, const Dims& dims_in, bool keepdim, const char* name) {
  const hodu::Tensor& c = core(x0, name);
  const Dims dims = reduction_dims(dims_in, c.rank(), name);
  Tensor x = x0;
  DType rt = c.dtype();
  if (op == ReduceOp::Sum && !kernels::is_float(rt)) rt = DType::I64;
  if (op == ReduceOp::Mean && !kernels::is_float(rt)) rt = DType::F32;
  if (rt != c.dtype()) x = x0.to(rt);
  const DType ct = kernels::compute_dtype(rt);
  hodu::Tensor out = kernels::reduce(op, kernels::cast(core(x), ct), dims, keepdim);
  if (out.dtype() == ct && ct != rt) out = kernels::cast(out, rt);
  Tensor r = make_tensor(std::move(out));
  if (needs_grad({&x})) {
    const Dims in = x.shape();
    int64_t count = 1;
    for (int64_t d : dims) count *= in[d];
    switch (op) {
      case ReduceOp::Sum:
        record("SumBackward", {x}, {&r}, [in, dims, keepdim](const std::vector<Tensor>& g, const FunctionNode&) {
          return std::vector<Tensor>{expand_reduced(g[0], in, dims, keepdim)};
        });
        break;
      case ReduceOp::Mean:
        record("MeanBackward", {x}, {&r}, [in, dims, keepdim, count](const std::vector<Tensor>& g, const FunctionNode&) {
          return std::vector<Tensor>{expand_reduced(g[0] / static_cast<double>(count), in, dims, keepdim)};
        });
        break;
      case ReduceOp::Max:
      case ReduceOp::Min:
        // Ties share the gradient evenly (PyTorch's amax/amin and max()/min()).
        record(op == ReduceOp::Max ? "AmaxBackward" : "AminBackward", {x}, {&r},
               [sx = Saved(x), sy = Saved(r, true), in, dims, keepdim](const std::vector<Tensor>& g, const FunctionNode& n) {
                 Tensor xv = sx.get();
                 Tensor mask = xv.eq(expand_reduced(sy.get(n), in, dims, keepdim)).to(xv.dtype());
                 Tensor count = expand_reduced(mask.sum(dims, keepdim), in, dims, keepdim);
                 return std::vector<Tensor>{expand_reduced(g[0], in, dims, keepdim) * mask / count};
               });
        break;
      case ReduceOp::Prod:
        record("ProdBackward", {x}, {&r},
               [sx = Saved(x), sy = Saved(r, true), in, dims, keepdim](const std::vector<Tensor>& g, const FunctionNode& n) {
                 Tensor xv = sx.get();
                 Tensor zero = xv.eq(0.0);
                 Tensor nz_count = expand_reduced(zero.to(DType::I64).sum(dims, keepdim), in, dims, keepdim);
                 Tensor prod_nz = expand_reduced(where(zero, ones_like(xv), xv).prod(dims.empty() ? 0 : dims[0], keepdim),
                                                 in, dims, keepdim);
                 Tensor y = expand_reduced(sy.get(n), in, dims, keepdim);
                 Tensor d = where(nz_count.eq(0.0), y / xv,
                                  where(logical_and(nz_count.eq(1.0), zero), prod_nz, zeros_like(xv)));
                 return std::vector<Tensor>{expand_reduced(g[0], in, dims, keepdim) * d};
               });
        break;
      default: break;
    }
  }
  trace_reduce(op, x, r, dims, keepdim);
  return r;
}

}  // namespace

Tensor Tensor::sum() const { return reduce_op(ReduceOp::Sum, *this, {}, false, "sum"); }
Tensor Tensor::sum(const Dims& d, bool k) const { return reduce_op(ReduceOp::Sum, *this, d, k, "sum"); }
Tensor Tensor::mean() const { return reduce_op(ReduceOp::Mean, *this, {}, false, "mean"); }
Tensor Tensor::mean(const Dims& d, bool k) const { return reduce_op(ReduceOp::Mean, *this, d, k, "mean"); }
Tensor Tensor::amax(const Dims& d, bool k) const { return reduce_op(ReduceOp::Max, *this, d, k, "amax"); }
Tensor Tensor::amin(const Dims& d, bool k) const { return reduce_op(ReduceOp::Min, *this, d, k, "amin"); }
Tensor Tensor::max() const { return reduce_op(ReduceOp::Max, *this, {}, false, "max"); }
Tensor Tensor::min() const { return reduce_op(ReduceOp::Min, *this, {}, false, "min"); }
Tensor Tensor::prod(int64_t d, bool k) const { return reduce_op(ReduceOp::Prod, *this, {d}, k, "prod"); }

Tensor Tensor::argmax(int64_t d, bool k) const {
  const Dims dims = reduction_dims({d}, dim(), "argmax");
  Tensor r = make_tensor(kernels::reduce(ReduceOp::ArgMax, kernels::cast(core(*this, "argmax"), kernels::compute_dtype(dtype())), dims, k));
  trace_reduce(ReduceOp::ArgMax, *this, r, dims, k);
  return r;
}

Tensor Tensor::argmin(int64_t d, bool k) const {
  const Dims dims = reduction_dims({d}, dim(), "argmin");
  Tensor r = make_tensor(kernels::reduce(ReduceOp::ArgMin, kernels::cast(core(*this, "argmin"), kernels::compute_dtype(dtype())), dims, k));
  trace_reduce(ReduceOp::ArgMin, *this, r, dims, k);
  return r;
}

namespace {
std::pair<Tensor, Tensor> max_min_dim(const Tensor& x, int64_t d, bool keepdim, bool mx) {
  const char* name = mx ? "max" : "min";
  const Dims dims = reduction_dims({d}, x.dim(), name);
  const DType ct = kernels::compute_dtype(x.dtype());
  const hodu::Tensor xc = kernels::cast(core(x, name), ct);
  Tensor idx = make_tensor(kernels::reduce(mx ? ReduceOp::ArgMax : ReduceOp::ArgMin, xc, dims, keepdim));
  hodu::Tensor v = kernels::reduce(mx ? ReduceOp::Max : ReduceOp::Min, xc, dims, keepdim);
  Tensor values = make_tensor(v.dtype() == x.dtype() ? v : kernels::cast(v, x.dtype()));
  if (needs_grad({&x})) {
    // The gradient goes to the element the index names.
    record(mx ? "MaxBackward" : "MinBackward", {x}, {&values},
           [in = x.shape(), dd = dims.empty() ? 0 : dims[0], keepdim, si = Saved(idx)](const std::vector<Tensor>& g,
                                                                                      const FunctionNode&) {
             Tensor gi = keepdim ? g[0] : g[0].unsqueeze(dd);
             Tensor ii = keepdim ? si.get() : si.get().unsqueeze(dd);
             return std::vector<Tensor>{scatter_add(zeros(in, g[0].dtype()), dd, ii, gi)};
           });
  }
  if (trace::active()) {
    trace_reduce(mx ? ReduceOp::Max : ReduceOp::Min, x, values, dims, keepdim);
    trace_reduce(mx ? ReduceOp::ArgMax : ReduceOp::ArgMin, x, idx, dims, keepdim);
  }
  return {values, idx};
}
}  // namespace

std::pair<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return max_min_dim(*this, d, k, true); }
std::pair<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return max_min_dim(*this, d, k, false); }

Tensor Tensor::var(const Dims& dims_in, bool unbiased, bool keepdim) const {
  const Dims dims = reduction_dims(dims_in, dim(), "var");
  int64_t n = 1;
  for (int64_t d : dims) n *= shape()[d];
  Tensor x = kernels::is_float(dtype()) ? *this : to(DType::F32);
  Tensor centered = x - x.mean(dims, true);
  const double denom = static_cast<double>(n - (unbiased ? 1 : 0));
  return (centered * centered).sum(dims, keepdim) / denom;
}

Tensor Tensor::std(const Dims& dims, bool unbiased, bool keepdim) const { return var(dims, unbiased, keepdim).sqrt(); }

Tensor Tensor::logsumexp(const Dims& dims_in, bool keepdim) const {
  const Dims dims = reduction_dims(dims_in, dim(), "logsumexp");
  Tensor x = kernels::is_float(dtype()) ? *this : to(DType::F32);
  Tensor m = x.amax(dims, true).detach();
  m = where(m.abs().lt(std::numeric_limits<double>::infinity()), m, zeros_like(m));
  Tensor r = (x - m).exp().sum(dims, true).log() + m;
  if (!keepdim)
    for (size_t i = dims.size(); i-- > 0;) r = r.squeeze(dims[i]);
  return r;
}

Tensor Tensor::norm(double p) const {
  Tensor x = kernels::is_float(dtype()) ? *this : to(DType::F32);
  if (p == 2.0) {
    // Its own node: through sqrt the gradient at x = 0 would be 0 * inf = nan; PyTorch's is 0.
    Tensor r;
    {
      NoGradGuard guard;
      r = (x * x).sum().sqrt();
    }
    if (needs_grad({&x}))
      record("NormBackward", {x}, {&r}, [sx = Saved(x), sy = Saved(r, true)](const std::vector<Tensor>& g, const FunctionNode& n) {
        Tensor y = sy.get(n);
        return std::vector<Tensor>{sx.get() * where(y.eq(0.0), zeros_like(y), g[0] / y)};
      });
    return r;
  }
  if (p == 1.0) return x.abs().sum();
  if (std::isinf(p)) return p > 0 ? x.abs().max() : x.abs().min();
  HODU_CHECK(p > 0, ErrorCode::InvalidArgument, "norm: p = {}", p);
  return x.abs().pow(p).sum().pow(1.0 / p);
}

Tensor Tensor::any() const {
  Tensor r = make_tensor(kernels::reduce(ReduceOp::Any, core(*this, "any"), reduction_dims({}, dim(), "any"), false));
  return r;
}

Tensor Tensor::all() const {
  Tensor r = make_tensor(kernels::reduce(ReduceOp::All, core(*this, "all"), reduction_dims({}, dim(), "all"), false));
  return r;
}

}  // namespace hodu::eager
