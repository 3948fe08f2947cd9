// The C code generator: a Model → portable C (a kernel library, the model's
// run function over a static arena, and the model.h API) plus a weights blob.
// The toolchain driver (toolchain.h) turns this into .o/.so/.a/executables.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::compilers::c {

class WeightStore;

struct CodegenOptions {
  std::string name = "model";   // prefix of every API symbol and the header name (<name>.h)
  int opt_level = 2;            // 0: no fusion/reuse; 1: fusion + memory reuse; 2,3: + build-time folding of BN/activations
  bool standalone = false;      // libc/libm only; no file I/O helpers beyond stdio
  // Default mode: Conv, MatMul/Gemm and pooling call hodu's oneDNN kernel library
  // (libhodu_kernels.so, include/hodu/kernels.h) and elementwise loops run on its
  // threads. false (--kernels portable, --standalone, cross targets): portable C only.
  bool kernel_library = true;
  bool embed_weights = true;    // .incbin the blob; otherwise load `<weights file>` at create time
  std::string weights_file;     // file name the .incbin directive reads (relative to the assembler's cwd)
  // Set (with embed_weights false): every constant goes to this shared blob, deduplicated, and
  // the library is made for it (size, fingerprint); GeneratedModel::weights holds no data. Used by
  // `hodu pack`, whose targets and graph share one weights section; generate once per target to
  // fill it, seal it, then build against it.
  WeightStore* weight_store = nullptr;
  std::map<std::string, std::vector<int64_t>> input_shapes;  // --shape NAME=1x3x224x224
  std::map<std::string, int64_t> dims;                       // --dim batch=1
  // A control-flow body compiled into its parent's source (control_flow.cc): no kernel
  // library text, no ABI declarations, no info tag of its own.
  bool nested = false;
};

struct GeneratedModel {
  std::string name;
  std::string header;       // <name>.h
  std::string source;       // kernels + model + API
  std::string main_source;  // main() for executables (reads/writes .npy)
  std::string weights;      // the blob: 64-byte header + 64-byte aligned tensors
  // Figures for the build report.
  int64_t arena_bytes = 0;
  int64_t naive_arena_bytes = 0;
  int64_t weight_bytes = 0;
  int nodes = 0;        // after constant folding
  int steps = 0;        // emitted kernel calls
  int fused_nodes = 0;  // nodes merged into another node's loop
  int folded_nodes = 0; // nodes evaluated at build time
  int library_ops = 0;  // calls into libhodu_kernels (0 in portable mode)
  std::set<std::string> kernel_sections;  // optional kernel library sections the source uses
};

// Throws Unsupported naming the op and node (and listing supported ops) for an
// op it cannot generate, InvalidArgument when shapes are symbolic and not bound
// by options.input_shapes / options.dims.
GeneratedModel generate_c(const Model& model, const CodegenOptions& options);

// Ops the generator supports (sorted).
std::vector<std::string> supported_ops();

// The kernel library's C text (src/compilers/c/kernels/hodu_kernels.c).
const char* kernel_library_source();
// An optional section of the kernel library (src/compilers/c/kernels/hk_<name>.c): "convert".
const char* kernel_section_source(const std::string& name);
// The C ABI of libhodu_kernels (include/hodu/kernels.h), pasted into default-mode sources.
const char* kernel_library_abi();

}  // namespace hodu::compilers::c
