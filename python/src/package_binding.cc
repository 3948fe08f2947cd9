// hodu.pack and hodu.package_info: .hodupkg packages (docs/hodupkg.md), as `hodu pack` and
// `hodu info --json` give them. InferenceSession("m.hodupkg") needs nothing here: the
// Session loads packages itself.
#include <pybind11/stl.h>

#include "bindings.h"
#include "compilers/package/package_builder.h"
#include "core/error.h"

namespace hodu::python {
namespace {

// Keyword options of hodu.pack(), as the flags of `hodu pack`.
pkg::PackOptions pack_options(const py::dict& options) {
  pkg::PackOptions o;
  std::string kernels = "onednn";
  for (auto [key, value] : options) {
    const std::string k = py::str(key);
    if (value.is_none()) continue;
    if (k == "targets") o.targets = value.cast<std::vector<std::string>>();
    else if (k == "graph_only") o.graph_only = value.cast<bool>();
    else if (k == "name") o.meta.name = value.cast<std::string>();
    else if (k == "version") o.meta.version = value.cast<std::string>();
    else if (k == "author") o.meta.author = value.cast<std::string>();
    else if (k == "license") o.meta.license = value.cast<std::string>();
    else if (k == "description") o.meta.description = value.cast<std::string>();
    else if (k == "input_docs") o.input_docs = value.cast<std::map<std::string, std::string>>();
    else if (k == "output_docs") o.output_docs = value.cast<std::map<std::string, std::string>>();
    else if (k == "opt_level") o.codegen.opt_level = value.cast<int>();
    else if (k == "kernels") kernels = value.cast<std::string>();
    else if (k == "shapes") o.codegen.input_shapes = value.cast<std::map<std::string, std::vector<int64_t>>>();
    else if (k == "dims") o.codegen.dims = value.cast<std::map<std::string, int64_t>>();
    else if (k == "api_name") o.codegen.name = value.cast<std::string>();
    else if (k == "source") o.source = value.cast<std::string>();
    else
      fail(ErrorCode::InvalidArgument,
           "pack: unknown option '{}' (targets, graph_only, name, version, author, license, description, input_docs, "
           "output_docs, opt_level, kernels, shapes, dims, api_name)",
           k);
  }
  HODU_CHECK(kernels == "onednn" || kernels == "portable", ErrorCode::InvalidArgument,
             "pack: kernels must be 'onednn' or 'portable', got '{}'", kernels);
  o.codegen.kernel_library = kernels == "onednn";
  if (o.meta.name.empty()) o.meta.name = "model";
  if (o.codegen.name == "model") o.codegen.name = pkg::api_prefix_for(o.meta.name);
  HODU_CHECK(o.codegen.name == pkg::api_prefix_for(o.codegen.name), ErrorCode::InvalidArgument,
             "pack: api_name '{}' is not a C identifier", o.codegen.name);
  return o;
}

}  // namespace

void bind_package(py::module_& m) {
  m.def(
      "pack_model",
      [](const Model& model, const std::string& out, py::dict options) {
        pkg::PackOptions o = pack_options(options);
        std::string json;
        {
          py::gil_scoped_release nogil;
          pkg::pack_model(model, out, o);
          json = pkg::Package::open(out)->describe_json();
        }
        return json;
      },
      py::arg("model"), py::arg("output"), py::arg("options"));
  m.def(
      "package_info",
      [](const std::string& path) {
        py::gil_scoped_release nogil;
        return pkg::Package::open(path)->describe_json();
      },
      py::arg("path"));
}

}  // namespace hodu::python
