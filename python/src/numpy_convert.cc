// numpy arrays ↔ hodu Tensors, sharing memory both ways where layout and
// ownership allow (see bindings.h for the rules).
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"

namespace hodu::python {
namespace {

constexpr int kNpyAligned = 0x0100;  // NPY_ARRAY_ALIGNED
constexpr const char* kTensorCapsule = "hodu.Tensor";

// Drops a Python reference from any thread; the GIL may not be held when the
// last hodu user of a borrowed buffer goes away (runs release it).
void release_pyobject(PyObject* owner) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;  // the interpreter frees everything anyway
  py::gil_scoped_acquire gil;
  Py_DECREF(owner);
}

DType dtype_from_numpy(const py::dtype& dt, const std::string& what) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  switch (kind) {
    case 'b': return DType::Bool;
    case 'i':
      if (size == 1) return DType::I8;
      if (size == 2) return DType::I16;
      if (size == 4) return DType::I32;
      if (size == 8) return DType::I64;
      break;
    case 'u':
      if (size == 1) return DType::U8;
      if (size == 2) return DType::U16;
      if (size == 4) return DType::U32;
      if (size == 8) return DType::U64;
      break;
    case 'f':
      if (size == 2) return DType::F16;
      if (size == 4) return DType::F32;
      if (size == 8) return DType::F64;
      break;
    case 'c':
      if (size == 8) return DType::C64;
      if (size == 16) return DType::C128;
      break;
    case 'U': case 'S': case 'O': return DType::String;
    default: break;
  }
  fail(ErrorCode::Unsupported, "{}: numpy dtype {} is not supported (hodu takes bool, int8-64, uint8-64, "
       "float16/32/64, complex64/128 and str)", what, dt.attr("name").cast<std::string>());
}

// True when `expected` has no numpy counterpart and `got` can feed it by conversion.
bool converts_to(DType got, DType expected) {
  switch (expected) {
    case DType::BF16: case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2:
    case DType::F8E5M2FNUZ: case DType::F8E8M0: case DType::F4E2M1:
      return got == DType::F32 || got == DType::F64 || got == DType::F16;
    case DType::I4: case DType::I2: return got == DType::I8 || got == DType::I32 || got == DType::I64;
    case DType::U4: case DType::U2: return got == DType::U8 || got == DType::I32 || got == DType::I64;
    default: return false;
  }
}

Tensor strings_from_numpy(const py::array& arr, const std::string& what) {
  std::vector<int64_t> shape(arr.shape(), arr.shape() + arr.ndim());
  py::list items = arr.attr("ravel")().attr("tolist")();
  std::vector<std::string> values;
  values.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle item = items[i];
    if (py::isinstance<py::str>(item)) values.push_back(item.cast<std::string>());
    else if (py::isinstance<py::bytes>(item)) values.push_back(item.cast<std::string>());
    else
      fail(ErrorCode::InvalidArgument, "{}: an object array must hold str or bytes, element {} is {}", what, i,
           py::str(py::type::of(item).attr("__name__")).cast<std::string>());
  }
  return Tensor::from_strings(shape, values);
}

py::object strings_to_numpy(const Tensor& t) {
  Tensor c = t.contiguous();
  const std::string* s = c.string_data();
  const int64_t n = c.numel();
  py::list items(n);
  for (int64_t i = 0; i < n; ++i) {
    PyObject* u = PyUnicode_DecodeUTF8(s[i].data(), static_cast<Py_ssize_t>(s[i].size()), "strict");
    if (!u) {  // not UTF-8: hand back the bytes
      PyErr_Clear();
      items[i] = py::bytes(s[i]);
    } else {
      items[i] = py::reinterpret_steal<py::object>(u);
    }
  }
  py::module_ np = py::module_::import("numpy");
  return np.attr("array")(items, py::arg("dtype") = "object").attr("reshape")(py::cast(t.shape()));
}

}  // namespace

py::object numpy_dtype_of(DType t) {
  switch (t) {
    case DType::Bool: return py::dtype("bool");
    case DType::I8: return py::dtype("int8");
    case DType::I16: return py::dtype("int16");
    case DType::I32: return py::dtype("int32");
    case DType::I64: return py::dtype("int64");
    case DType::U8: return py::dtype("uint8");
    case DType::U16: return py::dtype("uint16");
    case DType::U32: return py::dtype("uint32");
    case DType::U64: return py::dtype("uint64");
    case DType::F16: return py::dtype("float16");
    case DType::F32: return py::dtype("float32");
    case DType::F64: return py::dtype("float64");
    case DType::C64: return py::dtype("complex64");
    case DType::C128: return py::dtype("complex128");
    case DType::String: return py::dtype("object");
    default: return py::none();
  }
}

bool storage_exclusively_owned(const Tensor& t) { return t.storage() && t.storage().use_count() == 1; }

Tensor tensor_from_numpy(py::handle obj, DType expected, const std::string& what) {
  py::module_ np = py::module_::import("numpy");
  py::array arr = py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj)
                                                  : py::array(np.attr("asarray")(obj));
  DType dtype = dtype_from_numpy(arr.dtype(), what);
  if (dtype == DType::String) return strings_from_numpy(arr, what);
  if (!arr.dtype().attr("isnative").cast<bool>())
    arr = arr.attr("astype")(arr.dtype().attr("newbyteorder")("="));
  // Non-contiguous or misaligned arrays are copied into a packed one (documented).
  if (!(arr.flags() & py::array::c_style) || !(arr.flags() & kNpyAligned))
    arr = np.attr("ascontiguousarray")(arr);
  std::vector<int64_t> shape(arr.shape(), arr.shape() + arr.ndim());
  const size_t bytes = static_cast<size_t>(arr.nbytes());
  PyObject* owner = arr.ptr();
  Py_INCREF(owner);
  auto storage = Storage::wrap(const_cast<void*>(arr.data()), bytes, [owner] { release_pyobject(owner); });
  Tensor t = Tensor::from_storage(dtype, std::move(shape), std::move(storage));
  if (expected != DType::Undefined && expected != dtype && converts_to(dtype, expected)) {
    py::gil_scoped_release nogil;  // a large cast need not hold up other Python threads
    return t.cast(expected);
  }
  return t;
}

py::object tensor_to_numpy(Tensor t, bool require_exclusive) {
  HODU_CHECK(t.device().kind == Device::Kind::CPU, ErrorCode::InvalidArgument,
             "a tensor on {} cannot become a numpy array; use run_dlpack() / hodu.Tensor and DLPack",
             t.device().to_string());
  if (t.dtype() == DType::String) return strings_to_numpy(t);
  py::object np_dtype = numpy_dtype_of(t.dtype());
  if (np_dtype.is_none()) {
    // numpy has no bf16/float8/int4: widen to the nearest type it has.
    DType wide = dtype_is_float(t.dtype()) ? DType::F32 : dtype_is_signed(t.dtype()) ? DType::I8 : DType::U8;
    t = t.cast(wide);
    np_dtype = numpy_dtype_of(wide);
  }
  // Share the buffer only when nothing else (model weights, an input, another
  // output, an engine's arena) references it; otherwise the caller could change
  // hodu's memory through the array.
  if (!t.is_contiguous() || (require_exclusive && !storage_exclusively_owned(t))) t = t.clone();
  auto* owned = new Tensor(std::move(t));
  py::capsule base(owned, kTensorCapsule, [](PyObject* cap) {
    delete static_cast<Tensor*>(PyCapsule_GetPointer(cap, kTensorCapsule));
  });
  const auto itemsize = static_cast<int64_t>(dtype_storage_bytes(owned->dtype(), 1));
  std::vector<py::ssize_t> shape(owned->shape().begin(), owned->shape().end());
  std::vector<py::ssize_t> strides = [&] {
    std::vector<py::ssize_t> s;
    for (int64_t st : contiguous_strides(owned->shape())) s.push_back(st * itemsize);
    return s;
  }();
  return py::array(py::dtype::from_args(np_dtype), shape, strides, owned->raw_data(), base);
}

py::object value_to_python(RuntimeValue v) {
  switch (v.kind) {
    case RuntimeValue::Kind::Tensor: return tensor_to_numpy(std::move(v.tensor));
    case RuntimeValue::Kind::Sequence: {
      py::list out;
      for (auto& t : v.sequence) out.append(tensor_to_numpy(std::move(t)));
      return out;
    }
    case RuntimeValue::Kind::Map: {
      py::dict out;
      py::object keys = tensor_to_numpy(std::move(v.map_keys)).attr("tolist")();
      py::object values = tensor_to_numpy(std::move(v.map_values)).attr("tolist")();
      py::list key_list = keys, value_list = values;
      for (size_t i = 0; i < key_list.size(); ++i) out[key_list[i]] = value_list[i];
      return out;
    }
    case RuntimeValue::Kind::OptionalEmpty:
    case RuntimeValue::Kind::None: return py::none();
  }
  return py::none();
}

// Test hook: the address of the hodu buffer behind an array made by
// tensor_to_numpy (its base is the capsule holding the Tensor), or None.
py::object hodu_buffer_address(py::array arr) {
  py::object base = arr.attr("base");
  if (base.is_none() || !PyCapsule_CheckExact(base.ptr()) ||
      std::string(PyCapsule_GetName(base.ptr()) ? PyCapsule_GetName(base.ptr()) : "") != kTensorCapsule)
    return py::none();
  auto* t = static_cast<Tensor*>(PyCapsule_GetPointer(base.ptr(), kTensorCapsule));
  return py::int_(reinterpret_cast<uintptr_t>(t->raw_data()));
}

}  // namespace hodu::python
