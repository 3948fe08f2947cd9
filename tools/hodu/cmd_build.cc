// hodu build MODEL -o OUT [-f FORMAT] [--target TRIPLE] [-O0..-O3] [--standalone] [--kernels onednn|portable]
//                  [--weights embed|file] [--name PREFIX] [--shape NAME=1x3x224x224] [--dim N=V]
//                  [-p|--plugin NAME]
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "compilers/c/toolchain.h"
#include "core/error.h"
#include "formats/model_io.h"
#include "plugins/engine_choice.h"
#include "shape_flags.h"

namespace hodu::cli {
namespace {

struct BuildArgs {
  std::string model, out, format, target, weights = "embed", name = "model", device = "cpu", kernels = "onednn";
  std::string plugin;  // -p: a compiler plugin builds it instead
  std::vector<std::string> shapes, dims;
  int opt_level = 2;
  bool standalone = false, quiet = false, keep_temp = false;
};

// -p NAME: the compiler plugin builds it; the model crosses as .hdss bytes and
// the flags become the plugin's build options (docs/plugins.md).
int run_plugin_build(const BuildArgs& a) {
  auto compiler = plugins::find_compiler(plugins::PluginManager::instance(), a.plugin);
  HODU_CHECK(compiler->info().supports(Device::parse(a.device)), ErrorCode::Unsupported,
             "-d {}: compiler '{}' does not compile for it", a.device, compiler->name());
  plugins::BuildRequest r;
  r.format = a.format;
  if (r.format.empty()) {
    std::string ext = std::filesystem::path(a.out).extension().string();
    r.format = ext.empty() ? "exe" : ext.substr(1);
  }
  r.target = a.target;
  r.name = a.name;
  r.opt_level = a.opt_level;
  if (a.standalone) r.options.push_back("standalone=1");
  if (a.weights != "embed") r.options.push_back("weights=" + a.weights);
  r.input_shapes = a.shapes;
  for (const auto& s : a.dims) r.options.push_back("dim." + s);
  auto start = std::chrono::steady_clock::now();
  std::string hdss = write_hdss(load_model(a.model));
  compiler->build(hdss, r, a.out);
  if (!a.quiet)
    std::fprintf(stderr, "built %s (%s) with plugin %s %s in %.2f s\n", a.out.c_str(), r.format.c_str(),
                 compiler->name().c_str(), compiler->info().version.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

int run_build(const BuildArgs& a) {
  if (!a.plugin.empty()) return run_plugin_build(a);
  using namespace compilers::c;
  auto start = std::chrono::steady_clock::now();
  HODU_CHECK(a.device == "cpu", ErrorCode::Unsupported, "-d {}: hodu build compiles for cpu only (for now)", a.device);
  BuildOptions o;
  o.format = artifact_format(a.out, a.format);
  o.target = a.target;
  o.keep_temp = a.keep_temp;
  o.codegen.name = a.name;
  o.codegen.standalone = a.standalone;
  HODU_CHECK(a.kernels == "onednn" || a.kernels == "portable", ErrorCode::InvalidArgument,
             "--kernels {}: expected onednn or portable", a.kernels);
  o.codegen.kernel_library = a.kernels == "onednn";
  HODU_CHECK(a.opt_level >= 0 && a.opt_level <= 3, ErrorCode::InvalidArgument, "-O{}: expected -O0 to -O3",
             a.opt_level);
  o.codegen.opt_level = a.opt_level;
  HODU_CHECK(a.weights == "embed" || a.weights == "file", ErrorCode::InvalidArgument,
             "--weights {}: expected embed or file", a.weights);
  o.codegen.embed_weights = a.weights == "embed";
  parse_shape_flags(a.shapes, a.dims, o.codegen);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (!a.quiet)
    o.progress = [&](const std::string& line) { std::fprintf(stderr, "[%6.2fs] %s\n", elapsed(), line.c_str()); };
  if (!a.quiet) std::fprintf(stderr, "[%6.2fs] loading %s\n", elapsed(), a.model.c_str());
  Model model = load_model(a.model);
  auto r = build_model(model, a.out, o);
  if (!a.quiet) {
    for (const auto& f : r.files)
      std::fprintf(stderr, "[%6.2fs] wrote %s (%.1f KiB)\n", elapsed(), f.c_str(),
                   std::filesystem::file_size(f) / 1024.0);
    if (!r.temp_dir.empty()) std::fprintf(stderr, "scratch folder kept: %s\n", r.temp_dir.c_str());
    std::fprintf(stderr, "built %s (%s) in %.2f s (generate %.2f s, compile %.2f s)\n", a.out.c_str(),
                 artifact_format_name(o.format), elapsed(), r.generate_seconds, r.compile_seconds);
  }
  return 0;
}

}  // namespace

CommandFn add_build_command(CLI::App& app) {
  auto a = std::make_shared<BuildArgs>();
  app.footer(R"(Formats (from -f or the extension of OUT):
  .c    C source, plus <name>.h and OUT.weights beside it (compile with: cc -c OUT.c in that folder)
  .o    object file        .so  shared library      .a  static library
  (none) executable: OUT -i NAME=x.npy -o DIR writes DIR/<output>.npy
  .s    assembly           .ll  LLVM IR (clang)     .bc LLVM bitcode (clang)
Libraries come with <name>.h beside them: the C API (create/run/destroy with DLPack tensors).
Weights: --weights embed puts them in the artifact (.incbin; .c/.s/.ll/.bc read OUT.weights when
assembled); --weights file leaves OUT.weights, loaded at create time.
Optimization: -O0 plain code, no buffer sharing; -O1 fused elementwise loops + memory reuse;
-O2 (default) also folds BatchNorm into Conv and activations into Conv/Gemm/MatMul; -O3 also -funroll-loops and -march=native (host builds: fastest, runs only on CPUs like this one).
Dynamic shapes: input dims that are symbolic (batch, seq) or unknown stay free: the library takes any
size >= 1 there (<name>.h lists them; the arena is planned and the kernel library's ops prepared when a
run first sees a shape). --shape input=1x3x224x224 or --dim batch=1 bind them: fixed-size code, the fastest.
--standalone: the artifact needs only libc and libm and never allocates while running
(create it in your own memory with <name>_create_in), on hodu's portable C kernels; models with
control flow (If on data, Loop, Scan: each body compiled to C) or data-dependent sizes allocate.
Kernels: by default Conv, MatMul/Gemm and pooling call hodu's kernel library libhodu_kernels.so
(oneDNN, multithreaded: <name>_create_threads or HODU_NUM_THREADS, default physical cores); .so and
executables link it with an rpath, .o/.a/.c need -lhodu_kernels (printed). --kernels portable:
hodu's portable single-threaded C kernels, no library (cross builds always use these).
Cross builds: --target aarch64-linux-gnu uses aarch64-linux-gnu-gcc (Debian gcc-aarch64-linux-gnu).
Ops: those the interpreter runs, ai.onnx.ml and the training optimizers included, except what the C
API cannot carry (strings; sequences, maps and optionals as inputs or outputs: inside a graph they
compile), ImageDecoder, FlexAttention, SequenceMap and Gradient: refused naming the node and why.
Random ops draw what `hodu run --engine interp` draws (its default --seed 0), the same on every run.
See docs/aot.md.)");
  app.add_option("model", a->model, "model file (.onnx, .hdss, .hodu)")->required();
  app.add_option("-o,--output", a->out, "output file; its extension picks the format")->required();
  app.add_option("-f,--format", a->format, "output format: c, o, so, a, exe, s, ll, bc (default: from the extension)");
  app.add_option("-d,--device", a->device, "device to compile for: cpu")->capture_default_str();
  app.add_option("--target", a->target, "GNU target triple to cross-compile for (e.g. aarch64-linux-gnu)");
  app.add_option("-O", a->opt_level, "optimization level -O0..-O3 (see below)")->capture_default_str();
  app.add_flag("--standalone", a->standalone, "artifact needs only libc/libm; no allocation while running");
  app.add_option("--kernels", a->kernels, "onednn (libhodu_kernels.so) or portable (C kernels in the artifact)")
      ->capture_default_str();
  app.add_option("--weights", a->weights, "embed (in the artifact) or file (OUT.weights beside it)")->capture_default_str();
  app.add_option("--name", a->name, "prefix of the C API and header name (<name>.h)")->capture_default_str();
  app.add_option("--shape", a->shapes, "bind an input's shape: NAME=1x3x224x224; repeatable (default: free dims stay free)");
  app.add_option("--dim", a->dims, "bind a symbolic dim: NAME=VALUE; repeatable (default: free at run time)");
  app.add_flag("-q,--quiet", a->quiet, "no progress lines");
  app.add_flag("--keep-temp", a->keep_temp, "keep the scratch folder with the generated sources");
  app.add_option("-p,--plugin", a->plugin, "build with this compiler plugin (or pack), e.g. c (hodu plugin list)");
  return [a] { return run_build(*a); };
}

}  // namespace hodu::cli
