// Tensor family: shape/layout/indexing ops. The kernels live in
// tensor_shape.cc (layout), tensor_index.cc (gather/scatter) and
// tensor_misc.cc (OneHot, NonZero, Unique, Trilu, Dropout, ...); the shared
// element-movement helpers are here.
#include <algorithm>
#include <cstring>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {

// Packed 4-bit and 2-bit types: element i sits in byte i / per_byte, lowest bits first.
Tensor unpack4(const Tensor& t) {
  Tensor src = t.contiguous();
  Tensor out = Tensor::empty(DType::U8, t.shape());
  const auto* s = static_cast<const uint8_t*>(src.raw_data());
  auto* d = static_cast<uint8_t*>(out.raw_data());
  const int bits = dtype_bits(t.dtype()), per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = (s[i / per_byte] >> (bits * (i % per_byte))) & mask;
  return out;
}

Tensor repack4(const Tensor& nibbles, DType dt) {
  Tensor src = nibbles.contiguous();
  Tensor out = Tensor::empty(dt, nibbles.shape());
  const auto* s = static_cast<const uint8_t*>(src.raw_data());
  auto* d = static_cast<uint8_t*>(out.raw_data());
  const int bits = dtype_bits(dt), per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  int64_t n = nibbles.numel();
  std::memset(d, 0, dtype_storage_bytes(dt, n));
  for (int64_t i = 0; i < n; ++i) d[i / per_byte] |= static_cast<uint8_t>((s[i] & mask) << (bits * (i % per_byte)));
  return out;
}

Tensor to_movable(const Tensor& t) { return dtype_is_subbyte(t.dtype()) ? unpack4(t) : t.contiguous(); }

Tensor from_movable(Tensor t, DType original) {
  if (dtype_is_subbyte(original) && t.dtype() != original) return repack4(t, original);
  return t;
}

Tensor materialize(const Tensor& t) {
  if (dtype_is_subbyte(t.dtype())) return t.contiguous();
  return t.is_contiguous() ? t : t.clone();
}

Tensor take_flat(const KernelContext& ctx, const Tensor& src, const std::vector<int64_t>& idx,
                 std::vector<int64_t> shape) {
  Tensor out = Tensor::empty(src.dtype(), std::move(shape));
  dispatch_storage(ctx, src.dtype(), [&]<typename T>() {
    const T* s = elem_ptr<T>(src);
    T* d = elem_ptr<T>(out);
    parallel_for(ctx.threads, static_cast<int64_t>(idx.size()), 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) d[k] = s[idx[k]];
    });
  });
  return out;
}

std::vector<int64_t> read_int_list(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (!dtype_is_integer(t.dtype()))
    ctx.fail(ErrorCode::InvalidArgument, "{} must be an integer tensor, got {}", what, t.type_string());
  if (t.rank() > 1) ctx.fail(ErrorCode::InvalidArgument, "{} must be 1-D, got {}", what, t.type_string());
  return t.to_int64s();
}

int64_t prod(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < v.size(); ++i) p *= v[i];
  return p;
}

Tensor concat_tensors(const KernelContext& ctx, const std::vector<Tensor>& in, int64_t axis_attr) {
  if (in.empty()) ctx.fail(ErrorCode::InvalidArgument, "nothing to concatenate");
  const Tensor& first = in[0];
  int64_t r = first.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot concatenate scalars");
  int64_t axis = normalize_axis(ctx, axis_attr, r);
  std::vector<Tensor> xs;
  auto out_shape = first.shape();
  out_shape[axis] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    if (t.dtype() != first.dtype())
      ctx.fail(ErrorCode::InvalidArgument, "input {} has dtype {}, input 0 has {}", i, dtype_name(t.dtype()),
               dtype_name(first.dtype()));
    bool ok = t.rank() == r;
    for (int64_t d = 0; ok && d < r; ++d) ok = d == axis || t.dim(d) == first.dim(d);
    if (!ok)
      ctx.fail(ErrorCode::InvalidArgument, "input {} {} does not match input 0 {} outside axis {}", i,
               t.type_string(), first.type_string(), axis);
    out_shape[axis] += t.dim(axis);
    xs.push_back(to_movable(t));
  }
  DType mdt = xs[0].dtype();
  Tensor out = Tensor::empty(mdt, out_shape);
  int64_t outer = prod(out_shape, 0, axis), inner = prod(out_shape, axis + 1, r);
  int64_t out_block = out_shape[axis] * inner;
  dispatch_storage(ctx, mdt, [&]<typename T>() {
    T* d = elem_ptr<T>(out);
    int64_t off = 0;
    for (const auto& x : xs) {
      const T* s = elem_ptr<T>(x);
      int64_t blk = x.dim(axis) * inner;
      parallel_for(ctx.threads, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(blk, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t o = b; o < e; ++o)
                       std::copy(s + o * blk, s + (o + 1) * blk, d + o * out_block + off);
                   });
      off += blk;
    }
  });
  return from_movable(out, first.dtype());
}

Tensor stack_tensors(const KernelContext& ctx, const std::vector<Tensor>& in, int64_t axis) {
  if (in.empty()) ctx.fail(ErrorCode::InvalidArgument, "nothing to stack");
  int64_t r = in[0].rank();
  if (axis < 0) axis += r + 1;
  if (axis < 0 || axis > r) ctx.fail(ErrorCode::InvalidArgument, "stack axis {} is out of range for rank {}", axis, r);
  std::vector<Tensor> xs;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].shape() != in[0].shape())
      ctx.fail(ErrorCode::InvalidArgument, "cannot stack {} with {}", in[i].type_string(), in[0].type_string());
    auto s = in[i].shape();
    s.insert(s.begin() + axis, 1);
    xs.push_back(materialize(in[i]).reshape(s));
  }
  return concat_tensors(ctx, xs, axis);
}

void register_tensor_ops(OpTable& t) {
  register_tensor_shape_ops(t);
  register_tensor_index_ops(t);
  register_tensor_misc_ops(t);
}

}  // namespace hodu::interp
