// hodu convert IN -o OUT: between model formats (.onnx .hdss .hodu) or
// between tensor file formats (.npy .npz .hdt .json .pb .safetensors).
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "formats/model_io.h"
#include "formats/tensor_io.h"
#include "passes/passes.h"

namespace hodu::cli {
namespace {

struct ConvertArgs {
  std::string in, out;
  int opset = 0;
  int opt_level = -1;  // -O: optimize the model before writing it
};

bool is_model_path(const std::string& p) {
  auto ext = std::filesystem::path(p).extension().string();
  return ext == ".onnx" || ext == ".hdss" || ext == ".hodu" || ext == ".hodupkg";
}

int run_convert(const ConvertArgs& a) {
  if (is_model_path(a.in) || is_model_path(a.out)) {
    HODU_CHECK(is_model_path(a.in) && is_model_path(a.out), ErrorCode::InvalidArgument,
               "cannot convert between a model and a tensor file ('{}' → '{}')", a.in, a.out);
    Model m = load_model(a.in);
    if (a.opt_level >= 0) passes::optimize(m, {a.opt_level, {}});
    SaveOptions so;
    so.onnx_opset = a.opset;
    save_model(m, a.out, so);
  } else {
    NamedTensors t = read_tensor_file(a.in);
    write_tensor_file(a.out, t);
  }
  std::fprintf(stderr, "wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

CommandFn add_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  app.add_option("input", a->in, "model (.onnx .hdss .hodu, or a .hodupkg's graph) or tensor file")->required();
  app.add_option("-o,--output", a->out, "output path; its extension picks the format")->required();
  app.add_option("--opset", a->opset, "ONNX opset for .onnx output (default: lowest that expresses the graph, >= 17)");
  app.add_option("-O,--opt-level", a->opt_level, "run the graph passes of this level (0-3) before writing")
      ->check(CLI::Range(0, 3));
  return [a] { return run_convert(*a); };
}

}  // namespace hodu::cli
