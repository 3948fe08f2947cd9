// Gradient rule of scaled-dot-product attention: hodu.Attention and ONNX
// Attention (without a KV cache, softcap or GQA). The fused op keeps nothing
// of its forward, so the rule recomputes the probabilities P = softmax(Q·Kᵀ·s
// + mask + bias [+ causal]) and then writes the backward as products:
// dV = Pᵀ·dY, dP = dY·Vᵀ, dS = SoftmaxGrad(dP, P), dQ = s·dS·K, dK = s·dSᵀ·Q.
// The rank-3 form ([B, S, H·D] with num_heads) is reshaped to heads first and
// its gradients back.
#include <cmath>
#include <limits>

#include "passes/autodiff_rules.h"

namespace hodu::passes::autodiff {
namespace {

void attention_rule(RuleContext& c) {
  const Node& n = c.node();
  const bool onnx = n.domain.empty();
  if (onnx) {
    if (n.has_input(4) || n.has_input(5)) c.unsupported("Attention with a past key/value (KV cache)");
    if (n.get_float("softcap", 0.f) != 0) c.unsupported("Attention with softcap");
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (!c.dy(o).empty()) c.unsupported("a gradient flowing into Attention's output " + std::to_string(o));
  }
  const std::string &q = n.inputs[0], &k = n.inputs[1], &v = n.inputs[2];
  const int64_t rank = c.rank_or_fail(q);
  const int64_t heads = n.get_int(onnx ? "q_num_heads" : "num_heads", 0);
  const int64_t kv_heads = n.get_int("kv_num_heads", 0);
  if (rank != 4 && !(rank == 3 && heads > 0)) c.unsupported("attention operands of rank " + std::to_string(rank));
  if (rank == 3 && kv_heads != 0 && kv_heads != heads) c.unsupported("grouped-query attention (kv_num_heads != num_heads)");
  if (rank == 4) {
    auto hq = c.static_dim(q, 1), hk = c.static_dim(k, 1);
    if (!hq || !hk || *hq != *hk) c.unsupported("grouped-query attention or head counts unknown");
  }
  // Rank 3: [B, S, H·D] → [B, H, S, D] and back.
  auto split_heads = [&](const std::string& t) {
    if (rank == 4) return t;
    std::string r = c.emit("Reshape", {t, c.ints({0, 0, heads, -1})});
    return c.emit("Transpose", {r}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
  };
  auto merge_heads = [&](const std::string& t) {
    if (rank == 4) return t;
    std::string tr = c.emit("Transpose", {t}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
    return c.emit("Reshape", {tr, c.ints({0, 0, -1})});
  };
  const std::string Q = split_heads(q), K = split_heads(k), V = split_heads(v), dY = split_heads(c.dy());
  double scale;
  if (n.has_attr("scale")) {
    scale = n.get_float("scale", 1.f);
  } else {
    auto d = c.static_dim(q, -1);
    if (!d) c.unsupported("the head size is unknown and no scale is given");
    scale = 1 / std::sqrt(static_cast<double>(rank == 4 ? *d : *d / heads));
  }
  // S = s·Q·Kᵀ + mask (+ bias) (+ causal), P = softmax(S).
  std::string s = product(c, Q, K, false, true, scale);
  const double ninf = -std::numeric_limits<double>::infinity();
  if (n.has_input(3)) {
    const std::string& mask = n.inputs[3];
    auto mt = c.type(mask);
    if (!mt || !mt->is_tensor()) c.unsupported("the mask's type is unknown");
    s = mt->dtype == DType::Bool ? c.emit("Where", {mask, s, c.scalar_like(ninf, q)}) : c.add(s, mask);
  }
  if (!onnx && n.has_input(4)) s = c.add(s, n.inputs[4]);
  if (n.get_int("is_causal", 0) != 0) {
    // Key j is hidden from query i when j > i (no past).
    auto one_d = [&](const std::string& t, int64_t axis) {
      std::string len = c.emit("Squeeze", {c.emit("Slice", {c.shape_of(t), c.ints({axis}), c.ints({axis + 1})}), c.ints({0})});
      return c.emit("Range", {c.scalar(0, DType::I64), len, c.scalar(1, DType::I64)});
    };
    std::string rows = c.emit("Unsqueeze", {one_d(Q, 2), c.ints({1})});
    std::string cols = c.emit("Unsqueeze", {one_d(K, 2), c.ints({0})});
    std::string hidden = c.emit("Greater", {cols, rows});
    s = c.add(s, c.emit("Where", {hidden, c.scalar_like(ninf, q), c.scalar_like(0, q)}));
  }
  std::string p = c.emit("Softmax", {s}, {Attribute::make_int("axis", -1)});
  // Gradients.
  std::string dp = product(c, dY, V, false, true, 1);
  std::string ds = c.emit("SoftmaxGrad", {dp, p}, {Attribute::make_int("axis", -1)}, "hodu");
  if (c.wants(0)) c.give(0, merge_heads(product(c, ds, K, false, false, scale)));
  if (c.wants(1)) c.give(1, merge_heads(product(c, ds, Q, true, false, scale)));
  if (c.wants(2)) c.give(2, merge_heads(product(c, p, dY, true, false, 1)));
  // An additive mask or bias gets dS summed to its shape.
  auto tq = c.type(q), tk = c.type(k);
  auto additive = [&](size_t i) {
    if (!c.wants(i)) return;
    if (rank != 4) c.unsupported("the gradient of the mask of rank-3 attention");
    std::vector<Dim> dims = {tq->shape[0], tq->shape[1], tq->shape[2], tk->shape[2]};
    c.set_type(ds, ValueType::tensor(tq->dtype, Shape(dims)));
    c.give(i, c.sum_to(ds, ds, n.inputs[i]));
  };
  additive(3);
  if (!onnx) additive(4);
}

}  // namespace

void add_attention_rules(RuleTable& t) {
  t[{"hodu", "Attention"}] = attention_rule;
  t[{"", "Attention"}] = attention_rule;
}

}  // namespace hodu::passes::autodiff
