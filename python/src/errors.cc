// hodu::Error → the exception classes of hodu/errors.py, chosen by ErrorCode.
#include <algorithm>
#include <cctype>

#include "bindings.h"
#include "core/error.h"

namespace hodu::python {
namespace {

const char* class_name(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::InvalidModel: return "InvalidModelError";
    case ErrorCode::InvalidArgument: return "InvalidArgumentError";
    case ErrorCode::Unsupported: return "UnsupportedOperationError";
    case ErrorCode::OutOfMemory: return "OutOfMemoryError";
    case ErrorCode::Device: {
      // ErrorCode has one Device category; CUDA failures name CUDA in their message.
      std::string lower = message;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      return lower.find("cuda") != std::string::npos ? "CudaError" : "DeviceError";
    }
    case ErrorCode::Io: return "IoError";
    case ErrorCode::Internal: return "InternalError";
  }
  return "HoduError";
}

ErrorCode parse_code(const std::string& name) {
  for (ErrorCode c : {ErrorCode::InvalidModel, ErrorCode::InvalidArgument, ErrorCode::Unsupported,
                      ErrorCode::OutOfMemory, ErrorCode::Device, ErrorCode::Io, ErrorCode::Internal})
    if (name == error_code_name(c)) return c;
  throw Error(ErrorCode::InvalidArgument, "unknown error code '" + name + "'");
}

}  // namespace

void bind_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object cls = py::module_::import("hodu.errors").attr(class_name(e.code(), e.what()));
      PyErr_SetObject(cls.ptr(), py::str(e.what()).ptr());
    }
  });
  // Test hook: throws a hodu::Error of the named category through the translator.
  m.def("_raise", [](const std::string& code, const std::string& message) { throw Error(parse_code(code), message); },
        py::arg("code"), py::arg("message"));
}

}  // namespace hodu::python
