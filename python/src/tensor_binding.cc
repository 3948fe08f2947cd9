// hodu.Tensor: a hodu tensor held by Python, exchanged with numpy and any
// DLPack library (torch, numpy, cupy) without copies.
#include <pybind11/stl.h>

#include "bindings.h"
#include "core/error.h"

namespace hodu::python {

void bind_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", "A hodu tensor. Shares memory with numpy / DLPack producers and consumers.")
      .def_static(
          "from_numpy",
          [](py::handle arr) { return PyTensor{tensor_from_numpy(arr, DType::Undefined, "array")}; },
          py::arg("array"),
          "Wraps a C-contiguous numpy array without a copy (other layouts are copied); the tensor keeps the "
          "array alive.")
      .def_static(
          "from_dlpack", [](py::handle obj) { return PyTensor{tensor_from_dlpack(obj, "DLPack tensor")}; },
          py::arg("obj"), "Takes an object with __dlpack__ (torch, numpy, ...) or a DLPack capsule, without a copy.")
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(dtype_name(t.tensor.dtype())); })
      .def_property_readonly("shape", [](const PyTensor& t) { return py::tuple(py::cast(t.tensor.shape())); })
      .def_property_readonly("strides", [](const PyTensor& t) { return py::tuple(py::cast(t.tensor.strides())); })
      .def_property_readonly("device", [](const PyTensor& t) { return t.tensor.device().to_string(); })
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.tensor.nbytes(); })
      .def_property_readonly("is_contiguous", [](const PyTensor& t) { return t.tensor.is_contiguous(); })
      .def_property_readonly("data_ptr",
                             [](const PyTensor& t) {
                               HODU_CHECK(t.tensor.dtype() != DType::String, ErrorCode::InvalidArgument,
                                          "string tensors have no raw data pointer");
                               return reinterpret_cast<uintptr_t>(t.tensor.raw_data());
                             },
                             "Address of the first element (for checking that memory is shared).")
      .def(
          "numpy", [](const PyTensor& t) { return tensor_to_numpy(t.tensor, /*require_exclusive=*/false); },
          "A numpy array sharing this tensor's memory (a copy for dtypes numpy lacks, strided views and strings).")
      .def(
          "__array__",
          [](const PyTensor& t, py::object dtype, py::object copy) {
            py::object a = tensor_to_numpy(t.tensor, false);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def(
          "__dlpack__", [](const PyTensor& t, py::object stream) { return tensor_to_dlpack(t.tensor); },
          py::arg("stream") = py::none(), "A DLPack capsule sharing this tensor (no copy).")
      .def("__dlpack_device__", [](const PyTensor& t) { return dlpack_device_of(t.tensor); })
      .def("__len__",
           [](const PyTensor& t) {
             HODU_CHECK(t.tensor.rank() > 0, ErrorCode::InvalidArgument, "len() of a 0-d tensor");
             return t.tensor.shape()[0];
           })
      .def("__repr__", [](const PyTensor& t) {
        return "hodu.Tensor(" + t.tensor.type_string() + ", device=" + t.tensor.device().to_string() + ")";
      });
  m.def("_hodu_buffer_address", &hodu_buffer_address, py::arg("array"));
  m.def("_storage_allocation_count", [] { return Storage::allocation_count(); });
}

}  // namespace hodu::python
