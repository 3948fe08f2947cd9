// The text around the generated run body: the model.h header (the stable C
// API), the instance/create/run functions, and main() for executables.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace hodu::compilers::c {

inline constexpr int kAbiVersion = 1;
inline constexpr char kWeightsMagic[9] = "HODUWGT1";
inline constexpr int64_t kWeightsHeaderBytes = 64;

struct ApiTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t arena_offset = 0;  // outputs: where run() leaves them
  // Outputs: the body writes it through `oK`, the caller's memory when given (else the arena).
  bool direct = false;
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
