// Helpers shared by the tensor-family kernels (tensor*.cc, sequence.cc,
// control_flow.cc): dtype-agnostic element movement. Data-movement ops work on
// the storage type of a dtype (uint8/16/32/64, a 16-byte blob, std::string),
// so they move the bytes of every dtype, strings included. Packed 4-bit and
// 2-bit types are unpacked to one element per byte first and repacked at the end.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {

struct Bytes16 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Bytes16&) const = default;
};

// Calls f.template operator()<T>() with T the storage type of `dt`.
template <typename F>
decltype(auto) dispatch_storage(const KernelContext& ctx, DType dt, F&& f) {
  if (dt == DType::String) return f.template operator()<std::string>();
  switch (dtype_is_packed4(dt) ? 0 : dtype_bits(dt)) {
    case 8: return f.template operator()<uint8_t>();
    case 16: return f.template operator()<uint16_t>();
    case 32: return f.template operator()<uint32_t>();
    case 64: return f.template operator()<uint64_t>();
    case 128: return f.template operator()<Bytes16>();
    default:
      ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(dt));
  }
}

// Typed pointer to the first element of a contiguous tensor (strings included).
template <typename T>
const T* elem_ptr(const Tensor& t) {
  if constexpr (std::is_same_v<T, std::string>) return t.string_data();
  else return static_cast<const T*>(t.raw_data());
}
template <typename T>
T* elem_ptr(Tensor& t) {
  if constexpr (std::is_same_v<T, std::string>) return t.string_data();
  else return static_cast<T*>(t.raw_data());
}

// Packed 4-bit or 2-bit tensor → U8 tensor with one element per byte (same shape).
Tensor unpack4(const Tensor& t);
// U8 tensor of 4-bit/2-bit elements → packed tensor of dtype `dt`.
Tensor repack4(const Tensor& nibbles, DType dt);
// A contiguous tensor whose elements can be moved with dispatch_storage
// (packed sub-byte types unpacked); pair with from_movable(result, original dtype).
Tensor to_movable(const Tensor& t);
Tensor from_movable(Tensor t, DType original);
// A packed (contiguous) copy of any tensor, sub-byte types included.
Tensor materialize(const Tensor& t);

// out[k] = src[idx[k]] for a contiguous/movable `src`; result has `shape` and src's dtype.
Tensor take_flat(const KernelContext& ctx, const Tensor& src, const std::vector<int64_t>& idx,
                 std::vector<int64_t> shape);

// Integer values of a 1-D or scalar index tensor; InvalidArgument if it is not integer-typed.
std::vector<int64_t> read_int_list(const KernelContext& ctx, const Tensor& t, const char* what);

// Concatenation along `axis` (may be negative) of tensors of one dtype and rank.
Tensor concat_tensors(const KernelContext& ctx, const std::vector<Tensor>& xs, int64_t axis);
// Stacks same-shaped tensors along a new axis `axis` in [0, rank] (negative counts from rank+1).
Tensor stack_tensors(const KernelContext& ctx, const std::vector<Tensor>& xs, int64_t axis);

int64_t prod(const std::vector<int64_t>& v, size_t begin, size_t end);

void register_tensor_shape_ops(OpTable& t);
void register_tensor_index_ops(OpTable& t);
void register_tensor_misc_ops(OpTable& t);

}  // namespace hodu::interp
