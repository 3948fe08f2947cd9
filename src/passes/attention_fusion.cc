// Scaled dot-product attention on rank-4 [batch, heads, seq, dim] or rank-3
// [batch·heads, seq, dim] tensors:
//   s = MatMul(Q [Div c | Mul c], Transpose(K, swap last two)) [Div c | Mul c] [Add mask]; p = Softmax(s, -1);
//   y = MatMul(p, V)
// → hodu.Attention(Q, K, V[, mask]) with the scales multiplied into `scale`, semantics of ONNX
// Attention. Rank-3 operands (nn.MultiheadAttention's export) are viewed as [1, B·H, S, D] through
// Reshapes, which the engines run as views, and the result reshaped back.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool is_op(const Node& n, const char* op) { return n.op_type == op && n.domain.empty(); }

// Rank of an f32 tensor value with a known rank, or -1.
int64_t f32_rank(const Graph& g, const std::string& v) {
  auto t = g.type_of(v);
  if (!t || !t->is_tensor() || t->dtype != DType::F32 || !t->shape.rank_known()) return -1;
  return static_cast<int64_t>(t->shape.rank());
}

// The scalar constant `value` is divided by or multiplied with, when `node` is such a Div/Mul.
std::optional<float> scaling_of(const Graph& g, const Node& node) {
  if (!is_op(node, "Div") && !is_op(node, "Mul")) return std::nullopt;
  auto c = scalar_constant(g, node.inputs[1]);
  if (!c || *c == 0) return std::nullopt;
  return is_op(node, "Div") ? static_cast<float>(1.0 / *c) : static_cast<float>(*c);
}

}  // namespace

bool fuse_attention(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  std::set<size_t> removed;
  std::map<size_t, std::vector<Node>> before, after;  // Reshapes of rank-3 operands, around the Attention
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& out_mm = g.nodes[k];
    if (!is_op(out_mm, "MatMul") || removed.count(k)) continue;
    const std::string& v = out_mm.inputs[1];
    int sm = g.producer_of(out_mm.inputs[0]);
    if (sm < 0 || !is_op(g.nodes[sm], "Softmax") || uses[out_mm.inputs[0]] != 1) continue;
    const int64_t rank = f32_rank(g, v);
    if (rank != 3 && rank != 4) continue;
    int64_t axis = g.nodes[sm].get_int("axis", -1);
    if (axis != -1 && axis != rank - 1) continue;
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
    if (p >= 0 && uses[s] == 1) {
      if (auto c = scaling_of(g, g.nodes[p])) {
        scale *= *c;
        scaled = true;
        chain.insert(p);
        s = g.nodes[p].inputs[0];
        p = g.producer_of(s);
      }
    }
    if (p < 0 || !is_op(g.nodes[p], "MatMul") || uses[s] != 1) continue;
    chain.insert(p);
    std::string q = g.nodes[p].inputs[0];
    const std::string& kt = g.nodes[p].inputs[1];
    // Q scaled before the product (torch's MultiheadAttention): (cQ)Kᵀ = c(QKᵀ).
    if (int qp = g.producer_of(q); qp >= 0 && uses[q] == 1) {
      if (auto c = scaling_of(g, g.nodes[qp])) {
        scale *= *c;
        scaled = true;
        chain.insert(qp);
        q = g.nodes[qp].inputs[0];
      }
    }
    int t = g.producer_of(kt);
    if (t < 0 || !is_op(g.nodes[t], "Transpose")) continue;
    auto perm = g.nodes[t].get_ints("perm");
    if (static_cast<int64_t>(perm.size()) != rank || perm[rank - 2] == rank - 2 || perm[rank - 1] == rank - 1)
      continue;
    // K = Transpose(input, perm with its last two entries swapped): the swap undone.
    std::vector<int64_t> kperm = perm;
    std::swap(kperm[rank - 2], kperm[rank - 1]);
    bool identity = true;
    for (int64_t i = 0; i < rank; ++i) identity &= kperm[i] == i;
    std::string key = identity ? g.nodes[t].inputs[0] : kt;
    if (!identity && uses[kt] != 1) continue;
    if (f32_rank(g, q) != rank || f32_rank(g, g.nodes[t].inputs[0]) != rank) continue;
    if (!mask.empty()) {
      auto mt = g.type_of(mask);
      if (!mt || !mt->is_tensor() || mt->dtype != DType::F32) continue;
    }
    // Rank 3 needs static shapes for the views.
    std::optional<std::vector<int64_t>> qs, ks, vs, ys, ms;
    if (rank == 3) {
      qs = static_shape(g, q);
      ks = static_shape(g, g.nodes[t].inputs[0]);
      vs = static_shape(g, v);
      ys = static_shape(g, out_mm.outputs[0]);
      if (!qs || !ks || !vs || !ys) continue;
      // Reshape reads a 0 in the shape as "keep this dim": empty tensors stay unfused.
      if (shape_numel(*qs) == 0 || shape_numel(*ks) == 0 || shape_numel(*vs) == 0) continue;
      if (!mask.empty()) {
        ms = static_shape(g, mask);
        if (!ms || ms->size() > 3 || shape_numel(*ms) == 0) continue;
      }
    }
    bool overlap = false;
    for (size_t c : chain) overlap |= removed.count(c) > 0;
    if (overlap) continue;
    if (identity && uses[kt] == 1) chain.insert(t);
    std::vector<int64_t> k_shape;
    if (!identity) {
      // The Transpose now produces K itself (its only reader was the score MatMul).
      if (rank == 3) {
        auto src = *static_shape(g, g.nodes[t].inputs[0]);
        for (int64_t i = 0; i < 3; ++i) k_shape.push_back(src[kperm[i]]);
      }
      g.nodes[t].set_attr(Attribute::make_ints("perm", kperm));
      g.value_types.erase(kt);
    } else if (rank == 3) {
      k_shape = *ks;
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
    if (rank == 3) {
      auto as4 = [](std::vector<int64_t> s) {
        s.insert(s.begin(), 4 - s.size(), 1);
        return s;
      };
      const std::string base = out_mm.outputs[0] + "/attention";
      std::vector<std::vector<int64_t>> shapes = {*qs, k_shape, *vs};
      if (!mask.empty()) shapes.push_back(*ms);
      for (size_t i = 0; i < att.inputs.size(); ++i) {
        std::string viewed = base + "_in" + std::to_string(i);
        before[k].push_back(make_reshape(g, att.inputs[i], viewed, as4(shapes[i])));
        att.inputs[i] = viewed;
      }
      att.outputs = {base + "_out"};
      after[k].push_back(make_reshape(g, att.outputs[0], out_mm.outputs[0], *ys));
    }
    chain.erase(k);
    g.nodes[k] = att;
    removed.insert(chain.begin(), chain.end());
    changed = true;
  }
  splice_nodes(g, removed, std::move(before), std::move(after));
  return changed;
}

}  // namespace hodu::passes
