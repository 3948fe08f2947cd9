// Normalizations: BatchNormalization, InstanceNormalization, LayerNormalization,
// GroupNormalization (opset 21), RMSNormalization (opset 23), LRN,
// MeanVarianceNormalization, LpNormalization. Statistics are computed in double
// and results rounded to the tensor's type (narrow floats go through f32).
#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>

#include "engines/interp/ops/op_utils.h"
#include "engines/interp/ops/softmax_norm_row.h"

namespace hodu::interp {
namespace {

// A float tensor widened and packed, plus its original dtype.
struct FloatIn {
  Tensor t;
  DType orig;
};
FloatIn float_input(const KernelContext& ctx, size_t i) {
  const Tensor& x = ctx.input(i);
  if (!dtype_is_float(x.dtype()) || dtype_is_complex(x.dtype()))
    ctx.fail(ErrorCode::Unsupported, "input {} has dtype {}, a float type is needed", i, dtype_name(x.dtype()));
  return {widen(x).contiguous(), x.dtype()};
}

// Values of a small parameter tensor as doubles.
std::vector<double> param(const KernelContext& ctx, size_t i) { return ctx.input(i).to_doubles(); }

// Parameter `i` broadcast (numpy, unidirectionally) to `shape`; returns offsets into it.
std::vector<int64_t> param_offsets(const KernelContext& ctx, size_t i, const std::vector<int64_t>& shape,
                                   const char* what) {
  const Tensor& p = ctx.input(i);
  if (p.rank() > static_cast<int64_t>(shape.size()) || broadcast_shapes(ctx, p.shape(), shape) != shape)
    ctx.fail(ErrorCode::InvalidArgument, "{} of shape {} cannot be broadcast to {}", what, p.shape_string(),
             shape_to_string(shape));
  return broadcast_offsets(p.shape(), shape);
}

void check_channels(const KernelContext& ctx, size_t i, int64_t c, const char* what) {
  if (ctx.input(i).numel() != c)
    ctx.fail(ErrorCode::InvalidArgument, "{} has {} elements, expected {} (one per channel)", what, ctx.input(i).numel(), c);
}

// ---- BatchNormalization ---------------------------------------------------------

void batchnorm_kernel(KernelContext& ctx) {
  FloatIn x = float_input(ctx, 0);
  if (x.t.rank() < 1) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 1");
  int64_t N = x.t.dim(0), C = x.t.rank() > 1 ? x.t.dim(1) : 1;
  int64_t S = x.t.rank() > 2 ? shape_numel(std::vector<int64_t>(x.t.shape().begin() + 2, x.t.shape().end())) : 1;
  for (size_t i = 1; i <= 4; ++i) check_channels(ctx, i, C, i == 1 ? "scale" : i == 2 ? "B" : i == 3 ? "input_mean" : "input_var");
  double eps = ctx.node.get_float("epsilon", 1e-5f);
  double momentum = ctx.node.get_float("momentum", 0.9f);
  bool training = ctx.node.get_int("training_mode", 0) != 0;
  auto scale = param(ctx, 1), bias = param(ctx, 2), mean = param(ctx, 3), var = param(ctx, 4);
  Tensor out = Tensor::empty(x.t.dtype(), x.t.shape());
  dispatch_float(ctx, x.t.dtype(), [&]<typename T>() {
    const T* src = x.t.data<T>();
    T* dst = out.data<T>();
    std::vector<double> m = mean, v = var;
    if (training) {
      // Batch statistics (population variance), per channel.
      int64_t cnt = N * S;
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < S; ++k) s += src[(n * C + c) * S + k];
        double mu = cnt ? s / static_cast<double>(cnt) : 0;
        double q = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < S; ++k) {
            double d = src[(n * C + c) * S + k] - mu;
            q += d * d;
          }
        m[c] = mu;
        v[c] = cnt ? q / static_cast<double>(cnt) : 0;
      }
    }
    parallel_for(ctx.threads, N * C, std::max<int64_t>(1, 4096 / std::max<int64_t>(S, 1)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t c = t % C;
        double inv = 1.0 / std::sqrt(v[c] + eps);
        double a = scale[c] * inv;
        for (int64_t k = 0; k < S; ++k) dst[t * S + k] = static_cast<T>((src[t * S + k] - m[c]) * a + bias[c]);
      }
    });
    if (training) {
      auto emit = [&](size_t oi, const std::vector<double>& run, const std::vector<double>& batch) {
        if (!ctx.wants_output(oi)) return;
        DType pdt = ctx.input(oi + 2).dtype();
        Tensor r = Tensor::empty(pdt, {C});
        for (int64_t c = 0; c < C; ++c) r.set_double(c, run[c] * momentum + batch[c] * (1 - momentum));
        ctx.set_output(oi, r);
      };
      emit(1, mean, m);
      emit(2, var, v);
    }
  });
  ctx.set_output(0, narrow_to(out, x.orig));
}

// ---- InstanceNormalization --------------------------------------------------------

void instancenorm_kernel(KernelContext& ctx) {
  FloatIn x = float_input(ctx, 0);
  if (x.t.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 2");
  int64_t N = x.t.dim(0), C = x.t.dim(1);
  int64_t S = shape_numel(std::vector<int64_t>(x.t.shape().begin() + 2, x.t.shape().end()));
  check_channels(ctx, 1, C, "scale");
  check_channels(ctx, 2, C, "B");
  double eps = ctx.node.get_float("epsilon", 1e-5f);
  auto scale = param(ctx, 1), bias = param(ctx, 2);
  Tensor out = Tensor::empty(x.t.dtype(), x.t.shape());
  dispatch_float(ctx, x.t.dtype(), [&]<typename T>() {
    const T* src = x.t.data<T>();
    T* dst = out.data<T>();
    parallel_for(ctx.threads, N * C, std::max<int64_t>(1, 4096 / std::max<int64_t>(S, 1)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t c = t % C;
        const T* p = src + t * S;
        double s = 0;
        for (int64_t k = 0; k < S; ++k) s += p[k];
        double mu = s / static_cast<double>(S);
        double q = 0;
        for (int64_t k = 0; k < S; ++k) q += (p[k] - mu) * (p[k] - mu);
        double inv = 1.0 / std::sqrt(q / static_cast<double>(S) + eps);
        for (int64_t k = 0; k < S; ++k) dst[t * S + k] = static_cast<T>((p[k] - mu) * inv * scale[c] + bias[c]);
      }
    });
  });
  ctx.set_output(0, narrow_to(out, x.orig));
}

// ---- LayerNormalization / RMSNormalization -----------------------------------------

DType stash_dtype(const KernelContext& ctx) {
  int64_t st = ctx.node.get_int("stash_type", 1);
  auto d = dtype_from_onnx(static_cast<int>(st));
  if (!d || !dtype_is_float(*d)) ctx.fail(ErrorCode::InvalidArgument, "stash_type {} is not a float type", st);
  return *d;
}

void rows_norm_kernel(KernelContext& ctx, bool rms) {
  FloatIn x = float_input(ctx, 0);
  int64_t r = x.t.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", -1), r);
  double eps = ctx.node.get_float("epsilon", 1e-5f);
  DType stash = stash_dtype(ctx);
  std::vector<int64_t> norm_shape(x.t.shape().begin() + axis, x.t.shape().end());
  int64_t rows = shape_numel(std::vector<int64_t>(x.t.shape().begin(), x.t.shape().begin() + axis));
  int64_t cols = shape_numel(norm_shape);
  auto soff = param_offsets(ctx, 1, norm_shape, "Scale");
  auto scale = param(ctx, 1);
  std::vector<double> bias;
  std::vector<int64_t> boff;
  if (!rms && ctx.has_input(2)) {
    boff = param_offsets(ctx, 2, norm_shape, "B");
    bias = param(ctx, 2);
  }
  // Statistics are computed in the stash type: narrow (f16/bf16) stash rounds like numpy would.
  bool stash_f64 = stash == DType::F64;
  Tensor out = Tensor::empty(x.t.dtype(), x.t.shape());
  std::vector<int64_t> stat_shape(x.t.shape().begin(), x.t.shape().begin() + axis);
  stat_shape.resize(static_cast<size_t>(r), 1);
  std::vector<double> means(static_cast<size_t>(rows)), invs(static_cast<size_t>(rows));
  dispatch_float(ctx, x.t.dtype(), [&]<typename T>() {
    const T* src = x.t.data<T>();
    T* dst = out.data<T>();
    parallel_for(ctx.threads, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* p = src + i * cols;
        double mu, inv;
        norm_row_stats(p, cols, eps, rms, stash_f64, mu, inv);
        means[i] = mu;
        invs[i] = inv;
        for (int64_t k = 0; k < cols; ++k) {
          double y = (p[k] - mu) * inv * scale[soff[k]];
          if (!bias.empty()) y += bias[boff[k]];
          dst[i * cols + k] = static_cast<T>(y);
        }
      }
    });
  });
  ctx.set_output(0, narrow_to(out, x.orig));
  if (!rms) {
    for (size_t oi = 1; oi <= 2; ++oi) {
      if (!ctx.wants_output(oi)) continue;
      Tensor s = Tensor::empty(stash, stat_shape);
      const auto& v = oi == 1 ? means : invs;
      for (int64_t i = 0; i < rows; ++i) s.set_double(i, v[i]);
      ctx.set_output(oi, s);
    }
  }
}

// ---- GroupNormalization (opset 21) -------------------------------------------------

void groupnorm_kernel(KernelContext& ctx) {
  FloatIn x = float_input(ctx, 0);
  if (x.t.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 2");
  int64_t N = x.t.dim(0), C = x.t.dim(1);
  int64_t S = shape_numel(std::vector<int64_t>(x.t.shape().begin() + 2, x.t.shape().end()));
  int64_t G = ctx.node.get_int("num_groups", 0);
  if (G <= 0 || C % G != 0)
    ctx.fail(ErrorCode::InvalidArgument, "num_groups = {} must be positive and divide the {} channels", G, C);
  check_channels(ctx, 1, C, "scale");
  check_channels(ctx, 2, C, "bias");
  double eps = ctx.node.get_float("epsilon", 1e-5f);
  (void)stash_dtype(ctx);
  auto scale = param(ctx, 1), bias = param(ctx, 2);
  int64_t cg = C / G, gsize = cg * S;
  Tensor out = Tensor::empty(x.t.dtype(), x.t.shape());
  dispatch_float(ctx, x.t.dtype(), [&]<typename T>() {
    const T* src = x.t.data<T>();
    T* dst = out.data<T>();
    parallel_for(ctx.threads, N * G, std::max<int64_t>(1, 4096 / std::max<int64_t>(gsize, 1)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const T* p = src + t * gsize;
        double s = 0;
        for (int64_t k = 0; k < gsize; ++k) s += p[k];
        double mu = s / static_cast<double>(gsize);
        double q = 0;
        for (int64_t k = 0; k < gsize; ++k) q += (p[k] - mu) * (p[k] - mu);
        double inv = 1.0 / std::sqrt(q / static_cast<double>(gsize) + eps);
        int64_t g = t % G;
        for (int64_t cc = 0; cc < cg; ++cc) {
          int64_t c = g * cg + cc;
          for (int64_t k = 0; k < S; ++k) {
            int64_t idx = cc * S + k;
            dst[t * gsize + idx] = static_cast<T>((p[idx] - mu) * inv * scale[c] + bias[c]);
          }
        }
      }
    });
  });
  ctx.set_output(0, narrow_to(out, x.orig));
}

// ---- LRN ---------------------------------------------------------------------------

void lrn_kernel(KernelContext& ctx) {
  FloatIn x = float_input(ctx, 0);
  if (x.t.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 2");
  int64_t size = ctx.node.get_int("size", 0);
  if (size <= 0) ctx.fail(ErrorCode::InvalidArgument, "size must be positive, got {}", size);
  double alpha = ctx.node.get_float("alpha", 1e-4f), beta = ctx.node.get_float("beta", 0.75f),
         bias = ctx.node.get_float("bias", 1.0f);
  int64_t N = x.t.dim(0), C = x.t.dim(1);
  int64_t S = shape_numel(std::vector<int64_t>(x.t.shape().begin() + 2, x.t.shape().end()));
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo;  // floor, ceil
  Tensor out = Tensor::empty(x.t.dtype(), x.t.shape());
  dispatch_float(ctx, x.t.dtype(), [&]<typename T>() {
    const T* src = x.t.data<T>();
    T* dst = out.data<T>();
    parallel_for(ctx.threads, N * C, std::max<int64_t>(1, 1024 / std::max<int64_t>(S * size, 1)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t n = t / C, c = t % C;
        int64_t c0 = std::max<int64_t>(0, c - lo), c1 = std::min<int64_t>(C - 1, c + hi);
        for (int64_t k = 0; k < S; ++k) {
          double sq = 0;
          for (int64_t j = c0; j <= c1; ++j) {
            double v = src[(n * C + j) * S + k];
            sq += v * v;
          }
          dst[t * S + k] = static_cast<T>(src[t * S + k] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
        }
      }
    });
  });
  ctx.set_output(0, narrow_to(out, x.orig));
}

// ---- MeanVarianceNormalization / LpNormalization -------------------------------------

// Packs x as [outer, inner] with the chosen axes last; returns the permutation to undo.
struct AxesPack {
  Tensor packed;
  std::vector<int64_t> perm, packed_shape;
  int64_t outer = 1, inner = 1;
};
AxesPack pack_axes(const KernelContext& ctx, const Tensor& x, const std::vector<int64_t>& axes) {
  int64_t r = x.rank();
  std::vector<bool> sel(static_cast<size_t>(r), false);
  for (int64_t a : axes) {
    int64_t n = normalize_axis(ctx, a, r);
    if (sel[n]) ctx.fail(ErrorCode::InvalidArgument, "axis {} is repeated", a);
    sel[n] = true;
  }
  AxesPack p;
  for (int64_t d = 0; d < r; ++d)
    if (!sel[d]) { p.perm.push_back(d); p.outer *= x.dim(d); }
  for (int64_t d = 0; d < r; ++d)
    if (sel[d]) { p.perm.push_back(d); p.inner *= x.dim(d); }
  p.packed = x.permute(p.perm).contiguous();
  p.packed_shape = p.packed.shape();
  return p;
}
Tensor unpack_axes(const AxesPack& p, const Tensor& y) {
  std::vector<int64_t> inv(p.perm.size());
  for (size_t i = 0; i < p.perm.size(); ++i) inv[p.perm[i]] = static_cast<int64_t>(i);
  return y.permute(inv).contiguous();
}

void rowwise(KernelContext& ctx, const std::vector<int64_t>& axes,
             const std::function<void(const double*, double*, int64_t)>& fn) {
  FloatIn x = float_input(ctx, 0);
  AxesPack p = pack_axes(ctx, x.t, axes);
  Tensor y = Tensor::empty(x.t.dtype(), p.packed_shape);
  dispatch_float(ctx, x.t.dtype(), [&]<typename T>() {
    const T* src = p.packed.data<T>();
    T* dst = y.data<T>();
    parallel_for(ctx.threads, p.outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(p.inner, 1)), [&](int64_t b, int64_t e) {
      std::vector<double> in(static_cast<size_t>(p.inner)), out(static_cast<size_t>(p.inner));
      for (int64_t o = b; o < e; ++o) {
        for (int64_t k = 0; k < p.inner; ++k) in[k] = src[o * p.inner + k];
        fn(in.data(), out.data(), p.inner);
        for (int64_t k = 0; k < p.inner; ++k) dst[o * p.inner + k] = static_cast<T>(out[k]);
      }
    });
  });
  ctx.set_output(0, narrow_to(unpack_axes(p, y), x.orig));
}

void mvn_kernel(KernelContext& ctx) {
  auto axes = ctx.node.get_ints("axes", {0, 2, 3});
  rowwise(ctx, axes, [](const double* in, double* out, int64_t n) {
    // The ONNX function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
    double s = 0, s2 = 0;
    for (int64_t k = 0; k < n; ++k) { s += in[k]; s2 += in[k] * in[k]; }
    double mu = s / static_cast<double>(n);
    double var = s2 / static_cast<double>(n) - mu * mu;
    double sd = std::sqrt(std::max(var, 0.0)) + 1e-9;
    for (int64_t k = 0; k < n; ++k) out[k] = (in[k] - mu) / sd;
  });
}

void lpnorm_kernel(KernelContext& ctx) {
  int64_t p = ctx.node.get_int("p", 2);
  if (p != 1 && p != 2) ctx.fail(ErrorCode::InvalidArgument, "p must be 1 or 2, got {}", p);
  int64_t r = ctx.input(0).rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", -1), r);
  rowwise(ctx, {axis}, [p](const double* in, double* out, int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += p == 1 ? std::fabs(in[k]) : in[k] * in[k];
    double norm = p == 1 ? s : std::sqrt(s);
    // A zero vector stays zero (ONNX's reference: where(norm == 0, 0, x / norm)), not 0/0 = NaN.
    for (int64_t k = 0; k < n; ++k) out[k] = norm == 0 ? 0.0 : in[k] / norm;
  });
}

}  // namespace

void register_normalization_ops(OpTable& t) {
  t.add("", "BatchNormalization", batchnorm_kernel);
  t.add("", "InstanceNormalization", instancenorm_kernel);
  t.add("", "LayerNormalization", [](KernelContext& c) { rows_norm_kernel(c, false); });
  t.add("", "RMSNormalization", [](KernelContext& c) { rows_norm_kernel(c, true); });
  t.add("", "GroupNormalization", groupnorm_kernel);
  t.add("", "LRN", lrn_kernel);
  t.add("", "MeanVarianceNormalization", mvn_kernel);
  t.add("", "LpNormalization", lpnorm_kernel);
}

}  // namespace hodu::interp
