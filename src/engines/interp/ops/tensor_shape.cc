// Layout ops: Identity, Reshape, Squeeze, Unsqueeze, Flatten, Shape, Size,
// Expand, Tile, Transpose, Concat, Split, Slice, BitCast. Every dtype: the
// kernels move storage elements (see tensor_util.h).
#include <algorithm>
#include <cstring>
#include <limits>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {
namespace {

void identity_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.value(0)); }

void reshape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto spec = read_int_list(ctx, ctx.input(1), "shape");
  bool allowzero = ctx.node.get_int("allowzero", 0) != 0;
  std::vector<int64_t> out(spec.size());
  int64_t infer = -1, known = 1;
  bool has_zero = false;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t v = spec[i];
    if (v == 0) has_zero = true;
    if (v == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.rank())
        ctx.fail(ErrorCode::InvalidArgument, "shape[{}] = 0 copies a dim the input {} does not have", i,
                 x.type_string());
      v = x.dim(static_cast<int64_t>(i));
    } else if (v == -1) {
      if (infer >= 0) ctx.fail(ErrorCode::InvalidArgument, "shape {} has more than one -1", shape_to_string(spec));
      infer = static_cast<int64_t>(i);
      continue;
    } else if (v < 0) {
      ctx.fail(ErrorCode::InvalidArgument, "shape {} has an invalid negative dim", shape_to_string(spec));
    }
    out[i] = v;
    known *= v;
  }
  if (allowzero && has_zero && infer >= 0)
    ctx.fail(ErrorCode::InvalidArgument, "shape {} has both 0 and -1 with allowzero=1", shape_to_string(spec));
  int64_t n = x.numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      ctx.fail(ErrorCode::InvalidArgument, "cannot reshape {} to {}", x.type_string(), shape_to_string(spec));
    out[infer] = n / known;
  }
  if (shape_numel(out) != n)
    ctx.fail(ErrorCode::InvalidArgument, "cannot reshape {} to {}", x.type_string(), shape_to_string(spec));
  ctx.set_output(0, materialize(x).reshape(out));
}

void squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  std::vector<bool> drop(r, false);
  if (ctx.has_input(1)) {
    for (int64_t a : read_int_list(ctx, ctx.input(1), "axes")) {
      int64_t ax = normalize_axis(ctx, a, r);
      if (x.dim(ax) != 1)
        ctx.fail(ErrorCode::InvalidArgument, "cannot squeeze axis {} of {}: its size is not 1", a, x.type_string());
      drop[ax] = true;
    }
  } else {
    for (int64_t i = 0; i < r; ++i) drop[i] = x.dim(i) == 1;
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out.push_back(x.dim(i));
  ctx.set_output(0, materialize(x).reshape(out));
}

void unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto axes = read_int_list(ctx, ctx.input(1), "axes");
  int64_t r = x.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> add(r, false);
  for (int64_t a : axes) {
    int64_t ax = normalize_axis(ctx, a, r);
    if (add[ax]) ctx.fail(ErrorCode::InvalidArgument, "axes {} has a repeated axis", shape_to_string(axes));
    add[ax] = true;
  }
  std::vector<int64_t> out;
  int64_t k = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(add[i] ? 1 : x.dim(k++));
  ctx.set_output(0, materialize(x).reshape(out));
}

void flatten_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  int64_t axis = ctx.node.get_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r)
    ctx.fail(ErrorCode::InvalidArgument, "axis {} is out of range for rank {}", ctx.node.get_int("axis", 1), r);
  const auto& s = x.shape();
  ctx.set_output(0, materialize(x).reshape({prod(s, 0, axis), prod(s, axis, r)}));
}

void shape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  int64_t start = clampi(ctx.node.get_int("start", 0));
  int64_t end = ctx.node.has_attr("end") ? clampi(ctx.node.get_int("end", r)) : r;
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x.dim(i));
  ctx.set_output(0, Tensor::from_vector(DType::I64, {static_cast<int64_t>(dims.size())}, dims));
}

void size_kernel(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<int64_t>(DType::I64, ctx.input(0).numel()));
}

void expand_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto shape = read_int_list(ctx, ctx.input(1), "shape");
  for (int64_t d : shape)
    if (d < 0) ctx.fail(ErrorCode::InvalidArgument, "shape {} has a negative dim", shape_to_string(shape));
  auto out_shape = broadcast_shapes(ctx, in.shape(), shape);
  Tensor x = to_movable(in);
  Tensor view = x.as_strided(out_shape, broadcast_strides(x.shape(), out_shape), x.offset());
  ctx.set_output(0, from_movable(view.clone(), in.dtype()));
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto reps = read_int_list(ctx, ctx.input(1), "repeats");
  int64_t r = in.rank();
  if (static_cast<int64_t>(reps.size()) != r)
    ctx.fail(ErrorCode::InvalidArgument, "repeats has {} values, input {} has rank {}", reps.size(),
             in.type_string(), r);
  for (int64_t v : reps)
    if (v < 0) ctx.fail(ErrorCode::InvalidArgument, "repeats {} has a negative value", shape_to_string(reps));
  Tensor x = to_movable(in);
  std::vector<int64_t> vshape, vstrides, oshape;
  for (int64_t i = 0; i < r; ++i) {
    vshape.push_back(reps[i]);
    vstrides.push_back(0);
    vshape.push_back(x.dim(i));
    vstrides.push_back(x.strides()[i]);
    oshape.push_back(reps[i] * x.dim(i));
  }
  Tensor out = x.as_strided(vshape, vstrides, x.offset()).clone().reshape(oshape);
  ctx.set_output(0, from_movable(out, in.dtype()));
}

void transpose_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  int64_t r = in.rank();
  std::vector<int64_t> perm;
  if (ctx.node.has_attr("perm")) {
    perm = ctx.node.get_ints("perm");
  } else {
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != r)
    ctx.fail(ErrorCode::InvalidArgument, "perm {} does not match input rank {}", shape_to_string(perm), r);
  std::vector<bool> seen(r, false);
  for (auto& p : perm) {
    if (p < 0) p += r;
    if (p < 0 || p >= r || seen[p])
      ctx.fail(ErrorCode::InvalidArgument, "perm {} is not a permutation of rank {}",
               shape_to_string(ctx.node.get_ints("perm")), r);
    seen[p] = true;
  }
  Tensor x = to_movable(in);
  ctx.set_output(0, from_movable(x.permute(perm).clone(), in.dtype()));
}

void concat_kernel(KernelContext& ctx) {
  if (ctx.num_inputs() == 0) ctx.fail(ErrorCode::InvalidArgument, "Concat needs at least one input");
  std::vector<Tensor> xs;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) xs.push_back(ctx.input(i));
  ctx.set_output(0, concat_tensors(ctx, xs, ctx.node.get_int("axis", 0)));
}

void split_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  int64_t r = in.rank();
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), r);
  int64_t dim = in.dim(axis);
  int64_t n_out = static_cast<int64_t>(ctx.outputs.size());
  std::vector<int64_t> sizes;
  if (ctx.has_input(1)) {
    sizes = read_int_list(ctx, ctx.input(1), "split");
    if (static_cast<int64_t>(sizes.size()) != n_out)
      ctx.fail(ErrorCode::InvalidArgument, "split has {} values for {} outputs", sizes.size(), n_out);
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) ctx.fail(ErrorCode::InvalidArgument, "split {} has a negative size", shape_to_string(sizes));
      sum += s;
    }
    if (sum != dim)
      ctx.fail(ErrorCode::InvalidArgument, "split {} sums to {}, axis {} has size {}", shape_to_string(sizes), sum,
               axis, dim);
  } else {
    int64_t n = ctx.node.get_int("num_outputs", n_out);
    if (n != n_out || n <= 0)
      ctx.fail(ErrorCode::InvalidArgument, "num_outputs {} does not match the {} outputs", n, n_out);
    if (dim % n == 0) {
      sizes.assign(n, dim / n);
    } else {
      int64_t chunk = dim / n + 1;
      sizes.assign(n, chunk);
      sizes.back() = dim - chunk * (n - 1);
      if (sizes.back() < 0)
        ctx.fail(ErrorCode::InvalidArgument, "cannot split axis of size {} into {} outputs", dim, n);
    }
  }
  Tensor x = to_movable(in);
  int64_t start = 0;
  for (int64_t i = 0; i < n_out; ++i) {
    Tensor part = x.slice(axis, start, start + sizes[i]).clone();
    start += sizes[i];
    if (ctx.wants_output(i)) ctx.set_output(i, from_movable(part, in.dtype()));
  }
}

void slice_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  int64_t r = in.rank();
  auto starts = read_int_list(ctx, ctx.input(1), "starts");
  auto ends = read_int_list(ctx, ctx.input(2), "ends");
  if (starts.size() != ends.size())
    ctx.fail(ErrorCode::InvalidArgument, "starts has {} values, ends {}", starts.size(), ends.size());
  size_t n = starts.size();
  std::vector<int64_t> axes, steps(n, 1);
  if (ctx.has_input(3)) {
    axes = read_int_list(ctx, ctx.input(3), "axes");
  } else {
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (ctx.has_input(4)) steps = read_int_list(ctx, ctx.input(4), "steps");
  if (axes.size() != n || steps.size() != n)
    ctx.fail(ErrorCode::InvalidArgument, "starts, ends, axes and steps must have the same length");
  Tensor x = to_movable(in);
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < n; ++i) {
    int64_t ax = normalize_axis(ctx, axes[i], r);
    if (seen[ax]) ctx.fail(ErrorCode::InvalidArgument, "axes {} has a repeated axis", shape_to_string(axes));
    seen[ax] = true;
    int64_t step = steps[i];
    if (step == 0) ctx.fail(ErrorCode::InvalidArgument, "steps must not be 0");
    int64_t dim = in.dim(ax);
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (dim == 0) {
      s = 0;
      e = 0;
    } else if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    // Tensor::slice computes the length; an empty result is fine.
    if ((step > 0 && e <= s) || (step < 0 && e >= s)) {
      auto shape = x.shape();
      shape[ax] = 0;
      x = x.as_strided(shape, x.strides(), x.offset());
    } else {
      x = x.slice(ax, s, e, step);
    }
  }
  ctx.set_output(0, from_movable(x.clone(), in.dtype()));
}

void bitcast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto to = dtype_from_onnx(static_cast<int>(ctx.node.get_int("to", 0)));
  if (!to) ctx.fail(ErrorCode::InvalidArgument, "'to' = {} is not a known dtype", ctx.node.get_int("to", 0));
  if (x.dtype() == DType::String || *to == DType::String)
    ctx.fail(ErrorCode::InvalidArgument, "BitCast from or to string is not allowed");
  if (dtype_bits(x.dtype()) != dtype_bits(*to))
    ctx.fail(ErrorCode::InvalidArgument, "BitCast needs the same bit width: {} has {} bits, {} has {}",
             dtype_name(x.dtype()), dtype_bits(x.dtype()), dtype_name(*to), dtype_bits(*to));
  Tensor src = x.contiguous();
  ctx.set_output(0, Tensor::from_bytes(*to, x.shape(), src.raw_data(), src.nbytes()));
}

}  // namespace

void register_tensor_shape_ops(OpTable& t) {
  t.add("", "Identity", identity_kernel);
  t.add("", "Reshape", reshape_kernel);
  t.add("", "Squeeze", squeeze_kernel);
  t.add("", "Unsqueeze", unsqueeze_kernel);
  t.add("", "Flatten", flatten_kernel);
  t.add("", "Shape", shape_kernel);
  t.add("", "Size", size_kernel);
  t.add("", "Expand", expand_kernel);
  t.add("", "Tile", tile_kernel);
  t.add("", "Transpose", transpose_kernel);
  t.add("", "Concat", concat_kernel);
  t.add("", "Split", split_kernel);
  t.add("", "Slice", slice_kernel);
  t.add("", "BitCast", bitcast_kernel);
}

}  // namespace hodu::interp
