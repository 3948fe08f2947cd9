// --shape NAME=1x3x224x224 and --dim NAME=V, as hodu build and hodu pack take them.
#pragma once
#include <string>
#include <vector>

#include "compilers/c/c_codegen.h"

namespace hodu::cli {

// Into o.input_shapes and o.dims; InvalidArgument naming the flag for a malformed one.
void parse_shape_flags(const std::vector<std::string>& shapes, const std::vector<std::string>& dims,
                       compilers::c::CodegenOptions& o);

}  // namespace hodu::cli
