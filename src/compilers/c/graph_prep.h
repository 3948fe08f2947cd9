// Prepares a graph for ahead-of-time compilation: binds symbolic input dims to
// the sizes given at build time, infers every shape, and evaluates at build
// time every node whose inputs are all constant (Shape of a static tensor,
// Constant, the Shape→Gather→Concat→Reshape glue) with the reference interpreter.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::compilers::c {

struct PreparedGraph {
  Graph graph;          // remaining nodes; folded values are initializers
  int folded_nodes = 0;
};

// InvalidArgument when an input keeps a symbolic or unknown dim, naming the
// input and the --shape / --dim option that would bind it.
PreparedGraph prepare_graph(const Model& model, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                            const std::map<std::string, int64_t>& dims);

}  // namespace hodu::compilers::c
