// Prepares a graph for ahead-of-time compilation: binds symbolic input dims to
// the sizes given at build time, infers every shape, and evaluates at build
// time every node whose inputs are all constant (Shape of a static tensor,
// Constant, the Shape→Gather→Concat→Reshape glue) with the reference interpreter.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compilers/c/sym_shapes.h"
#include "ir/graph.h"

namespace hodu::compilers::c {

struct PreparedGraph {
  Graph graph;          // remaining nodes; folded values are initializers
  int folded_nodes = 0;
  SymInfo sym;          // shapes and size values over the free input dims (empty when all static)
  std::map<std::string, SymShape> free_inputs;  // inputs with free dims: their shapes
};

// Infers info.shapes afresh for g (after a rewrite): the free inputs, the size values, the rest.
void refresh_sym_shapes(const Graph& g, const std::map<std::string, SymShape>& free_inputs, SymInfo& info,
                        bool partial = false);

// Input dims the options do not bind stay free: each symbol (or unnamed dim, named
// "<input>_<d>") becomes a run-time dim of `table` (the current SymScope's). An input of
// unknown rank is InvalidArgument, naming the --shape option that would give it.
PreparedGraph prepare_graph(const Model& model, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                            const std::map<std::string, int64_t>& dims);

}  // namespace hodu::compilers::c
