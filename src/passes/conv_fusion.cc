// Conv [+ Add] [+ activation] → hodu.FusedConv: Y = act(conv(X, W) + B + Z).
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// The single consumer of `value`, when exactly one node reads it and it is not a graph output.
int sole_consumer(const Graph& g, const std::map<std::string, int>& uses,
                  const std::map<std::string, std::vector<size_t>>& readers, const std::string& value) {
  auto u = uses.find(value);
  auto r = readers.find(value);
  if (u == uses.end() || u->second != 1 || r == readers.end() || r->second.size() != 1) return -1;
  if (is_graph_output(g, value)) return -1;
  return static_cast<int>(r->second[0]);
}

// Swish/SiLU as Mul(y, Sigmoid(y)): returns the Mul index when node `sig` is that Sigmoid.
int silu_mul(const Graph& g, const std::map<std::string, std::vector<size_t>>& readers,
             const std::map<std::string, int>& uses, const std::string& y, size_t sig) {
  const Node& s = g.nodes[sig];
  if (s.op_type != "Sigmoid" || !s.domain.empty()) return -1;
  int mul = sole_consumer(g, uses, readers, s.outputs[0]);
  if (mul < 0) return -1;
  const Node& m = g.nodes[mul];
  if (m.op_type != "Mul" || !m.domain.empty() || m.inputs.size() != 2) return -1;
  if (!((m.inputs[0] == y && m.inputs[1] == s.outputs[0]) || (m.inputs[1] == y && m.inputs[0] == s.outputs[0])))
    return -1;
  return mul;
}

}  // namespace

bool fuse_conv(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& conv = g.nodes[k];
    if (conv.op_type != "Conv" || !conv.domain.empty() || removed.count(k)) continue;
    auto type = g.type_of(conv.outputs[0]);
    if (!type || !type->is_tensor() || type->dtype != DType::F32) continue;
    std::string y = conv.outputs[0];
    std::string z;
    std::set<size_t> absorbed;
    // Add of a tensor with the conv output's exact shape (the residual).
    int next = sole_consumer(g, uses, readers, y);
    if (next >= 0 && (g.nodes[next].op_type == "Add" || g.nodes[next].op_type == "Sum") &&
        g.nodes[next].domain.empty() && g.nodes[next].inputs.size() == 2) {
      const Node& add = g.nodes[next];
      std::string other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      auto ys = static_shape(g, y), os = static_shape(g, other);
      int other_producer = g.producer_of(other);
      if (ys && os && *ys == *os && other != y && other_producer < static_cast<int>(k)) {
        z = other;
        absorbed.insert(next);
        y = add.outputs[0];
        next = sole_consumer(g, uses, readers, y);
      }
    }
    std::optional<Activation> act;
    if (next >= 0 && (act = as_activation(g, g.nodes[next]))) {
      absorbed.insert(next);
      y = g.nodes[next].outputs[0];
    } else {
      {
        // SiLU: y is read by the Sigmoid and by the Mul.
        auto r = readers.find(y);
        if (r != readers.end() && r->second.size() == 2 && uses[y] == 2 && !is_graph_output(g, y)) {
          for (size_t i = 0; i < 2 && !act; ++i) {
            int mul = silu_mul(g, readers, uses, y, r->second[i]);
            if (mul >= 0 && static_cast<size_t>(mul) == r->second[1 - i]) {
              act = Activation{"Silu", {}};
              absorbed.insert(r->second[i]);
              absorbed.insert(mul);
              y = g.nodes[mul].outputs[0];
            }
          }
        }
      }
    }
    conv.op_type = "FusedConv";
    conv.domain = "hodu";
    if (!z.empty()) {
      conv.inputs.resize(4);
      conv.inputs[3] = z;
    }
    if (act) {
      conv.set_attr(Attribute::make_string("activation", act->name));
      if (!act->params.empty()) conv.set_attr(Attribute::make_floats("activation_params", act->params));
    }
    if (y != conv.outputs[0]) {
      g.value_types.erase(conv.outputs[0]);
      conv.outputs[0] = y;
    }
    removed.insert(absorbed.begin(), absorbed.end());
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
