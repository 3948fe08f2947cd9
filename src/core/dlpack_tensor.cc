#include "core/dlpack_tensor.h"

#include <memory>

#include "core/error.h"

namespace hodu {

DLDataType to_dl_dtype(DType t, const std::string& what) {
  DLDataType d{};
  d.lanes = 1;
  switch (t) {
    case DType::F16: case DType::F32: case DType::F64: d.code = kDLFloat; break;
    case DType::BF16: d.code = kDLBfloat; break;
    case DType::Bool: d.code = kDLBoolCode; break;
    case DType::I8: case DType::I16: case DType::I32: case DType::I64: d.code = kDLInt; break;
    case DType::U8: case DType::U16: case DType::U32: case DType::U64: d.code = kDLUInt; break;
    // DLPack 1.1's codes (dlpack.h 0.6 names them not): packed ones bits 4 / 2, elements side by side.
    case DType::I4: case DType::I2: d.code = kDLInt; break;
    case DType::U4: case DType::U2: d.code = kDLUInt; break;
    case DType::F8E4M3FN: d.code = 10; break;
    case DType::F8E4M3FNUZ: d.code = 11; break;
    case DType::F8E5M2: d.code = 12; break;
    case DType::F8E5M2FNUZ: d.code = 13; break;
    case DType::F8E8M0: d.code = 14; break;
    case DType::F4E2M1: d.code = 17; break;
    default:
      fail(ErrorCode::Unsupported, "{}: dtype {} has no DLPack equivalent", what, dtype_name(t));
  }
  d.bits = static_cast<uint8_t>(t == DType::Bool ? 8 : dtype_bits(t));
  return d;
}

DType from_dl_dtype(DLDataType d, const std::string& what) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && d.bits == 16) return DType::F16;
    if (d.code == kDLFloat && d.bits == 32) return DType::F32;
    if (d.code == kDLFloat && d.bits == 64) return DType::F64;
    if (d.code == kDLBfloat && d.bits == 16) return DType::BF16;
    if (d.code == kDLBoolCode && d.bits == 8) return DType::Bool;
    if (d.code == kDLInt && d.bits == 8) return DType::I8;
    if (d.code == kDLInt && d.bits == 16) return DType::I16;
    if (d.code == kDLInt && d.bits == 32) return DType::I32;
    if (d.code == kDLInt && d.bits == 64) return DType::I64;
    if (d.code == kDLUInt && d.bits == 8) return DType::U8;
    if (d.code == kDLUInt && d.bits == 16) return DType::U16;
    if (d.code == kDLUInt && d.bits == 32) return DType::U32;
    if (d.code == kDLUInt && d.bits == 64) return DType::U64;
    if (d.code == kDLInt && d.bits == 4) return DType::I4;
    if (d.code == kDLUInt && d.bits == 4) return DType::U4;
    if (d.code == kDLInt && d.bits == 2) return DType::I2;
    if (d.code == kDLUInt && d.bits == 2) return DType::U2;
    if (d.code == 10 && d.bits == 8) return DType::F8E4M3FN;
    if (d.code == 11 && d.bits == 8) return DType::F8E4M3FNUZ;
    if (d.code == 12 && d.bits == 8) return DType::F8E5M2;
    if (d.code == 13 && d.bits == 8) return DType::F8E5M2FNUZ;
    if (d.code == 14 && d.bits == 8) return DType::F8E8M0;
    if (d.code == 17 && d.bits == 4) return DType::F4E2M1;
  }
  fail(ErrorCode::Unsupported, "{}: DLPack dtype (code {}, bits {}, lanes {}) has no hodu dtype", what, d.code, d.bits,
       d.lanes);
}

DLTensor dl_view(const Tensor& t, const std::string& what) {
  HODU_CHECK(t.is_contiguous(), ErrorCode::Internal, "{}: a DLPack view needs a contiguous tensor", what);
  DLTensor d{};
  d.data = const_cast<void*>(t.raw_data());
  d.device = {kDLCPU, 0};
  d.ndim = static_cast<int>(t.rank());
  d.dtype = to_dl_dtype(t.dtype(), what);
  d.shape = const_cast<int64_t*>(t.shape().data());
  d.strides = nullptr;
  d.byte_offset = 0;
  return d;
}

Tensor tensor_from_dl(const DLTensor& d, std::function<void()> release, const std::string& what) {
  HODU_CHECK(d.device.device_type == kDLCPU, ErrorCode::Unsupported, "{}: tensor is not in CPU memory", what);
  HODU_CHECK(d.ndim >= 0 && (d.ndim == 0 || d.shape), ErrorCode::InvalidArgument, "{}: bad DLTensor shape", what);
  DType dtype = from_dl_dtype(d.dtype, what);
  std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
  int64_t n = 1;
  for (int64_t v : shape) {
    HODU_CHECK(v >= 0, ErrorCode::InvalidArgument, "{}: negative dim {}", what, v);
    n *= v;
  }
  if (d.strides) {  // compact row-major strides are fine, anything else is refused
    int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      HODU_CHECK(shape[i] <= 1 || d.strides[i] == expect, ErrorCode::Unsupported,
                 "{}: strided DLTensors are not supported", what);
      expect *= shape[i];
    }
  }
  size_t bytes = dtype_storage_bytes(dtype, n);
  HODU_CHECK(n == 0 || d.data, ErrorCode::InvalidArgument, "{}: DLTensor has no data", what);
  auto storage = Storage::wrap(static_cast<char*>(d.data) + d.byte_offset, bytes, std::move(release));
  return Tensor::from_storage(dtype, std::move(shape), std::move(storage));
}

namespace {
struct ManagedContext {
  Tensor tensor;
};
}  // namespace

DLManagedTensor* to_managed(Tensor t, const std::string& what) {
  auto ctx = std::make_unique<ManagedContext>(ManagedContext{t.contiguous()});
  auto m = std::make_unique<DLManagedTensor>();
  m->dl_tensor = dl_view(ctx->tensor, what);
  m->manager_ctx = ctx.release();
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<ManagedContext*>(self->manager_ctx);
    delete self;
  };
  return m.release();
}

Tensor from_managed(DLManagedTensor* m, const std::string& what) {
  HODU_CHECK(m, ErrorCode::Internal, "{}: no tensor returned", what);
  auto released = std::make_shared<bool>(false);  // once, whether the storage or the catch below releases
  auto release = [m, released] {
    if (!*released && m->deleter) m->deleter(m);
    *released = true;
  };
  try {
    return tensor_from_dl(m->dl_tensor, release, what);
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace hodu
