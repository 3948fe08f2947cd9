// _hodu.Session: runtime/session.h for Python. Feeds are converted without
// copies where possible (numpy_convert.cc, dlpack_convert.cc), the GIL is
// released while the model runs, and outputs come back as numpy arrays or
// hodu.Tensor objects. hodu/session.py wraps it in onnxruntime's call shape.
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"
#include "runtime/policy.h"
#include "runtime/session.h"

namespace hodu::python {
namespace {

// onnxruntime's spelling of a type: tensor(float), seq(tensor(int64)), map(string,tensor(float)).
std::string ort_type_string(const ValueType& t) {
  switch (t.kind) {
    case ValueType::Kind::Tensor:
      return "tensor(" + std::string(t.dtype == DType::Undefined ? "undefined" : dtype_onnx_name(t.dtype)) + ")";
    case ValueType::Kind::SparseTensor: return "sparse_tensor(" + std::string(dtype_onnx_name(t.dtype)) + ")";
    case ValueType::Kind::Sequence: return "seq(" + (t.elem ? ort_type_string(*t.elem) : "unknown") + ")";
    case ValueType::Kind::Optional: return "optional(" + (t.elem ? ort_type_string(*t.elem) : "unknown") + ")";
    case ValueType::Kind::Map:
      return "map(" + std::string(dtype_onnx_name(t.key_type)) + "," + (t.elem ? ort_type_string(*t.elem) : "") + ")";
    case ValueType::Kind::Unknown: break;
  }
  return "unknown";
}

// Dims of a (sparse) tensor (see shape_to_python); [] for other kinds of value.
py::object shape_of(const ValueType& t) {
  if (t.kind != ValueType::Kind::Tensor && t.kind != ValueType::Kind::SparseTensor) return py::list();
  return shape_to_python(t.shape);
}

py::dict describe(const Value& v) {
  py::dict d;
  d["name"] = v.name;
  d["type"] = ort_type_string(v.type);
  d["shape"] = shape_of(v.type);
  d["dtype"] = v.type.kind == ValueType::Kind::Tensor ? py::object(py::str(std::string(dtype_name(v.type.dtype))))
                                                      : py::object(py::none());
  return d;
}

// The element type a sequence/optional input holds, when it is a tensor type.
const ValueType* element_type(const ValueType* t) {
  while (t && (t->kind == ValueType::Kind::Sequence || t->kind == ValueType::Kind::Optional)) t = t->elem.get();
  return t;
}

bool expects_sequence(const ValueType* t) {
  if (t && t->kind == ValueType::Kind::Optional && t->elem) t = t->elem.get();
  return t && t->kind == ValueType::Kind::Sequence;
}

Tensor feed_tensor(py::handle obj, DType expected, const std::string& what) {
  // Strided views (a transposed torch tensor) are packed first, as numpy feeds are: kernels want packed inputs.
  if (py::isinstance<PyTensor>(obj)) return obj.cast<const PyTensor&>().tensor.contiguous();
  if (!py::isinstance<py::array>(obj) && is_dlpack_source(obj)) return tensor_from_dlpack(obj, what).contiguous();
  return tensor_from_numpy(obj, expected, what);
}

RuntimeValue feed_value(py::handle obj, const ValueType* type, const std::string& what) {
  if (obj.is_none()) {
    HODU_CHECK(type && type->kind == ValueType::Kind::Optional, ErrorCode::InvalidArgument,
               "{} is None but the model expects {}", what, type ? type->to_string() : "a value");
    return RuntimeValue::empty_optional();
  }
  const ValueType* elem = element_type(type);
  const DType expected = elem && elem->kind == ValueType::Kind::Tensor ? elem->dtype : DType::Undefined;
  if (expects_sequence(type) && (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj))) {
    TensorSequence seq;
    size_t i = 0;
    for (py::handle item : obj) seq.push_back(feed_tensor(item, expected, what + "[" + std::to_string(i++) + "]"));
    RuntimeValue v = RuntimeValue::make_sequence(std::move(seq), expected);
    v.is_optional = type->kind == ValueType::Kind::Optional;
    return v;
  }
  RuntimeValue v(feed_tensor(obj, expected, what));
  v.is_optional = type && type->kind == ValueType::Kind::Optional;
  return v;
}

class PySession {
 public:
  // Explicit arguments ("" / -1 = not given) override the policy's fields.
  PySession(py::object source, const std::string& device, int threads, const std::string& engine,
            const std::string& policy_json, bool reseed_each_run, uint64_t seed, int opt_level) {
    if (!policy_json.empty()) policy_ = Policy::from_json(parse_json(policy_json, "policy"));
    ExecutionPolicy& exec = policy_.execution;
    if (!device.empty()) exec.device = Device::parse(device);
    if (threads >= 0) exec.threads = threads;
    if (!engine.empty()) exec.engine = engine;
    // The Session's Dispatcher checks the whole policy (kernel names registered
    // for the op on the device, precision supported by the engine) and picks the engine.
    SessionOptions options;
    options.policy = policy_;
    options.reseed_each_run = reseed_each_run;
    options.seed = seed;
    options.opt_level = opt_level;
    if (py::isinstance<Model>(source)) {
      Model model = source.cast<const Model&>();
      py::gil_scoped_release nogil;
      session_ = Session::from_model(std::move(model), options);
    } else if (is_bytes_like(source)) {
      std::string bytes = bytes_of(source);
      py::gil_scoped_release nogil;
      session_ = Session::from_bytes(bytes, options);
    } else if (py::isinstance<py::str>(source) || py::hasattr(source, "__fspath__")) {
      std::string path = py::module_::import("os").attr("fspath")(source).cast<std::string>();
      py::gil_scoped_release nogil;
      session_ = Session::load(path, options);
    } else {
      fail(ErrorCode::InvalidArgument, "a model is a path (str, os.PathLike), bytes or hodu.Model, not {}",
           py::str(py::type::of(source).attr("__name__")).cast<std::string>());
    }
    device_ = exec.device;
  }

  py::list inputs() const {
    py::list out;
    for (const auto& v : session_->inputs()) out.append(describe(v));
    return out;
  }
  py::list outputs() const {
    py::list out;
    for (const auto& v : session_->outputs()) out.append(describe(v));
    return out;
  }
  const Session& session() const { return *session_; }
  std::string policy_json() const { return policy_.to_json().dump(); }
  std::string device() const { return device_.to_string(); }

  // as_tensors: outputs as hodu.Tensor (DLPack) instead of numpy arrays.
  py::list run(py::object output_names, py::dict feeds, bool as_tensors) {
    std::vector<size_t> selected = select_outputs(output_names);
    std::map<std::string, RuntimeValue> inputs;
    for (auto [key, value] : feeds) {
      HODU_CHECK(py::isinstance<py::str>(key), ErrorCode::InvalidArgument, "feed names must be str, got {}",
                 py::str(py::type::of(key).attr("__name__")).cast<std::string>());
      std::string name = key.cast<std::string>();
      const Value* decl = session_->model().graph.input(name);
      // Unknown names are reported by Session::check_inputs with the list of inputs.
      RuntimeValue v = feed_value(value, decl ? &decl->type : nullptr, "input '" + name + "'");
      check_device(v, name);
      inputs.emplace(std::move(name), std::move(v));
    }
    std::vector<NamedValue> outs;
    {
      py::gil_scoped_release nogil;
      outs = session_->run(inputs);
    }
    // `inputs` stays alive until the outputs are converted: an output that
    // aliases an input then counts as shared and is copied.
    py::list result;
    for (size_t i : selected) {
      RuntimeValue v = std::move(outs[i].value);
      result.append(as_tensors ? value_to_tensors(std::move(v)) : value_to_python(std::move(v)));
    }
    return result;
  }

 private:
  std::vector<size_t> select_outputs(const py::object& names) const {
    const auto& outs = session_->outputs();
    std::vector<size_t> selected;
    if (names.is_none() || (py::isinstance<py::sequence>(names) && py::len(names) == 0)) {
      for (size_t i = 0; i < outs.size(); ++i) selected.push_back(i);
      return selected;
    }
    HODU_CHECK(!py::isinstance<py::str>(names), ErrorCode::InvalidArgument,
               "output_names is a list of names or None, not a str");
    for (py::handle h : names) {
      std::string name = h.cast<std::string>();
      size_t i = 0;
      while (i < outs.size() && outs[i].name != name) ++i;
      if (i == outs.size()) {
        std::string all;
        for (const auto& o : outs) all += (all.empty() ? "'" : ", '") + o.name + "'";
        fail(ErrorCode::InvalidArgument, "'{}' is not an output of the model (outputs: {})", name, all);
      }
      selected.push_back(i);
    }
    return selected;
  }

  void check_device(const RuntimeValue& v, const std::string& name) const {
    auto check = [&](const Tensor& t) {
      HODU_CHECK(t.device() == device_, ErrorCode::InvalidArgument,
                 "input '{}' is on {} but the session runs on {}", name, t.device().to_string(),
                 device_.to_string());
    };
    if (v.is_tensor()) check(v.tensor);
    for (const auto& t : v.sequence) check(t);
  }

  static py::object tensor_object(Tensor t) {
    if (!storage_exclusively_owned(t)) t = t.clone();  // never hand out hodu's weights or an input's memory
    return py::cast(PyTensor{std::move(t)});
  }

  static py::object value_to_tensors(RuntimeValue v) {
    switch (v.kind) {
      case RuntimeValue::Kind::Tensor: return tensor_object(std::move(v.tensor));
      case RuntimeValue::Kind::Sequence: {
        py::list out;
        for (auto& t : v.sequence) out.append(tensor_object(std::move(t)));
        return out;
      }
      default: return value_to_python(std::move(v));
    }
  }

  std::unique_ptr<Session> session_;
  Device device_;
  Policy policy_;
};

}  // namespace

void bind_session(py::module_& m) {
  py::class_<PySession>(m, "Session")
      .def(py::init<py::object, const std::string&, int, const std::string&, const std::string&, bool, uint64_t, int>(),
           py::arg("model"), py::arg("device") = "", py::arg("threads") = -1, py::arg("engine") = "",
           py::arg("policy") = "", py::arg("reseed_each_run") = false, py::arg("seed") = 0, py::arg("opt_level") = -1)
      .def_property_readonly("policy", &PySession::policy_json)
      .def("inputs", &PySession::inputs)
      .def("outputs", &PySession::outputs)
      .def("run", &PySession::run, py::arg("output_names"), py::arg("feeds"), py::arg("as_tensors") = false)
      .def_property_readonly("device", &PySession::device)
      .def_property_readonly("engine", [](const PySession& s) { return s.session().engine_name(); })
      .def_property_readonly("threads", [](const PySession& s) { return s.session().threads(); })
      .def_property_readonly("metadata", [](const PySession& s) {
        const Model& model = s.session().model();
        py::dict d;
        d["producer_name"] = model.producer_name;
        d["producer_version"] = model.producer_version;
        d["domain"] = model.domain;
        d["version"] = model.model_version;
        d["description"] = model.doc;
        d["graph_name"] = model.graph.name;
        d["graph_description"] = model.graph.doc;
        py::dict custom;
        for (const auto& [k, v] : model.metadata) custom[py::str(k)] = v;
        d["custom_metadata_map"] = custom;
        return d;
      });
}

}  // namespace hodu::python
