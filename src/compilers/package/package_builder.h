// `hodu pack`: a model → one .hodupkg (docs/hodupkg.md). The graph goes in as an .hdss whose
// tensors live in the weights section; every target's library is built by hodu build against
// that same section (WeightStore), so the weights are stored once and read in place by both
// the libraries and the graph.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compilers/c/c_codegen.h"
#include "formats/package.h"
#include "ir/graph.h"

namespace hodu::pkg {

struct PackOptions {
  // GNU triples to prebuild a library for; empty: this host's. Cross targets use the
  // portable kernels (hodu build --target).
  std::vector<std::string> targets;
  bool graph_only = false;  // no library at all: the package runs on the cpu engine everywhere
  // name, version, author, license, description; the rest is filled in.
  Meta meta;
  std::map<std::string, std::string> input_docs, output_docs;  // value name → doc
  // The libraries' build: opt_level (0-2), input_shapes/dims, kernel_library (the host
  // target's kernels), name (the C API prefix; default from meta.name).
  compilers::c::CodegenOptions codegen;
  std::string source;  // file the model came from (recorded in the metadata)
  std::function<void(const std::string&)> progress;
};

struct PackResult {
  Meta meta;
  std::vector<SectionInfo> sections;
  uint64_t file_bytes = 0;
  int64_t shared_bytes = 0;  // constants the libraries found already in the weights section
};

// Folds the graph for deployment (constants, identities, Conv+BatchNorm, Gemm weights
// pre-transposed: so the libraries read the graph's own weight bytes), builds each target's
// library and writes the package. InvalidArgument for bad options; a library that cannot be
// built fails naming its target.
PackResult pack_model(Model model, const std::string& out_path, const PackOptions& options);

// A C identifier from a package name ("resnet-50" → "resnet_50"; "model" when none is left).
std::string api_prefix_for(const std::string& name);

}  // namespace hodu::pkg
