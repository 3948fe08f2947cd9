// Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, Col2Im.
// Float convolutions lower to im2col + nn_sgemm (nn_gemm.cc); integer ones to an
// exact int32 GEMM.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engines/interp/ops/nn_common.h"
#include "engines/interp/ops/nn_gemm.h"

namespace hodu::interp {
namespace {

// ---- GEMM dispatch by element type ----
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool acc, int threads) {
  nn_sgemm(M, N, K, A, lda, B, ldb, C, ldc, acc, threads);
}
void gemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb, double* C,
          int64_t ldc, bool acc, int threads) {
  nn_dgemm(M, N, K, A, lda, B, ldb, C, ldc, acc, threads);
}
void gemm(int64_t M, int64_t N, int64_t K, const int32_t* A, int64_t lda, const int32_t* B, int64_t ldb,
          int32_t* C, int64_t ldc, bool acc, int threads) {
  parallel_for(threads, M, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int32_t* c = C + i * ldc;
      if (!acc) std::fill(c, c + N, 0);
      for (int64_t k = 0; k < K; ++k) {
        // Wrap-around like numpy int32 arithmetic, without signed-overflow UB.
        uint32_t a = static_cast<uint32_t>(A[i * lda + k]);
        const int32_t* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j)
          c[j] = static_cast<int32_t>(static_cast<uint32_t>(c[j]) + a * static_cast<uint32_t>(b[j]));
      }
    }
  });
}

// Multi-index helpers.
inline void unravel(int64_t flat, const std::vector<int64_t>& dims, int64_t* idx) {
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
}

// col[(c*kk + kidx), p - p0] = x[c, in-position of (out position p, kernel offset kidx)], or pad.
template <typename T>
void im2col(const T* x, int64_t C, const WindowGeom& g, int64_t p0, int64_t p1, T* col, T pad, int threads) {
  const int64_t nd = g.nd, kk = g.kernel_size(), ins = g.in_size(), ldc = p1 - p0;
  std::vector<int64_t> in_strides(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * g.in[d + 1];
  const int64_t last = nd - 1, W = g.out[last], sW = g.strides[last], dW = g.dilations[last], pW = g.pad_begin[last],
                inW = g.in[last];
  parallel_for(threads, C * kk, 4, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> kidx(nd), o(nd);
    for (int64_t r = r0; r < r1; ++r) {
      int64_t c = r / kk;
      unravel(r % kk, g.kernel, kidx.data());
      const T* xc = x + c * ins;
      T* dst = col + r * ldc;
      unravel(p0, g.out, o.data());
      int64_t p = p0;
      while (p < p1) {
        bool ok = true;
        int64_t off = 0;
        for (int64_t d = 0; d < last; ++d) {
          int64_t i = o[d] * g.strides[d] - g.pad_begin[d] + kidx[d] * g.dilations[d];
          if (i < 0 || i >= g.in[d]) { ok = false; break; }
          off += i * in_strides[d];
        }
        int64_t cnt = std::min(W - o[last], p1 - p);
        T* dp = dst + (p - p0);
        if (!ok) {
          std::fill(dp, dp + cnt, pad);
        } else {
          const T* xr = xc + off;
          int64_t iw = o[last] * sW - pW + kidx[last] * dW;
          if (sW == 1 && iw >= 0 && iw + cnt <= inW) {
            std::memcpy(dp, xr + iw, static_cast<size_t>(cnt) * sizeof(T));
          } else {
            for (int64_t j = 0; j < cnt; ++j, iw += sW) dp[j] = (iw >= 0 && iw < inW) ? xr[iw] : pad;
          }
        }
        p += cnt;
        o[last] = 0;
        for (int64_t d = last - 1; d >= 0; --d) {
          if (++o[d] < g.out[d]) break;
          o[d] = 0;
        }
      }
    }
  });
}

// Y[n, m, out] = sum W[m, c, k] X[n, g*Cg + c, window] (+ B[m]); padding contributes `pad`.
template <typename T>
void conv_core(const T* X, const T* W, const T* B, T* Y, int64_t N, int64_t C, int64_t M, int64_t G,
               const WindowGeom& g, T pad, int threads) {
  const int64_t Cg = C / G, Mg = M / G, kk = g.kernel_size(), ins = g.in_size(), outs = g.out_size();
  const int64_t rows = Cg * kk;
  bool pointwise = kk == 1;
  for (int64_t d = 0; d < g.nd; ++d)
    if (g.strides[d] != 1 || g.pad_begin[d] != 0 || g.pad_end[d] != 0) pointwise = false;
  // Column chunk so the im2col buffer stays below ~64 MiB.
  const int64_t max_col = int64_t(16) << 20;
  const int64_t chunk = std::max<int64_t>(1, std::min(outs, max_col / std::max<int64_t>(rows, 1)));
  auto run_one = [&](int64_t n, int64_t grp, int inner_threads, std::vector<T>& colbuf) {
    const T* xg = X + (n * C + grp * Cg) * ins;
    const T* wg = W + grp * Mg * rows;
    T* yg = Y + (n * M + grp * Mg) * outs;
    if (pointwise) {
      gemm(Mg, outs, Cg, wg, rows, xg, ins, yg, outs, false, inner_threads);
    } else {
      for (int64_t p0 = 0; p0 < outs; p0 += chunk) {
        int64_t p1 = std::min(outs, p0 + chunk);
        colbuf.resize(static_cast<size_t>(rows * (p1 - p0)));
        im2col(xg, Cg, g, p0, p1, colbuf.data(), pad, inner_threads);
        gemm(Mg, p1 - p0, rows, wg, rows, colbuf.data(), p1 - p0, yg + p0, outs, false, inner_threads);
      }
    }
    if (B)
      for (int64_t m = 0; m < Mg; ++m) {
        T b = B[grp * Mg + m];
        T* y = yg + m * outs;
        for (int64_t p = 0; p < outs; ++p) y[p] = static_cast<T>(y[p] + b);
      }
  };
  const int64_t tasks = N * G;
  if (threads > 1 && tasks >= 2 * static_cast<int64_t>(threads)) {
    parallel_for(threads, tasks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<T> colbuf;
      for (int64_t t = t0; t < t1; ++t) run_one(t / G, t % G, 1, colbuf);
    });
  } else {
    std::vector<T> colbuf;
    for (int64_t t = 0; t < tasks; ++t) run_one(t / G, t % G, threads, colbuf);
  }
}

// out[c, img] += col[c*kk + k, q] for every grid position q and kernel offset k that lands inside img.
template <typename T>
void col2im_add(const T* col, int64_t C, const std::vector<int64_t>& img, const std::vector<int64_t>& kernel,
                const std::vector<int64_t>& grid, const std::vector<int64_t>& strides,
                const std::vector<int64_t>& dil, const std::vector<int64_t>& pb, T* out, int threads) {
  const int64_t nd = static_cast<int64_t>(img.size());
  int64_t kk = 1, L = 1, imgs = 1;
  for (auto v : kernel) kk *= v;
  for (auto v : grid) L *= v;
  for (auto v : img) imgs *= v;
  std::vector<int64_t> img_strides(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) img_strides[d] = img_strides[d + 1] * img[d + 1];
  parallel_for(threads, C, 1, [&](int64_t c0, int64_t c1) {
    std::vector<int64_t> kidx(nd), q(nd);
    for (int64_t c = c0; c < c1; ++c) {
      T* oc = out + c * imgs;
      for (int64_t k = 0; k < kk; ++k) {
        unravel(k, kernel, kidx.data());
        const T* src = col + (c * kk + k) * L;
        std::fill(q.begin(), q.end(), 0);
        for (int64_t p = 0; p < L; ++p) {
          int64_t off = 0;
          bool ok = true;
          for (int64_t d = 0; d < nd; ++d) {
            int64_t i = q[d] * strides[d] - pb[d] + kidx[d] * dil[d];
            if (i < 0 || i >= img[d]) { ok = false; break; }
            off += i * img_strides[d];
          }
          if (ok) oc[off] = static_cast<T>(oc[off] + src[p]);
          for (int64_t d = nd - 1; d >= 0; --d) {
            if (++q[d] < grid[d]) break;
            q[d] = 0;
          }
        }
      }
    }
  });
}

struct ConvShapes {
  int64_t N, C, M, G;
  WindowGeom g;
};

// Validates X/W (and B) for Conv-like ops and computes the geometry.
ConvShapes conv_shapes(const KernelContext& ctx, const Tensor& X, const Tensor& W, const Tensor* B) {
  if (X.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3, got {}", X.shape_string());
  if (W.rank() != X.rank())
    ctx.fail(ErrorCode::InvalidArgument, "W {} must have the rank of X {}", W.shape_string(), X.shape_string());
  ConvShapes s;
  s.N = X.dim(0);
  s.C = X.dim(1);
  s.M = W.dim(0);
  s.G = ctx.node.get_int("group", 1);
  if (s.G <= 0 || s.C % s.G != 0 || s.M % s.G != 0 || W.dim(1) * s.G != s.C)
    ctx.fail(ErrorCode::InvalidArgument, "X {} / W {} are inconsistent with group {}", X.shape_string(),
             W.shape_string(), s.G);
  std::vector<int64_t> in(X.shape().begin() + 2, X.shape().end());
  std::vector<int64_t> kernel(W.shape().begin() + 2, W.shape().end());
  auto ks = ctx.node.get_ints("kernel_shape");
  if (!ks.empty() && ks != kernel)
    ctx.fail(ErrorCode::InvalidArgument, "kernel_shape {} does not match W {}", shape_to_string(ks),
             W.shape_string());
  s.g = make_window_geom(ctx, in, kernel);
  if (B && (B->rank() != 1 || B->dim(0) != s.M))
    ctx.fail(ErrorCode::InvalidArgument, "B {} must be 1-D of size {}", B->shape_string(), s.M);
  return s;
}

std::vector<int64_t> out_shape_of(const ConvShapes& s) {
  std::vector<int64_t> o{s.N, s.M};
  o.insert(o.end(), s.g.out.begin(), s.g.out.end());
  return o;
}

void conv_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& W0 = ctx.input(1);
  const Tensor* B0 = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (W0.dtype() != X0.dtype() || (B0 && B0->dtype() != X0.dtype()))
    ctx.fail(ErrorCode::InvalidArgument, "X, W and B must have the same dtype");
  ConvShapes s = conv_shapes(ctx, X0, W0, B0);
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous(), W = widen(W0).contiguous();
  Tensor B = B0 ? widen(*B0).contiguous() : Tensor();
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), out_shape_of(s));
    conv_core<T>(X.data<T>(), W.data<T>(), B0 ? B.data<T>() : nullptr, Y.data<T>(), s.N, s.C, s.M, s.G, s.g, T(0),
                 ctx.threads);
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// (x - zero_point) as int32, zero point scalar (or 1-element).
int32_t scalar_zero_point(const KernelContext& ctx, const KernelContext& c2, size_t idx, const char* what) {
  (void)c2;
  if (!ctx.has_input(idx)) return 0;
  const Tensor& z = ctx.input(idx);
  if (z.numel() != 1) ctx.fail(ErrorCode::Unsupported, "{} must be a scalar, got {}", what, z.shape_string());
  return static_cast<int32_t>(z.get_int64(0));
}

Tensor to_int32_minus(const Tensor& t, int32_t zp) {
  Tensor r = Tensor::empty(DType::I32, t.shape());
  int32_t* d = r.data<int32_t>();
  Tensor c = t.contiguous();
  const void* base = c.raw_data();
  for (int64_t i = 0, n = c.numel(); i < n; ++i) d[i] = static_cast<int32_t>(load_as_int64(c.dtype(), base, i)) - zp;
  return r;
}

// W - w_zero_point where the zero point is a scalar or per output channel.
Tensor weights_minus_zp(const KernelContext& ctx, const Tensor& W, size_t zp_idx) {
  Tensor r = to_int32_minus(W, 0);
  if (!ctx.has_input(zp_idx)) return r;
  const Tensor& z = ctx.input(zp_idx);
  int64_t M = W.dim(0), per = W.numel() / std::max<int64_t>(M, 1);
  auto zs = z.to_int64s();
  if (zs.size() != 1 && static_cast<int64_t>(zs.size()) != M)
    ctx.fail(ErrorCode::InvalidArgument, "w_zero_point {} must be a scalar or have {} values", z.shape_string(), M);
  int32_t* d = r.data<int32_t>();
  for (int64_t m = 0; m < M; ++m) {
    int32_t zp = static_cast<int32_t>(zs.size() == 1 ? zs[0] : zs[m]);
    for (int64_t i = 0; i < per; ++i) d[m * per + i] -= zp;
  }
  return r;
}

void conv_integer_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& W0 = ctx.input(1);
  for (const Tensor* t : {&X0, &W0})
    if (t->dtype() != DType::U8 && t->dtype() != DType::I8)
      ctx.fail(ErrorCode::Unsupported, "ConvInteger needs int8/uint8 inputs, got {}", dtype_name(t->dtype()));
  ConvShapes s = conv_shapes(ctx, X0, W0, nullptr);
  int32_t xzp = scalar_zero_point(ctx, ctx, 2, "x_zero_point");
  Tensor X = to_int32_minus(X0, xzp), W = weights_minus_zp(ctx, W0, 3);
  Tensor Y = Tensor::empty(DType::I32, out_shape_of(s));
  conv_core<int32_t>(X.data<int32_t>(), W.data<int32_t>(), nullptr, Y.data<int32_t>(), s.N, s.C, s.M, s.G, s.g, 0,
                     ctx.threads);
  ctx.set_output(0, Y);
}

void qlinear_conv_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& W0 = ctx.input(3);
  const Tensor* B0 = ctx.has_input(8) ? &ctx.input(8) : nullptr;
  for (const Tensor* t : {&X0, &W0})
    if (t->dtype() != DType::U8 && t->dtype() != DType::I8)
      ctx.fail(ErrorCode::Unsupported, "QLinearConv needs int8/uint8 x and w, got {}", dtype_name(t->dtype()));
  ConvShapes s = conv_shapes(ctx, X0, W0, B0);
  int32_t xzp = scalar_zero_point(ctx, ctx, 2, "x_zero_point");
  Tensor X = to_int32_minus(X0, xzp), W = weights_minus_zp(ctx, W0, 5);
  Tensor Bi;
  if (B0) Bi = to_int32_minus(*B0, 0);
  Tensor acc = Tensor::empty(DType::I32, out_shape_of(s));
  conv_core<int32_t>(X.data<int32_t>(), W.data<int32_t>(), B0 ? Bi.data<int32_t>() : nullptr, acc.data<int32_t>(),
                     s.N, s.C, s.M, s.G, s.g, 0, ctx.threads);
  const Tensor& xs = ctx.input(1);
  const Tensor& ws = ctx.input(4);
  const Tensor& ys = ctx.input(6);
  if (xs.numel() != 1 || ys.numel() != 1)
    ctx.fail(ErrorCode::InvalidArgument, "x_scale and y_scale must be scalars");
  auto wsv = ws.to_doubles();
  if (wsv.size() != 1 && static_cast<int64_t>(wsv.size()) != s.M)
    ctx.fail(ErrorCode::InvalidArgument, "w_scale {} must be a scalar or have {} values", ws.shape_string(), s.M);
  DType out_dt = X0.dtype();
  int64_t yzp = 0;
  if (ctx.has_input(7)) {
    const Tensor& z = ctx.input(7);
    if (z.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "y_zero_point must be a scalar");
    out_dt = z.dtype();
    yzp = z.get_int64(0);
  }
  double lo = out_dt == DType::I8 ? -128 : 0, hi = out_dt == DType::I8 ? 127 : 255;
  float xsf = static_cast<float>(xs.get_double(0)), ysf = static_cast<float>(ys.get_double(0));
  Tensor Y = Tensor::empty(out_dt, acc.shape());
  const int32_t* a = acc.data<int32_t>();
  int64_t outs = s.g.out_size();
  void* yb = Y.raw_data();
  for (int64_t i = 0, n = acc.numel(); i < n; ++i) {
    int64_t m = (i / outs) % s.M;
    float scale = xsf * static_cast<float>(wsv.size() == 1 ? wsv[0] : wsv[m]) / ysf;
    double r = static_cast<double>(a[i]) * static_cast<double>(scale) + static_cast<double>(yzp);
    r = std::nearbyint(std::clamp(r, lo, hi));
    store_from_int64(out_dt, yb, i, static_cast<int64_t>(r));
  }
  ctx.set_output(0, Y);
}

// ---- ConvTranspose ----
void conv_transpose_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& W0 = ctx.input(1);
  const Tensor* B0 = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (X0.rank() < 3 || W0.rank() != X0.rank())
    ctx.fail(ErrorCode::InvalidArgument, "X {} and W {} must have the same rank >= 3", X0.shape_string(),
             W0.shape_string());
  if (W0.dtype() != X0.dtype() || (B0 && B0->dtype() != X0.dtype()))
    ctx.fail(ErrorCode::InvalidArgument, "X, W and B must have the same dtype");
  const size_t nd = static_cast<size_t>(X0.rank() - 2);
  int64_t N = X0.dim(0), C = X0.dim(1), G = ctx.node.get_int("group", 1);
  if (G <= 0 || C % G != 0 || W0.dim(0) != C)
    ctx.fail(ErrorCode::InvalidArgument, "X {} / W {} are inconsistent with group {}", X0.shape_string(),
             W0.shape_string(), G);
  int64_t Mg = W0.dim(1), M = Mg * G, Cg = C / G;
  if (B0 && (B0->rank() != 1 || B0->dim(0) != M))
    ctx.fail(ErrorCode::InvalidArgument, "B {} must be 1-D of size {}", B0->shape_string(), M);
  std::vector<int64_t> in(X0.shape().begin() + 2, X0.shape().end());
  std::vector<int64_t> kernel(W0.shape().begin() + 2, W0.shape().end());
  auto ks = ctx.node.get_ints("kernel_shape");
  if (!ks.empty() && ks != kernel)
    ctx.fail(ErrorCode::InvalidArgument, "kernel_shape {} does not match W {}", shape_to_string(ks), W0.shape_string());
  auto strides = ints_attr(ctx, "strides", nd, 1);
  auto dil = ints_attr(ctx, "dilations", nd, 1);
  auto opad = ints_attr(ctx, "output_padding", nd, 0);
  for (size_t i = 0; i < nd; ++i)
    if (strides[i] <= 0 || dil[i] <= 0 || opad[i] < 0)
      ctx.fail(ErrorCode::InvalidArgument, "strides/dilations must be positive and output_padding non-negative");
  auto out_shape_attr = ctx.node.get_ints("output_shape");
  if (!out_shape_attr.empty() && out_shape_attr.size() != nd) {
    if (out_shape_attr.size() == nd + 2) out_shape_attr.erase(out_shape_attr.begin(), out_shape_attr.begin() + 2);
    else ctx.fail(ErrorCode::InvalidArgument, "output_shape has {} values, expected {}", out_shape_attr.size(), nd);
  }
  std::string auto_pad = ctx.node.get_string("auto_pad", "NOTSET");
  auto pads = ctx.node.get_ints("pads");
  std::vector<int64_t> pb(nd, 0), out(nd, 0);
  auto full = [&](size_t i) { return strides[i] * (in[i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1; };
  if (pads.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    for (size_t i = 0; i < nd; ++i) {
      out[i] = out_shape_attr.empty() ? in[i] * strides[i] : out_shape_attr[i];
      int64_t total = full(i) - out[i];
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // python floor division
      pb[i] = auto_pad == "SAME_UPPER" ? half : total - half;
    }
  } else {
    if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
      ctx.fail(ErrorCode::InvalidArgument, "unknown auto_pad '{}'", auto_pad);
    if (!pads.empty() && pads.size() != 2 * nd)
      ctx.fail(ErrorCode::InvalidArgument, "'pads' has {} values, expected {}", pads.size(), 2 * nd);
    for (size_t i = 0; i < nd; ++i) {
      int64_t b = pads.empty() ? 0 : pads[i], e = pads.empty() ? 0 : pads[i + nd];
      pb[i] = b;
      out[i] = out_shape_attr.empty() ? full(i) - b - e : out_shape_attr[i];
    }
  }
  for (size_t i = 0; i < nd; ++i)
    if (out[i] <= 0) ctx.fail(ErrorCode::InvalidArgument, "computed output size {} is not positive", out[i]);
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous(), W = widen(W0).contiguous();
  Tensor B = B0 ? widen(*B0).contiguous() : Tensor();
  std::vector<int64_t> yshape{N, M};
  yshape.insert(yshape.end(), out.begin(), out.end());
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), yshape);
    int64_t ins = 1, outs = 1, kk = 1;
    for (auto v : in) ins *= v;
    for (auto v : out) outs *= v;
    for (auto v : kernel) kk *= v;
    const T* x = X.data<T>();
    const T* w = W.data<T>();
    T* y = Y.data<T>();
    const int64_t rows = Mg * kk;
    // Wt[g] = (W[g*Cg:(g+1)*Cg] as Cg × rows)^T, rows × Cg.
    std::vector<T> wt(static_cast<size_t>(G * rows * Cg));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t r = 0; r < rows; ++r) wt[(g * rows + r) * Cg + c] = w[(g * Cg + c) * rows + r];
    std::vector<T> col(static_cast<size_t>(rows * ins));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < G; ++g) {
        gemm(rows, ins, Cg, wt.data() + g * rows * Cg, Cg, x + (n * C + g * Cg) * ins, ins, col.data(), ins, false,
             ctx.threads);
        col2im_add(col.data(), Mg, out, kernel, in, strides, dil, pb, y + (n * M + g * Mg) * outs, ctx.threads);
      }
    if (B0) {
      const T* b = B.data<T>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          T* ym = y + (n * M + m) * outs;
          for (int64_t p = 0; p < outs; ++p) ym[p] += b[m];
        }
    }
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// ---- Col2Im ----
void col2im_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  auto img = ctx.input(1).to_int64s();
  auto block = ctx.input(2).to_int64s();
  size_t nd = img.size();
  if (nd == 0 || block.size() != nd)
    ctx.fail(ErrorCode::InvalidArgument, "image_shape and block_shape must have the same non-zero length");
  if (X0.rank() != 3) ctx.fail(ErrorCode::InvalidArgument, "input must be 3-D [N, C*prod(block), L], got {}",
                               X0.shape_string());
  auto strides = ints_attr(ctx, "strides", nd, 1);
  auto dil = ints_attr(ctx, "dilations", nd, 1);
  auto pads = ints_attr(ctx, "pads", 2 * nd, 0);
  int64_t kk = 1, L = 1;
  std::vector<int64_t> grid(nd);
  for (size_t i = 0; i < nd; ++i) {
    if (block[i] <= 0 || img[i] <= 0 || strides[i] <= 0 || dil[i] <= 0)
      ctx.fail(ErrorCode::InvalidArgument, "image/block shapes, strides and dilations must be positive");
    kk *= block[i];
    int64_t ek = (block[i] - 1) * dil[i] + 1;
    int64_t span = img[i] + pads[i] + pads[i + nd] - ek;
    if (span < 0) ctx.fail(ErrorCode::InvalidArgument, "block larger than padded image on dim {}", i);
    grid[i] = span / strides[i] + 1;
    L *= grid[i];
  }
  int64_t N = X0.dim(0);
  if (X0.dim(1) % kk != 0 || X0.dim(2) != L)
    ctx.fail(ErrorCode::InvalidArgument, "input {} is inconsistent with block {} and {} blocks", X0.shape_string(),
             shape_to_string(block), L);
  int64_t C = X0.dim(1) / kk, imgs = 1;
  for (auto v : img) imgs *= v;
  std::vector<int64_t> pb(pads.begin(), pads.begin() + static_cast<int64_t>(nd));
  std::vector<int64_t> yshape{N, C};
  yshape.insert(yshape.end(), img.begin(), img.end());
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  dispatch_numeric(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), yshape);
    for (int64_t n = 0; n < N; ++n)
      col2im_add(X.data<T>() + n * C * kk * L, C, img, block, grid, strides, dil, pb, Y.data<T>() + n * C * imgs,
                 ctx.threads);
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// ---- DeformConv (2-D) ----
void deform_conv_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& W0 = ctx.input(1);
  const Tensor& O0 = ctx.input(2);
  const Tensor* B0 = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const Tensor* K0 = ctx.has_input(4) ? &ctx.input(4) : nullptr;
  if (X0.rank() != 4)
    ctx.fail(ErrorCode::Unsupported, "DeformConv supports 2-D inputs (rank 4), got {}", X0.shape_string());
  if (W0.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "W must be rank 4, got {}", W0.shape_string());
  int64_t N = X0.dim(0), C = X0.dim(1), H = X0.dim(2), Wd = X0.dim(3), M = W0.dim(0);
  int64_t G = ctx.node.get_int("group", 1), OG = ctx.node.get_int("offset_group", 1);
  if (G <= 0 || C % G != 0 || M % G != 0 || W0.dim(1) * G != C)
    ctx.fail(ErrorCode::InvalidArgument, "X {} / W {} are inconsistent with group {}", X0.shape_string(),
             W0.shape_string(), G);
  if (OG <= 0 || C % OG != 0) ctx.fail(ErrorCode::InvalidArgument, "C {} not divisible by offset_group {}", C, OG);
  std::vector<int64_t> kernel{W0.dim(2), W0.dim(3)};
  WindowGeom g = make_window_geom(ctx, {H, Wd}, kernel);
  int64_t OH = g.out[0], OW = g.out[1], kh = kernel[0], kw = kernel[1], kk = kh * kw, outs = OH * OW;
  if (O0.rank() != 4 || O0.dim(0) != N || O0.dim(1) != OG * 2 * kk || O0.dim(2) != OH || O0.dim(3) != OW)
    ctx.fail(ErrorCode::InvalidArgument, "offset {} must be [{}, {}, {}, {}]", O0.shape_string(), N, OG * 2 * kk, OH,
             OW);
  if (K0 && (K0->rank() != 4 || K0->dim(0) != N || K0->dim(1) != OG * kk || K0->dim(2) != OH || K0->dim(3) != OW))
    ctx.fail(ErrorCode::InvalidArgument, "mask {} must be [{}, {}, {}, {}]", K0->shape_string(), N, OG * kk, OH, OW);
  if (B0 && (B0->rank() != 1 || B0->dim(0) != M))
    ctx.fail(ErrorCode::InvalidArgument, "B {} must be 1-D of size {}", B0->shape_string(), M);
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous(), W = widen(W0).contiguous(), O = widen(O0).contiguous();
  Tensor B = B0 ? widen(*B0).contiguous() : Tensor(), K = K0 ? widen(*K0).contiguous() : Tensor();
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), {N, M, OH, OW});
    const T* x = X.data<T>();
    const T* w = W.data<T>();
    const T* off = O.data<T>();
    const T* mask = K0 ? K.data<T>() : nullptr;
    T* y = Y.data<T>();
    int64_t Cg = C / G, Mg = M / G, Cog = C / OG, rows = Cg * kk;
    std::vector<T> col(static_cast<size_t>(rows * outs));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t grp = 0; grp < G; ++grp) {
        parallel_for(ctx.threads, rows, 1, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            int64_t c = grp * Cg + r / kk, k = r % kk, ki = k / kw, kj = k % kw, og = c / Cog;
            const T* xc = x + (n * C + c) * H * Wd;
            const T* dy = off + ((n * OG + og) * 2 * kk + 2 * k) * outs;
            const T* dx = dy + outs;
            const T* mk = mask ? mask + ((n * OG + og) * kk + k) * outs : nullptr;
            T* dst = col.data() + r * outs;
            for (int64_t oh = 0; oh < OH; ++oh)
              for (int64_t ow = 0; ow < OW; ++ow) {
                int64_t p = oh * OW + ow;
                T h = static_cast<T>(oh * g.strides[0] - g.pad_begin[0] + ki * g.dilations[0]) + dy[p];
                T wv = static_cast<T>(ow * g.strides[1] - g.pad_begin[1] + kj * g.dilations[1]) + dx[p];
                T h0f = std::floor(h), w0f = std::floor(wv);
                T lh = h - h0f, lw = wv - w0f;
                int64_t h0 = static_cast<int64_t>(h0f), w0 = static_cast<int64_t>(w0f);
                auto at = [&](int64_t yy, int64_t xx) -> T {
                  return (yy >= 0 && yy < H && xx >= 0 && xx < Wd) ? xc[yy * Wd + xx] : T(0);
                };
                T v = T(0);
                if (std::isfinite(h) && std::isfinite(wv) && h0 > -2 && h0 <= H && w0 > -2 && w0 <= Wd)
                  v = (1 - lh) * ((1 - lw) * at(h0, w0) + lw * at(h0, w0 + 1)) +
                      lh * ((1 - lw) * at(h0 + 1, w0) + lw * at(h0 + 1, w0 + 1));
                dst[p] = mk ? v * mk[p] : v;
              }
          }
        });
        gemm(Mg, outs, rows, w + grp * Mg * rows, rows, col.data(), outs, y + (n * M + grp * Mg) * outs, outs, false,
             ctx.threads);
      }
    if (B0) {
      const T* b = B.data<T>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t p = 0; p < outs; ++p) y[(n * M + m) * outs + p] += b[m];
    }
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

}  // namespace

void register_nn_conv_ops(OpTable& t) {
  t.add("", "Conv", conv_kernel);
  t.add("", "ConvInteger", conv_integer_kernel);
  t.add("", "QLinearConv", qlinear_conv_kernel);
  t.add("", "ConvTranspose", conv_transpose_kernel);
  t.add("", "Col2Im", col2im_kernel);
  t.add("", "DeformConv", deform_conv_kernel);
}

}  // namespace hodu::interp
