// Constant folding through the interpreter's kernels: the interpreter is the
// oracle, so a folded value is exactly what running the node would give.
#include "engines/interp/kernel.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// Folding these would bloat the model or is pointless.
bool never_fold(const Node& n) {
  return is_random_op(n) || has_subgraph(n) || n.op_type == "Identity";
}

}  // namespace

bool fold_constants(Graph& g) {
  const auto& table = interp::OpTable::instance();
  bool changed = false;
  std::set<size_t> folded;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (never_fold(n)) continue;
    bool all_const = true;
    for (const auto& in : n.inputs)
      if (!in.empty() && !constant_of(g, in)) all_const = false;
    if (!all_const) continue;
    // A graph output may be an initializer (ONNX allows it): fold those too.
    interp::KernelFn fn = table.find(n.domain, n.op_type);
    if (!fn) continue;
    std::vector<RuntimeValue> held;
    held.reserve(n.inputs.size());
    for (const auto& in : n.inputs) held.emplace_back(in.empty() ? RuntimeValue() : RuntimeValue(*constant_of(g, in)));
    interp::KernelContext ctx{n, {}, {}, 1, 0, {}};
    for (size_t i = 0; i < n.inputs.size(); ++i) ctx.inputs.push_back(n.inputs[i].empty() ? nullptr : &held[i]);
    ctx.outputs.resize(n.outputs.size());
    try {
      fn(ctx);
    } catch (const Error&) {
      continue;  // the node fails on these inputs: leave it, the run reports the error in context
    }
    bool all_tensors = true;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty() && !ctx.outputs[i].is_tensor()) all_tensors = false;
    if (!all_tensors) continue;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) g.set_initializer(n.outputs[i], ctx.outputs[i].tensor);
    folded.insert(k);
    changed = true;
  }
  erase_nodes(g, folded);
  return changed;
}

}  // namespace hodu::passes
