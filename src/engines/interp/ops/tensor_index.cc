// Indexing ops: Gather, GatherElements, GatherND, ScatterElements (and the old
// Scatter), ScatterND, TensorScatter.
#include <algorithm>
#include <string>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {
namespace {

std::vector<int64_t> read_indices(const KernelContext& ctx, const Tensor& t) {
  if (t.dtype() != DType::I64 && t.dtype() != DType::I32)
    ctx.fail(ErrorCode::InvalidArgument, "indices must be int32 or int64, got {}", t.type_string());
  return t.to_int64s();
}

int64_t fix_index(const KernelContext& ctx, int64_t v, int64_t dim) {
  int64_t w = v < 0 ? v + dim : v;
  if (w < 0 || w >= dim) ctx.fail(ErrorCode::InvalidArgument, "index {} is out of range for a dim of size {}", v, dim);
  return w;
}

void gather_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& it = ctx.input(1);
  int64_t r = in.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "Gather needs data of rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), r);
  auto ids = read_indices(ctx, it);
  int64_t dim = in.dim(axis);
  for (auto& v : ids) v = fix_index(ctx, v, dim);
  std::vector<int64_t> oshape(in.shape().begin(), in.shape().begin() + axis);
  oshape.insert(oshape.end(), it.shape().begin(), it.shape().end());
  oshape.insert(oshape.end(), in.shape().begin() + axis + 1, in.shape().end());
  int64_t outer = prod(in.shape(), 0, axis), inner = prod(in.shape(), axis + 1, r);
  int64_t nidx = static_cast<int64_t>(ids.size());
  Tensor x = to_movable(in);
  Tensor out = Tensor::empty(x.dtype(), oshape);
  dispatch_storage(ctx, x.dtype(), [&]<typename T>() {
    const T* s = elem_ptr<T>(x);
    T* d = elem_ptr<T>(out);
    parallel_for(ctx.threads, outer * nidx, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t k = b; k < e; ++k) {
                     int64_t o = k / nidx, j = k % nidx;
                     const T* src = s + (o * dim + ids[j]) * inner;
                     std::copy(src, src + inner, d + k * inner);
                   }
                 });
  });
  ctx.set_output(0, from_movable(out, in.dtype()));
}

// Flat offsets into `data_shape` for every element of `idx_shape`, with the
// coordinate along `axis` replaced by ids[k].
std::vector<int64_t> element_offsets(const KernelContext& ctx, const std::vector<int64_t>& data_shape,
                                     const std::vector<int64_t>& idx_shape, int64_t axis, std::vector<int64_t> ids) {
  int64_t r = static_cast<int64_t>(data_shape.size());
  if (static_cast<int64_t>(idx_shape.size()) != r)
    ctx.fail(ErrorCode::InvalidArgument, "indices {} must have the rank of data {}", shape_to_string(idx_shape),
             shape_to_string(data_shape));
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && idx_shape[d] > data_shape[d])
      ctx.fail(ErrorCode::InvalidArgument, "indices {} is larger than data {} along axis {}",
               shape_to_string(idx_shape), shape_to_string(data_shape), d);
  auto ds = contiguous_strides(data_shape);
  int64_t n = shape_numel(idx_shape);
  std::vector<int64_t> coord(r, 0);
  int64_t base = 0;  // offset of coord with the axis coordinate zeroed
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = fix_index(ctx, ids[k], data_shape[axis]);
    ids[k] = base + v * ds[axis];
    for (int64_t d = r; d-- > 0;) {
      if (++coord[d] < idx_shape[d]) {
        if (d != axis) base += ds[d];
        break;
      }
      if (d != axis) base -= ds[d] * (idx_shape[d] - 1);
      coord[d] = 0;
    }
  }
  return ids;
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& it = ctx.input(1);
  int64_t r = in.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "GatherElements needs data of rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), r);
  auto offs = element_offsets(ctx, in.shape(), it.shape(), axis, read_indices(ctx, it));
  Tensor x = to_movable(in);
  ctx.set_output(0, from_movable(take_flat(ctx, x, offs, it.shape()), in.dtype()));
}

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& it = ctx.input(1);
  if (it.dtype() != DType::I64) ctx.fail(ErrorCode::InvalidArgument, "indices must be int64, got {}", it.type_string());
  int64_t r = in.rank(), q = it.rank();
  int64_t b = ctx.node.get_int("batch_dims", 0);
  if (r < 1 || q < 1) ctx.fail(ErrorCode::InvalidArgument, "GatherND needs data and indices of rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    ctx.fail(ErrorCode::InvalidArgument, "batch_dims {} must be below the ranks of data and indices", b);
  for (int64_t d = 0; d < b; ++d)
    if (in.dim(d) != it.dim(d))
      ctx.fail(ErrorCode::InvalidArgument, "batch dims of data {} and indices {} differ", in.type_string(),
               it.type_string());
  int64_t m = it.dim(q - 1);
  if (m < 1 || m > r - b)
    ctx.fail(ErrorCode::InvalidArgument, "indices last dim {} must be in [1, {}]", m, r - b);
  std::vector<int64_t> oshape(it.shape().begin(), it.shape().end() - 1);
  oshape.insert(oshape.end(), in.shape().begin() + b + m, in.shape().end());
  int64_t batches = prod(in.shape(), 0, b);
  int64_t per_batch = prod(it.shape(), b, q - 1);  // index tuples per batch
  int64_t inner = prod(in.shape(), b + m, r);
  int64_t batch_stride = prod(in.shape(), b, r);
  auto ds = contiguous_strides(in.shape());
  auto ids = it.to_int64s();
  std::vector<int64_t> src(static_cast<size_t>(batches * per_batch));
  for (int64_t bt = 0; bt < batches; ++bt)
    for (int64_t j = 0; j < per_batch; ++j) {
      const int64_t* tup = ids.data() + (bt * per_batch + j) * m;
      int64_t off = bt * batch_stride;
      for (int64_t k = 0; k < m; ++k) off += fix_index(ctx, tup[k], in.dim(b + k)) * ds[b + k];
      src[bt * per_batch + j] = off;
    }
  Tensor x = to_movable(in);
  Tensor out = Tensor::empty(x.dtype(), oshape);
  dispatch_storage(ctx, x.dtype(), [&]<typename T>() {
    const T* s = elem_ptr<T>(x);
    T* d = elem_ptr<T>(out);
    parallel_for(ctx.threads, static_cast<int64_t>(src.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t k = lo; k < hi; ++k) std::copy(s + src[k], s + src[k] + inner, d + k * inner);
                 });
  });
  ctx.set_output(0, from_movable(out, in.dtype()));
}

// out[targets[i] + j] (op)= upd[i * block + j], in index order (later writes win).
Tensor scatter_apply(const KernelContext& ctx, const Tensor& data, const Tensor& updates,
                     const std::vector<int64_t>& targets, int64_t block) {
  std::string red = ctx.node.get_string("reduction", "none");
  if (updates.dtype() != data.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "updates dtype {} differs from data dtype {}", dtype_name(updates.dtype()),
             dtype_name(data.dtype()));
  if (red == "none") {
    Tensor out = to_movable(data).clone();
    Tensor u = to_movable(updates);
    dispatch_storage(ctx, out.dtype(), [&]<typename T>() {
      T* d = elem_ptr<T>(out);
      const T* s = elem_ptr<T>(u);
      for (size_t i = 0; i < targets.size(); ++i)
        std::copy(s + i * block, s + (i + 1) * block, d + targets[i]);
    });
    return from_movable(out, data.dtype());
  }
  int op = red == "add" ? 0 : red == "mul" ? 1 : red == "max" ? 2 : red == "min" ? 3 : -1;
  if (op < 0) ctx.fail(ErrorCode::InvalidArgument, "unknown reduction '{}'", red);
  if (data.dtype() == DType::String || dtype_is_packed4(data.dtype()) || dtype_is_complex(data.dtype()))
    ctx.fail(ErrorCode::Unsupported, "reduction '{}' on dtype {}", red, dtype_name(data.dtype()));
  Tensor out = widen(data).clone();
  Tensor u = widen(updates).contiguous();
  dispatch_numeric(ctx, out.dtype(), [&]<typename T>() {
    T* d = out.data<T>();
    const T* s = u.data<T>();
    for (size_t i = 0; i < targets.size(); ++i)
      for (int64_t j = 0; j < block; ++j) {
        T& a = d[targets[i] + j];
        T v = s[i * block + j];
        switch (op) {
          case 0: a = static_cast<T>(a + v); break;
          case 1: a = static_cast<T>(a * v); break;
          case 2: a = std::max(a, v); break;
          default: a = std::min(a, v); break;
        }
      }
  });
  return narrow_to(out, data.dtype());
}

void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& it = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  int64_t r = data.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "ScatterElements needs data of rank >= 1");
  if (upd.shape() != it.shape())
    ctx.fail(ErrorCode::InvalidArgument, "updates {} must have the shape of indices {}", upd.type_string(),
             it.type_string());
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), r);
  auto offs = element_offsets(ctx, data.shape(), it.shape(), axis, read_indices(ctx, it));
  ctx.set_output(0, scatter_apply(ctx, data, upd, offs, 1));
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& it = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  if (it.dtype() != DType::I64) ctx.fail(ErrorCode::InvalidArgument, "indices must be int64, got {}", it.type_string());
  int64_t r = data.rank(), q = it.rank();
  if (r < 1 || q < 1) ctx.fail(ErrorCode::InvalidArgument, "ScatterND needs data and indices of rank >= 1");
  int64_t k = it.dim(q - 1);
  if (k > r) ctx.fail(ErrorCode::InvalidArgument, "indices last dim {} exceeds data rank {}", k, r);
  std::vector<int64_t> ushape(it.shape().begin(), it.shape().end() - 1);
  ushape.insert(ushape.end(), data.shape().begin() + k, data.shape().end());
  if (upd.shape() != ushape)
    ctx.fail(ErrorCode::InvalidArgument, "updates {} must have shape {}", upd.type_string(), shape_to_string(ushape));
  auto ds = contiguous_strides(data.shape());
  auto ids = it.to_int64s();
  int64_t n = prod(it.shape(), 0, q - 1);
  std::vector<int64_t> targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) off += fix_index(ctx, ids[i * k + j], data.dim(j)) * ds[j];
    targets[i] = off;
  }
  ctx.set_output(0, scatter_apply(ctx, data, upd, targets, prod(data.shape(), k, r)));
}

void tensor_scatter_kernel(KernelContext& ctx) {
  const Tensor& cache = ctx.input(0);
  const Tensor& upd = ctx.input(1);
  std::string mode = ctx.node.get_string("mode", "linear");
  if (mode != "linear" && mode != "circular") ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
  int64_t r = cache.rank();
  if (r < 2) ctx.fail(ErrorCode::InvalidArgument, "past_cache must have rank >= 2, got {}", cache.type_string());
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", -2), r);
  if (axis == 0) ctx.fail(ErrorCode::InvalidArgument, "axis must not be the batch axis 0");
  if (upd.rank() != r || upd.dtype() != cache.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "update {} does not match past_cache {}", upd.type_string(),
             cache.type_string());
  for (int64_t d = 0; d < r; ++d)
    if (d == axis ? upd.dim(d) > cache.dim(d) : upd.dim(d) != cache.dim(d))
      ctx.fail(ErrorCode::InvalidArgument, "update {} does not fit past_cache {} (axis {})", upd.type_string(),
               cache.type_string(), axis);
  int64_t batch = cache.dim(0);
  std::vector<int64_t> wi(batch, 0);
  if (ctx.has_input(2)) {
    wi = read_indices(ctx, ctx.input(2));
    if (static_cast<int64_t>(wi.size()) != batch)
      ctx.fail(ErrorCode::InvalidArgument, "write_indices has {} values for batch {}", wi.size(), batch);
  }
  int64_t max_len = cache.dim(axis), len = upd.dim(axis);
  for (int64_t b = 0; b < batch; ++b) {
    if (wi[b] < 0 || (mode == "linear" && wi[b] + len > max_len))
      ctx.fail(ErrorCode::InvalidArgument, "write_indices[{}] = {} with {} updates overflows the cache of {}", b,
               wi[b], len, max_len);
  }
  int64_t inner = prod(cache.shape(), axis + 1, r);
  int64_t outer = prod(cache.shape(), 0, axis);
  int64_t per_batch = outer / std::max<int64_t>(batch, 1);
  std::vector<int64_t> targets;
  targets.reserve(static_cast<size_t>(outer * len));
  for (int64_t o = 0; o < outer; ++o) {
    int64_t b = o / std::max<int64_t>(per_batch, 1);
    for (int64_t s = 0; s < len; ++s) {
      int64_t pos = wi[b] + s;
      if (mode == "circular") pos %= max_len;
      targets.push_back((o * max_len + pos) * inner);
    }
  }
  Tensor out = to_movable(cache).clone();
  Tensor u = to_movable(upd);
  dispatch_storage(ctx, out.dtype(), [&]<typename T>() {
    T* d = elem_ptr<T>(out);
    const T* s = elem_ptr<T>(u);
    for (size_t i = 0; i < targets.size(); ++i) std::copy(s + i * inner, s + (i + 1) * inner, d + targets[i]);
  });
  ctx.set_output(0, from_movable(out, cache.dtype()));
}

}  // namespace

void register_tensor_index_ops(OpTable& t) {
  t.add("", "Gather", gather_kernel);
  t.add("", "GatherElements", gather_elements_kernel);
  t.add("", "GatherND", gather_nd_kernel);
  t.add("", "ScatterElements", scatter_elements_kernel);
  t.add("", "Scatter", scatter_elements_kernel);  // opset 9-10 name, same semantics (no reduction)
  t.add("", "ScatterND", scatter_nd_kernel);
  t.add("", "TensorScatter", tensor_scatter_kernel);
}

}  // namespace hodu::interp
