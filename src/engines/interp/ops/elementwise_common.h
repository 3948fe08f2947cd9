// Helpers shared by the elementwise kernels (elementwise_*.cc, cast.cc,
// generator.cc, string.cc): dtype dispatch without bool, broadcasting loops for
// one, two and three inputs, and the per-file registration hooks.
#pragma once
#include <array>
#include <string>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engines/interp/ops/op_utils.h"
#include "engines/interp/ops/scalar_math.h"

namespace hodu::interp {

// Registration hooks, called from register_elementwise_ops (elementwise.cc).
void register_elementwise_unary_ops(OpTable& t);
void register_elementwise_binary_ops(OpTable& t);
void register_cast_ops(OpTable& t);

// Casts a tensor to `to` with ONNX Cast semantics (strings both ways, float8
// saturation, float8e8m0 round_mode "up" / "down" / "nearest").
Tensor cast_tensor(const KernelContext& ctx, const Tensor& x, DType to, bool saturate = true,
                   const std::string& round_mode = "up");

// Numeric dispatch without bool: float, double and every 8..64-bit integer.
template <typename F>
decltype(auto) dispatch_arith(const KernelContext& ctx, DType dtype, F&& f) {
  if (dtype == DType::Bool)
    ctx.fail(ErrorCode::Unsupported, "dtype bool is not supported by this op");
  return dispatch_numeric(ctx, dtype, std::forward<F>(f));
}

// Integer types only (8..64-bit, signed and unsigned).
template <typename F>
decltype(auto) dispatch_integer(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::I8: return f.template operator()<int8_t>();
    case DType::I16: return f.template operator()<int16_t>();
    case DType::I32: return f.template operator()<int32_t>();
    case DType::I64: return f.template operator()<int64_t>();
    case DType::U8: return f.template operator()<uint8_t>();
    case DType::U16: return f.template operator()<uint16_t>();
    case DType::U32: return f.template operator()<uint32_t>();
    case DType::U64: return f.template operator()<uint64_t>();
    default:
      ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op (needs an integer type)",
               dtype_name(dtype));
  }
}

inline constexpr int64_t kElementwiseGrain = 1 << 15;

// Output shape of broadcasting all `shapes` together (numpy rules).
std::vector<int64_t> broadcast_all(const KernelContext& ctx, const std::vector<std::vector<int64_t>>& shapes);

// Calls body(out_index, offsets) for every element of `out_shape`, where
// offsets[k] is the element offset into input k (contiguous, shape shapes[k]
// broadcast to out_shape). Parallel over disjoint output ranges.
template <size_t N, typename Body>
void broadcast_for(int threads, const std::vector<int64_t>& out_shape,
                   const std::array<std::vector<int64_t>, N>& in_shapes, Body&& body) {
  const int64_t n = shape_numel(out_shape);
  if (n == 0) return;
  bool same = true;
  for (size_t k = 0; k < N; ++k) same = same && in_shapes[k] == out_shape;
  if (same) {
    parallel_for(threads, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      std::array<int64_t, N> offs;
      for (int64_t i = b; i < e; ++i) {
        offs.fill(i);
        body(i, offs);
      }
    });
    return;
  }
  const size_t r = out_shape.size();
  std::array<std::vector<int64_t>, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcast_strides(in_shapes[k], out_shape);
  parallel_for(threads, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(r, 0);
    std::array<int64_t, N> offs{};
    int64_t rem = b;
    for (size_t d = r; d-- > 0;) {
      idx[d] = rem % out_shape[d];
      rem /= out_shape[d];
      for (size_t k = 0; k < N; ++k) offs[k] += idx[d] * st[k][d];
    }
    for (int64_t i = b; i < e; ++i) {
      body(i, offs);
      for (size_t d = r; d-- > 0;) {
        if (++idx[d] < out_shape[d]) {
          for (size_t k = 0; k < N; ++k) offs[k] += st[k][d];
          break;
        }
        for (size_t k = 0; k < N; ++k) offs[k] -= st[k][d] * (out_shape[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

// out[i] = f(a[i]) over contiguous buffers, in parallel.
template <typename TI, typename TO, typename F>
void map_unary(int threads, const TI* in, TO* out, int64_t n, F&& f) {
  parallel_for(threads, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = f(in[i]);
  });
}

// out = f(a, b) with broadcasting; a, b contiguous, out allocated with the broadcast shape.
template <typename TA, typename TB, typename TO, typename F>
void map_binary(int threads, const Tensor& a, const Tensor& b, Tensor& out, F&& f) {
  const TA* pa = static_cast<const TA*>(a.raw_data());
  const TB* pb = static_cast<const TB*>(b.raw_data());
  TO* po = static_cast<TO*>(out.raw_data());
  const int64_t n = out.numel();
  if (n == 0) return;
  if (a.shape() == out.shape() && b.numel() == 1) {
    const TB bv = pb[0];
    parallel_for(threads, n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], bv);
    });
    return;
  }
  if (b.shape() == out.shape() && a.numel() == 1) {
    const TA av = pa[0];
    parallel_for(threads, n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(av, pb[i]);
    });
    return;
  }
  if (a.shape() == out.shape() && b.shape() == out.shape()) {
    parallel_for(threads, n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  broadcast_for<2>(threads, out.shape(), {a.shape(), b.shape()},
                   [&](int64_t i, const std::array<int64_t, 2>& o) { po[i] = f(pa[o[0]], pb[o[1]]); });
}

// Element pointers of a contiguous tensor (also valid for empty tensors of any shape).
template <typename T>
T* elems(Tensor& t) { return static_cast<T*>(t.raw_data()); }
template <typename T>
const T* elems(const Tensor& t) { return static_cast<const T*>(t.raw_data()); }
inline std::string* strs(Tensor& t) { return static_cast<std::string*>(t.raw_data()); }
inline const std::string* strs(const Tensor& t) { return static_cast<const std::string*>(t.raw_data()); }

// Input i as a contiguous tensor, narrow floats widened to f32.
inline Tensor widened_input(const KernelContext& ctx, size_t i) { return widen(ctx.input(i)).contiguous(); }

}  // namespace hodu::interp
