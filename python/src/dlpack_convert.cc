// DLPack ↔ hodu Tensors without copies (dlpack/dlpack.h, DLPack 0.6 ABI as
// Debian ships it; the bool code 6 of DLPack >= 0.8 is understood too).
#include <dlpack/dlpack.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"

namespace hodu::python {
namespace {

constexpr const char* kDLTensorName = "dltensor";
constexpr const char* kUsedDLTensorName = "used_dltensor";
constexpr uint8_t kDLBoolCode = 6;  // DLPack >= 0.8

// What a DLManagedTensor made by hodu owns: a Tensor reference and the arrays
// its DLTensor points at.
struct ExportedTensor {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

DLDataType dl_dtype_of(DType t) {
  auto make = [](uint8_t code, uint8_t bits) { return DLDataType{code, bits, 1}; };
  switch (t) {
    case DType::Bool: return make(kDLBoolCode, 8);
    case DType::I8: return make(kDLInt, 8);
    case DType::I16: return make(kDLInt, 16);
    case DType::I32: return make(kDLInt, 32);
    case DType::I64: return make(kDLInt, 64);
    case DType::U8: return make(kDLUInt, 8);
    case DType::U16: return make(kDLUInt, 16);
    case DType::U32: return make(kDLUInt, 32);
    case DType::U64: return make(kDLUInt, 64);
    case DType::F16: return make(kDLFloat, 16);
    case DType::F32: return make(kDLFloat, 32);
    case DType::F64: return make(kDLFloat, 64);
    case DType::BF16: return make(kDLBfloat, 16);
    case DType::C64: return make(kDLComplex, 64);
    case DType::C128: return make(kDLComplex, 128);
    default: fail(ErrorCode::Unsupported, "dtype {} has no DLPack equivalent", dtype_name(t));
  }
}

DType dtype_of_dl(const DLDataType& d, const std::string& what) {
  HODU_CHECK(d.lanes == 1, ErrorCode::Unsupported, "{}: DLPack vector types (lanes={}) are not supported", what,
             d.lanes);
  switch (d.code) {
    case kDLInt:
      if (d.bits == 8) return DType::I8;
      if (d.bits == 16) return DType::I16;
      if (d.bits == 32) return DType::I32;
      if (d.bits == 64) return DType::I64;
      break;
    case kDLUInt:
      if (d.bits == 8) return DType::U8;
      if (d.bits == 16) return DType::U16;
      if (d.bits == 32) return DType::U32;
      if (d.bits == 64) return DType::U64;
      break;
    case kDLFloat:
      if (d.bits == 16) return DType::F16;
      if (d.bits == 32) return DType::F32;
      if (d.bits == 64) return DType::F64;
      break;
    case kDLBfloat:
      if (d.bits == 16) return DType::BF16;
      break;
    case kDLComplex:
      if (d.bits == 64) return DType::C64;
      if (d.bits == 128) return DType::C128;
      break;
    case kDLBoolCode:
      if (d.bits == 8) return DType::Bool;
      break;
    default: break;
  }
  fail(ErrorCode::Unsupported, "{}: DLPack dtype (code {}, {} bits) is not supported", what, d.code, d.bits);
}

Device device_of_dl(const DLDevice& d, const std::string& what) {
  switch (d.device_type) {
    case kDLCPU: case kDLCUDAHost: return Device::cpu();
    case kDLCUDA: case kDLCUDAManaged: return Device::cuda(d.device_id);
    default: fail(ErrorCode::Unsupported, "{}: DLPack device type {} is not supported (cpu and cuda are)", what,
                  static_cast<int>(d.device_type));
  }
}

DLDevice dl_device_of(const Device& d) {
  return d.kind == Device::Kind::CUDA ? DLDevice{kDLCUDA, d.index} : DLDevice{kDLCPU, 0};
}

// Calls the producer's deleter; producers (numpy, torch) may touch Python objects.
void release_managed(DLManagedTensor* managed) {
  if (!managed->deleter) return;
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  managed->deleter(managed);
}

}  // namespace

bool is_dlpack_source(py::handle obj) {
  if (PyCapsule_CheckExact(obj.ptr())) {
    const char* name = PyCapsule_GetName(obj.ptr());
    return name && std::string(name) == kDLTensorName;
  }
  return py::hasattr(obj, "__dlpack__");
}

Tensor tensor_from_dlpack(py::handle obj, const std::string& what) {
  py::object capsule = PyCapsule_CheckExact(obj.ptr()) ? py::reinterpret_borrow<py::object>(obj)
                                                       : obj.attr("__dlpack__")();
  const char* name = PyCapsule_GetName(capsule.ptr());
  HODU_CHECK(name && std::string(name) == kDLTensorName, ErrorCode::InvalidArgument,
             "{}: not an unused DLPack capsule (a capsule can be consumed once)", what);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kDLTensorName));
  const DLTensor& dl = managed->dl_tensor;
  // Read everything that can fail before taking ownership.
  // Checks that can fail come first: until the rename below the capsule owns the tensor and frees it.
  const DType dtype = dtype_of_dl(dl.dtype, what);
  const Device device = device_of_dl(dl.device, what);
  std::vector<int64_t> shape(dl.shape, dl.shape + dl.ndim);
  std::vector<int64_t> strides = dl.strides ? std::vector<int64_t>(dl.strides, dl.strides + dl.ndim)
                                            : contiguous_strides(shape);
  // Bytes the view reaches: 1 + sum((dim-1)*stride) elements when non-empty.
  int64_t extent = 1;
  bool empty = false;
  for (int i = 0; i < dl.ndim; ++i) {
    if (shape[i] == 0) empty = true;
    HODU_CHECK(strides[i] >= 0 || shape[i] <= 1, ErrorCode::Unsupported,
               "{}: DLPack tensors with negative strides are not supported", what);
    if (shape[i] > 1) extent += (shape[i] - 1) * strides[i];
  }
  if (empty) extent = 0;
  PyCapsule_SetName(capsule.ptr(), kUsedDLTensorName);  // ours now: the capsule no longer frees it
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  auto storage = Storage::wrap(data, dtype_storage_bytes(dtype, extent), [managed] { release_managed(managed); },
                               device);
  // A strided view may reach fewer elements than it has (a broadcast's stride 0: torch's expand).
  if (dl.strides && strides != contiguous_strides(shape))
    return Tensor::from_storage(dtype, {extent}, std::move(storage)).as_strided(shape, strides, 0);
  return Tensor::from_storage(dtype, shape, std::move(storage));
}

py::capsule tensor_to_dlpack(const Tensor& t) {
  HODU_CHECK(t.dtype() != DType::String, ErrorCode::Unsupported, "string tensors cannot be shared through DLPack");
  DLDataType dl_dtype = dl_dtype_of(t.dtype());
  auto* holder = new ExportedTensor{t, t.shape(), t.strides(), {}};
  DLTensor& dl = holder->managed.dl_tensor;
  dl.data = const_cast<void*>(holder->tensor.raw_data());
  dl.device = dl_device_of(t.device());
  dl.ndim = static_cast<int32_t>(holder->shape.size());
  dl.dtype = dl_dtype;
  dl.shape = holder->shape.data();
  dl.strides = holder->strides.data();
  dl.byte_offset = 0;
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = [](DLManagedTensor* m) { delete static_cast<ExportedTensor*>(m->manager_ctx); };
  return py::capsule(&holder->managed, kDLTensorName, [](PyObject* cap) {
    // Only an unconsumed capsule still owns its tensor.
    if (PyCapsule_IsValid(cap, kDLTensorName)) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kDLTensorName));
      m->deleter(m);
    }
  });
}

py::tuple dlpack_device_of(const Tensor& t) {
  DLDevice d = dl_device_of(t.device());
  return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
}

}  // namespace hodu::python
