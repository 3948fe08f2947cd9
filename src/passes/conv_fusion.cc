// Conv [+ Add] [+ activation] → hodu.FusedConv: Y = act(conv(X, W) + B + Z).
#include <algorithm>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// Swish/SiLU after `y`: Mul(y, Sigmoid(y)), `y` read by those two nodes only. The Sigmoid's
// and the Mul's indices.
std::optional<std::pair<size_t, size_t>> silu_after(const Graph& g, const std::map<std::string, int>& uses,
                                                    const std::map<std::string, std::vector<size_t>>& readers,
                                                    const std::string& y) {
  auto r = readers.find(y);
  auto u = uses.find(y);
  if (r == readers.end() || r->second.size() != 2 || u == uses.end() || u->second != 2 || is_graph_output(g, y))
    return std::nullopt;
  for (size_t i = 0; i < 2; ++i) {
    const Node& s = g.nodes[r->second[i]];
    if (s.op_type != "Sigmoid" || !s.domain.empty()) continue;
    int mul = sole_reader(g, uses, readers, s.outputs[0]);
    if (mul < 0 || static_cast<size_t>(mul) != r->second[1 - i]) continue;
    const Node& m = g.nodes[mul];
    if (m.op_type == "Mul" && m.domain.empty() && other_input(m, y) == s.outputs[0])
      return std::make_pair(r->second[i], static_cast<size_t>(mul));
  }
  return std::nullopt;
}

}  // namespace

bool fuse_conv(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& conv = g.nodes[k];
    if (removed.count(k)) continue;
    // A FusedConv of an earlier run over symbolic shapes (a model with dynamic dims, optimized
    // again once its input shapes are known) still takes the residual Add it could not
    // match then: it has no Z and no activation (that would come before the Add).
    const bool late = conv.op_type == "FusedConv" && conv.domain == "hodu" &&
                        conv.get_string("activation", "").empty() &&
                        (conv.inputs.size() < 4 || conv.inputs[3].empty());
    if (!late && (conv.op_type != "Conv" || !conv.domain.empty())) continue;
    auto type = g.type_of(conv.outputs[0]);
    if (!type || !type->is_tensor() || type->dtype != DType::F32) continue;
    std::string y = conv.outputs[0];
    std::string z;
    std::set<size_t> absorbed;
    int moved_to = -1;  // the Add's index when the fused conv takes its place
    // Add of a tensor with the conv output's exact shape (the residual).
    int next = sole_reader(g, uses, readers, y);
    if (next >= 0 && (g.nodes[next].op_type == "Add" || g.nodes[next].op_type == "Sum") &&
        g.nodes[next].domain.empty() && g.nodes[next].inputs.size() == 2) {
      const Node& add = g.nodes[next];
      std::string other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      auto ys = static_shape(g, y), os = static_shape(g, other);
      // (A node fused earlier and moved later has a stale copy at its old index, in `removed`.)
      int other_producer = -1;
      for (size_t j = 0; j < g.nodes.size() && other_producer < 0; ++j)
        if (!removed.count(j) && std::find(g.nodes[j].outputs.begin(), g.nodes[j].outputs.end(), other) !=
                                     g.nodes[j].outputs.end())
          other_producer = static_cast<int>(j);
      // A residual made after the conv (tf2onnx orders BlazeFace's channel-padding Concat between
      // the conv and the Add) is still made before the Add, the conv's only reader: the fused
      // conv runs where the Add did. Unless a conv makes it: that conv takes the Add (as
      // ResNet's downsampling conv, after the block's last conv, always did).
      const bool later_conv = other_producer > static_cast<int>(k) &&
                              (g.nodes[other_producer].op_type == "Conv" || g.nodes[other_producer].op_type == "FusedConv");
      if (ys && os && *ys == *os && other != y && other_producer < next && !later_conv) {
        if (other_producer > static_cast<int>(k)) moved_to = next;
        z = other;
        absorbed.insert(next);
        y = add.outputs[0];
        next = sole_reader(g, uses, readers, y);
      }
    }
    if (late && z.empty()) continue;
    std::optional<Activation> act;
    if (next >= 0 && (act = as_activation(g, g.nodes[next]))) {
      absorbed.insert(next);
      y = g.nodes[next].outputs[0];
    } else if (auto silu = silu_after(g, uses, readers, y)) {
      act = Activation{"Silu", {}};
      absorbed.insert({silu->first, silu->second});
      y = g.nodes[silu->second].outputs[0];
    }
    conv.op_type = "FusedConv";
    conv.domain = "hodu";
    if (!z.empty()) {
      conv.inputs.resize(4);
      conv.inputs[3] = z;
    }
    finish_fusion(g, conv, act, y);
    if (moved_to >= 0) {
      absorbed.erase(static_cast<size_t>(moved_to));
      absorbed.insert(k);
      g.nodes[static_cast<size_t>(moved_to)] = conv;
    }
    removed.insert(absorbed.begin(), absorbed.end());
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
