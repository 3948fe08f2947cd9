// hodu.compile: the ahead-of-time C compiler (compilers/c/toolchain.h), as `hodu build`.
#include <pybind11/stl.h>

#include "bindings.h"
#include "compilers/c/toolchain.h"
#include "core/error.h"

namespace hodu::python {
namespace {

namespace cc = compilers::c;

// Keyword options of hodu.compile(): name, standalone, weights ("embed"|"file"),
// shapes {input: [dims]}, dims {symbol: size}, target (GNU triple), keep_temp.
cc::BuildOptions build_options(const std::string& out, const std::string& format, int opt_level,
                               const py::dict& options) {
  cc::BuildOptions o;
  o.format = cc::artifact_format(out, format);
  o.codegen.opt_level = opt_level;
  for (auto [key, value] : options) {
    const std::string k = py::str(key);
    if (k == "name") o.codegen.name = value.cast<std::string>();
    else if (k == "standalone") o.codegen.standalone = value.cast<bool>();
    else if (k == "weights") {
      const std::string w = value.cast<std::string>();
      HODU_CHECK(w == "embed" || w == "file", ErrorCode::InvalidArgument,
                 "compile: weights must be 'embed' or 'file', got '{}'", w);
      o.codegen.embed_weights = w == "embed";
    } else if (k == "shapes") o.codegen.input_shapes = value.cast<std::map<std::string, std::vector<int64_t>>>();
    else if (k == "dims") o.codegen.dims = value.cast<std::map<std::string, int64_t>>();
    else if (k == "target") o.target = value.cast<std::string>();
    else if (k == "keep_temp") o.keep_temp = value.cast<bool>();
    else
      fail(ErrorCode::InvalidArgument,
           "compile: unknown option '{}' (name, standalone, weights, shapes, dims, target, keep_temp)", k);
  }
  return o;
}

}  // namespace

void bind_compiler(py::module_& m) {
  m.def(
      "compile_model",
      [](const Model& model, const std::string& out, const std::string& format, int opt_level, py::dict options) {
        cc::BuildOptions o = build_options(out, format, opt_level, options);
        cc::BuildResult r;
        {
          py::gil_scoped_release nogil;
          r = cc::build_model(model, out, o);
        }
        py::dict d;
        d["files"] = r.files;
        d["format"] = std::string(cc::artifact_format_name(o.format));
        d["compiler"] = r.compiler;
        d["generate_seconds"] = r.generate_seconds;
        d["compile_seconds"] = r.compile_seconds;
        d["arena_bytes"] = r.model.arena_bytes;
        d["weight_bytes"] = r.model.weight_bytes;
        d["nodes"] = r.model.nodes;
        d["fused_nodes"] = r.model.fused_nodes;
        if (!r.temp_dir.empty()) d["temp_dir"] = r.temp_dir;
        return d;
      },
      py::arg("model"), py::arg("output"), py::arg("format"), py::arg("opt_level"), py::arg("options"));
  m.def("compiler_supported_ops", &cc::supported_ops);
}

}  // namespace hodu::python
