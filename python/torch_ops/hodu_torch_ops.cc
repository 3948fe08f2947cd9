// torch.ops.hodu.{matmul, linear, conv2d, attention, layer_norm, gelu, softmax}: hodu's
// kernels on core tensors (src/kernels/cpu/tensor: oneDNN's matmul and convolution forward
// and backward for f32, hodu's loops for f64 and for the rest) as PyTorch operators,
// registered with TORCH_LIBRARY. Each op has a kernel below autograd (<op>_cpu, at
// CompositeExplicitAutograd: inference mode) and an Autograd kernel that runs the forward
// inside a torch::autograd::Function whose backward is hodu's too. Torch tensors cross to hodu as
// strided views over torch's memory and come back as torch tensors over hodu's storage: no
// copies besides the row-major inputs a kernel needs. Shape bookkeeping (transposed views,
// flattening, unsqueezes) is torch's view ops; every number is computed by hodu.
//
// Policy: a family (matmul covers matmul and linear; conv, attention, layer_norm, gelu,
// softmax) set to "python" by hodu.torch.ops.set_policy runs hodu::_engine_<op> instead,
// which Python implements (engine kernels by name through hodu.torch.compile, "torch", "auto").
// One translation unit on purpose: torch's headers cost most of its compile time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"

namespace hodu_torch_ops {

namespace tk = hodu::tensor_kernels;
using at::Tensor;
using c10::optional;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// ---- Policy: which families run here, which on Python's _engine_ ops ---------------------

enum Family { kMatmul, kConv, kAttention, kLayerNorm, kGelu, kSoftmax, kFamilies };
constexpr std::array<const char*, kFamilies> kFamilyNames = {"matmul", "conv", "attention", "layer_norm", "gelu",
                                                             "softmax"};
std::array<std::atomic<bool>, kFamilies> g_python{};  // true: the family runs hodu::_engine_<op>

void set_route(c10::string_view family, c10::string_view route) {
  TORCH_CHECK(route == "extension" || route == "python", "torch.ops.hodu._set_route: route must be 'extension' or ",
              "'python', got '", std::string(route), "'");
  for (int i = 0; i < kFamilies; ++i)
    if (family == kFamilyNames[i]) {
      g_python[i] = route == "python";
      return;
    }
  TORCH_CHECK(false, "torch.ops.hodu._set_route: no family '", std::string(family),
              "' (families: matmul, conv, attention, layer_norm, gelu, softmax)");
}

std::string get_route(c10::string_view family) {
  for (int i = 0; i < kFamilies; ++i)
    if (family == kFamilyNames[i]) return g_python[i] ? "python" : "extension";
  TORCH_CHECK(false, "torch.ops.hodu._get_route: no family '", std::string(family), "'");
}

bool python_route(Family f) { return g_python[f].load(std::memory_order_relaxed); }

template <typename Sig>
c10::TypedOperatorHandle<Sig> engine_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// ---- Crossing between torch and hodu tensors ---------------------------------------------

hodu::DType hodu_dtype(const Tensor& t) { return t.scalar_type() == at::kDouble ? hodu::DType::F64 : hodu::DType::F32; }

// Checks what every op's tensor must be: defined, on the CPU, strided, f32 or f64, and of the
// dtype of the op's first input.
void check_tensor(const char* op, const char* what, const Tensor& t, const Tensor* like = nullptr) {
  TORCH_CHECK(t.defined(), "torch.ops.hodu.", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "torch.ops.hodu.", op, ": ", what, " is on ", t.device(),
              "; hodu's ops run on the CPU");
  TORCH_CHECK(t.layout() == at::kStrided, "torch.ops.hodu.", op, ": ", what, " has layout ", t.layout(),
              "; the ops take dense (strided) tensors");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "torch.ops.hodu.", op, ": ", what,
              " is ", t.scalar_type(), "; the ops take float32 or float64 tensors");
  if (like)
    TORCH_CHECK(t.scalar_type() == like->scalar_type(), "torch.ops.hodu.", op, ": ", what, " is ", t.scalar_type(),
                " but the first input is ", like->scalar_type(), "; all inputs must have one dtype");
}

// A hodu view of a torch tensor's elements (its strides kept); the storage holds a reference
// to the torch tensor, so the bytes live as long as the view.
hodu::Tensor to_hodu(const Tensor& t) {
  int64_t span = 1;  // elements from the first to one past the last
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) == 0) span = 0;
    if (span) span += (t.size(i) - 1) * t.stride(i);
  }
  const size_t elem = t.element_size();
  auto storage = hodu::Storage::wrap(t.data_ptr(), static_cast<size_t>(span) * elem, [keep = t]() {});
  return hodu::Tensor::from_storage(hodu_dtype(t), {span}, storage)
      .as_strided(t.sizes().vec(), t.strides().vec(), 0);
}

// A torch tensor over a hodu result's storage (no copy); the deleter drops hodu's reference.
Tensor to_torch(const hodu::Tensor& h) {
  auto storage = h.storage();
  void* data = const_cast<void*>(h.raw_data());
  auto opts = at::TensorOptions().dtype(h.dtype() == hodu::DType::F64 ? at::kDouble : at::kFloat);
  return at::from_blob(data, h.shape(), h.strides(), [storage](void*) mutable { storage.reset(); }, opts);
}
// The same for a row-major result given another shape of its elements: a tensor of its own,
// not a view (a custom Function's output that is a view could not be modified in place).
Tensor to_torch(const hodu::Tensor& h, at::IntArrayRef shape) {
  TORCH_CHECK(h.is_contiguous(), "torch.ops.hodu: internal: a reshaped result must be row-major");
  auto storage = h.storage();
  void* data = const_cast<void*>(h.raw_data());
  auto opts = at::TensorOptions().dtype(h.dtype() == hodu::DType::F64 ? at::kDouble : at::kFloat);
  return at::from_blob(data, shape, [storage](void*) mutable { storage.reset(); }, opts);
}

// Runs a hodu kernel on torch's intra-op thread count, turning hodu's errors into torch's
// (RuntimeError in Python) with the op's name in front.
template <typename F>
auto run(const char* op, F&& f) -> decltype(f()) {
  try {
    tk::ThreadScope threads(at::get_num_threads());
    return f();
  } catch (const c10::Error&) {
    throw;  // torch's own, already naming the op
  } catch (const std::exception& e) {  // hodu::Error, oneDNN's, allocation failures
    TORCH_CHECK(false, "torch.ops.hodu.", op, ": ", e.what());
  }
}

// hodu's row-major copy of a view (the view itself when already row-major).
Tensor hcontiguous(const Tensor& t) { return t.is_contiguous() ? t : to_torch(tk::contiguous(to_hodu(t))); }

// hodu's backward kernels record no graph: with create_graph=True a second derivative through
// the op would silently miss its part, so that is refused.
void once_differentiable(const char* op) {
  TORCH_CHECK(!at::GradMode::is_enabled(), "torch.ops.hodu.", op, ": backward with create_graph=True (double ",
              "backward) is not supported; hodu's backward kernels are not differentiable");
}

// hodu's product of two torch tensors of rank >= 2 (batch dims broadcast), bias [N] optional.
hodu::Tensor hmatmul_h(const Tensor& a, const Tensor& b, const Tensor* bias = nullptr) {
  hodu::Tensor hb;
  if (bias) hb = to_hodu(hcontiguous(*bias));
  return tk::matmul(to_hodu(a), to_hodu(b), bias ? &hb : nullptr);
}
Tensor hmatmul(const Tensor& a, const Tensor& b, const Tensor* bias = nullptr) { return to_torch(hmatmul_h(a, b, bias)); }

// Sums a broadcast gradient back to `shape` (leading dims and dims of size 1), on hodu.
Tensor hsum_to(const Tensor& g, at::IntArrayRef shape) {
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.size(i) != 1)) dims.push_back(i);
  if (dims.empty()) return g.reshape(shape);
  Tensor s = to_torch(tk::reduce(tk::ReduceOp::Sum, to_hodu(g), dims, /*keepdim=*/true));
  return s.reshape(shape);
}

// x * scalar on hodu.
Tensor hscale(const Tensor& x, double s) {
  hodu::Tensor k = x.scalar_type() == at::kDouble ? hodu::Tensor::scalar(hodu::DType::F64, s)
                                                  : hodu::Tensor::scalar(hodu::DType::F32, static_cast<float>(s));
  return to_torch(tk::binary(tk::BinaryOp::Mul, to_hodu(x), k, "attention"));
}

// ---- matmul ------------------------------------------------------------------------------

void check_matmul(const Tensor& a, const Tensor& b) {
  check_tensor("matmul", "self", a);
  check_tensor("matmul", "other", b, &a);
  TORCH_CHECK(a.dim() >= 1 && b.dim() >= 1, "torch.ops.hodu.matmul: both arguments need at least 1 dimension, got ",
              a.dim(), "-D and ", b.dim(), "-D");
  const int64_t k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  TORCH_CHECK(a.size(-1) == k_b, "torch.ops.hodu.matmul: shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied (", a.size(-1), " columns against ", k_b, " rows)");
}

// torch.matmul's 1-D promotion: a [K] is [1, K], b [K] is [K, 1]; the added dims are dropped after.
Tensor promote_a(const Tensor& a) { return a.dim() == 1 ? a.unsqueeze(0) : a; }
Tensor promote_b(const Tensor& b) { return b.dim() == 1 ? b.unsqueeze(-1) : b; }
// The product of the promoted operands with the promoted dims dropped from its shape.
Tensor matmul_forward(const Tensor& a, const Tensor& b) {
  const hodu::Tensor c = hmatmul_h(promote_a(a), promote_b(b));
  std::vector<int64_t> shape = c.shape();
  if (b.dim() == 1) shape.erase(shape.end() - 1);
  if (a.dim() == 1) shape.erase(shape.end() - (b.dim() == 1 ? 1 : 2));
  return to_torch(c, shape);
}

template <bool Routed>
Tensor matmul_cpu(const Tensor& a, const Tensor& b) {
  if (Routed && python_route(kMatmul))
    return engine_op<Tensor(const Tensor&, const Tensor&)>("hodu::_engine_matmul").call(a, b);
  check_matmul(a, b);
  return run("matmul", [&] { return matmul_forward(a, b); });
}

struct MatmulFn : torch::autograd::Function<MatmulFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    ctx->save_for_backward({a, b});
    return run("matmul", [&] { return matmul_forward(a, b); });
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("matmul");
    auto saved = ctx->get_saved_variables();
    const Tensor &a0 = saved[0], &b0 = saved[1];
    return run("matmul backward", [&] {
      const Tensor a = promote_a(a0), b = promote_b(b0);
      Tensor g = grads[0];
      if (b0.dim() == 1) g = g.unsqueeze(-1);
      if (a0.dim() == 1) g = g.unsqueeze(-2);
      Tensor da, db;
      if (ctx->needs_input_grad(0)) da = hsum_to(hmatmul(g, b.transpose(-1, -2)), a.sizes()).reshape(a0.sizes());
      if (ctx->needs_input_grad(1)) db = hsum_to(hmatmul(a.transpose(-1, -2), g), b.sizes()).reshape(b0.sizes());
      return tensor_list{da, db};
    });
  }
};

template <bool Routed>
Tensor matmul_autograd(const Tensor& a, const Tensor& b) {
  if (Routed && python_route(kMatmul))
    return engine_op<Tensor(const Tensor&, const Tensor&)>("hodu::_engine_matmul").call(a, b);
  check_matmul(a, b);
  return MatmulFn::apply(a, b);
}

// ---- linear: y = x wᵀ + b over x's rows ---------------------------------------------------

void check_linear(const Tensor& x, const Tensor& w, const optional<Tensor>& b) {
  check_tensor("linear", "input", x);
  check_tensor("linear", "weight", w, &x);
  TORCH_CHECK(w.dim() == 2, "torch.ops.hodu.linear: weight must be 2-D [out_features, in_features], got ", w.dim(),
              "-D ", w.sizes());
  TORCH_CHECK(x.dim() >= 1, "torch.ops.hodu.linear: input must have at least 1 dimension");
  TORCH_CHECK(x.size(-1) == w.size(1), "torch.ops.hodu.linear: input's last dim is ", x.size(-1), " but weight ",
              w.sizes(), " takes ", w.size(1), " features");
  if (b && b->defined()) {
    check_tensor("linear", "bias", *b, &x);
    TORCH_CHECK(b->dim() == 1 && b->size(0) == w.size(0), "torch.ops.hodu.linear: bias must be [", w.size(0),
                "], got ", b->sizes());
  }
}

Tensor linear_forward(const Tensor& x, const Tensor& w, const optional<Tensor>& b) {
  const bool bias = b && b->defined();
  std::vector<int64_t> out(x.sizes().begin(), x.sizes().end() - 1);
  out.push_back(w.size(0));
  const Tensor x2 = x.reshape({-1, x.size(-1)});
  return to_torch(hmatmul_h(x2, w.t(), bias ? &*b : nullptr), out);
}

template <bool Routed>
Tensor linear_cpu(const Tensor& x, const Tensor& w, const optional<Tensor>& b) {
  if (Routed && python_route(kMatmul))
    return engine_op<Tensor(const Tensor&, const Tensor&, const optional<Tensor>&)>("hodu::_engine_linear")
        .call(x, w, b);
  check_linear(x, w, b);
  return run("linear", [&] { return linear_forward(x, w, b); });
}

struct LinearFn : torch::autograd::Function<LinearFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const optional<Tensor>& b) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = b && b->defined();
    return run("linear", [&] { return linear_forward(x, w, b); });
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("linear");
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1];
    return run("linear backward", [&] {
      const Tensor g2 = grads[0].reshape({-1, w.size(0)});
      Tensor dx, dw, db;
      if (ctx->needs_input_grad(0)) dx = hmatmul(g2, w).view(x.sizes());
      if (ctx->needs_input_grad(1)) dw = hmatmul(g2.t(), x.reshape({-1, x.size(-1)}));
      if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) db = to_torch(tk::reduce(tk::ReduceOp::Sum, to_hodu(g2), {0}, false));
      return tensor_list{dx, dw, db};
    });
  }
};

template <bool Routed>
Tensor linear_autograd(const Tensor& x, const Tensor& w, const optional<Tensor>& b) {
  if (Routed && python_route(kMatmul))
    return engine_op<Tensor(const Tensor&, const Tensor&, const optional<Tensor>&)>("hodu::_engine_linear")
        .call(x, w, b);
  check_linear(x, w, b);
  return LinearFn::apply(x, w, b);
}

// ---- conv2d (NCHW; a 3-D input is one unbatched image, as torch's) -----------------------

using ConvSig = Tensor(const Tensor&, const Tensor&, const optional<Tensor>&, at::IntArrayRef, at::IntArrayRef,
                       at::IntArrayRef, int64_t);

std::vector<int64_t> pair_of(const char* name, at::IntArrayRef v, int64_t min) {
  TORCH_CHECK(v.size() == 1 || v.size() == 2, "torch.ops.hodu.conv2d: ", name, " must have 1 or 2 values, got ",
              v.size());
  std::vector<int64_t> p = {v[0], v.size() == 2 ? v[1] : v[0]};
  TORCH_CHECK(p[0] >= min && p[1] >= min, "torch.ops.hodu.conv2d: ", name, " must be >= ", min, ", got ", v);
  return p;
}

tk::ConvParams conv_params(const Tensor& x, const Tensor& w, const optional<Tensor>& b, at::IntArrayRef stride,
                           at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  check_tensor("conv2d", "input", x);
  check_tensor("conv2d", "weight", w, &x);
  TORCH_CHECK(x.dim() == 4 || x.dim() == 3, "torch.ops.hodu.conv2d: input must be 4-D (N, C, H, W) or 3-D (C, H, W), got ",
              x.dim(), "-D ", x.sizes());
  TORCH_CHECK(w.dim() == 4, "torch.ops.hodu.conv2d: weight must be 4-D (out, in / groups, kH, kW), got ", w.dim(),
              "-D ", w.sizes());
  TORCH_CHECK(groups >= 1, "torch.ops.hodu.conv2d: groups must be >= 1, got ", groups);
  const int64_t c = x.size(x.dim() - 3);
  TORCH_CHECK(w.size(1) * groups == c && w.size(0) % groups == 0, "torch.ops.hodu.conv2d: weight ", w.sizes(),
              " with groups=", groups, " does not fit an input of ", c, " channels");
  if (b && b->defined()) {
    check_tensor("conv2d", "bias", *b, &x);
    TORCH_CHECK(b->dim() == 1 && b->size(0) == w.size(0), "torch.ops.hodu.conv2d: bias must be [", w.size(0),
                "], got ", b->sizes());
  }
  tk::ConvParams p{pair_of("stride", stride, 1), pair_of("padding", padding, 0), pair_of("dilation", dilation, 1),
                   groups};
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.size(x.dim() - 2 + i) + 2 * p.padding[i], k = p.dilation[i] * (w.size(2 + i) - 1) + 1;
    TORCH_CHECK(in >= k, "torch.ops.hodu.conv2d: the kernel (", k, " with dilation) is larger than the padded input (",
                in, ") in dim ", 2 + i);
  }
  return p;
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const optional<Tensor>& b, const tk::ConvParams& p) {
  const bool batched = x.dim() == 4;
  const Tensor x4 = hcontiguous(batched ? x : x.unsqueeze(0));
  hodu::Tensor hb;
  if (b && b->defined()) hb = to_hodu(hcontiguous(*b));
  const hodu::Tensor y = tk::conv2d(to_hodu(x4), to_hodu(hcontiguous(w)), hb.defined() ? &hb : nullptr, p);
  return batched ? to_torch(y) : to_torch(y, {y.dim(1), y.dim(2), y.dim(3)});
}

template <bool Routed>
Tensor conv2d_cpu(const Tensor& x, const Tensor& w, const optional<Tensor>& b, at::IntArrayRef stride,
                  at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (Routed && python_route(kConv))
    return engine_op<ConvSig>("hodu::_engine_conv2d").call(x, w, b, stride, padding, dilation, groups);
  const auto p = conv_params(x, w, b, stride, padding, dilation, groups);
  return run("conv2d", [&] { return conv_forward(x, w, b, p); });
}

struct Conv2dFn : torch::autograd::Function<Conv2dFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const optional<Tensor>& b,
                        std::vector<int64_t> params) {
    // params: stride, padding, dilation (2 each), groups
    ctx->save_for_backward({x, w});
    ctx->saved_data["params"] = params;
    ctx->saved_data["has_bias"] = b && b->defined();
    const tk::ConvParams p{{params[0], params[1]}, {params[2], params[3]}, {params[4], params[5]}, params[6]};
    return run("conv2d", [&] { return conv_forward(x, w, b, p); });
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("conv2d");
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1];
    const auto v = ctx->saved_data["params"].toIntVector();
    const tk::ConvParams p{{v[0], v[1]}, {v[2], v[3]}, {v[4], v[5]}, v[6]};
    return run("conv2d backward", [&] {
      const bool batched = x.dim() == 4;
      const Tensor x4 = hcontiguous(batched ? x : x.unsqueeze(0));
      const Tensor g = hcontiguous(batched ? grads[0] : grads[0].unsqueeze(0));
      Tensor dx, dw, db;
      if (ctx->needs_input_grad(0)) {
        dx = to_torch(tk::conv2d_backward_input(to_hodu(g), to_hodu(hcontiguous(w)), x4.sizes().vec(), p));
        if (!batched) dx = dx.squeeze(0);
      }
      const bool with_bias = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
      if (ctx->needs_input_grad(1) || with_bias) {
        hodu::Tensor hdw, hdb;
        tk::conv2d_backward_weight(to_hodu(g), to_hodu(x4), w.sizes().vec(), p, with_bias, hdw, hdb);
        if (ctx->needs_input_grad(1)) dw = to_torch(hdw);
        if (with_bias) db = to_torch(hdb);
      }
      return tensor_list{dx, dw, db, Tensor()};
    });
  }
};

template <bool Routed>
Tensor conv2d_autograd(const Tensor& x, const Tensor& w, const optional<Tensor>& b, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (Routed && python_route(kConv))
    return engine_op<ConvSig>("hodu::_engine_conv2d").call(x, w, b, stride, padding, dilation, groups);
  const auto p = conv_params(x, w, b, stride, padding, dilation, groups);
  return Conv2dFn::apply(x, w, b,
                         std::vector<int64_t>{p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0],
                                              p.dilation[1], p.groups});
}

// ---- attention: softmax(q kᵀ / √d + mask, causal) v ---------------------------------------

using AttentionSig = Tensor(const Tensor&, const Tensor&, const Tensor&, const optional<Tensor>&, bool);

void check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask) {
  check_tensor("attention", "query", q);
  check_tensor("attention", "key", k, &q);
  check_tensor("attention", "value", v, &q);
  TORCH_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "torch.ops.hodu.attention: query, key and value must ",
              "be at least 2-D ([..., seq, dim]), got ", q.dim(), "-D, ", k.dim(), "-D and ", v.dim(), "-D");
  TORCH_CHECK(q.size(-1) == k.size(-1), "torch.ops.hodu.attention: query's last dim ", q.size(-1),
              " differs from key's ", k.size(-1));
  TORCH_CHECK(k.size(-2) == v.size(-2), "torch.ops.hodu.attention: key has ", k.size(-2), " positions but value has ",
              v.size(-2));
  if (mask && mask->defined()) {
    TORCH_CHECK(mask->scalar_type() == q.scalar_type(), "torch.ops.hodu.attention: mask is ", mask->scalar_type(),
                "; it is added to the scores, so it must be ", q.scalar_type(),
                " (for a boolean mask pass torch.zeros(...).masked_fill(~keep, float('-inf')))");
    check_tensor("attention", "mask", *mask, &q);
  }
}

// Sets the scores above the diagonal (key position > query position) to -inf, in place.
void causal_fill(Tensor& s) {
  const int64_t S = s.size(-2), T = s.size(-1), rows = s.numel() / T;
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "hodu_causal", [&] {
    scalar_t* p = s.data_ptr<scalar_t>();
    const scalar_t inf = -std::numeric_limits<scalar_t>::infinity();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = r % S + 1; j < T; ++j) p[r * T + j] = inf;
  });
}

// The probabilities softmax(q kᵀ · scale + mask) (row-major, hodu's storage).
Tensor attention_probs(const Tensor& q, const Tensor& k, const optional<Tensor>& mask, bool causal, double scale) {
  Tensor s = hscale(hmatmul(q, k.transpose(-1, -2)), scale);
  if (mask && mask->defined()) s = to_torch(tk::binary(tk::BinaryOp::Add, to_hodu(s), to_hodu(*mask), "attention"));
  s = hcontiguous(s);
  if (causal) causal_fill(s);
  return to_torch(tk::softmax_last(to_hodu(s), false));
}

template <bool Routed>
Tensor attention_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask, bool causal) {
  if (Routed && python_route(kAttention))
    return engine_op<AttentionSig>("hodu::_engine_attention").call(q, k, v, mask, causal);
  check_attention(q, k, v, mask);
  return run("attention", [&] {
    return hmatmul(attention_probs(q, k, mask, causal, 1.0 / std::sqrt(static_cast<double>(q.size(-1)))), v);
  });
}

struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const optional<Tensor>& mask, bool causal) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const bool has_mask = mask && mask->defined();
    return run("attention", [&] {
      Tensor p = attention_probs(q, k, mask, causal, scale);
      ctx->save_for_backward({q, k, v, p});
      ctx->saved_data["scale"] = scale;
      ctx->saved_data["mask_shape"] = has_mask ? mask->sizes().vec() : std::vector<int64_t>{};
      ctx->saved_data["has_mask"] = has_mask;
      return hmatmul(p, v);
    });
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("attention");
    auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &p = saved[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    return run("attention backward", [&] {
      const Tensor& g = grads[0];
      Tensor dq, dk, dv, dmask;
      if (ctx->needs_input_grad(2)) dv = hsum_to(hmatmul(p.transpose(-1, -2), g), v.sizes());
      // dS = softmax'(dP) with dP = g vᵀ; zero where causal masked (p = 0 there).
      const Tensor dp = hcontiguous(hmatmul(g, v.transpose(-1, -2)));
      const Tensor ds = to_torch(tk::softmax_last_grad(to_hodu(dp), to_hodu(p), false));
      if (ctx->saved_data["has_mask"].toBool() && ctx->needs_input_grad(3))
        dmask = hsum_to(ds, ctx->saved_data["mask_shape"].toIntVector());
      const Tensor dss = hscale(ds, scale);
      if (ctx->needs_input_grad(0)) dq = hsum_to(hmatmul(dss, k), q.sizes());
      if (ctx->needs_input_grad(1)) dk = hsum_to(hmatmul(dss.transpose(-1, -2), q), k.sizes());
      return tensor_list{dq, dk, dv, dmask, Tensor()};
    });
  }
};

template <bool Routed>
Tensor attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask,
                          bool causal) {
  if (Routed && python_route(kAttention))
    return engine_op<AttentionSig>("hodu::_engine_attention").call(q, k, v, mask, causal);
  check_attention(q, k, v, mask);
  return AttentionFn::apply(q, k, v, mask, causal);
}

// ---- layer_norm over the trailing normalized_shape ---------------------------------------

using LayerNormSig = Tensor(const Tensor&, at::IntArrayRef, const optional<Tensor>&, const optional<Tensor>&, double);

void check_layer_norm(const Tensor& x, at::IntArrayRef shape, const optional<Tensor>& w, const optional<Tensor>& b,
                      double eps) {
  check_tensor("layer_norm", "input", x);
  const int64_t n = static_cast<int64_t>(shape.size());
  TORCH_CHECK(n >= 1, "torch.ops.hodu.layer_norm: normalized_shape must have at least one dim");
  TORCH_CHECK(x.dim() >= n && x.sizes().slice(x.dim() - n) == shape, "torch.ops.hodu.layer_norm: input ", x.sizes(),
              " does not end with normalized_shape ", shape);
  TORCH_CHECK(eps >= 0, "torch.ops.hodu.layer_norm: eps must be >= 0, got ", eps);
  for (const auto* t : {&w, &b})
    if (*t && (*t)->defined()) {
      const char* what = t == &w ? "weight" : "bias";
      check_tensor("layer_norm", what, **t, &x);
      TORCH_CHECK((*t)->sizes() == shape, "torch.ops.hodu.layer_norm: ", what, " must have normalized_shape ", shape,
                  ", got ", (*t)->sizes());
    }
}

struct LayerNormOut {
  Tensor y, mean, rstd;
};

LayerNormOut layer_norm_forward(const Tensor& x, at::IntArrayRef shape, const optional<Tensor>& w,
                                const optional<Tensor>& b, double eps) {
  int64_t d = 1;
  for (int64_t s : shape) d *= s;
  const Tensor x2 = hcontiguous(x).view({-1, d});
  hodu::Tensor hw, hb, y, mean, rstd;
  if (w && w->defined()) hw = to_hodu(hcontiguous(*w).view({d}));
  if (b && b->defined()) hb = to_hodu(hcontiguous(*b).view({d}));
  tk::layer_norm(to_hodu(x2), hw.defined() ? &hw : nullptr, hb.defined() ? &hb : nullptr, eps, y, mean, rstd);
  return {to_torch(y, x.sizes()), to_torch(mean), to_torch(rstd)};
}

template <bool Routed>
Tensor layer_norm_cpu(const Tensor& x, at::IntArrayRef shape, const optional<Tensor>& w, const optional<Tensor>& b,
                      double eps) {
  if (Routed && python_route(kLayerNorm))
    return engine_op<LayerNormSig>("hodu::_engine_layer_norm").call(x, shape, w, b, eps);
  check_layer_norm(x, shape, w, b, eps);
  return run("layer_norm", [&] { return layer_norm_forward(x, shape, w, b, eps).y; });
}

struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, std::vector<int64_t> shape, const optional<Tensor>& w,
                        const optional<Tensor>& b, double eps) {
    return run("layer_norm", [&] {
      LayerNormOut o = layer_norm_forward(x, shape, w, b, eps);
      ctx->save_for_backward({x, w && w->defined() ? *w : Tensor(), o.mean, o.rstd});
      ctx->saved_data["has_bias"] = b && b->defined();
      ctx->saved_data["normalized_shape"] = shape;
      return o.y;
    });
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("layer_norm");
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    return run("layer_norm backward", [&] {
      const int64_t rows = mean.numel(), d = rows ? x.numel() / rows : 0;
      const Tensor g2 = hcontiguous(grads[0]).view({rows, d});
      hodu::Tensor hw, hdx, hdw, hdb;
      if (w.defined()) hw = to_hodu(hcontiguous(w).view({d}));
      tk::layer_norm_backward(to_hodu(g2), to_hodu(hcontiguous(x).view({rows, d})), to_hodu(mean), to_hodu(rstd),
                              w.defined() ? &hw : nullptr, hdx, hdw, hdb);
      // Edges: input 0, weight 1 when given, bias after it when given.
      const auto shape = ctx->saved_data["normalized_shape"].toIntVector();
      Tensor dx = to_torch(hdx, x.sizes()), dw, db;
      if (w.defined() && ctx->needs_input_grad(1)) dw = to_torch(hdw, shape);
      if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(w.defined() ? 2 : 1))
        db = to_torch(w.defined() ? hdb : tk::reduce(tk::ReduceOp::Sum, to_hodu(g2), {0}, false), shape);
      return tensor_list{dx, Tensor(), dw, db, Tensor()};
    });
  }
};

template <bool Routed>
Tensor layer_norm_autograd(const Tensor& x, at::IntArrayRef shape, const optional<Tensor>& w,
                           const optional<Tensor>& b, double eps) {
  if (Routed && python_route(kLayerNorm))
    return engine_op<LayerNormSig>("hodu::_engine_layer_norm").call(x, shape, w, b, eps);
  check_layer_norm(x, shape, w, b, eps);
  Tensor y = LayerNormFn::apply(x, shape.vec(), w, b, eps);
  return y;
}

// ---- gelu --------------------------------------------------------------------------------

using GeluSig = Tensor(const Tensor&, c10::string_view);

tk::UnaryOp gelu_kind(const Tensor& x, c10::string_view approximate) {
  check_tensor("gelu", "self", x);
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "torch.ops.hodu.gelu: approximate must be 'none' or 'tanh', got '", std::string(approximate), "'");
  return approximate == "tanh" ? tk::UnaryOp::GeluTanh : tk::UnaryOp::Gelu;
}

template <bool Routed>
Tensor gelu_cpu(const Tensor& x, c10::string_view approximate) {
  if (Routed && python_route(kGelu)) return engine_op<GeluSig>("hodu::_engine_gelu").call(x, approximate);
  const auto kind = gelu_kind(x, approximate);
  return run("gelu", [&] { return to_torch(tk::unary(kind, to_hodu(x))); });
}

struct GeluFn : torch::autograd::Function<GeluFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, bool tanh) {
    ctx->save_for_backward({x});
    ctx->saved_data["tanh"] = tanh;
    return run("gelu",
               [&] { return to_torch(tk::unary(tanh ? tk::UnaryOp::GeluTanh : tk::UnaryOp::Gelu, to_hodu(x))); });
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("gelu");
    const Tensor x = ctx->get_saved_variables()[0];
    const auto op = ctx->saved_data["tanh"].toBool() ? tk::GradOp::GeluTanh : tk::GradOp::Gelu;
    return run("gelu backward",
               [&] { return tensor_list{to_torch(tk::unary_grad(op, to_hodu(grads[0]), to_hodu(x))), Tensor()}; });
  }
};

template <bool Routed>
Tensor gelu_autograd(const Tensor& x, c10::string_view approximate) {
  if (Routed && python_route(kGelu)) return engine_op<GeluSig>("hodu::_engine_gelu").call(x, approximate);
  return GeluFn::apply(x, gelu_kind(x, approximate) == tk::UnaryOp::GeluTanh);
}

// ---- softmax over one dim ------------------------------------------------------------------

int64_t softmax_dim(const Tensor& x, int64_t dim) {
  check_tensor("softmax", "self", x);
  const int64_t r = std::max<int64_t>(x.dim(), 1);
  TORCH_CHECK(dim >= -r && dim < r, "torch.ops.hodu.softmax: dim ", dim, " is out of range for a ", x.dim(),
              "-D tensor");
  return dim < 0 ? dim + r : dim;
}

// The op over the last dim of x moved so that `dim` is last, moved back (row-major, hodu's copies).
Tensor softmax_forward(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return to_torch(tk::softmax_last(to_hodu(x.reshape({1})), false), {});
  if (dim == x.dim() - 1) return to_torch(tk::softmax_last(tk::contiguous(to_hodu(x)), false));
  const Tensor xt = hcontiguous(x.movedim(dim, -1));
  return hcontiguous(to_torch(tk::softmax_last(to_hodu(xt), false)).movedim(-1, dim));
}

template <bool Routed>
Tensor softmax_cpu(const Tensor& x, int64_t dim) {
  if (Routed && python_route(kSoftmax)) return engine_op<Tensor(const Tensor&, int64_t)>("hodu::_engine_softmax").call(x, dim);
  const int64_t d = softmax_dim(x, dim);
  return run("softmax", [&] { return softmax_forward(x, d); });
}

struct SoftmaxFn : torch::autograd::Function<SoftmaxFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t dim) {
    Tensor y = run("softmax", [&] { return softmax_forward(x, dim); });
    ctx->save_for_backward({y});
    ctx->saved_data["dim"] = dim;
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    once_differentiable("softmax");
    const Tensor y = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    return run("softmax backward", [&] {
      if (y.dim() == 0) return tensor_list{at::zeros_like(y), Tensor()};  // d softmax(scalar) = 0
      const Tensor yt = hcontiguous(y.movedim(dim, -1)), gt = hcontiguous(grads[0].movedim(dim, -1));
      const Tensor dx = to_torch(tk::softmax_last_grad(to_hodu(gt), to_hodu(yt), false)).movedim(-1, dim);
      return tensor_list{hcontiguous(dx), Tensor()};
    });
  }
};

template <bool Routed>
Tensor softmax_autograd(const Tensor& x, int64_t dim) {
  if (Routed && python_route(kSoftmax)) return engine_op<Tensor(const Tensor&, int64_t)>("hodu::_engine_softmax").call(x, dim);
  return SoftmaxFn::apply(x, softmax_dim(x, dim));
}

}  // namespace hodu_torch_ops

using namespace hodu_torch_ops;

// The public ops, their _ext_ and _engine_ twins, and the route switch.
TORCH_LIBRARY(hodu, m) {
  const char* schemas[] = {
      "matmul(Tensor self, Tensor other) -> Tensor",
      "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] dilation=1, int groups=1) -> Tensor",
      "attention(Tensor query, Tensor key, Tensor value, Tensor? mask=None, bool causal=False) -> Tensor",
      "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> Tensor",
      "gelu(Tensor self, str approximate='none') -> Tensor",
      "softmax(Tensor self, int dim) -> Tensor",
  };
  // <op>: routed by the policy; _ext_<op>: this extension's kernels always ("auto" times them);
  // _engine_<op>: implemented by hodu.torch.ops in Python.
  for (const char* s : schemas) {
    m.def(s);
    m.def((std::string("_ext_") + s).c_str());
    m.def((std::string("_engine_") + s).c_str());
  }
  m.def("_set_route(str family, str route) -> ()", &set_route);
  m.def("_get_route(str family) -> str", &get_route);
}

#define HODU_TORCH_OPS_IMPL(m, kind)                              \
  m.impl("matmul", &matmul_##kind<true>);                         \
  m.impl("linear", &linear_##kind<true>);                         \
  m.impl("conv2d", &conv2d_##kind<true>);                         \
  m.impl("attention", &attention_##kind<true>);                   \
  m.impl("layer_norm", &layer_norm_##kind<true>);                 \
  m.impl("gelu", &gelu_##kind<true>);                             \
  m.impl("softmax", &softmax_##kind<true>);                       \
  m.impl("_ext_matmul", &matmul_##kind<false>);                   \
  m.impl("_ext_linear", &linear_##kind<false>);                   \
  m.impl("_ext_conv2d", &conv2d_##kind<false>);                   \
  m.impl("_ext_attention", &attention_##kind<false>);             \
  m.impl("_ext_layer_norm", &layer_norm_##kind<false>);           \
  m.impl("_ext_gelu", &gelu_##kind<false>);                       \
  m.impl("_ext_softmax", &softmax_##kind<false>)

// Below autograd on every backend (not only CPU), so a tensor on another device meets the ops'
// own check ("... is on meta; hodu's ops run on the CPU") rather than a missing kernel.
TORCH_LIBRARY_IMPL(hodu, CompositeExplicitAutograd, m) { HODU_TORCH_OPS_IMPL(m, cpu); }
TORCH_LIBRARY_IMPL(hodu, Autograd, m) { HODU_TORCH_OPS_IMPL(m, autograd); }
