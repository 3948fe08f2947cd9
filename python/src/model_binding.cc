// hodu.Model and the file functions: load/save/convert models
// (formats/model_io.h) and tensor files (formats/tensor_io.h).
#include <pybind11/stl.h>

#include <filesystem>
#include <map>

#include "bindings.h"
#include "core/error.h"
#include "formats/model_io.h"
#include "formats/tensor_io.h"
#include "ir/hoduscript.h"

namespace hodu::python {
namespace {

bool is_model_path(const std::string& p) {
  auto ext = std::filesystem::path(p).extension().string();
  return ext == ".onnx" || ext == ".hdss" || ext == ".hodu" || ext == ".hodupkg";
}

ModelFormat parse_format(const std::string& name) {
  if (name == "onnx") return ModelFormat::Onnx;
  if (name == "hdss") return ModelFormat::Hdss;
  if (name == "hodu" || name == "hoduscript") return ModelFormat::HoduScript;
  fail(ErrorCode::InvalidArgument, "unknown model format '{}' (onnx, hdss, hodu)", name);
}

void count_ops(const Graph& g, std::map<std::string, int>& hist) {
  for (const auto& n : g.nodes) {
    ++hist[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type];
    for (const auto& a : n.attributes) {
      if (a.g) count_ops(*a.g, hist);
      for (const auto& sg : a.graphs) count_ops(*sg, hist);
    }
  }
}

int node_count(const std::map<std::string, int>& hist) {
  int nodes = 0;
  for (const auto& [op, n] : hist) nodes += n;
  return nodes;
}

py::dict value_info(const Value& v) {
  py::dict d;
  d["name"] = v.name;
  d["type"] = v.type.to_string();
  if (v.type.kind == ValueType::Kind::Tensor) {
    d["dtype"] = std::string(dtype_name(v.type.dtype));
    d["shape"] = shape_to_python(v.type.shape);
  }
  return d;
}

// The graph inputs a caller feeds (initializers left out).
py::list input_infos(const Graph& g) {
  py::list out;
  for (const auto& v : g.inputs)
    if (!g.initializer(v.name)) out.append(value_info(v));
  return out;
}

py::list output_infos(const Graph& g) {
  py::list out;
  for (const auto& v : g.outputs) out.append(value_info(v));
  return out;
}

py::dict model_info(const Model& m) {
  const Graph& g = m.graph;
  py::dict d;
  d["graph_name"] = g.name;
  d["producer"] = py::dict(py::arg("name") = m.producer_name, py::arg("version") = m.producer_version);
  d["ir_version"] = m.ir_version;
  py::dict opsets;
  for (const auto& [domain, version] : m.opset_imports) opsets[py::str(domain.empty() ? "ai.onnx" : domain)] = version;
  d["opsets"] = opsets;
  d["inputs"] = input_infos(g);
  d["outputs"] = output_infos(g);
  std::map<std::string, int> hist;
  count_ops(g, hist);
  d["node_count"] = node_count(hist);
  d["ops"] = hist;
  d["parameter_count"] = g.parameter_count();
  d["parameter_bytes"] = g.parameter_bytes();
  return d;
}

std::shared_ptr<Model> load_any(py::handle source) {
  if (is_bytes_like(source)) {
    std::string bytes = bytes_of(source);
    py::gil_scoped_release nogil;
    return std::make_shared<Model>(load_model_from_bytes(bytes, model_format_from_bytes(bytes)));
  }
  std::string path = py::module_::import("os").attr("fspath")(source).cast<std::string>();
  py::gil_scoped_release nogil;
  return std::make_shared<Model>(load_model(path));
}

}  // namespace

py::object shape_to_python(const Shape& shape) {
  if (!shape.rank_known()) return py::none();
  py::list dims;
  for (const Dim& d : shape.dims()) {
    if (d.is_known()) dims.append(d.value);
    else if (d.is_symbolic()) dims.append(d.symbol);
    else dims.append(py::none());
  }
  return dims;
}

bool is_bytes_like(py::handle obj) {
  return py::isinstance<py::bytes>(obj) || py::isinstance<py::bytearray>(obj) || py::isinstance<py::memoryview>(obj);
}

std::string bytes_of(py::handle obj) {
  if (py::isinstance<py::bytes>(obj)) return obj.cast<std::string>();
  return py::module_::import("builtins").attr("bytes")(obj).cast<std::string>();
}

void bind_models(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "Model", "A model in hodu's graph IR (canonical, newest-opset ops).")
      .def_property_readonly("graph_name", [](const Model& x) { return x.graph.name; })
      .def_property_readonly("producer_name", [](const Model& x) { return x.producer_name; })
      .def_property_readonly("ir_version", [](const Model& x) { return x.ir_version; })
      .def_property_readonly("opset_imports", [](const Model& x) { return x.opset_imports; })
      .def_property_readonly("inputs", [](const Model& x) { return input_infos(x.graph); })
      .def_property_readonly("outputs", [](const Model& x) { return output_infos(x.graph); })
      .def_property_readonly("node_count",
                             [](const Model& x) {
                               std::map<std::string, int> hist;
                               count_ops(x.graph, hist);
                               return node_count(hist);
                             })
      .def_property_readonly("parameter_count", [](const Model& x) { return x.graph.parameter_count(); })
      .def("info", &model_info)
      .def("to_text", &print_hoduscript, "The model as HoduScript text.")
      .def(
          "to_bytes",
          [](const Model& x, const std::string& format, int opset) {
            SaveOptions so;
            so.onnx_opset = opset;
            return py::bytes(save_model_to_bytes(x, parse_format(format), so));
          },
          py::arg("format") = "onnx", py::arg("opset") = 0)
      .def(
          "save",
          [](const Model& x, py::object path, int opset) {
            SaveOptions so;
            so.onnx_opset = opset;
            save_model(x, py::module_::import("os").attr("fspath")(path).cast<std::string>(), so);
          },
          py::arg("path"), py::arg("opset") = 0)
      .def("__eq__", [](const Model& a, const Model& b) { return a == b; })
      .def("__repr__", [](const Model& x) {
        return "hodu.Model(graph='" + x.graph.name + "', nodes=" + std::to_string(x.graph.nodes.size()) +
               ", inputs=" + std::to_string(x.graph.inputs.size()) + ", outputs=" +
               std::to_string(x.graph.outputs.size()) + ")";
      });

  m.def("load", &load_any, py::arg("model"),
        "Loads a model from a path (.onnx, .hdss, .hodu) or from bytes (format sniffed).");
  m.def("parse_text", [](const std::string& text) { return std::make_shared<Model>(parse_hoduscript(text)); },
        py::arg("text"), "Parses HoduScript text into a model.");
  m.def("info", [](py::handle source) {
    if (py::isinstance<Model>(source)) return model_info(source.cast<const Model&>());
    return model_info(*load_any(source));
  }, py::arg("model"));
  m.def("is_model_path", [](const std::string& p) { return is_model_path(p); });
  m.def(
      "convert_model",
      [](const std::string& src, const std::string& dst, int opset) {
        py::gil_scoped_release nogil;
        Model model = load_model(src);
        SaveOptions so;
        so.onnx_opset = opset;
        save_model(model, dst, so);
      },
      py::arg("src"), py::arg("dst"), py::arg("opset") = 0);
  m.def(
      "read_tensors",
      [](const std::string& path) {
        NamedTensors tensors = read_tensor_file(path);
        py::dict out;
        for (auto& [name, t] : tensors) out[py::str(name)] = tensor_to_numpy(std::move(t));
        return out;
      },
      py::arg("path"));
  m.def(
      "write_tensors",
      [](const std::string& path, py::dict tensors) {
        NamedTensors named;
        for (auto [k, v] : tensors) {
          std::string name = py::str(k).cast<std::string>();
          named.emplace_back(name, tensor_from_numpy(v, DType::Undefined, "tensor '" + name + "'"));
        }
        write_tensor_file(path, named);
      },
      py::arg("path"), py::arg("tensors"));
  m.def(
      "convert_tensors", [](const std::string& src, const std::string& dst) {
        write_tensor_file(dst, read_tensor_file(src));
      },
      py::arg("src"), py::arg("dst"));
}

}  // namespace hodu::python
