// Reductions: Reduce*, ArgMax/ArgMin, CumSum/CumProd, Softmax/LogSoftmax/Hardmax, TopK.
// Newest ONNX semantics (Reduce* take axes as an input; Softmax family works along one axis).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "engines/interp/ops/op_utils.h"
#include "engines/interp/ops/reduce_row.h"
#include "engines/interp/ops/softmax_norm_row.h"

namespace hodu::interp {
namespace {

// ---- Reduce* -----------------------------------------------------------------


// Moves the reduced axes last and packs the data: result is [outer, inner] row-major,
// each outer row holding the elements reduced into one output element.
struct ReducePlan {
  std::vector<int64_t> out_shape;
  int64_t outer = 1, inner = 1;
  Tensor packed;
};

ReducePlan plan_reduce(const KernelContext& ctx, const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  int64_t r = x.rank();
  std::vector<bool> red(static_cast<size_t>(r), false);
  if (axes.empty()) {
    std::fill(red.begin(), red.end(), true);
  } else {
    for (int64_t a : axes) {
      if (a < -r || a >= r || (r == 0 && a != 0 && a != -1))
        ctx.fail(ErrorCode::InvalidArgument, "axis {} is out of range for rank {}", a, r);
      if (r == 0) continue;
      int64_t n = a < 0 ? a + r : a;
      if (red[n]) ctx.fail(ErrorCode::InvalidArgument, "axis {} is repeated in axes", a);
      red[n] = true;
    }
  }
  ReducePlan p;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d)
    if (!red[d]) { perm.push_back(d); p.outer *= x.dim(d); }
  for (int64_t d = 0; d < r; ++d)
    if (red[d]) { perm.push_back(d); p.inner *= x.dim(d); }
  for (int64_t d = 0; d < r; ++d) {
    if (!red[d]) p.out_shape.push_back(x.dim(d));
    else if (keepdims) p.out_shape.push_back(1);
  }
  p.packed = x.permute(perm).contiguous();
  return p;
}

void reduce_kernel(KernelContext& ctx, RKind kind) {
  const Tensor& x = ctx.input(0);
  bool keepdims = ctx.node.get_int("keepdims", 1) != 0;
  bool noop = ctx.node.get_int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (ctx.has_input(1)) axes = tensor_to_int64_vector(ctx.input(1));
  else if (ctx.node.has_attr("axes")) axes = ctx.node.get_ints("axes");
  if (axes.empty() && noop) {
    ctx.set_output(0, x.clone());
    return;
  }
  DType dt = x.dtype();
  if (dt == DType::String || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(dt));
  if (dt == DType::Bool && kind != RKind::Max && kind != RKind::Min)
    ctx.fail(ErrorCode::Unsupported, "dtype bool is only supported by ReduceMax/ReduceMin");
  Tensor xw = widen(x);
  ReducePlan p = plan_reduce(ctx, xw, axes, keepdims);
  Tensor out = Tensor::empty(xw.dtype(), p.out_shape);
  dispatch_numeric(ctx, xw.dtype(), [&]<typename T>() {
    // raw_data: empty tensors (a zero dim) may not pass the typed-access contiguity check.
    const T* src = static_cast<const T*>(p.packed.raw_data());
    T* dst = static_cast<T*>(out.raw_data());
    int64_t inner = p.inner;
    parallel_for(ctx.threads, p.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) dst[o] = reduce_row<T>(kind, src + o * inner, inner);
                 });
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- ArgMax / ArgMin ----------------------------------------------------------

// Splits a tensor around one axis: [outer, n, inner].
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_axis(const std::vector<int64_t>& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[d];
    else if (d == axis) s.n = shape[d];
    else s.inner *= shape[d];
  }
  return s;
}

void arg_kernel(KernelContext& ctx, bool is_max) {
  const Tensor& x0 = ctx.input(0);
  Tensor x = widen(x0).contiguous();
  int64_t r = x.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), r);
  bool keepdims = ctx.node.get_int("keepdims", 1) != 0;
  bool last = ctx.node.get_int("select_last_index", 0) != 0;
  AxisSplit s = split_axis(x.shape(), axis);
  if (s.n == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot take the arg{} of an empty axis", is_max ? "max" : "min");
  std::vector<int64_t> oshape;
  for (int64_t d = 0; d < r; ++d) {
    if (d != axis) oshape.push_back(x.dim(d));
    else if (keepdims) oshape.push_back(1);
  }
  Tensor out = Tensor::empty(DType::I64, oshape);
  int64_t* dst = out.data<int64_t>();
  dispatch_numeric(ctx, x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    auto isnan_ = [](T v) {
      if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
      else return false;
    };
    parallel_for(ctx.threads, s.outer * s.inner, 4096, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / s.inner, i = t % s.inner;
        const T* p = src + o * s.n * s.inner + i;
        int64_t best = 0;
        T bv = p[0];
        for (int64_t k = 1; k < s.n; ++k) {
          T v = p[k * s.inner];
          bool vn = isnan_(v), bn = isnan_(bv);
          bool better, equal;
          if (vn || bn) {  // numpy: NaN wins both argmax and argmin
            better = vn && !bn;
            equal = vn && bn;
          } else {
            better = is_max ? (v > bv) : (v < bv);
            equal = v == bv;
          }
          if (better || (last && equal)) { best = k; bv = v; }
        }
        dst[t] = best;
      }
    });
  });
  ctx.set_output(0, out);
}

// ---- CumSum / CumProd ------------------------------------------------------------

void cum_kernel(KernelContext& ctx, bool prod) {
  const Tensor& x0 = ctx.input(0);
  DType dt = x0.dtype();
  Tensor x = widen(x0).contiguous();
  auto av = tensor_to_int64_vector(ctx.input(1));
  if (av.size() != 1) ctx.fail(ErrorCode::InvalidArgument, "axis must be a scalar (or 1-element) tensor");
  int64_t r = x.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
  int64_t axis = normalize_axis(ctx, av[0], r);
  bool exclusive = ctx.node.get_int("exclusive", 0) != 0;
  bool reverse = ctx.node.get_int("reverse", 0) != 0;
  AxisSplit s = split_axis(x.shape(), axis);
  Tensor out = Tensor::empty(x.dtype(), x.shape());
  dispatch_numeric(ctx, x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail(ErrorCode::Unsupported, "dtype bool is not supported by this op");
    } else {
      const T* src = x.data<T>();
      T* dst = out.data<T>();
      // Integer arithmetic wraps (unsigned to avoid UB); floats accumulate in their type like numpy.
      using Acc = std::conditional_t<std::is_floating_point_v<T>, T, uint64_t>;
      parallel_for(ctx.threads, s.outer * s.inner, 1024, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t o = t / s.inner, i = t % s.inner;
          const T* p = src + o * s.n * s.inner + i;
          T* q = dst + o * s.n * s.inner + i;
          Acc acc = prod ? Acc(1) : Acc(0);
          for (int64_t c = 0; c < s.n; ++c) {
            int64_t k = reverse ? s.n - 1 - c : c;
            Acc v;
            if constexpr (std::is_floating_point_v<T>) v = p[k * s.inner];
            else v = static_cast<Acc>(static_cast<int64_t>(p[k * s.inner]));
            if constexpr (std::is_same_v<T, uint64_t>) v = p[k * s.inner];
            if (exclusive) {
              q[k * s.inner] = static_cast<T>(acc);
              acc = prod ? Acc(acc * v) : Acc(acc + v);
            } else {
              acc = prod ? Acc(acc * v) : Acc(acc + v);
              q[k * s.inner] = static_cast<T>(acc);
            }
          }
        }
      });
    }
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- Softmax / LogSoftmax / Hardmax ----------------------------------------------

void softmax_kernel(KernelContext& ctx, SKind kind) {
  const Tensor& x0 = ctx.input(0);
  DType dt = x0.dtype();
  Tensor x = widen(x0).contiguous();
  int64_t r = x.rank();
  int64_t axis = r == 0 ? 0 : normalize_axis(ctx, ctx.node.get_int("axis", -1), r);
  AxisSplit s = r == 0 ? AxisSplit{} : split_axis(x.shape(), axis);
  Tensor out = Tensor::empty(x.dtype(), x.shape());
  dispatch_float(ctx, x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    int64_t n = s.n, inner = s.inner;
    parallel_for(ctx.threads, s.outer * s.inner, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
                 [&](int64_t b, int64_t e) {
                   std::vector<T> tmp(static_cast<size_t>(n));
                   for (int64_t t = b; t < e; ++t) {
                     int64_t o = t / inner, i = t % inner;
                     const T* p = src + o * n * inner + i;
                     T* q = dst + o * n * inner + i;
                     softmax_lane(kind, p, q, n, inner, tmp.data());
                   }
                 });
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// ---- TopK ------------------------------------------------------------------------

void topk_kernel(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  DType dt = x0.dtype();
  Tensor x = widen(x0).contiguous();
  auto kv = tensor_to_int64_vector(ctx.input(1));
  if (kv.size() != 1) ctx.fail(ErrorCode::InvalidArgument, "K must be a 1-element tensor");
  int64_t r = x.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", -1), r);
  bool largest = ctx.node.get_int("largest", 1) != 0;
  int64_t k = kv[0];
  AxisSplit s = split_axis(x.shape(), axis);
  if (k < 0 || k > s.n)
    ctx.fail(ErrorCode::InvalidArgument, "K = {} is out of range for an axis of size {}", k, s.n);
  std::vector<int64_t> oshape = x.shape();
  oshape[axis] = k;
  Tensor vals = Tensor::empty(x.dtype(), oshape);
  Tensor idxs = Tensor::empty(DType::I64, oshape);
  dispatch_numeric(ctx, x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* vd = vals.data<T>();
    int64_t* id = idxs.data<int64_t>();
    parallel_for(ctx.threads, s.outer * s.inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(s.n, 1)),
                 [&](int64_t b, int64_t e) {
                   std::vector<int64_t> order(static_cast<size_t>(s.n));
                   for (int64_t t = b; t < e; ++t) {
                     int64_t o = t / s.inner, i = t % s.inner;
                     const T* p = src + o * s.n * s.inner + i;
                     std::iota(order.begin(), order.end(), 0);
                     // NaN sorts as the largest value (numpy); ties keep the lower index first.
                     auto key_less = [&](int64_t a, int64_t c) {
                       T va = p[a * s.inner], vc = p[c * s.inner];
                       if constexpr (std::is_floating_point_v<T>) {
                         bool na = std::isnan(va), nc = std::isnan(vc);
                         if (na || nc) return !na && nc;
                       }
                       return va < vc;
                     };
                     auto cmp = [&](int64_t a, int64_t c) {
                       bool before = largest ? key_less(c, a) : key_less(a, c);
                       if (before) return true;
                       bool after = largest ? key_less(a, c) : key_less(c, a);
                       if (after) return false;
                       return a < c;
                     };
                     std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
                     T* vq = vd + o * k * s.inner + i;
                     int64_t* iq = id + o * k * s.inner + i;
                     for (int64_t j = 0; j < k; ++j) {
                       vq[j * s.inner] = p[order[j] * s.inner];
                       iq[j * s.inner] = order[j];
                     }
                   }
                 });
  });
  ctx.set_output(0, narrow_to(vals, dt));
  ctx.set_output(1, idxs);
}

}  // namespace

void register_reduction_ops(OpTable& t) {
  t.add("", "ReduceSum", [](KernelContext& c) { reduce_kernel(c, RKind::Sum); });
  t.add("", "ReduceMean", [](KernelContext& c) { reduce_kernel(c, RKind::Mean); });
  t.add("", "ReduceMax", [](KernelContext& c) { reduce_kernel(c, RKind::Max); });
  t.add("", "ReduceMin", [](KernelContext& c) { reduce_kernel(c, RKind::Min); });
  t.add("", "ReduceProd", [](KernelContext& c) { reduce_kernel(c, RKind::Prod); });
  t.add("", "ReduceL1", [](KernelContext& c) { reduce_kernel(c, RKind::L1); });
  t.add("", "ReduceL2", [](KernelContext& c) { reduce_kernel(c, RKind::L2); });
  t.add("", "ReduceLogSum", [](KernelContext& c) { reduce_kernel(c, RKind::LogSum); });
  t.add("", "ReduceLogSumExp", [](KernelContext& c) { reduce_kernel(c, RKind::LogSumExp); });
  t.add("", "ReduceSumSquare", [](KernelContext& c) { reduce_kernel(c, RKind::SumSquare); });
  t.add("", "ArgMax", [](KernelContext& c) { arg_kernel(c, true); });
  t.add("", "ArgMin", [](KernelContext& c) { arg_kernel(c, false); });
  t.add("", "CumSum", [](KernelContext& c) { cum_kernel(c, false); });
  t.add("", "CumProd", [](KernelContext& c) { cum_kernel(c, true); });
  t.add("", "Softmax", [](KernelContext& c) { softmax_kernel(c, SKind::Softmax); });
  t.add("", "LogSoftmax", [](KernelContext& c) { softmax_kernel(c, SKind::LogSoftmax); });
  t.add("", "Hardmax", [](KernelContext& c) { softmax_kernel(c, SKind::Hardmax); });
  t.add("", "TopK", topk_kernel);
}

}  // namespace hodu::interp
