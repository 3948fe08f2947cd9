// OneHot, NonZero, Unique, Compress, Trilu, ReverseSequence, Dropout.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {
namespace {

void onehot_kernel(KernelContext& ctx) {
  const Tensor& it = ctx.input(0);
  const Tensor& dt = ctx.input(1);
  const Tensor& vals = ctx.input(2);
  if (dt.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "depth must hold one value, got {}", dt.type_string());
  if (vals.numel() != 2) ctx.fail(ErrorCode::InvalidArgument, "values must hold 2 values, got {}", vals.type_string());
  if (it.dtype() == DType::String || dt.dtype() == DType::String)
    ctx.fail(ErrorCode::InvalidArgument, "indices and depth must be numeric");
  double dd = dt.get_double(0);
  if (!(dd >= 1) || !std::isfinite(dd)) ctx.fail(ErrorCode::InvalidArgument, "depth must be >= 1, got {}", dd);
  int64_t depth = static_cast<int64_t>(dd);
  int64_t r = it.rank();
  int64_t axis = ctx.node.get_int("axis", -1);
  if (axis < 0) axis += r + 1;
  if (axis < 0 || axis > r) ctx.fail(ErrorCode::InvalidArgument, "axis {} is out of range for output rank {}",
                                     ctx.node.get_int("axis", -1), r + 1);
  std::vector<int64_t> oshape = it.shape();
  oshape.insert(oshape.begin() + axis, depth);
  std::vector<int64_t> ids(static_cast<size_t>(it.numel()));
  if (dtype_is_float(it.dtype())) {
    auto dv = it.to_doubles();
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = std::isfinite(dv[i]) ? static_cast<int64_t>(dv[i]) : depth;
  } else {
    ids = it.to_int64s();
  }
  int64_t outer = prod(it.shape(), 0, axis), inner = prod(it.shape(), axis, r);
  Tensor v = to_movable(vals);
  Tensor out = Tensor::empty(v.dtype(), oshape);
  dispatch_storage(ctx, v.dtype(), [&]<typename T>() {
    const T* vp = elem_ptr<T>(v);
    T* d = elem_ptr<T>(out);
    int64_t n = out.numel();
    for (int64_t k = 0; k < n; ++k) d[k] = vp[0];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t id = ids[o * inner + i];
        if (id < 0) id += depth;
        if (id < 0 || id >= depth) continue;
        d[(o * depth + id) * inner + i] = vp[1];
      }
  });
  ctx.set_output(0, from_movable(out, vals.dtype()));
}

// Nonzero flags of every element (strings: non-empty; floats: != 0, NaN counts).
std::vector<uint8_t> nonzero_flags(const KernelContext& ctx, const Tensor& x) {
  std::vector<uint8_t> f(static_cast<size_t>(x.numel()));
  if (x.dtype() == DType::String) {
    Tensor c = x.contiguous();
    for (size_t i = 0; i < f.size(); ++i) f[i] = !c.string_data()[i].empty();
    return f;
  }
  if (dtype_is_packed4(x.dtype()) || dtype_is_complex(x.dtype())) {
    auto dv = x.to_doubles();
    for (size_t i = 0; i < f.size(); ++i) f[i] = dv[i] != 0;
    return f;
  }
  Tensor w = widen(x).contiguous();
  dispatch_numeric(ctx, w.dtype(), [&]<typename T>() {
    const T* p = w.data<T>();
    for (size_t i = 0; i < f.size(); ++i) f[i] = p[i] != T(0);
  });
  return f;
}

void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto f = nonzero_flags(ctx, x);
  std::vector<int64_t> shape = x.shape();
  if (shape.empty()) shape = {1};  // numpy treats a scalar as 1-D
  int64_t r = static_cast<int64_t>(shape.size());
  int64_t nnz = std::count(f.begin(), f.end(), uint8_t{1});
  Tensor out = Tensor::empty(DType::I64, {r, nnz});
  int64_t* d = out.data<int64_t>();
  std::vector<int64_t> coord(r, 0);
  int64_t j = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k]) {
      for (int64_t a = 0; a < r; ++a) d[a * nnz + j] = coord[a];
      ++j;
    }
    for (int64_t a = r; a-- > 0;) {
      if (++coord[a] < shape[a]) break;
      coord[a] = 0;
    }
  }
  ctx.set_output(0, out);
}

// Three-way comparison of two values; NaN sorts after everything and equals NaN.
template <typename T>
int cmp3(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

void unique_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  bool sorted = ctx.node.get_int("sorted", 1) != 0;
  bool has_axis = ctx.node.has_attr("axis");
  Tensor src = to_movable(in);  // for the output values
  int64_t axis = 0;
  if (has_axis) {
    axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), in.rank());
  } else {
    src = src.reshape({in.numel()});
  }
  const auto& sshape = src.shape();
  int64_t r = src.rank();
  int64_t n = sshape[axis], outer = prod(sshape, 0, axis), inner = prod(sshape, axis + 1, r);
  // Comparison keys: rows of the axis-first layout, in the value type (narrow floats widened).
  Tensor keys = in.dtype() == DType::String ? src : (dtype_is_packed4(in.dtype()) ? in.cast(DType::F32) : widen(in));
  keys = keys.reshape(sshape);
  std::vector<int64_t> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::rotate(perm.begin(), perm.begin() + axis, perm.begin() + axis + 1);
  keys = keys.permute(perm).clone();  // [n, outer..., inner...]
  int64_t m = outer * inner;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto compare_rows = [&]<typename T>(const T* p, int64_t a, int64_t b) {
    for (int64_t k = 0; k < m; ++k) {
      int c = cmp3(p[a * m + k], p[b * m + k]);
      if (c) return c;
    }
    return 0;
  };
  std::vector<int64_t> first;           // first occurrence of each unique row, in output order
  std::vector<int64_t> inverse(n), counts;
  auto run = [&]<typename T>() {
    const T* p = elem_ptr<T>(keys);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return compare_rows.template operator()<T>(p, a, b) < 0; });
    std::vector<int64_t> group(n);  // sorted-group id per row
    std::vector<int64_t> group_first, group_count;
    for (int64_t i = 0; i < n; ++i) {
      if (i == 0 || compare_rows.template operator()<T>(p, order[i - 1], order[i]) != 0) {
        group_first.push_back(order[i]);
        group_count.push_back(0);
      }
      group[order[i]] = static_cast<int64_t>(group_first.size()) - 1;
      group_count.back()++;
    }
    int64_t g = static_cast<int64_t>(group_first.size());
    std::vector<int64_t> rank_of(g);
    std::vector<int64_t> go(g);
    std::iota(go.begin(), go.end(), 0);
    if (!sorted) std::sort(go.begin(), go.end(), [&](int64_t a, int64_t b) { return group_first[a] < group_first[b]; });
    for (int64_t i = 0; i < g; ++i) {
      rank_of[go[i]] = i;
      first.push_back(group_first[go[i]]);
      counts.push_back(group_count[go[i]]);
    }
    for (int64_t i = 0; i < n; ++i) inverse[i] = rank_of[group[i]];
  };
  switch (keys.dtype()) {
    case DType::String: run.template operator()<std::string>(); break;
    default: dispatch_numeric(ctx, keys.dtype(), [&]<typename T>() { run.template operator()<T>(); });
  }
  int64_t u = static_cast<int64_t>(first.size());
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(outer * u * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < u; ++j)
      for (int64_t i = 0; i < inner; ++i) idx.push_back((o * n + first[j]) * inner + i);
  auto yshape = sshape;
  yshape[axis] = u;
  ctx.set_output(0, from_movable(take_flat(ctx, src, idx, yshape), in.dtype()));
  auto vec = [](const std::vector<int64_t>& v) {
    return Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v);
  };
  if (ctx.wants_output(1)) ctx.set_output(1, vec(first));
  if (ctx.wants_output(2)) ctx.set_output(2, vec(inverse));
  if (ctx.wants_output(3)) ctx.set_output(3, vec(counts));
}

void compress_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  if (cond.rank() != 1) ctx.fail(ErrorCode::InvalidArgument, "condition must be 1-D, got {}", cond.type_string());
  auto c = cond.to_int64s();
  Tensor src = to_movable(in);
  int64_t axis = 0;
  if (ctx.node.has_attr("axis")) axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), in.rank());
  else src = src.reshape({in.numel()});
  const auto& s = src.shape();
  int64_t n = s[axis], outer = prod(s, 0, axis), inner = prod(s, axis + 1, src.rank());
  std::vector<int64_t> sel;
  for (int64_t i = 0; i < static_cast<int64_t>(c.size()); ++i) {
    if (!c[i]) continue;
    if (i >= n)
      ctx.fail(ErrorCode::InvalidArgument, "condition selects index {} beyond axis size {}", i, n);
    sel.push_back(i);
  }
  int64_t k = static_cast<int64_t>(sel.size());
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(outer * k * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < inner; ++i) idx.push_back((o * n + sel[j]) * inner + i);
  auto oshape = s;
  oshape[axis] = k;
  ctx.set_output(0, from_movable(take_flat(ctx, src, idx, oshape), in.dtype()));
}

void trilu_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  if (in.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "Trilu needs rank >= 2, got {}", in.type_string());
  int64_t k = 0;
  if (ctx.has_input(1)) {
    const Tensor& kt = ctx.input(1);
    if (kt.numel() != 1 || !dtype_is_integer(kt.dtype()))
      ctx.fail(ErrorCode::InvalidArgument, "k must be one integer, got {}", kt.type_string());
    k = kt.get_int64(0);
  }
  bool upper = ctx.node.get_int("upper", 1) != 0;
  Tensor x = to_movable(in);
  int64_t rows = x.dim(-2), cols = x.dim(-1);
  int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  Tensor out = Tensor::empty(x.dtype(), x.shape());
  dispatch_storage(ctx, x.dtype(), [&]<typename T>() {
    const T* s = elem_ptr<T>(x);
    T* d = elem_ptr<T>(out);
    for (int64_t b = 0; b < mats; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          int64_t o = (b * rows + i) * cols + j;
          bool keep = upper ? (j - i >= k) : (j - i <= k);
          if (keep) d[o] = s[o];
        }
  });
  ctx.set_output(0, from_movable(out, in.dtype()));
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& lens_t = ctx.input(1);
  if (in.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got {}", in.type_string());
  int64_t ba = ctx.node.get_int("batch_axis", 1), ta = ctx.node.get_int("time_axis", 0);
  if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
    ctx.fail(ErrorCode::InvalidArgument, "batch_axis/time_axis must be 1/0 or 0/1, got {}/{}", ba, ta);
  auto lens = read_int_list(ctx, lens_t, "sequence_lens");
  int64_t batch = in.dim(ba), T = in.dim(ta);
  if (static_cast<int64_t>(lens.size()) != batch)
    ctx.fail(ErrorCode::InvalidArgument, "sequence_lens has {} values for batch {}", lens.size(), batch);
  for (int64_t l : lens)
    if (l < 0 || l > T) ctx.fail(ErrorCode::InvalidArgument, "sequence length {} is outside [0, {}]", l, T);
  Tensor x = to_movable(in);
  int64_t inner = prod(x.shape(), 2, x.rank());
  int64_t n = x.numel();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  int64_t d1 = x.dim(1);
  for (int64_t k = 0; k < n; ++k) {
    int64_t i = k % inner, rest = k / inner;
    int64_t a1 = rest % d1, a0 = rest / d1;
    int64_t b = ba == 0 ? a0 : a1, t = ta == 0 ? a0 : a1;
    int64_t st = t < lens[b] ? lens[b] - 1 - t : t;
    int64_t s0 = ta == 0 ? st : a0, s1 = ta == 1 ? st : a1;
    idx[k] = (s0 * d1 + s1) * inner + i;
  }
  ctx.set_output(0, from_movable(take_flat(ctx, x, idx, x.shape()), in.dtype()));
}

void dropout_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  double ratio = 0.5;
  float ratio_f = 0.5f;
  if (ctx.has_input(1)) {
    const Tensor& rt = ctx.input(1);
    if (rt.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "ratio must be a scalar, got {}", rt.type_string());
    ratio = rt.get_double(0);
    ratio_f = static_cast<float>(ratio);
  }
  bool training = ctx.has_input(2) && ctx.input(2).numel() == 1 && ctx.input(2).get_double(0) != 0;
  if (!training || ratio == 0) {
    ctx.set_output(0, x);
    if (ctx.wants_output(1)) {
      Tensor m = Tensor::empty(DType::Bool, x.shape());
      std::fill_n(m.data<bool>(), m.numel(), true);
      ctx.set_output(1, m);
    }
    return;
  }
  if (!(ratio >= 0 && ratio < 1)) ctx.fail(ErrorCode::InvalidArgument, "ratio must be in [0, 1), got {}", ratio);
  // numpy's RandomState(seed).uniform: MT19937 (same seeding as std::mt19937), 53-bit doubles.
  uint64_t seed = ctx.node.has_attr("seed") ? static_cast<uint64_t>(ctx.node.get_int("seed", 0)) : ctx.seed;
  std::mt19937 gen(static_cast<uint32_t>(seed));
  int64_t n = x.numel();
  Tensor mask = Tensor::empty(DType::Bool, x.shape());
  bool* mp = mask.data<bool>();
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a = gen() >> 5, b = gen() >> 6;
    double u = (a * 67108864.0 + b) / 9007199254740992.0;
    mp[i] = u >= ratio;
  }
  Tensor w = widen(x).clone();
  dispatch_float(ctx, w.dtype(), [&]<typename T>() {
    T* p = w.data<T>();
    // numpy: mask * X * scale, the scale computed in the ratio's type.
    T scale = x.dtype() == DType::F64 && ctx.has_input(1) && ctx.input(1).dtype() == DType::F64
                  ? static_cast<T>(1.0 / (1.0 - ratio))
                  : static_cast<T>(1.0f / (1.0f - ratio_f));
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>((mp[i] ? p[i] : static_cast<T>(p[i] * T(0))) * scale);
  });
  ctx.set_output(0, narrow_to(w, x.dtype()));
  if (ctx.wants_output(1)) ctx.set_output(1, mask);
}

}  // namespace

void register_tensor_misc_ops(OpTable& t) {
  t.add("", "OneHot", onehot_kernel);
  t.add("", "NonZero", nonzero_kernel);
  t.add("", "Unique", unique_kernel);
  t.add("", "Compress", compress_kernel);
  t.add("", "Trilu", trilu_kernel);
  t.add("", "ReverseSequence", reverse_sequence_kernel);
  t.add("", "Dropout", dropout_kernel);
}

}  // namespace hodu::interp
