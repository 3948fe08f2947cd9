// The toolchain driver of `hodu build`: generates C for a model, writes it to
// a scratch folder and runs the C compiler (gcc, a cross gcc for --target, or
// clang for LLVM IR) to produce the requested artifact.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "compilers/c/c_codegen.h"
#include "ir/graph.h"

namespace hodu::compilers::c {

enum class ArtifactFormat { CSource, Object, SharedLibrary, StaticLibrary, Executable, Assembly, LlvmIr, Bitcode };

// From -f (c, o, so, a, exe, s, ll, bc) or, when empty, from the output's extension
// (no extension: executable). InvalidArgument for anything else.
ArtifactFormat artifact_format(const std::string& out_path, const std::string& format_flag);
const char* artifact_format_name(ArtifactFormat f);

struct BuildOptions {
  CodegenOptions codegen;
  ArtifactFormat format = ArtifactFormat::SharedLibrary;
  std::string target;        // GNU triple (aarch64-linux-gnu); empty: the host
  std::function<void(const std::string&)> progress;  // one line per phase
  bool keep_temp = false;    // leave the scratch folder (its path is reported)
};

struct BuildResult {
  std::vector<std::string> files;  // what was written
  GeneratedModel model;            // figures (texts cleared)
  double generate_seconds = 0, compile_seconds = 0;
  std::string compiler;            // the compiler command used
  std::string temp_dir;            // when keep_temp
  // Default mode: what linking the artifact needs ("-L DIR -lhodu_kernels -Wl,-rpath,DIR");
  // empty for portable and standalone builds.
  std::string link_flags;
};

// Throws Unsupported for unsupported ops, InvalidArgument for bad options,
// Io when the compiler fails (with its diagnostics) or is missing.
BuildResult build_model(const Model& model, const std::string& out_path, const BuildOptions& options);

// The C compiler for a target ("" = host): "cc", "<triple>-gcc" when installed, else clang.
std::string c_compiler_for(const std::string& target);

// The folder holding libhodu_kernels.so: $HODU_KERNELS_DIR when set, else ../lib next to
// the running program, else the build tree's lib folder. Io error naming the
// places looked at (and --kernels portable) when none has it.
std::string kernel_library_dir();

}  // namespace hodu::compilers::c
