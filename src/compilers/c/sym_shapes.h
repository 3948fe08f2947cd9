// Shapes over the free input dims (dynamic shapes). graph_prep binds what the
// user bound and folds what is constant; the rest of the sizes are SymInts:
// every value's shape, and the elements of the small int tensors a model
// computes from shapes (Shape → Gather → Concat → Reshape glue, torch's
// exports), so that a Reshape to such a tensor has a shape the generator knows.
#pragma once
#include <map>
#include <string>

#include "compilers/c/sym_int.h"
#include "ir/graph.h"

namespace hodu::compilers::c {

struct SymInfo {
  std::map<std::string, SymShape> shapes;  // values whose shape is not static
  std::map<std::string, SymShape> values;  // int tensors of sizes: their elements (row-major)
  std::map<std::string, std::vector<int64_t>> value_shapes;  // ... and their (static) shapes
  // Small int tensors computed from data (or model inputs) and read as sizes (a Slice's
  // starts given as an input): their elements as late dims, read where the first node that
  // reads them as sizes runs.
  std::map<std::string, SymShape> late_values;
  // Checks on late sizes, made by the node producing the value named (emitted with it).
  std::map<std::string, std::vector<SymTable::Statement>> late_checks;
};

// Folds nodes whose inputs are constants or sizes and whose outputs are small int
// tensors into `info.values` (or into initializers when every element is known);
// they leave the graph. True when something changed.
bool fold_sym_values(Graph& g, SymInfo& info);

// The shape of every value of `g` that is not static, in `info.shapes`. An op whose
// output shape this cannot express is Unsupported, naming the node and suggesting
// --dim/--shape (partial: such values are left out, and so is what reads them).
void infer_sym_shapes(const Graph& g, SymInfo& info, bool partial = false);

// Whether input i of a node of type `op` is read only for its values as sizes
// (Reshape's shape, Slice's starts/ends, ...): a size value read there needs no tensor.
bool is_size_input(const std::string& op, size_t i);

}  // namespace hodu::compilers::c
