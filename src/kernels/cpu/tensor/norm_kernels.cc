// Layer and batch normalization, forward and backward. Batch statistics are
// accumulated in double, as PyTorch's CPU kernels do (its acc_type of float),
// and the affine transform is applied as x * alpha + beta per channel with
// PyTorch's alpha = invstd * weight, beta = bias - mean * alpha.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"

namespace hodu::tensor_kernels {
namespace {

// One row of layer norm. The sums are kept per lane (kLanes partial sums, in double) so the
// compiler vectorizes them without -ffast-math; the row's statistics are then the lanes' total.
constexpr int kLanes = 8;

template <typename T>
HODU_ISA_BODY double lane_sum(const T* x, int64_t D, double shift, bool square) {
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= D; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(x[j + l]) - shift;
      acc[l] += square ? d * d : d;
    }
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; j < D; ++j) {
    const double d = static_cast<double>(x[j]) - shift;
    s += square ? d * d : d;
  }
  return s;
}

template <typename T>
HODU_ISA_BODY void ln_rows_body(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t r0, int64_t r1,
                                int64_t D, double eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    const double m = lane_sum(xr, D, 0.0, false) / static_cast<double>(D);
    const double v = lane_sum(xr, D, m, true);
    const double rs = 1.0 / std::sqrt(v / static_cast<double>(D) + eps);
    const T mt = static_cast<T>(m), rt = static_cast<T>(rs);
    if (w && b)
      for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mt) * rt * w[j] + b[j];
    else if (w)
      for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mt) * rt * w[j];
    else if (b)
      for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mt) * rt + b[j];
    else
      for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mt) * rt;
    mean[r] = mt;
    rstd[r] = rt;
  }
}

HODU_ISA_BODY void ln_rows_f32_body(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                                    int64_t r0, int64_t r1, int64_t D, double eps) {
  ln_rows_body(x, w, b, y, mean, rstd, r0, r1, D, eps);
}
HODU_ISA_BODY void ln_rows_f64_body(const double* x, const double* w, const double* b, double* y, double* mean,
                                    double* rstd, int64_t r0, int64_t r1, int64_t D, double eps) {
  ln_rows_body(x, w, b, y, mean, rstd, r0, r1, D, eps);
}
HODU_ISA_VARIANTS(void, ln_rows_f32,
                  (const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int64_t r0,
                   int64_t r1, int64_t D, double eps),
                  (x, w, b, y, mean, rstd, r0, r1, D, eps))
HODU_ISA_VARIANTS(void, ln_rows_f64,
                  (const double* x, const double* w, const double* b, double* y, double* mean, double* rstd,
                   int64_t r0, int64_t r1, int64_t D, double eps),
                  (x, w, b, y, mean, rstd, r0, r1, D, eps))

template <typename T>
void ln_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t D, double eps) {
  loops::parallel_range(rows, rows * D * 3, [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, float>) ln_rows_f32(x, w, b, y, mean, rstd, r0, r1, D, eps);
    else ln_rows_f64(x, w, b, y, mean, rstd, r0, r1, D, eps);
  });
}

// dx of rows r0..r1: the two row sums per lane (as ln_rows_body), then one pass.
template <typename T>
HODU_ISA_BODY void ln_grad_rows_body(const T* g, const T* x, const T* mean, const T* rstd, const T* w, T* dx,
                                     int64_t r0, int64_t r1, int64_t D) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = g + r * D;
    const T* xr = x + r * D;
    T* dr = dx + r * D;
    const double m = mean[r], rs = rstd[r];
    double sa[kLanes] = {}, sb[kLanes] = {};  // sums of g·w and of g·w·xhat, per lane
    int64_t j = 0;
    for (; j + kLanes <= D; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const double gw = w ? static_cast<double>(gr[j + l]) * w[j + l] : static_cast<double>(gr[j + l]);
        sa[l] += gw;
        sb[l] += gw * ((xr[j + l] - m) * rs);
      }
    double a = 0, bsum = 0;
    for (int l = 0; l < kLanes; ++l) {
      a += sa[l];
      bsum += sb[l];
    }
    for (; j < D; ++j) {
      const double gw = w ? static_cast<double>(gr[j]) * w[j] : static_cast<double>(gr[j]);
      a += gw;
      bsum += gw * ((xr[j] - m) * rs);
    }
    a /= static_cast<double>(D);
    bsum /= static_cast<double>(D);
    for (j = 0; j < D; ++j) {
      const double gw = w ? static_cast<double>(gr[j]) * w[j] : static_cast<double>(gr[j]);
      const double xh = (xr[j] - m) * rs;
      dr[j] = static_cast<T>(rs * (gw - a - xh * bsum));
    }
  }
}

// dw and db of columns j0..j1: rows walked in order with one sum per column, so the loop
// reads whole rows (contiguous) and the columns' sums vectorize without changing their order.
template <typename T>
HODU_ISA_BODY void ln_grad_cols_body(const T* g, const T* x, const T* mean, const T* rstd, T* dw, T* db, int64_t j0,
                                     int64_t j1, int64_t rows, int64_t D) {
  constexpr int64_t kBlock = 64;
  for (int64_t c0 = j0; c0 < j1; c0 += kBlock) {
    const int64_t n = std::min(kBlock, j1 - c0);
    double sw[kBlock] = {}, sb[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * D + c0;
      const T* xr = x + r * D + c0;
      const double m = mean[r], rs = rstd[r];
      for (int64_t k = 0; k < n; ++k) {
        sw[k] += gr[k] * ((xr[k] - m) * rs);
        sb[k] += gr[k];
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      if (dw) dw[c0 + k] = static_cast<T>(sw[k]);
      if (db) db[c0 + k] = static_cast<T>(sb[k]);
    }
  }
}

HODU_ISA_BODY void ln_grad_rows_f32_body(const float* g, const float* x, const float* mean, const float* rstd,
                                         const float* w, float* dx, int64_t r0, int64_t r1, int64_t D) {
  ln_grad_rows_body(g, x, mean, rstd, w, dx, r0, r1, D);
}
HODU_ISA_BODY void ln_grad_rows_f64_body(const double* g, const double* x, const double* mean, const double* rstd,
                                         const double* w, double* dx, int64_t r0, int64_t r1, int64_t D) {
  ln_grad_rows_body(g, x, mean, rstd, w, dx, r0, r1, D);
}
HODU_ISA_BODY void ln_grad_cols_f32_body(const float* g, const float* x, const float* mean, const float* rstd,
                                         float* dw, float* db, int64_t j0, int64_t j1, int64_t rows, int64_t D) {
  ln_grad_cols_body(g, x, mean, rstd, dw, db, j0, j1, rows, D);
}
HODU_ISA_BODY void ln_grad_cols_f64_body(const double* g, const double* x, const double* mean, const double* rstd,
                                         double* dw, double* db, int64_t j0, int64_t j1, int64_t rows, int64_t D) {
  ln_grad_cols_body(g, x, mean, rstd, dw, db, j0, j1, rows, D);
}
HODU_ISA_VARIANTS(void, ln_grad_rows_f32,
                  (const float* g, const float* x, const float* mean, const float* rstd, const float* w, float* dx,
                   int64_t r0, int64_t r1, int64_t D),
                  (g, x, mean, rstd, w, dx, r0, r1, D))
HODU_ISA_VARIANTS(void, ln_grad_rows_f64,
                  (const double* g, const double* x, const double* mean, const double* rstd, const double* w,
                   double* dx, int64_t r0, int64_t r1, int64_t D),
                  (g, x, mean, rstd, w, dx, r0, r1, D))
HODU_ISA_VARIANTS(void, ln_grad_cols_f32,
                  (const float* g, const float* x, const float* mean, const float* rstd, float* dw, float* db,
                   int64_t j0, int64_t j1, int64_t rows, int64_t D),
                  (g, x, mean, rstd, dw, db, j0, j1, rows, D))
HODU_ISA_VARIANTS(void, ln_grad_cols_f64,
                  (const double* g, const double* x, const double* mean, const double* rstd, double* dw, double* db,
                   int64_t j0, int64_t j1, int64_t rows, int64_t D),
                  (g, x, mean, rstd, dw, db, j0, j1, rows, D))

template <typename T>
void ln_backward(const T* g, const T* x, const T* mean, const T* rstd, const T* w, T* dx, T* dw, T* db, int64_t rows,
                 int64_t D) {
  loops::parallel_range(rows, rows * D * 4, [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, float>) ln_grad_rows_f32(g, x, mean, rstd, w, dx, r0, r1, D);
    else ln_grad_rows_f64(g, x, mean, rstd, w, dx, r0, r1, D);
  });
  if (dw || db) {
    loops::parallel_range(D, rows * D * 2, [&](int64_t j0, int64_t j1) {
      if constexpr (std::is_same_v<T, float>) ln_grad_cols_f32(g, x, mean, rstd, dw, db, j0, j1, rows, D);
      else ln_grad_cols_f64(g, x, mean, rstd, dw, db, j0, j1, rows, D);
    });
  }
}

template <typename T>
void bn_forward(const T* x, const T* w, const T* b, const T* rm, const T* rv, bool training, double eps, T* y, T* mean,
                T* invstd, T* var_unbiased, int64_t N, int64_t C, int64_t S) {
  loops::parallel_range(C, N * C * S * 3, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double m, is;
      if (training) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) {
          const T* row = x + (n * C + c) * S;
          for (int64_t k = 0; k < S; ++k) s += row[k];
        }
        const double count = static_cast<double>(N * S);
        m = s / count;
        double v = 0;
        for (int64_t n = 0; n < N; ++n) {
          const T* row = x + (n * C + c) * S;
          for (int64_t k = 0; k < S; ++k) {
            const double d = row[k] - m;
            v += d * d;
          }
        }
        is = 1.0 / std::sqrt(v / count + eps);
        var_unbiased[c] = static_cast<T>(count > 1 ? v / (count - 1) : std::numeric_limits<double>::quiet_NaN());
      } else {
        m = rm[c];
        is = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
      }
      mean[c] = static_cast<T>(m);
      invstd[c] = static_cast<T>(is);
      const T alpha = static_cast<T>(is) * (w ? w[c] : T(1));
      const T beta = (b ? b[c] : T(0)) - static_cast<T>(m) * alpha;
      for (int64_t n = 0; n < N; ++n) {
        const T* row = x + (n * C + c) * S;
        T* yr = y + (n * C + c) * S;
        for (int64_t k = 0; k < S; ++k) yr[k] = row[k] * alpha + beta;
      }
    }
  });
}

template <typename T>
void bn_backward(const T* g, const T* x, const T* mean, const T* invstd, const T* w, bool training, T* dx, T* dw,
                 T* db, int64_t N, int64_t C, int64_t S) {
  loops::parallel_range(C, N * C * S * 3, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T m = mean[c], is = invstd[c], wc = w ? w[c] : T(1);
      double sum = 0, dotp = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* gr = g + (n * C + c) * S;
        const T* xr = x + (n * C + c) * S;
        for (int64_t k = 0; k < S; ++k) {
          sum += gr[k];
          dotp += (xr[k] - m) * gr[k];
        }
      }
      if (dx) {
        if (training) {
          const double count = static_cast<double>(N * S);
          const T k = static_cast<T>(dotp * is * is / count);
          const T grad_mean = static_cast<T>(sum / count);
          for (int64_t n = 0; n < N; ++n) {
            const T* gr = g + (n * C + c) * S;
            const T* xr = x + (n * C + c) * S;
            T* dr = dx + (n * C + c) * S;
            for (int64_t j = 0; j < S; ++j) dr[j] = (gr[j] - grad_mean - (xr[j] - m) * k) * is * wc;
          }
        } else {
          for (int64_t n = 0; n < N; ++n) {
            const T* gr = g + (n * C + c) * S;
            T* dr = dx + (n * C + c) * S;
            for (int64_t j = 0; j < S; ++j) dr[j] = gr[j] * is * wc;
          }
        }
      }
      if (dw) dw[c] = static_cast<T>(dotp * is);
      if (db) db[c] = static_cast<T>(sum);
    }
  });
}

template <typename T> const T* ptr(const hodu::Tensor* t) { return t ? static_cast<const T*>(t->raw_data()) : nullptr; }

}  // namespace

void layer_norm(const hodu::Tensor& x, const hodu::Tensor* w, const hodu::Tensor* b, double eps, hodu::Tensor& y,
                hodu::Tensor& mean, hodu::Tensor& rstd) {
  const int64_t D = x.dim(-1), rows = D ? x.numel() / D : 0;
  y = empty(x.dtype(), x.shape());
  mean = empty(x.dtype(), {rows});
  rstd = empty(x.dtype(), {rows});
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ln_forward<T>(static_cast<const T*>(x.raw_data()), ptr<T>(w), ptr<T>(b), static_cast<T*>(y.raw_data()),
                  static_cast<T*>(mean.raw_data()), static_cast<T*>(rstd.raw_data()), rows, D, eps);
  });
}

void layer_norm_backward(const hodu::Tensor& g, const hodu::Tensor& x, const hodu::Tensor& mean,
                         const hodu::Tensor& rstd, const hodu::Tensor* w, hodu::Tensor& dx, hodu::Tensor& dw,
                         hodu::Tensor& db) {
  const int64_t D = x.dim(-1), rows = D ? x.numel() / D : 0;
  dx = empty(x.dtype(), x.shape());
  if (w) {
    dw = empty(x.dtype(), {D});
    db = empty(x.dtype(), {D});
  }
  dispatch_float(x.dtype(), "layer_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ln_backward<T>(static_cast<const T*>(g.raw_data()), static_cast<const T*>(x.raw_data()),
                   static_cast<const T*>(mean.raw_data()), static_cast<const T*>(rstd.raw_data()), ptr<T>(w),
                   static_cast<T*>(dx.raw_data()), w ? static_cast<T*>(dw.raw_data()) : nullptr,
                   w ? static_cast<T*>(db.raw_data()) : nullptr, rows, D);
  });
}

void batch_norm(const hodu::Tensor& x, const hodu::Tensor* w, const hodu::Tensor* b, const hodu::Tensor* rm,
                const hodu::Tensor* rv, bool training, double eps, hodu::Tensor& y, hodu::Tensor& mean,
                hodu::Tensor& invstd, hodu::Tensor& var_unbiased) {
  const int64_t N = x.dim(0), C = x.dim(1), S = N * C != 0 ? x.numel() / (N * C) : 0;
  y = empty(x.dtype(), x.shape());
  mean = empty(x.dtype(), {C});
  invstd = empty(x.dtype(), {C});
  var_unbiased = empty(x.dtype(), {C});
  dispatch_float(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_forward<T>(static_cast<const T*>(x.raw_data()), ptr<T>(w), ptr<T>(b), ptr<T>(rm), ptr<T>(rv), training, eps,
                  static_cast<T*>(y.raw_data()), static_cast<T*>(mean.raw_data()), static_cast<T*>(invstd.raw_data()),
                  static_cast<T*>(var_unbiased.raw_data()), N, C, S);
  });
}

void batch_norm_backward(const hodu::Tensor& g, const hodu::Tensor& x, const hodu::Tensor& mean,
                         const hodu::Tensor& invstd, const hodu::Tensor* w, bool training, hodu::Tensor& dx,
                         hodu::Tensor& dw, hodu::Tensor& db) {
  const int64_t N = x.dim(0), C = x.dim(1), S = N * C != 0 ? x.numel() / (N * C) : 0;
  dx = empty(x.dtype(), x.shape());
  dw = empty(x.dtype(), {C});
  db = empty(x.dtype(), {C});
  dispatch_float(x.dtype(), "batch_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_backward<T>(static_cast<const T*>(g.raw_data()), static_cast<const T*>(x.raw_data()),
                   static_cast<const T*>(mean.raw_data()), static_cast<const T*>(invstd.raw_data()), ptr<T>(w),
                   training, static_cast<T*>(dx.raw_data()), static_cast<T*>(dw.raw_data()),
                   static_cast<T*>(db.raw_data()), N, C, S);
  });
}

}  // namespace hodu::tensor_kernels
