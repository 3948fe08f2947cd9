// Shared declarations of the _hodu extension: one bind_* function per area
// (errors, tensors, models, sessions, runtime) and the numpy/DLPack converters
// that sessions and tensors share.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <nlohmann/json_fwd.hpp>

#include <string>

#include "core/runtime_value.h"
#include "core/tensor.h"

namespace hodu::python {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_tensor(py::module_& m);
void bind_models(py::module_& m);
void bind_session(py::module_& m);
void bind_runtime(py::module_& m);
void bind_compiler(py::module_& m);
void bind_package(py::module_& m);
void bind_training(py::module_& m);

// JSON text → json; InvalidArgument "<what>: not valid JSON: ..." when malformed.
nlohmann::json parse_json(const std::string& text, const std::string& what);

// A value's dims as onnxruntime gives them: int, symbol name or None per dim;
// None for an unknown rank.
py::object shape_to_python(const Shape& shape);

// bytes / bytearray / memoryview → std::string (one copy).
std::string bytes_of(py::handle obj);
bool is_bytes_like(py::handle obj);

// ---- numpy ----
// A Tensor over the array's memory when it is C-contiguous, aligned, native
// byte order and of a dtype hodu shares with numpy; the Storage keeps the
// array alive. Otherwise a contiguous copy (strings are always copied).
// `expected` (may be Undefined) lets float arrays feed dtypes numpy lacks
// (bf16, float8): those are converted. `what` names the value in errors.
Tensor tensor_from_numpy(py::handle obj, DType expected, const std::string& what);
// A numpy array sharing the tensor's buffer (a capsule holding the Tensor is
// its base) when the tensor is contiguous, its dtype exists in numpy and no
// one else references its storage; a copy otherwise (see docs/python.md).
// `require_exclusive` false: share even when others reference the storage
// (hodu.Tensor.numpy(), an explicit view like torch's).
py::object tensor_to_numpy(Tensor t, bool require_exclusive = true);
// Test hook: the hodu buffer address behind an array from tensor_to_numpy, or None.
py::object hodu_buffer_address(py::array arr);
// Tensor, sequence → list, empty optional → None, map → dict.
py::object value_to_python(RuntimeValue v);
// The numpy dtype of a hodu dtype, or None when numpy has none.
py::object numpy_dtype_of(DType t);

// ---- DLPack ----
// True when obj has __dlpack__ or is a "dltensor" capsule.
bool is_dlpack_source(py::handle obj);
// Consumes a DLPack capsule / __dlpack__ object; no copy. The Tensor keeps the
// producer's memory alive and calls its deleter (under the GIL) when dropped.
Tensor tensor_from_dlpack(py::handle obj, const std::string& what);
// A "dltensor" capsule sharing the tensor (the capsule owns a Tensor reference).
py::capsule tensor_to_dlpack(const Tensor& t);
// (device_type, device_id) as __dlpack_device__ returns it.
py::tuple dlpack_device_of(const Tensor& t);

// Whether a tensor's storage may be handed to Python without a copy: it is
// referenced only by `t` (not by the model's weights, an input or another output).
bool storage_exclusively_owned(const Tensor& t);

// The Python-visible tensor wrapper (hodu.Tensor); holds a hodu::Tensor.
struct PyTensor {
  Tensor tensor;
};

}  // namespace hodu::python
