// The text around the generated run body: the model.h header (the stable C
// API), the instance/create/run functions, and main() for executables.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compilers/c/sym_int.h"
#include "core/dtype.h"

namespace hodu::compilers::c {

// 2: sizes known at run time (free input dims): <name>_num_dims, _dim_name, _input_dim_name,
// _workspace_size; -1 in the declared shapes for a free dim.
inline constexpr int kAbiVersion = 2;
inline constexpr char kWeightsMagic[9] = "HODUWGT1";
inline constexpr int64_t kWeightsHeaderBytes = 64;

struct ApiTensor {
  std::string name;
  DType dtype = DType::F32;
  SymShape shape;
  int64_t arena_offset = 0;  // outputs: where run() leaves them
  // Outputs: the body writes it through `oK`, the caller's memory when given (else the arena).
  bool direct = false;
  // Sizes known at run time: the free dim (SymTable atom) of each input dim, -1 if fixed;
  // an output's data pointer after the run (C over A, O, L).
  std::vector<int> free_dims;
  std::string data;
  bool late = false;                   // its shape is known only after the body
  std::vector<std::string> shape_c;    // its dims as C (over S), where not constants
  std::string shape_doc;               // "[batch, 3, 224, 224]" for the header
};

struct ApiSpec {
  std::string name;
  bool embed_weights = true;
  bool standalone = false;
  std::string weights_file;  // the .incbin path (embedded) / the default side file name
  std::vector<ApiTensor> inputs, outputs;
  int64_t arena_bytes = 0;
  int64_t weights_bytes = 0;  // blob data after the header
  uint64_t fingerprint = 0;   // of the blob data; a side file must match it
  std::string tables;         // file-scope tables of the run body
  std::string body;           // the run body (kernel calls)
  std::string model_doc;      // one line for the header comment
  // Default mode: the instance holds a libhodu_kernels context and its ops,
  // prepared at create time by `prepare` (statements; `st`, `m`, `W` in scope).
  bool kernel_library = false;
  int library_ops = 0;
  std::string prepare;
  // Sizes known at run time (dynamic): the instance keeps a few shape states, each with the
  // run-time dims S (the free input dims first), the arena offsets O and, in default mode,
  // the library ops prepared for that shape.
  bool dynamic = false;
  std::vector<std::string> dim_names;  // the free input dims, S[0..)
  int num_slots = 0;                   // S
  int num_buffers = 0;                 // O
  int num_late = 0;                    // values allocated while running (data-dependent sizes)
  std::string shape_function;          // statements computing S from the free dims (and checks)
  std::string plan_function;           // statements filling O; returns the arena bytes
  std::string buffer_first, buffer_last, buffer_reuse;  // per buffer: liveness and in-place joins (C lists)
  // Control-flow bodies' instances: instance fields, created (after the kernel context;
  // `m`, `num_threads`, `errbuf` in scope) and destroyed with the model's.
  std::string extra_fields, extra_create, extra_destroy;
};

std::string emit_header(const ApiSpec& spec);
// Kernel library + tables + API implementation.
std::string emit_source(const ApiSpec& spec, const std::string& kernels, const std::string& kernel_abi);
std::string emit_main(const ApiSpec& spec);
// Fills in the 64-byte header at the start of `blob` (the data follows it): built in place,
// the weights are never held twice.
void seal_weights_blob(std::string& blob, uint64_t fingerprint);
uint64_t fingerprint_of(std::string_view data);

}  // namespace hodu::compilers::c
