// Shared helpers for the reference kernels: broadcasting, axis handling and
// dtype dispatch. Kernels compute natively in f32/f64/integers; narrow float
// types (f16, bf16, f8) are computed in f32 and rounded back (to nearest even),
// which is what ONNX's numpy reference does.
#pragma once
#include <cstdint>
#include <vector>

#include "core/element_access.h"
#include "core/tensor.h"
#include "engines/interp/kernel.h"

namespace hodu::interp {

// Numpy-style broadcast of two or more shapes; InvalidModel naming the node when incompatible.
std::vector<int64_t> broadcast_shapes(const KernelContext& ctx, const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b);
// For each output element (row-major), the element offset into an input of
// shape `in` broadcast to `out`.
std::vector<int64_t> broadcast_offsets(const std::vector<int64_t>& in, const std::vector<int64_t>& out);
// Strides of `in` broadcast to `out` (0 along broadcast dims), aligned right.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);

// Axis in [-rank, rank) → [0, rank); InvalidModel otherwise.
int64_t normalize_axis(const KernelContext& ctx, int64_t axis, int64_t rank);
// Reads a 1-D (or scalar) integer tensor as int64 values.
std::vector<int64_t> tensor_to_int64_vector(const Tensor& t);

// True for the dtypes computed through f32 (f16, bf16, float8, float4).
bool is_narrow_float(DType t);
// Narrow float → f32 tensor; other dtypes are returned as they are.
Tensor widen(const Tensor& t);
// f32 result → `target` (rounding to nearest even); no-op if target is f32.
Tensor narrow_to(const Tensor& f32_result, DType target);

// Calls f.template operator()<T>() with T the C++ type of `dtype`:
// float, double, int8_t..int64_t, uint8_t..uint64_t, bool. Unsupported (naming the
// node) for other dtypes. Narrow floats must be widened first.
template <typename F>
decltype(auto) dispatch_numeric(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    case DType::I8: return f.template operator()<int8_t>();
    case DType::I16: return f.template operator()<int16_t>();
    case DType::I32: return f.template operator()<int32_t>();
    case DType::I64: return f.template operator()<int64_t>();
    case DType::U8: return f.template operator()<uint8_t>();
    case DType::U16: return f.template operator()<uint16_t>();
    case DType::U32: return f.template operator()<uint32_t>();
    case DType::U64: return f.template operator()<uint64_t>();
    case DType::Bool: return f.template operator()<bool>();
    default:
      ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(dtype));
  }
}

// Same, floating types only (f32, f64).
template <typename F>
decltype(auto) dispatch_float(const KernelContext& ctx, DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    default:
      ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op (needs a float type)",
               dtype_name(dtype));
  }
}

// Runs fn(begin, end) over [0, n) split across `threads` workers (fn must be
// safe to run on disjoint ranges). Deterministic: the split does not change results.
void parallel_for(int threads, int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace hodu::interp
