// HardSwish as exporters write it without the opset-14 op → HardSwish(x):
//   paddle2onnx:  Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)   (or Mul by 1/6, or the Div before the Mul)
//   torch < 14:   Mul(x, HardSigmoid(x, alpha = 1/6, beta = 0.5))
// One node instead of four lets an engine run it as one activation (the cpu engine: a post-op of
// the conv before it, in the conv's blocked layout; as four nodes the two-input Mul/Div forced
// reorders to plain and back around every one of PaddleOCR's hardswishes).
#include <cmath>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool near(std::optional<double> v, double want) { return v && std::abs(*v - want) <= 1e-5 * std::abs(want); }

bool is_binary(const Node& n, const char* op) { return n.op_type == op && n.domain.empty() && n.inputs.size() == 2; }

// A constant of one element that cannot broadcast `x` to a higher rank.
std::optional<double> scalar_for(const Graph& g, const std::string& c, int64_t x_rank) {
  const Tensor* t = constant_of(g, c);
  if (!t || t->rank() > x_rank) return std::nullopt;
  return scalar_constant(g, c);
}

// The rank of a float tensor value that is not a constant; -1 otherwise.
int64_t float_rank(const Graph& g, const std::string& x) {
  auto t = g.type_of(x);
  if (!t || !t->is_tensor() || !t->shape.rank_known() || constant_of(g, x)) return -1;
  if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16 && t->dtype != DType::F64) return -1;
  return t->shape.rank();
}

}  // namespace

bool fuse_hardswish(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  auto readers = consumers(g);
  auto only_reader = [&](const std::string& v) { return sole_reader(g, uses, readers, v); };
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& gate = g.nodes[k];
    if (!gate.domain.empty() || removed.count(k)) continue;
    std::string x;
    int64_t rank = -1;
    std::set<size_t> chain = {k};
    std::string gated;  // the value x is multiplied by: clip(x + 3, 0, 6) / 6, or the raw clip (scale after)
    bool scaled = false;  // gated already includes the 1/6
    if (gate.op_type == "HardSigmoid" && gate.inputs.size() == 1) {
      if (!near(gate.get_float("alpha", 0.2f), 1.0 / 6) || !near(gate.get_float("beta", 0.5f), 0.5)) continue;
      x = gate.inputs[0];
      rank = float_rank(g, x);
      gated = gate.outputs[0];
      scaled = true;
    } else if (gate.op_type == "Clip") {
      auto act = as_activation(g, gate);
      if (!act || act->params.size() != 2 || act->params[0] != 0.0f || act->params[1] != 6.0f) continue;
      int a = g.producer_of(gate.inputs[0]);
      if (a < 0 || removed.count(a) || !is_binary(g.nodes[a], "Add") || uses[gate.inputs[0]] != 1) continue;
      const Node& add = g.nodes[a];
      for (int i = 0; i < 2 && x.empty(); ++i) {
        rank = float_rank(g, add.inputs[i]);
        if (rank >= 0 && near(scalar_for(g, add.inputs[1 - i], rank), 3.0)) x = add.inputs[i];
      }
      if (x.empty()) continue;
      chain.insert(a);
      gated = gate.outputs[0];
      // clip / 6 (or * 1/6) before the Mul by x.
      int d = only_reader(gated);
      if (d >= 0 && (is_binary(g.nodes[d], "Div") || is_binary(g.nodes[d], "Mul"))) {
        const Node& dn = g.nodes[d];
        const bool div = dn.op_type == "Div";
        std::string c = div ? (dn.inputs[0] == gated ? dn.inputs[1] : std::string()) : other_input(dn, gated);
        if (!c.empty() && near(scalar_for(g, c, rank), div ? 6.0 : 1.0 / 6)) {
          chain.insert(d);
          gated = dn.outputs[0];
          scaled = true;
        }
      }
    } else {
      continue;
    }
    if (rank < 0) continue;  // x: a float tensor computed by the graph, of known rank
    // x * gated: x is read by the gate's first node and by this Mul.
    int m = only_reader(gated);
    if (m < 0 || !is_binary(g.nodes[m], "Mul") || other_input(g.nodes[m], gated) != x) continue;
    chain.insert(m);
    size_t last = m;
    if (!scaled) {
      int d = only_reader(g.nodes[m].outputs[0]);
      if (d < 0) continue;
      const Node& dn = g.nodes[d];
      const std::string& p = g.nodes[m].outputs[0];
      bool ok = (is_binary(dn, "Div") && dn.inputs[0] == p &&
                 near(scalar_for(g, dn.inputs[1], rank), 6.0)) ||
                (is_binary(dn, "Mul") && !other_input(dn, p).empty() &&
                 near(scalar_for(g, other_input(dn, p), rank), 1.0 / 6));
      if (!ok) continue;
      chain.insert(d);
      last = d;
    }
    if (!replace_chain(g, chain, last, "HardSwish", "", x, removed)) continue;
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
