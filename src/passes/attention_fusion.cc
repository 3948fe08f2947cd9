// Scaled dot-product attention on rank-4 [batch, heads, seq, dim] tensors:
//   s = MatMul(Q, Transpose(K, swap last two)) [Div c | Mul c] [Add mask]; p = Softmax(s, -1); y = MatMul(p, V)
// → hodu.Attention(Q, K, V[, mask]) with scale = 1/c (or c), semantics of ONNX Attention.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool is_op(const Node& n, const char* op) { return n.op_type == op && n.domain.empty(); }

bool rank4(const Graph& g, const std::string& v) {
  auto t = g.type_of(v);
  return t && t->is_tensor() && t->dtype == DType::F32 && t->shape.rank_known() && t->shape.rank() == 4;
}

}  // namespace

bool fuse_attention(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& out_mm = g.nodes[k];
    if (!is_op(out_mm, "MatMul") || removed.count(k)) continue;
    const std::string& v = out_mm.inputs[1];
    int sm = g.producer_of(out_mm.inputs[0]);
    if (sm < 0 || !is_op(g.nodes[sm], "Softmax") || uses[out_mm.inputs[0]] != 1) continue;
    int64_t axis = g.nodes[sm].get_int("axis", -1);
    if (axis != -1 && axis != 3) continue;
    std::set<size_t> chain = {k, static_cast<size_t>(sm)};
    std::string s = g.nodes[sm].inputs[0];
    std::string mask;
    int p = g.producer_of(s);
    if (p >= 0 && is_op(g.nodes[p], "Add") && uses[s] == 1) {
      const Node& add = g.nodes[p];
      // The mask is the operand not produced by the score chain (a MatMul or scaling).
      int p0 = g.producer_of(add.inputs[0]), p1 = g.producer_of(add.inputs[1]);
      auto is_score = [&](int q) {
        return q >= 0 && (is_op(g.nodes[q], "MatMul") || is_op(g.nodes[q], "Div") || is_op(g.nodes[q], "Mul"));
      };
      int score = is_score(p0) ? 0 : is_score(p1) ? 1 : -1;
      if (score < 0) continue;
      mask = add.inputs[1 - score];
      chain.insert(p);
      s = add.inputs[score];
      p = g.producer_of(s);
    }
    float scale = 1.0f;
    bool scaled = false;
    if (p >= 0 && (is_op(g.nodes[p], "Div") || is_op(g.nodes[p], "Mul")) && uses[s] == 1) {
      auto c = scalar_constant(g, g.nodes[p].inputs[1]);
      if (!c || *c == 0) continue;
      scale = is_op(g.nodes[p], "Div") ? static_cast<float>(1.0 / *c) : static_cast<float>(*c);
      scaled = true;
      chain.insert(p);
      s = g.nodes[p].inputs[0];
      p = g.producer_of(s);
    }
    if (p < 0 || !is_op(g.nodes[p], "MatMul") || uses[s] != 1) continue;
    chain.insert(p);
    const std::string& q = g.nodes[p].inputs[0];
    const std::string& kt = g.nodes[p].inputs[1];
    int t = g.producer_of(kt);
    if (t < 0 || !is_op(g.nodes[t], "Transpose")) continue;
    auto perm = g.nodes[t].get_ints("perm");
    if (perm.size() != 4 || perm[2] == 2 || perm[3] == 3) continue;
    // K = Transpose(input, perm with its last two entries swapped): the swap undone.
    std::vector<int64_t> kperm = {perm[0], perm[1], perm[3], perm[2]};
    bool identity = kperm == std::vector<int64_t>{0, 1, 2, 3};
    std::string key = identity ? g.nodes[t].inputs[0] : kt;
    if (!identity && uses[kt] != 1) continue;
    if (!rank4(g, q) || !rank4(g, v) || !rank4(g, g.nodes[t].inputs[0])) continue;
    if (identity && uses[kt] == 1) chain.insert(t);
    if (!mask.empty()) {
      auto mt = g.type_of(mask);
      if (!mt || !mt->is_tensor() || mt->dtype != DType::F32) continue;
    }
    bool overlap = false;
    for (size_t c : chain) overlap |= removed.count(c) > 0;
    if (overlap) continue;
    if (!identity) {
      // The Transpose now produces K itself (its only reader was the score MatMul).
      g.nodes[t].set_attr(Attribute::make_ints("perm", kperm));
      g.value_types.erase(kt);
    }
    Node att;
    att.name = out_mm.name;
    att.op_type = "Attention";
    att.domain = "hodu";
    att.inputs = {q, key, v};
    if (!mask.empty()) att.inputs.push_back(mask);
    att.outputs = {out_mm.outputs[0]};
    // Without an explicit scale the scores were not scaled: say so (ONNX's default is 1/sqrt(dim)).
    att.attributes = {Attribute::make_float("scale", scaled ? scale : 1.0f)};
    chain.erase(k);
    g.nodes[k] = att;
    removed.insert(chain.begin(), chain.end());
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
