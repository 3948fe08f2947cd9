// Gemm(A, B, transB=1) with a constant B → Gemm(A, Bᵀ, transB=0), Bᵀ a new initializer.
// `hodu pack` stores the graph so: hodu build transposes such a B at build time, and the
// package's libraries then read the very bytes the graph holds (its weights kept once).
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {

bool pretranspose_gemm_weights(Graph& g) {
  bool changed = false;
  std::map<std::string, std::string> transposed;  // B → its transposed initializer
  for (Node& n : g.nodes) {
    if (n.op_type != "Gemm" || !n.domain.empty() || n.get_int("transB", 0) == 0 || n.inputs.size() < 2) continue;
    const Tensor* b = constant_of(g, n.inputs[1]);
    if (!b || b->rank() != 2 || b->dtype() == DType::String) continue;
    auto it = transposed.find(n.inputs[1]);
    if (it == transposed.end()) {
      std::string name = g.unique_name(n.inputs[1] + "_T");
      g.set_initializer(name, b->permute({1, 0}).contiguous());
      it = transposed.emplace(n.inputs[1], name).first;
    }
    n.inputs[1] = it->second;
    for (auto& a : n.attributes)
      if (a.name == "transB") a.i = 0;
    changed = true;
  }
  if (changed) eliminate_dead_code(g);
  return changed;
}

}  // namespace hodu::passes
