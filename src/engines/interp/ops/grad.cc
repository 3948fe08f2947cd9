// hodu's gradient ops (domain "hodu"), the backward halves the autodiff pass
// emits where a fused kernel beats the decomposition (passes/autodiff.h):
// ConvGrad, MaxPoolGrad, AveragePoolGrad, SoftmaxGrad, LayerNormGrad,
// BatchNormGrad, ActivationGrad, SoftmaxCrossEntropyLossGrad,
// NegativeLogLikelihoodLossGrad. These are the oracles of the cpu engine's
// backward kernels: plain loops in double, written from the derivative, each
// recomputing what it needs of the forward (window maxima, batch statistics)
// exactly as the forward kernel computed it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engines/interp/ops/nn_common.h"

namespace hodu::interp {
namespace {

using Doubles = std::vector<double>;

const Tensor& float_in(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  if (!dtype_is_float(t.dtype()) || dtype_is_complex(t.dtype()))
    ctx.fail(ErrorCode::Unsupported, "input {} has dtype {}, a float type is needed", i, dtype_name(t.dtype()));
  return t;
}

void set_doubles(KernelContext& ctx, size_t i, const Doubles& v, const std::vector<int64_t>& shape, DType dt) {
  if (!ctx.wants_output(i)) return;
  Tensor t = Tensor::from_vector(DType::F64, shape, v);
  ctx.set_output(i, dt == DType::F64 ? t : t.cast(dt));
}

void same_shape(const KernelContext& ctx, const Tensor& a, const Tensor& b, const char* an, const char* bn) {
  if (a.shape() != b.shape())
    ctx.fail(ErrorCode::InvalidArgument, "{} {} does not match {} {}", an, a.shape_string(), bn, b.shape_string());
}

// ---- windows (conv, pooling) -----------------------------------------------------

// For each output position and kernel offset: the input offset it reads, or -1 (padding).
std::vector<int64_t> window_offsets(const WindowGeom& g, std::vector<int64_t>* in_padded = nullptr) {
  const int64_t nd = g.nd, outs = g.out_size(), kk = g.kernel_size();
  std::vector<int64_t> table(static_cast<size_t>(outs * kk));
  if (in_padded) in_padded->assign(static_cast<size_t>(outs), 0);
  std::vector<int64_t> o(static_cast<size_t>(nd)), k(static_cast<size_t>(nd));
  for (int64_t op = 0; op < outs; ++op) {
    int64_t r = op;
    for (int64_t d = nd - 1; d >= 0; --d) { o[d] = r % g.out[d]; r /= g.out[d]; }
    for (int64_t kf = 0; kf < kk; ++kf) {
      int64_t r2 = kf;
      for (int64_t d = nd - 1; d >= 0; --d) { k[d] = r2 % g.kernel[d]; r2 /= g.kernel[d]; }
      int64_t off = 0;
      bool inside = true, padded = true;
      for (int64_t d = 0; d < nd; ++d) {
        int64_t i = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
        if (i < 0 || i >= g.in[d]) inside = false;
        if (i < -g.pad_begin[d] || i >= g.in[d] + g.pad_end[d]) padded = false;
        off = off * g.in[d] + i;
      }
      table[static_cast<size_t>(op * kk + kf)] = inside ? off : -1;
      if (in_padded && padded) ++(*in_padded)[static_cast<size_t>(op)];
    }
  }
  return table;
}

std::vector<int64_t> spatial(const Tensor& t) { return {t.shape().begin() + 2, t.shape().end()}; }

void check_out_shape(const KernelContext& ctx, const Tensor& dy, int64_t n, int64_t c, const WindowGeom& g) {
  std::vector<int64_t> want = {n, c};
  want.insert(want.end(), g.out.begin(), g.out.end());
  if (dy.shape() != want)
    ctx.fail(ErrorCode::InvalidArgument, "dY {} does not match the forward output {}", dy.shape_string(),
             shape_to_string(want));
}

// dX = Σ W·dY over the windows, dW = Σ X·dY, dB = Σ dY.
void conv_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &x = float_in(ctx, 1), &w = float_in(ctx, 2);
  if (x.rank() < 3 || w.rank() != x.rank())
    ctx.fail(ErrorCode::InvalidArgument, "X {} and W {} must have the same rank >= 3", x.shape_string(), w.shape_string());
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), G = ctx.node.get_int("group", 1);
  if (G <= 0 || C % G != 0 || M % G != 0 || w.dim(1) != C / G)
    ctx.fail(ErrorCode::InvalidArgument, "X {} and W {} do not fit group {}", x.shape_string(), w.shape_string(), G);
  WindowGeom g = make_window_geom(ctx, spatial(x), spatial(w));
  check_out_shape(ctx, dy, N, M, g);
  const int64_t Cg = C / G, Mg = M / G, kk = g.kernel_size(), ins = g.in_size(), outs = g.out_size();
  std::vector<int64_t> table = window_offsets(g);
  Doubles X = x.to_doubles(), Wt = w.to_doubles(), dY = dy.to_doubles();
  Doubles dX(X.size(), 0.0), dW(Wt.size(), 0.0), dB(static_cast<size_t>(M), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t grp = m / Mg;
      const double* gy = dY.data() + (n * M + m) * outs;
      for (int64_t op = 0; op < outs; ++op) dB[static_cast<size_t>(m)] += gy[op];
      for (int64_t c = 0; c < Cg; ++c) {
        const size_t xbase = static_cast<size_t>((n * C + grp * Cg + c) * ins);
        const size_t wbase = static_cast<size_t>((m * Cg + c) * kk);
        for (int64_t op = 0; op < outs; ++op) {
          const double gv = gy[op];
          const int64_t* row = table.data() + op * kk;
          for (int64_t kf = 0; kf < kk; ++kf) {
            if (row[kf] < 0) continue;
            dX[xbase + static_cast<size_t>(row[kf])] += Wt[wbase + static_cast<size_t>(kf)] * gv;
            dW[wbase + static_cast<size_t>(kf)] += X[xbase + static_cast<size_t>(row[kf])] * gv;
          }
        }
      }
    }
  set_doubles(ctx, 0, dX, x.shape(), x.dtype());
  set_doubles(ctx, 1, dW, w.shape(), w.dtype());
  set_doubles(ctx, 2, dB, {M}, w.dtype());
}

WindowGeom pool_geom(const KernelContext& ctx, const Tensor& x) {
  if (x.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3 (N, C, spatial...), got {}", x.shape_string());
  auto ks = ctx.node.get_ints("kernel_shape");
  if (ks.size() != static_cast<size_t>(x.rank() - 2))
    ctx.fail(ErrorCode::InvalidArgument, "kernel_shape {} must have {} values", shape_to_string(ks), x.rank() - 2);
  return make_window_geom(ctx, spatial(x), ks, ctx.node.get_int("ceil_mode", 0) != 0);
}

// The gradient goes to the first maximum of each window (NaNs skipped, as the forward does).
void max_pool_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &x = float_in(ctx, 1);
  WindowGeom g = pool_geom(ctx, x);
  check_out_shape(ctx, dy, x.dim(0), x.dim(1), g);
  const int64_t planes = x.dim(0) * x.dim(1), kk = g.kernel_size(), ins = g.in_size(), outs = g.out_size();
  std::vector<int64_t> table = window_offsets(g);
  Doubles X = x.to_doubles(), dY = dy.to_doubles(), dX(X.size(), 0.0);
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t op = 0; op < outs; ++op) {
      int64_t best = -1;
      for (int64_t kf = 0; kf < kk; ++kf) {
        int64_t off = table[static_cast<size_t>(op * kk + kf)];
        if (off < 0) continue;
        double v = X[static_cast<size_t>(q * ins + off)];
        if (std::isnan(v)) continue;
        if (best < 0 || v > X[static_cast<size_t>(q * ins + best)]) best = off;
      }
      if (best >= 0) dX[static_cast<size_t>(q * ins + best)] += dY[static_cast<size_t>(q * outs + op)];
    }
  set_doubles(ctx, 0, dX, x.shape(), x.dtype());
}

// Each window's gradient shared by the elements it averaged (the forward's divisor).
void average_pool_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &x = float_in(ctx, 1);
  WindowGeom g = pool_geom(ctx, x);
  check_out_shape(ctx, dy, x.dim(0), x.dim(1), g);
  const bool include_pad = ctx.node.get_int("count_include_pad", 0) != 0;
  const int64_t planes = x.dim(0) * x.dim(1), kk = g.kernel_size(), ins = g.in_size(), outs = g.out_size();
  std::vector<int64_t> padded;
  std::vector<int64_t> table = window_offsets(g, &padded);
  Doubles dY = dy.to_doubles(), dX(static_cast<size_t>(x.numel()), 0.0);
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t op = 0; op < outs; ++op) {
      int64_t count = 0;
      for (int64_t kf = 0; kf < kk; ++kf) count += table[static_cast<size_t>(op * kk + kf)] >= 0;
      int64_t div = include_pad ? padded[static_cast<size_t>(op)] : count;
      if (div <= 0) continue;
      double share = dY[static_cast<size_t>(q * outs + op)] / static_cast<double>(div);
      for (int64_t kf = 0; kf < kk; ++kf) {
        int64_t off = table[static_cast<size_t>(op * kk + kf)];
        if (off >= 0) dX[static_cast<size_t>(q * ins + off)] += share;
      }
    }
  set_doubles(ctx, 0, dX, x.shape(), x.dtype());
}

// ---- rows: softmax, normalization -------------------------------------------------

// dX = Y·(dY − Σ dY·Y), or with log=1 (Y = log_softmax) dX = dY − exp(Y)·Σ dY, over `axis`.
void softmax_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &y = float_in(ctx, 1);
  same_shape(ctx, dy, y, "dY", "Y");
  const int64_t r = y.rank();
  const int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", -1), std::max<int64_t>(r, 1));
  const bool log = ctx.node.get_int("log", 0) != 0;
  int64_t outer = 1, inner = 1, A = r == 0 ? 1 : y.dim(axis);
  for (int64_t d = 0; d < axis; ++d) outer *= y.dim(d);
  for (int64_t d = axis + 1; d < r; ++d) inner *= y.dim(d);
  Doubles Y = y.to_doubles(), dY = dy.to_doubles(), dX(Y.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t a) { return static_cast<size_t>((o * A + a) * inner + i); };
      double s = 0;
      for (int64_t a = 0; a < A; ++a) s += log ? dY[at(a)] : dY[at(a)] * Y[at(a)];
      for (int64_t a = 0; a < A; ++a)
        dX[at(a)] = log ? dY[at(a)] - std::exp(Y[at(a)]) * s : Y[at(a)] * (dY[at(a)] - s);
    }
  set_doubles(ctx, 0, dX, y.shape(), y.dtype());
}

// LayerNormalization over [axis, rank) (rms=1: RMSNormalization, no mean):
// x̂ = (x − μ)·σ⁻¹, dscale = Σ_rows dY·x̂, dbias = Σ_rows dY,
// dX = σ⁻¹·(g − mean(g) − x̂·mean(g·x̂)) with g = dY·scale (rms: without mean(g)).
void layer_norm_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &x = float_in(ctx, 1), &scale = float_in(ctx, 2);
  same_shape(ctx, dy, x, "dY", "X");
  const int64_t r = x.rank();
  const int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", -1), r);
  const double eps = ctx.node.get_float("epsilon", 1e-5f);
  const bool rms = ctx.node.get_int("rms", 0) != 0;
  int64_t rows = 1, D = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.dim(d);
  for (int64_t d = axis; d < r; ++d) D *= x.dim(d);
  if (scale.numel() != D && scale.numel() != 1)
    ctx.fail(ErrorCode::InvalidArgument, "scale {} does not match the normalized dims of X {}", scale.shape_string(),
             x.shape_string());
  Doubles X = x.to_doubles(), dY = dy.to_doubles(), S = scale.to_doubles();
  Doubles dX(X.size()), dS(S.size(), 0.0), dB(S.size(), 0.0);
  auto sc = [&](int64_t j) { return S[S.size() == 1 ? 0 : static_cast<size_t>(j)]; };
  for (int64_t row = 0; row < rows; ++row) {
    const double* xr = X.data() + row * D;
    const double* gr = dY.data() + row * D;
    double mu = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < D; ++j) mu += xr[j];
      mu /= static_cast<double>(D);
    }
    for (int64_t j = 0; j < D; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= static_cast<double>(D);
    const double inv = 1 / std::sqrt(var + eps);
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < D; ++j) {
      double xh = (xr[j] - mu) * inv, g = gr[j] * sc(j);
      mg += g;
      mgx += g * xh;
      size_t k = S.size() == 1 ? 0 : static_cast<size_t>(j);
      dS[k] += gr[j] * xh;
      dB[k] += gr[j];
    }
    mg /= static_cast<double>(D);
    mgx /= static_cast<double>(D);
    for (int64_t j = 0; j < D; ++j) {
      double xh = (xr[j] - mu) * inv;
      dX[static_cast<size_t>(row * D + j)] = inv * (gr[j] * sc(j) - (rms ? 0 : mg) - xh * mgx);
    }
  }
  set_doubles(ctx, 0, dX, x.shape(), x.dtype());
  set_doubles(ctx, 1, dS, scale.shape(), scale.dtype());
  set_doubles(ctx, 2, dB, scale.shape(), scale.dtype());
}

// BatchNormalization in training mode (batch statistics, population variance, per channel
// over N and the spatial dims): dX = scale·σ⁻¹·(dY − mean(dY) − x̂·mean(dY·x̂)).
void batch_norm_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &x = float_in(ctx, 1), &scale = float_in(ctx, 2);
  same_shape(ctx, dy, x, "dY", "X");
  if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 2, got {}", x.shape_string());
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  if (scale.numel() != C) ctx.fail(ErrorCode::InvalidArgument, "scale has {} elements, X has {} channels", scale.numel(), C);
  const double eps = ctx.node.get_float("epsilon", 1e-5f);
  Doubles X = x.to_doubles(), dY = dy.to_doubles(), Sc = scale.to_doubles();
  Doubles dX(X.size()), dS(static_cast<size_t>(C), 0.0), dB(static_cast<size_t>(C), 0.0);
  const double cnt = static_cast<double>(N * S);
  for (int64_t c = 0; c < C; ++c) {
    auto at = [&](int64_t n, int64_t k) { return static_cast<size_t>((n * C + c) * S + k); };
    double mu = 0, var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) mu += X[at(n, k)];
    mu /= cnt;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) var += (X[at(n, k)] - mu) * (X[at(n, k)] - mu);
    var /= cnt;
    const double inv = 1 / std::sqrt(var + eps);
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) {
        sg += dY[at(n, k)];
        sgx += dY[at(n, k)] * (X[at(n, k)] - mu) * inv;
      }
    dS[static_cast<size_t>(c)] = sgx;
    dB[static_cast<size_t>(c)] = sg;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) {
        double xh = (X[at(n, k)] - mu) * inv;
        dX[at(n, k)] = Sc[static_cast<size_t>(c)] * inv * (dY[at(n, k)] - sg / cnt - xh * sgx / cnt);
      }
  }
  set_doubles(ctx, 0, dX, x.shape(), x.dtype());
  set_doubles(ctx, 1, dS, scale.shape(), scale.dtype());
  set_doubles(ctx, 2, dB, scale.shape(), scale.dtype());
}

// ---- activations ------------------------------------------------------------------

// f'(x) of the activation (PyTorch's choice at the kinks: Relu' (0) = 0, HardSwish' (3) = 1.5).
double activation_derivative(const KernelContext& ctx, const std::string& act, const std::vector<float>& p, double x) {
  auto param = [&](size_t i, double def) { return i < p.size() ? static_cast<double>(p[i]) : def; };
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  if (act == "Relu") return x > 0 ? 1 : 0;
  if (act == "LeakyRelu") return x > 0 ? 1 : param(0, 0.01);
  if (act == "Sigmoid") return sigmoid(x) * (1 - sigmoid(x));
  if (act == "Tanh") return 1 - std::tanh(x) * std::tanh(x);
  if (act == "Softplus") return sigmoid(x);
  if (act == "Silu") return sigmoid(x) * (1 + x * (1 - sigmoid(x)));
  if (act == "Elu") return x > 0 ? 1 : param(0, 1.0) * std::exp(x);
  if (act == "Gelu") return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  if (act == "GeluTanh") {
    const double s = std::sqrt(2 / M_PI), a = 0.044715;
    double t = std::tanh(s * (x + a * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * a * x * x);
  }
  if (act == "HardSigmoid") {
    double v = param(0, 0.2) * x + param(1, 0.5);
    return v > 0 && v < 1 ? param(0, 0.2) : 0;
  }
  if (act == "HardSwish") return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1;
  if (act == "Clip") return x >= param(0, -INFINITY) && x <= param(1, INFINITY) ? 1 : 0;
  ctx.fail(ErrorCode::Unsupported, "unknown activation '{}'", act);
}

// dX = dY · f'(X) for the activation named by `activation` (the fused ops' names).
void activation_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = float_in(ctx, 0), &x = float_in(ctx, 1);
  same_shape(ctx, dy, x, "dY", "X");
  const std::string act = ctx.node.get_string("activation", "");
  const std::vector<float> p = ctx.node.get_floats("activation_params");
  Doubles X = x.to_doubles(), dY = dy.to_doubles();
  for (size_t i = 0; i < X.size(); ++i) dY[i] *= activation_derivative(ctx, act, p, X[i]);
  set_doubles(ctx, 0, dY, x.shape(), x.dtype());
}

// ---- losses ------------------------------------------------------------------------

// What the loss ops' reduction made of each sample: dL/d(loss of sample i) = dY·w[t_i]·(1/Σw for
// mean), or dY_i·w[t_i] with reduction "none"; 0 for an ignored sample.
struct LossShare {
  int64_t N = 0, C = 0, Dn = 0;
  std::vector<int64_t> target;
  Doubles share;  // per sample (n, d)
};

LossShare loss_share(const KernelContext& ctx, const Tensor& input, size_t target_i, size_t weight_i) {
  const Tensor& dy = float_in(ctx, 0);
  const Tensor& target = ctx.input(target_i);
  if (!dtype_is_integer(target.dtype())) ctx.fail(ErrorCode::InvalidArgument, "target must be an integer tensor");
  if (input.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got {}", input.shape_string());
  LossShare s;
  s.N = input.dim(0);
  s.C = input.dim(1);
  std::vector<int64_t> tshape{s.N};
  for (int64_t d = 2; d < input.rank(); ++d) tshape.push_back(input.dim(d));
  if (target.shape() != tshape)
    ctx.fail(ErrorCode::InvalidArgument, "target {} does not match input {}", target.shape_string(), input.shape_string());
  s.Dn = s.N ? shape_numel(tshape) / s.N : 0;
  const std::string reduction = ctx.node.get_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    ctx.fail(ErrorCode::InvalidArgument, "reduction '{}' is not one of none, sum, mean", reduction);
  if (reduction == "none" ? dy.shape() != tshape : dy.numel() != 1)
    ctx.fail(ErrorCode::InvalidArgument, "dY {} does not match the loss of reduction '{}'", dy.shape_string(), reduction);
  const bool has_ii = ctx.node.has_attr("ignore_index");
  const int64_t ii = ctx.node.get_int("ignore_index", 0);
  Doubles weight;
  if (ctx.has_input(weight_i)) {
    weight = ctx.input(weight_i).to_doubles();
    if (static_cast<int64_t>(weight.size()) != s.C) ctx.fail(ErrorCode::InvalidArgument, "weight must have C = {} values", s.C);
  }
  s.target = target.to_int64s();
  Doubles g = dy.to_doubles();
  s.share.assign(s.target.size(), 0.0);
  double wsum = 0;
  for (size_t i = 0; i < s.target.size(); ++i) {
    int64_t t = s.target[i];
    if (has_ii && t == ii) continue;
    if (t < 0 || t >= s.C) ctx.fail(ErrorCode::InvalidArgument, "target value {} is out of range [0, {})", t, s.C);
    double w = weight.empty() ? 1.0 : weight[static_cast<size_t>(t)];
    s.share[i] = w * (reduction == "none" ? g[i] : g[0]);
    wsum += w;
  }
  if (reduction == "mean")
    for (double& v : s.share) v /= wsum;
  return s;
}

// d(-Σ w·log_prob[t]) / d scores = share · (softmax − onehot(t)).
void softmax_cross_entropy_grad_kernel(KernelContext& ctx) {
  const Tensor& lp = float_in(ctx, 1);
  LossShare s = loss_share(ctx, lp, 2, 3);
  Doubles L = lp.to_doubles(), dX(L.size());
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t d = 0; d < s.Dn; ++d) {
      size_t i = static_cast<size_t>(n * s.Dn + d);
      for (int64_t c = 0; c < s.C; ++c) {
        size_t k = static_cast<size_t>((n * s.C + c) * s.Dn + d);
        dX[k] = s.share[i] * (std::exp(L[k]) - (c == s.target[i] ? 1.0 : 0.0));
      }
    }
  set_doubles(ctx, 0, dX, lp.shape(), lp.dtype());
}

// d(-Σ w·input[t]) / d input = −share at the target class.
void nll_grad_kernel(KernelContext& ctx) {
  const Tensor& input = float_in(ctx, 1);
  LossShare s = loss_share(ctx, input, 2, 3);
  Doubles dX(static_cast<size_t>(input.numel()), 0.0);
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t d = 0; d < s.Dn; ++d) {
      size_t i = static_cast<size_t>(n * s.Dn + d);
      if (s.share[i] != 0) dX[static_cast<size_t>((n * s.C + s.target[i]) * s.Dn + d)] = -s.share[i];
    }
  set_doubles(ctx, 0, dX, input.shape(), input.dtype());
}

}  // namespace

void register_grad_ops(OpTable& t) {
  t.add("hodu", "ConvGrad", conv_grad_kernel);
  t.add("hodu", "MaxPoolGrad", max_pool_grad_kernel);
  t.add("hodu", "AveragePoolGrad", average_pool_grad_kernel);
  t.add("hodu", "SoftmaxGrad", softmax_grad_kernel);
  t.add("hodu", "LayerNormGrad", layer_norm_grad_kernel);
  t.add("hodu", "BatchNormGrad", batch_norm_grad_kernel);
  t.add("hodu", "ActivationGrad", activation_grad_kernel);
  t.add("hodu", "SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_grad_kernel);
  t.add("hodu", "NegativeLogLikelihoodLossGrad", nll_grad_kernel);
}

}  // namespace hodu::interp
