// Neural-network ops: matmul and linear, convolution, pooling, softmax,
// layer and batch normalization, with their gradients.
#include <algorithm>
#include <cmath>

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "frontend/tensor/ops_internal.h"
#include "kernels/cpu/tensor/kernels.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {

// Float inputs in one dtype for the float-only ops.
DType float_type(std::initializer_list<const Tensor*> ts, const char* op) {
  DType dt = DType::Undefined;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    const DType d = core(*t, op).dtype();
    HODU_CHECK(kernels::is_float(d), ErrorCode::InvalidArgument, "{}: a {} input (floating-point tensors only)", op,
               dtype_name(d));
    HODU_CHECK(dt == DType::Undefined || dt == d, ErrorCode::InvalidArgument,
               "{}: inputs of {} and {} (convert one with to())", op, dtype_name(dt), dtype_name(d));
    dt = d;
  }
  return dt;
}

// The core tensor in the compute dtype, row-major.
hodu::Tensor prep(const Tensor& t) {
  const hodu::Tensor& c = core(t);
  return kernels::contiguous(kernels::cast(c, kernels::compute_dtype(c.dtype())));
}
const hodu::Tensor* opt(const Tensor& t, hodu::Tensor& holder) {
  if (!t.defined()) return nullptr;
  holder = prep(t);
  return &holder;
}
Tensor result(hodu::Tensor t, DType dt) { return make_tensor(t.dtype() == dt ? std::move(t) : kernels::cast(t, dt)); }

// The product of two rank >= 2 tensors and its gradients.
Tensor matmul2(const Tensor& a, const Tensor& b) {
  const DType ct = kernels::compute_dtype(a.dtype());
  Tensor r = result(kernels::matmul(kernels::cast(core(a), ct), kernels::cast(core(b), ct)), a.dtype());
  if (needs_grad({&a, &b}))
    record("MmBackward", {a, b}, {&r}, [sa = Saved(a), sb = Saved(b)](const std::vector<Tensor>& g, const FunctionNode& n) {
      Tensor a = sa.get(), b = sb.get();
      std::vector<Tensor> out(2);
      if (n.needs_input_grad(0)) out[0] = sum_to(matmul(g[0], b.transpose(-1, -2)), a.shape());
      if (n.needs_input_grad(1)) {
        if (b.dim() == 2 && a.dim() > 2) {
          // A weight shared over a batch: one product over the flattened rows.
          Tensor a2 = a.reshape({-1, a.size(-1)}), g2 = g[0].reshape({-1, g[0].size(-1)});
          out[1] = matmul(a2.t(), g2);
        } else {
          out[1] = sum_to(matmul(a.transpose(-1, -2), g[0]), b.shape());
        }
      }
      return out;
    });
  return r;
}

std::vector<int64_t> pair(const Dims& v, const char* what, const char* op) {
  HODU_CHECK(v.size() == 1 || v.size() == 2, ErrorCode::InvalidArgument, "{}: {} {} (give 1 or 2 values)", op, what,
             shape_to_string(v));
  return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const hodu::Tensor& ac = core(a, "matmul");
  const hodu::Tensor& bc = core(b, "matmul");
  HODU_CHECK(ac.rank() >= 1 && bc.rank() >= 1, ErrorCode::InvalidArgument,
             "matmul: both operands need at least one dim (got {} and {})", shape_to_string(ac.shape()),
             shape_to_string(bc.shape()));
  const DType rt = result_type(a, b);
  HODU_CHECK(rt != DType::Bool, ErrorCode::InvalidArgument, "matmul of bool tensors");
  Tensor x = a.dtype() == rt ? a : a.to(rt), y = b.dtype() == rt ? b : b.to(rt);
  Tensor r;
  {
    trace::Pause pause;
    if (ac.rank() == 1 && bc.rank() == 1) {
      HODU_CHECK(ac.numel() == bc.numel(), ErrorCode::InvalidArgument, "matmul: vectors of {} and {} elements",
                 ac.numel(), bc.numel());
      r = matmul2(x.unsqueeze(0), y.unsqueeze(1)).reshape({});
    } else if (ac.rank() == 1) {
      r = matmul2(x.unsqueeze(0), y).squeeze(-2);
    } else if (bc.rank() == 1) {
      r = matmul2(x, y.unsqueeze(1)).squeeze(-1);
    } else {
      r = matmul2(x, y);
    }
  }
  if (trace::active()) trace::record("MatMul", {x, y}, {r});
  return r;
}

Tensor Tensor::matmul(const Tensor& o) const { return eager::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const {
  HODU_CHECK(dim() == 2 && o.dim() == 2, ErrorCode::InvalidArgument, "mm: {} and {} are not both 2-d",
             shape_to_string(shape()), shape_to_string(o.shape()));
  return eager::matmul(*this, o);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const DType dt = float_type({&x, &w, &b}, "linear");
  const hodu::Tensor& xc = core(x);
  const hodu::Tensor& wc = core(w);
  HODU_CHECK(wc.rank() == 2 && xc.rank() >= 1 && xc.shape().back() == wc.shape()[1], ErrorCode::InvalidArgument,
             "linear: input {} and weight {} (weight is [out_features, in_features = the input's last dim])",
             shape_to_string(xc.shape()), shape_to_string(wc.shape()));
  if (b.defined())
    HODU_CHECK(core(b).rank() == 1 && core(b).shape()[0] == wc.shape()[0], ErrorCode::InvalidArgument,
               "linear: bias {} for weight {}", shape_to_string(core(b).shape()), shape_to_string(wc.shape()));
  const DType ct = kernels::compute_dtype(dt);
  const int64_t K = wc.shape()[1], N = wc.shape()[0];
  hodu::Tensor x2 = kernels::cast(xc, ct);
  x2 = x2.rank() == 2 ? x2 : kernels::contiguous(x2).reshape({xc.numel() / std::max<int64_t>(K, 1), K});
  hodu::Tensor bh;
  const hodu::Tensor* bp = opt(b, bh);
  hodu::Tensor y = kernels::matmul(x2, kernels::cast(wc, ct).permute({1, 0}), bp);
  Dims ys = xc.shape();
  ys.back() = N;
  Tensor r = result(y.reshape(ys), dt);
  if (needs_grad({&x, &w, &b}))
    record("LinearBackward", {x, w, b}, {&r}, [sx = Saved(x), sw = Saved(w)](const std::vector<Tensor>& g,
                                                                            const FunctionNode& n) {
      Tensor x = sx.get(), w = sw.get();
      Tensor g2 = g[0].reshape({-1, g[0].size(-1)});
      std::vector<Tensor> out(3);
      if (n.needs_input_grad(0)) out[0] = matmul(g[0], w);
      if (n.needs_input_grad(1)) out[1] = matmul(g2.t(), x.reshape({-1, x.size(-1)}));
      if (n.needs_input_grad(2)) out[2] = g2.sum({0});
      return out;
    });
  if (trace::active()) {
    if (xc.rank() == 2 && b.defined()) {
      trace::record("Gemm", {x, w, b}, {r}, {Attribute::make_int("transB", 1)});
    } else {
      Tensor wt, prod;
      {
        trace::Pause p;
        NoGradGuard guard;
        wt = w.t();
        prod = b.defined() ? eager::matmul(x, wt) : r;
      }
      trace::record("Transpose", {w}, {wt}, {Attribute::make_ints("perm", {1, 0})});
      trace::record("MatMul", {x, wt}, {prod});
      if (b.defined()) trace::record("Add", {prod, b}, {r});
    }
  }
  return r;
}

namespace {

Tensor conv_impl(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvParams& p, const char* op) {
  const DType dt = float_type({&x, &w, &b}, op);
  const hodu::Tensor& xc = core(x);
  const hodu::Tensor& wc = core(w);
  HODU_CHECK(xc.rank() == 4 && wc.rank() == 4, ErrorCode::InvalidArgument,
             "{}: input {} and weight {} (input [N, C, H, W], weight [O, C / groups, kH, kW])", op,
             shape_to_string(xc.shape()), shape_to_string(wc.shape()));
  HODU_CHECK(p.groups >= 1 && xc.shape()[1] == wc.shape()[1] * p.groups && wc.shape()[0] % p.groups == 0,
             ErrorCode::InvalidArgument,
             "{}: input {} has {} channels; weight {} with {} groups wants {} (and out channels divisible by groups)",
             op, shape_to_string(xc.shape()), xc.shape()[1], shape_to_string(wc.shape()), p.groups,
             wc.shape()[1] * p.groups);
  for (int i = 0; i < 2; ++i)
    HODU_CHECK(p.stride[i] > 0 && p.dilation[i] > 0 && p.padding[i] >= 0, ErrorCode::InvalidArgument,
               "{}: stride {}, dilation {} must be positive and padding {} not negative", op,
               shape_to_string(p.stride), shape_to_string(p.dilation), shape_to_string(p.padding));
  if (b.defined())
    HODU_CHECK(core(b).rank() == 1 && core(b).shape()[0] == wc.shape()[0], ErrorCode::InvalidArgument,
               "{}: bias {} for {} output channels", op, shape_to_string(core(b).shape()), wc.shape()[0]);
  hodu::Tensor bh;
  hodu::Tensor y = kernels::conv2d(prep(x), prep(w), opt(b, bh), p);
  Tensor r = result(std::move(y), dt);
  if (needs_grad({&x, &w, &b}))
    record("ConvolutionBackward", {x, w, b}, {&r}, [sx = Saved(x), sw = Saved(w), p](const std::vector<Tensor>& g,
                                                                                     const FunctionNode& n) {
      Tensor x = sx.get(), w = sw.get();
      std::vector<Tensor> out(3);
      if (is_grad_enabled()) {
        // create_graph: the gradients as differentiable ops (input: a transposed convolution
        // written as the convolution's own vector-Jacobian product is not available; refuse).
        fail(ErrorCode::Unsupported, "create_graph through conv2d (second derivatives of convolutions)");
      }
      const DType dt = x.dtype();
      hodu::Tensor gc = prep(g[0]);
      if (n.needs_input_grad(0)) out[0] = result(kernels::conv2d_backward_input(gc, prep(w), x.shape(), p), dt);
      if (n.needs_input_grad(1) || n.needs_input_grad(2)) {
        hodu::Tensor dw, db;
        kernels::conv2d_backward_weight(gc, prep(x), w.shape(), p, n.needs_input_grad(2), dw, db);
        if (n.needs_input_grad(1)) out[1] = result(dw, dt);
        if (n.needs_input_grad(2)) out[2] = result(db, dt);
      }
      return out;
    });
  return r;
}

void trace_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r, const Dims& kernel, const Dims& stride,
                const Dims& padding, const Dims& dilation, int64_t groups) {
  if (!trace::active()) return;
  Dims pads = padding;
  pads.insert(pads.end(), padding.begin(), padding.end());
  trace::record("Conv", {x, w, b}, {r},
                {Attribute::make_ints("kernel_shape", kernel), Attribute::make_ints("strides", stride),
                 Attribute::make_ints("pads", pads), Attribute::make_ints("dilations", dilation),
                 Attribute::make_int("group", groups)});
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Dims stride, Dims padding, Dims dilation,
              int64_t groups) {
  kernels::ConvParams p{pair(stride, "stride", "conv2d"), pair(padding, "padding", "conv2d"),
                        pair(dilation, "dilation", "conv2d"), groups};
  Tensor r = conv_impl(x, w, b, p, "conv2d");
  trace_conv(x, w, b, r, {w.size(2), w.size(3)}, p.stride, p.padding, p.dilation, groups);
  return r;
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding, int64_t dilation,
              int64_t groups) {
  HODU_CHECK(core(x, "conv1d").rank() == 3 && core(w, "conv1d").rank() == 3, ErrorCode::InvalidArgument,
             "conv1d: input {} and weight {} (input [N, C, L], weight [O, C / groups, k])", shape_to_string(x.shape()),
             shape_to_string(w.shape()));
  Tensor r;
  {
    trace::Pause pause;
    kernels::ConvParams p{{1, stride}, {0, padding}, {1, dilation}, groups};
    r = conv_impl(x.unsqueeze(2), w.unsqueeze(2), b, p, "conv1d").squeeze(2);
  }
  trace_conv(x, w, b, r, {w.size(2)}, {stride}, {padding}, {dilation}, groups);
  return r;
}

namespace {

kernels::PoolParams pool_params(const Dims& kernel, const Dims& stride, const Dims& padding, const Dims& dilation,
                                bool ceil_mode, bool include_pad, const char* op) {
  kernels::PoolParams p;
  p.kernel = pair(kernel, "kernel", op);
  p.stride = stride.empty() ? p.kernel : pair(stride, "stride", op);
  p.padding = pair(padding, "padding", op);
  p.dilation = pair(dilation, "dilation", op);
  p.ceil_mode = ceil_mode;
  p.count_include_pad = include_pad;
  return p;
}

Tensor max_pool_impl(const Tensor& x, const kernels::PoolParams& p, const char* op) {
  const DType dt = float_type({&x}, op);
  HODU_CHECK(core(x).rank() == 4, ErrorCode::InvalidArgument, "{}: input {} is not [N, C, H, W]", op,
             shape_to_string(x.shape()));
  hodu::Tensor saved;
  Tensor r = result(kernels::max_pool2d(prep(x), p, saved), dt);
  if (needs_grad({&x}))
    record("MaxPool2DBackward", {x}, {&r}, [in = x.shape(), saved, p, dt](const std::vector<Tensor>& g,
                                                                          const FunctionNode&) {
      HODU_CHECK(!is_grad_enabled(), ErrorCode::Unsupported, "create_graph through max_pool2d");
      return std::vector<Tensor>{result(kernels::max_pool2d_backward(prep(g[0]), in, saved, p), dt)};
    });
  return r;
}

Tensor avg_pool_impl(const Tensor& x, const kernels::PoolParams& p, const char* op) {
  const DType dt = float_type({&x}, op);
  HODU_CHECK(core(x).rank() == 4, ErrorCode::InvalidArgument, "{}: input {} is not [N, C, H, W]", op,
             shape_to_string(x.shape()));
  Tensor r = result(kernels::avg_pool2d(prep(x), p), dt);
  if (needs_grad({&x}))
    record("AvgPool2DBackward", {x}, {&r}, [in = x.shape(), p, dt](const std::vector<Tensor>& g, const FunctionNode&) {
      HODU_CHECK(!is_grad_enabled(), ErrorCode::Unsupported, "create_graph through avg_pool2d");
      return std::vector<Tensor>{result(kernels::avg_pool2d_backward(prep(g[0]), in, p), dt)};
    });
  return r;
}

void trace_pool(bool max, const Tensor& x, const Tensor& r, const Dims& kernel, const Dims& stride, const Dims& padding,
                const Dims& dilation, bool ceil_mode, bool include_pad) {
  if (!trace::active()) return;
  Dims pads = padding;
  pads.insert(pads.end(), padding.begin(), padding.end());
  std::vector<Attribute> attrs = {Attribute::make_ints("kernel_shape", kernel), Attribute::make_ints("strides", stride),
                                  Attribute::make_ints("pads", pads), Attribute::make_int("ceil_mode", ceil_mode)};
  if (max) attrs.push_back(Attribute::make_ints("dilations", dilation));
  else attrs.push_back(Attribute::make_int("count_include_pad", include_pad));
  trace::record(max ? "MaxPool" : "AveragePool", {x}, {r}, std::move(attrs));
}

// max_pool1d / avg_pool1d: the 2-d pool over [N, C, 1, L], recorded as the 1-d pool.
Tensor pool1d(bool max, const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const char* op = max ? "max_pool1d" : "avg_pool1d";
  HODU_CHECK(core(x, op).rank() == 3, ErrorCode::InvalidArgument, "{}: input {} is not [N, C, L]", op,
             shape_to_string(x.shape()));
  const int64_t s = stride ? stride : kernel;
  Tensor r;
  {
    trace::Pause pause;
    const auto p = pool_params({1, kernel}, {1, s}, {0, padding}, {1, 1}, false, true, op);
    r = (max ? max_pool_impl(x.unsqueeze(2), p, op) : avg_pool_impl(x.unsqueeze(2), p, op)).squeeze(2);
  }
  trace_pool(max, x, r, {kernel}, {s}, {padding}, {1}, false, true);
  return r;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Dims kernel, Dims stride, Dims padding, Dims dilation, bool ceil_mode) {
  auto p = pool_params(kernel, stride, padding, dilation, ceil_mode, true, "max_pool2d");
  Tensor r = max_pool_impl(x, p, "max_pool2d");
  trace_pool(true, x, r, p.kernel, p.stride, p.padding, p.dilation, ceil_mode, true);
  return r;
}

Tensor avg_pool2d(const Tensor& x, Dims kernel, Dims stride, Dims padding, bool ceil_mode, bool count_include_pad) {
  auto p = pool_params(kernel, stride, padding, {1, 1}, ceil_mode, count_include_pad, "avg_pool2d");
  Tensor r = avg_pool_impl(x, p, "avg_pool2d");
  trace_pool(false, x, r, p.kernel, p.stride, p.padding, p.dilation, ceil_mode, count_include_pad);
  return r;
}

Tensor max_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool1d(true, x, kernel, stride, padding);
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool1d(false, x, kernel, stride, padding);
}

Tensor adaptive_avg_pool2d(const Tensor& x, Dims out) {
  HODU_CHECK(core(x, "adaptive_avg_pool2d").rank() == 4, ErrorCode::InvalidArgument,
             "adaptive_avg_pool2d: input {} is not [N, C, H, W]", shape_to_string(x.shape()));
  out = pair(out, "output size", "adaptive_avg_pool2d");
  const int64_t H = x.size(2), W = x.size(3);
  HODU_CHECK(out[0] > 0 && out[1] > 0 && H % out[0] == 0 && W % out[1] == 0, ErrorCode::Unsupported,
             "adaptive_avg_pool2d: output {} must divide the input's {}x{}", shape_to_string(out), H, W);
  if (out[0] == 1 && out[1] == 1) {
    Tensor r;
    {
      trace::Pause pause;
      r = x.mean({2, 3}, true);
    }
    if (trace::active()) trace::record("GlobalAveragePool", {x}, {r});
    return r;
  }
  return avg_pool2d(x, {H / out[0], W / out[1]});
}

// ---- softmax -------------------------------------------------------------------

namespace {
Tensor softmax_impl(const Tensor& x0, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  Tensor x = kernels::is_float(core(x0, op).dtype()) ? x0 : x0.to(DType::F32);
  const int64_t r = x.dim();
  dim = wrap_dim(dim, r, op);
  const DType dt = x.dtype(), ct = kernels::compute_dtype(dt);
  const bool last = r == 0 || dim == r - 1;
  hodu::Tensor xc = kernels::cast(core(x), ct);
  Dims perm;
  if (!last) {
    for (int64_t i = 0; i < r; ++i)
      if (i != dim) perm.push_back(i);
    perm.push_back(dim);
    xc = xc.permute(perm);
  }
  hodu::Tensor y = kernels::softmax_last(kernels::contiguous(xc), log);
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  if (!last) y = kernels::contiguous(y.permute(inv));
  Tensor out = result(std::move(y), dt);
  if (needs_grad({&x}))
    record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, {&out},
           [sy = Saved(out, true), dim, log, perm, inv, last](const std::vector<Tensor>& g, const FunctionNode& n) {
             Tensor y = sy.get(n);
             if (is_grad_enabled()) {
               if (log) return std::vector<Tensor>{g[0] - y.exp() * g[0].sum({dim}, true)};
               return std::vector<Tensor>{y * (g[0] - (g[0] * y).sum({dim}, true))};
             }
             const DType ct = kernels::compute_dtype(y.dtype());
             hodu::Tensor gc = kernels::cast(core(g[0]), ct), yc = kernels::cast(core(y), ct);
             if (!last) {
               gc = gc.permute(perm);
               yc = yc.permute(perm);
             }
             hodu::Tensor d = kernels::softmax_last_grad(kernels::contiguous(gc), kernels::contiguous(yc), log);
             if (!last) d = kernels::contiguous(d.permute(inv));
             return std::vector<Tensor>{result(std::move(d), y.dtype())};
           });
  if (trace::active())
    trace::record(log ? "LogSoftmax" : "Softmax", {x}, {out}, {Attribute::make_int("axis", dim)});
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }
Tensor Tensor::softmax(int64_t dim) const { return softmax_impl(*this, dim, false); }
Tensor Tensor::log_softmax(int64_t dim) const { return softmax_impl(*this, dim, true); }

// ---- normalization ---------------------------------------------------------------

Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  const DType dt = float_type({&x, &weight, &bias}, "layer_norm");
  const hodu::Tensor& xc = core(x);
  const size_t k = normalized_shape.size();
  HODU_CHECK(k >= 1 && k <= static_cast<size_t>(xc.rank()) &&
                 std::equal(normalized_shape.begin(), normalized_shape.end(), xc.shape().end() - k),
             ErrorCode::InvalidArgument, "layer_norm: normalized shape {} is not the last dims of input {}",
             shape_to_string(normalized_shape), shape_to_string(xc.shape()));
  for (const Tensor* t : {&weight, &bias})
    if (t->defined())
      HODU_CHECK(t->shape() == normalized_shape, ErrorCode::InvalidArgument,
                 "layer_norm: weight/bias {} for normalized shape {}", shape_to_string(t->shape()),
                 shape_to_string(normalized_shape));
  int64_t D = 1;
  for (int64_t d : normalized_shape) D *= d;
  const hodu::Tensor x2 = prep(x).reshape({xc.numel() / std::max<int64_t>(D, 1), D});
  hodu::Tensor wh, bh, y, mean, rstd;
  const hodu::Tensor* wp = weight.defined() ? &(wh = prep(weight).reshape({D})) : nullptr;
  const hodu::Tensor* bp = bias.defined() ? &(bh = prep(bias).reshape({D})) : nullptr;
  kernels::layer_norm(x2, wp, bp, eps, y, mean, rstd);
  Tensor r = result(y.reshape(xc.shape()), dt);
  if (needs_grad({&x, &weight, &bias}))
    record("LayerNormBackward", {x, weight, bias}, {&r},
           [sx = Saved(x), sw = Saved(weight), mean, rstd, D, normalized_shape, eps](const std::vector<Tensor>& g,
                                                                                     const FunctionNode& n) {
             Tensor x = sx.get(), w = sw.get();
             std::vector<Tensor> out(3);
             Dims dims;
             for (size_t i = 0; i < normalized_shape.size(); ++i) dims.push_back(x.dim() - 1 - static_cast<int64_t>(i));
             if (is_grad_enabled()) {
               // create_graph: the same formulas through ops.
               Tensor mu = x.mean(dims, true);
               Tensor rs = ((x - mu).square().mean(dims, true) + eps).rsqrt();
               Tensor xh = (x - mu) * rs;
               Tensor gw = w.defined() ? g[0] * w : g[0];
               if (n.needs_input_grad(0))
                 out[0] = rs * (gw - gw.mean(dims, true) - xh * (gw * xh).mean(dims, true));
               Dims lead;
               for (int64_t i = 0; i < x.dim() - static_cast<int64_t>(normalized_shape.size()); ++i) lead.push_back(i);
               if (n.needs_input_grad(1)) out[1] = lead.empty() ? g[0] * xh : (g[0] * xh).sum(lead);
               if (n.needs_input_grad(2)) out[2] = lead.empty() ? g[0] : g[0].sum(lead);
               return out;
             }
             const DType dt = x.dtype();
             hodu::Tensor wh, dx, dw, db;
             const hodu::Tensor* wp = w.defined() ? &(wh = prep(w).reshape({D})) : nullptr;
             kernels::layer_norm_backward(prep(g[0]).reshape({x.numel() / std::max<int64_t>(D, 1), D}),
                                          prep(x).reshape({x.numel() / std::max<int64_t>(D, 1), D}), mean, rstd, wp,
                                          dx, dw, db);
             if (n.needs_input_grad(0)) out[0] = result(dx.reshape(x.shape()), dt);
             if (n.needs_input_grad(1)) out[1] = result(dw.reshape(normalized_shape), dt);
             if (n.needs_input_grad(2)) out[2] = result(db.reshape(normalized_shape), dt);
             return out;
           });
  if (trace::active()) {
    Tensor w = weight.defined() ? weight : ones(normalized_shape, dt);
    trace::record("LayerNormalization", {x, w, bias}, {r},
                  {Attribute::make_int("axis", -static_cast<int64_t>(k)),
                   Attribute::make_float("epsilon", static_cast<float>(eps))});
  }
  return r;
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const DType dt = float_type({&x, &weight, &bias}, "batch_norm");
  const hodu::Tensor& xc = core(x);
  HODU_CHECK(xc.rank() >= 2, ErrorCode::InvalidArgument, "batch_norm: input {} is not [N, C, ...]",
             shape_to_string(xc.shape()));
  const int64_t C = xc.shape()[1];
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    if (t->defined())
      HODU_CHECK(t->dim() == 1 && t->size(0) == C, ErrorCode::InvalidArgument,
                 "batch_norm: a per-channel tensor of shape {} for {} channels", shape_to_string(t->shape()), C);
  HODU_CHECK(training || (running_mean.defined() && running_var.defined()), ErrorCode::InvalidArgument,
             "batch_norm: evaluation mode needs running_mean and running_var");
  if (training) {
    int64_t per_channel = xc.numel() / std::max<int64_t>(C, 1);
    HODU_CHECK(per_channel > 1, ErrorCode::InvalidArgument,
               "batch_norm: expected more than 1 value per channel when training, got input {}",
               shape_to_string(xc.shape()));
  }
  const int64_t N = xc.shape()[0];
  const hodu::Tensor x3 = prep(x).reshape({N, C, C * N != 0 ? xc.numel() / (N * C) : 0});
  hodu::Tensor wh, bh, mh, vh, y, mean, invstd, var_unbiased;
  kernels::batch_norm(x3, opt(weight, wh), opt(bias, bh), training ? nullptr : opt(running_mean, mh),
                      training ? nullptr : opt(running_var, vh), training, eps, y, mean, invstd, var_unbiased);
  if (training && running_mean.defined() && running_var.defined()) {
    // running = (1 - momentum) * running + momentum * batch (the unbiased variance), in place.
    NoGradGuard guard;
    trace::Pause pause;
    Tensor bm = make_tensor(kernels::cast(mean, running_mean.dtype()));
    Tensor bv = make_tensor(kernels::cast(var_unbiased, running_var.dtype()));
    Tensor rm = running_mean, rv = running_var;
    rm.mul_(1.0 - momentum).add_(bm * momentum);
    rv.mul_(1.0 - momentum).add_(bv * momentum);
  }
  Tensor r = result(y.reshape(xc.shape()), dt);
  if (needs_grad({&x, &weight, &bias}))
    record("BatchNormBackward", {x, weight, bias}, {&r},
           [sx = Saved(x), sw = Saved(weight), mean, invstd, training, eps](const std::vector<Tensor>& g,
                                                                            const FunctionNode& n) {
             Tensor x = sx.get(), w = sw.get();
             const int64_t C = x.size(1);
             std::vector<Tensor> out(3);
             Dims bshape(x.dim(), 1);
             bshape[1] = C;
             Dims red;
             for (int64_t i = 0; i < x.dim(); ++i)
               if (i != 1) red.push_back(i);
             if (is_grad_enabled()) {
               Tensor mu = make_tensor(kernels::cast(mean, x.dtype())).reshape(bshape);
               Tensor is = make_tensor(kernels::cast(invstd, x.dtype())).reshape(bshape);
               if (training) {
                 mu = x.mean(red, true);
                 is = ((x - mu).square().mean(red, true) + eps).rsqrt();
               }
               Tensor xh = (x - mu) * is;
               Tensor wv = w.defined() ? w.reshape(bshape) : ones(bshape, x.dtype());
               if (n.needs_input_grad(0)) {
                 if (training)
                   out[0] = (g[0] - g[0].mean(red, true) - xh * (g[0] * xh).mean(red, true)) * is * wv;
                 else
                   out[0] = g[0] * is * wv;
               }
               if (n.needs_input_grad(1)) out[1] = (g[0] * xh).sum(red);
               if (n.needs_input_grad(2)) out[2] = g[0].sum(red);
               return out;
             }
             const DType dt = x.dtype();
             const int64_t N = x.size(0), S = N * C != 0 ? x.numel() / (N * C) : 0;
             hodu::Tensor wh, dx, dw, db;
             const hodu::Tensor* wp = w.defined() ? &(wh = prep(w)) : nullptr;
             kernels::batch_norm_backward(prep(g[0]).reshape({N, C, S}), prep(x).reshape({N, C, S}), mean, invstd, wp,
                                          training, dx, dw, db);
             if (n.needs_input_grad(0)) out[0] = result(dx.reshape(x.shape()), dt);
             if (n.needs_input_grad(1)) out[1] = result(dw, dt);
             if (n.needs_input_grad(2)) out[2] = result(db, dt);
             return out;
           });
  if (trace::active()) {
    // ONNX BatchNormalization; in training mode (a captured training step) with batch
    // statistics, its running statistics the step's state. ONNX's momentum weighs the old value.
    Tensor w = weight.defined() ? weight : ones({C}, dt), b = bias.defined() ? bias : zeros({C}, dt);
    Tensor rm = running_mean.defined() ? running_mean : zeros({C}, dt);
    Tensor rv = running_var.defined() ? running_var : ones({C}, dt);
    std::vector<Attribute> attrs = {Attribute::make_float("epsilon", static_cast<float>(eps)),
                                    Attribute::make_float("momentum", static_cast<float>(1.0 - momentum))};
    if (training) attrs.push_back(Attribute::make_int("training_mode", 1));
    trace::record("BatchNormalization", {x, w, b, rm, rv}, {r}, std::move(attrs));
  }
  return r;
}

}  // namespace hodu::eager
