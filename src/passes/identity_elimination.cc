// Identity elimination: ops that pass their input through unchanged.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool is_identity(const Graph& g, const Node& n, const std::map<std::string, int>& uses) {
  if (!n.domain.empty() && n.domain != "ai.onnx") return false;
  if (n.op_type == "Identity") return n.has_input(0);
  if (n.op_type == "Dropout") {
    // Inference mode (no training_mode input, or a constant false) or a constant ratio of 0
    // (torch exports Swin-T's attention dropout in training mode with ratio 0), the mask unused.
    if (n.has_output(1) && uses.count(n.outputs[1])) return false;
    if (n.has_input(2)) {
      auto t = scalar_constant(g, n.inputs[2]);
      auto ratio = n.has_input(1) ? scalar_constant(g, n.inputs[1]) : std::nullopt;
      if ((!t || *t != 0) && (!ratio || *ratio != 0)) return false;
    }
    return n.has_input(0);
  }
  if (n.op_type == "Pad" && n.has_input(0) && n.has_input(1)) {
    // Nothing added on any side (Swin-T pads to a multiple of its window: 0 at 224x224).
    const Tensor* pads = constant_of(g, n.inputs[1]);
    if (!pads || pads->numel() == 0) return false;
    for (int64_t v : pads->to_int64s())
      if (v != 0) return false;
    auto in = g.type_of(n.inputs[0]), out = g.type_of(n.outputs[0]);
    return in && out && in->is_tensor() && out->is_tensor() && in->dtype == out->dtype;
  }
  // One input (torchvision's DenseNet concatenates a dense block's single input before its
  // first layer): the input itself.
  if (n.op_type == "Concat" && n.inputs.size() == 1) return n.has_input(0);
  if (n.op_type == "Cast") {
    auto in = g.type_of(n.inputs[0]);
    return in && in->is_tensor() && static_cast<int64_t>(in->dtype) != 0 &&
           n.get_int("to", 0) == static_cast<int64_t>(dtype_to_onnx(in->dtype));
  }
  return false;
}

}  // namespace

bool eliminate_identities(Graph& g) {
  bool changed = false;
  std::set<size_t> removed;
  const auto uses = use_counts(g);  // only a Dropout's mask is looked up: no pass below changes its uses
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!is_identity(g, n, uses)) continue;
    const std::string in = n.inputs[0];
    const std::string out = n.outputs[0];
    if (is_graph_output(g, out)) {
      // The output name must survive: rename the producer's output instead, when it is a plain node output.
      int p = g.producer_of(in);
      if (p < 0 || is_graph_output(g, in) || g.input(in)) continue;
      for (auto& o : g.nodes[p].outputs)
        if (o == in) o = out;
      replace_uses(g, in, out);
      g.value_types.erase(in);
    } else {
      replace_uses(g, out, in);
    }
    if (n.outputs.size() > 1 && n.has_output(1)) g.value_types.erase(n.outputs[1]);  // an unused Dropout mask
    removed.insert(k);
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
