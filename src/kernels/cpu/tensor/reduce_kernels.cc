// Reductions and row-wise softmax. A reduction sees its input as [K, R] rows
// (kept dims, then reduced dims): in place when the reduced dims are the
// trailing ones of a row-major tensor, else through one permuted copy; sums
// over leading dims run column-wise without the copy. Sums keep 16 partial
// sums per row so that GCC vectorizes them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::tensor_kernels {
namespace {

constexpr int64_t kLanes = 16;

template <typename T>
T row_sum(const T* x, int64_t n) {
  if constexpr (std::is_floating_point_v<T>) {
    T lanes[kLanes] = {};
    const int64_t body = n / kLanes * kLanes;
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
    T s = 0;
    for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
    for (int64_t j = body; j < n; ++j) s += x[j];
    return s;
  } else {
    T s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j];
    return s;
  }
}

template <typename T>
void reduce_rows(ReduceOp op, const T* x, void* out, int64_t K, int64_t R) {
  loops::parallel_range(K, K * R, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const T* row = x + k * R;
      switch (op) {
        case ReduceOp::Sum: static_cast<T*>(out)[k] = row_sum(row, R); break;
        case ReduceOp::Mean:
          static_cast<T*>(out)[k] = R ? static_cast<T>(row_sum(row, R) / static_cast<T>(R))
                                      : std::numeric_limits<T>::quiet_NaN();
          break;
        case ReduceOp::Prod: {
          T p = 1;
          for (int64_t j = 0; j < R; ++j) p *= row[j];
          static_cast<T*>(out)[k] = p;
          break;
        }
        case ReduceOp::Max:
        case ReduceOp::Min: {
          T m = row[0];
          const bool mx = op == ReduceOp::Max;
          for (int64_t j = 1; j < R; ++j) {
            const T v = row[j];
            if (m != m) break;  // NaN wins
            if (v != v || (mx ? v > m : v < m)) m = v;
          }
          static_cast<T*>(out)[k] = m;
          break;
        }
        case ReduceOp::ArgMax:
        case ReduceOp::ArgMin: {
          int64_t best = 0;
          T m = row[0];
          const bool mx = op == ReduceOp::ArgMax;
          for (int64_t j = 1; j < R && m == m; ++j) {
            const T v = row[j];
            if (v != v || (mx ? v > m : v < m)) {
              m = v;
              best = j;
            }
          }
          static_cast<int64_t*>(out)[k] = best;
          break;
        }
        case ReduceOp::Any:
        case ReduceOp::All: {
          bool any = false, all = true;
          for (int64_t j = 0; j < R; ++j) {
            any = any || row[j] != 0;
            all = all && row[j] != 0;
          }
          static_cast<uint8_t*>(out)[k] = op == ReduceOp::Any ? any : all;
          break;
        }
      }
    }
  });
}

// out[k] = sum_r x[r, k] for a row-major [R, K].
template <typename T>
void sum_columns(const T* x, T* out, int64_t R, int64_t K, bool mean) {
  loops::parallel_range((K + 63) / 64, K * R, [&](int64_t c0, int64_t c1) {
    const int64_t k0 = c0 * 64, k1 = std::min(K, c1 * 64);
    for (int64_t k = k0; k < k1; ++k) out[k] = 0;
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + r * K;
      for (int64_t k = k0; k < k1; ++k) out[k] += row[k];
    }
    if (mean)
      for (int64_t k = k0; k < k1; ++k) out[k] = R ? static_cast<T>(out[k] / static_cast<T>(R)) : std::numeric_limits<T>::quiet_NaN();
  });
}

}  // namespace

hodu::Tensor reduce(ReduceOp op, const hodu::Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t r = x.rank();
  std::vector<bool> reduced(r, false);
  for (int64_t d : dims) reduced[d] = true;
  std::vector<int64_t> out_shape, perm_kept, perm_red;
  int64_t K = 1, R = 1;
  for (int64_t d = 0; d < r; ++d) {
    if (reduced[d]) {
      perm_red.push_back(d);
      R *= x.dim(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      perm_kept.push_back(d);
      K *= x.dim(d);
      out_shape.push_back(x.dim(d));
    }
  }
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  const bool logical = op == ReduceOp::Any || op == ReduceOp::All;
  DType out_dtype = arg ? DType::I64 : logical ? DType::Bool : x.dtype();
  hodu::Tensor out = empty(out_dtype, out_shape);
  if (K == 0) return out;
  HODU_CHECK(R > 0 || op == ReduceOp::Sum || op == ReduceOp::Mean || op == ReduceOp::Prod || logical,
             ErrorCode::InvalidArgument, "reduction over an empty dim of shape {} (max, min and arg* need elements)",
             shape_to_string(x.shape()));
  const char* name = "reduce";
  // Sum/mean over leading dims of a row-major tensor: columns.
  bool leading = x.is_contiguous() && !perm_red.empty() && !perm_kept.empty();
  for (size_t i = 0; i < perm_red.size() && leading; ++i) leading = perm_red[i] == static_cast<int64_t>(i);
  if (leading && (op == ReduceOp::Sum || op == ReduceOp::Mean) && K > 1) {
    dispatch_compute(x.dtype(), name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      sum_columns(static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), R, K, op == ReduceOp::Mean);
    });
    return out;
  }
  std::vector<int64_t> perm = perm_kept;
  perm.insert(perm.end(), perm_red.begin(), perm_red.end());
  hodu::Tensor rows = contiguous(x.permute(perm));
  if (R == 0) {
    fill(out, op == ReduceOp::Prod || op == ReduceOp::All ? 1.0
              : op == ReduceOp::Mean                      ? std::numeric_limits<double>::quiet_NaN()
                                                          : 0.0);
    return out;
  }
  if (logical) {
    // Bool and narrow ints: bytes compared with 0 through u8/i64 views.
    hodu::Tensor v = rows.dtype() == DType::Bool || rows.dtype() == DType::U8 ? rows : cast(rows, DType::I64);
    if (v.dtype() == DType::I64) reduce_rows<int64_t>(op, static_cast<const int64_t*>(v.raw_data()), out.raw_data(), K, R);
    else reduce_rows<uint8_t>(op, static_cast<const uint8_t*>(v.raw_data()), out.raw_data(), K, R);
    return out;
  }
  dispatch_compute(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_rows<T>(op, static_cast<const T*>(rows.raw_data()), out.raw_data(), K, R);
  });
  return out;
}

hodu::Tensor softmax_last(const hodu::Tensor& x, bool log) {
  const int64_t n = x.rank() ? x.dim(-1) : 1;
  const int64_t rows = n ? x.numel() / n : 0;
  hodu::Tensor out = empty(x.dtype(), x.shape());
  if (rows == 0 || n == 0) return out;
  dispatch_float(x.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(x.raw_data());
    T* dst = static_cast<T*>(out.raw_data());
    loops::parallel_range(rows, rows * n * 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = src + r * n;
        T* yr = dst + r * n;
        T mx = xr[0];
        for (int64_t j = 1; j < n; ++j) mx = xr[j] > mx ? xr[j] : mx;
        if constexpr (std::is_same_v<T, float>) {
          if (!log) {
            std::copy(xr, xr + n, yr);
            if (!vector_math::softmax_in_place_fast(yr, n))
              for (int64_t j = 0; j < n; ++j) yr[j] = std::numeric_limits<float>::quiet_NaN();
            continue;
          }
        }
        if (std::isinf(mx) && mx < 0) {  // a row of -inf: NaN as PyTorch
          for (int64_t j = 0; j < n; ++j) yr[j] = std::numeric_limits<T>::quiet_NaN();
          continue;
        }
        T sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(xr[j] - mx);
        if (log) {
          const T lse = mx + std::log(sum);
          for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] - lse;
        } else {
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < n; ++j) yr[j] = std::exp(xr[j] - mx) * inv;
        }
      }
    });
  });
  return out;
}

hodu::Tensor softmax_last_grad(const hodu::Tensor& g, const hodu::Tensor& y, bool log) {
  const int64_t n = y.rank() ? y.dim(-1) : 1;
  const int64_t rows = n ? y.numel() / n : 0;
  hodu::Tensor out = empty(y.dtype(), y.shape());
  if (rows == 0 || n == 0) return out;
  dispatch_float(y.dtype(), "softmax backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = static_cast<const T*>(g.raw_data());
    const T* yp = static_cast<const T*>(y.raw_data());
    T* dp = static_cast<T*>(out.raw_data());
    loops::parallel_range(rows, rows * n * 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* gr = gp + r * n;
        const T* yr = yp + r * n;
        T* dr = dp + r * n;
        if (log) {
          const T s = row_sum(gr, n);
          for (int64_t j = 0; j < n; ++j) dr[j] = gr[j] - std::exp(yr[j]) * s;
        } else {
          T lanes[kLanes] = {};
          const int64_t body = n / kLanes * kLanes;
          for (int64_t j = 0; j < body; j += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) lanes[l] += gr[j + l] * yr[j + l];
          T s = 0;
          for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
          for (int64_t j = body; j < n; ++j) s += gr[j] * yr[j];
          for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - s);
        }
      }
    });
  });
  return out;
}

}  // namespace hodu::tensor_kernels
