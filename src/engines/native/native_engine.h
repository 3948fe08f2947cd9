// The native engine: runs a model compiled by `hodu build` into a shared
// library, through the library's C API (dlopen). A .so is described as a Model
// with inputs and outputs only; any other model is first compiled to a
// temporary .so (hodu's C compiler, -O2) and then loaded.
#pragma once
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "runtime/kernel_registry.h"

namespace hodu::native {

// Metadata key of a Model that stands for a compiled library (its path).
inline constexpr const char* kLibraryKey = "hodu.native.library";

std::shared_ptr<Engine> make_native_engine();
// One "*" kernel ("aot-c"): the native engine compiles the whole graph, and
// ops the C compiler lacks fail at prepare with its Unsupported error.
void register_native_kernels(KernelRegistry& registry);
// True for a path ending in ".so".
bool is_native_library(const std::string& path);
// Inputs/outputs of a compiled library as a Model without nodes; the Session
// runs it with the native engine. Io/InvalidModel naming the file when it is
// not a library built by hodu.
Model describe_library(const std::string& path);

}  // namespace hodu::native
