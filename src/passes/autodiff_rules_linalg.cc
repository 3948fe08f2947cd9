// Gradient rules of the products: MatMul, Gemm and the fused products. The
// gradients are products again, written as hodu.FusedMatMul with transA/transB
// so no operand is transposed in memory (the engines' matmul kernels read the
// transposed operand through its strides). A 2-D weight read by a batched
// product ([B, S, K] x [K, N], a Linear layer) gets its gradient as one
// [K, B·S] x [B·S, N] product instead of a batched product and a sum.
#include "passes/autodiff_rules.h"

namespace hodu::passes::autodiff {
namespace {

// The type of op(a)·op(b)'s result shape with the batch dims of `y`: y's batch dims + [rows, cols].
ValueType batched_type(const ValueType& y, const Dim& rows, const Dim& cols) {
  std::vector<Dim> dims(y.shape.dims().begin(), y.shape.dims().end() - 2);
  dims.push_back(rows);
  dims.push_back(cols);
  return ValueType::tensor(y.dtype, Shape(dims));
}

// Gradients of y = alpha · op(A) op(B) (+ terms not involving A, B), both of rank >= 2, with
// dL/dy = g; op transposes the last two dims where ta/tb. Batch dims broadcast.
void product_grads(RuleContext& c, size_t ia, size_t ib, bool ta, bool tb, double alpha, const std::string& g,
                   const std::string& y) {
  const std::string &A = c.node().inputs[ia], &B = c.node().inputs[ib];
  auto tA = c.type(A), tB = c.type(B), tY = c.type(y);
  if (!tA || !tB || !tY || !tA->shape.rank_known() || !tB->shape.rank_known() || !tY->shape.rank_known())
    c.unsupported("the ranks of the product's operands are unknown");
  const int64_t ra = tA->shape.rank(), rb = tB->shape.rank();
  if (c.wants(ia)) {
    std::string dA = ta ? product(c, B, g, tb, true, alpha) : product(c, g, B, false, !tb, alpha);
    c.set_type(dA, batched_type(*tY, tA->shape[ra - 2], tA->shape[ra - 1]));
    c.give(ia, c.sum_to(dA, dA, A));
  }
  if (c.wants(ib)) {
    auto k = c.static_dim(A, ta ? -2 : -1);
    auto n = c.static_dim(y, -1);
    std::string dB;
    if (rb == 2 && ra > 2 && !ta && k && n) {
      // [..., M, K] x [K, N]: flatten the batch into the rows.
      std::string a2 = c.emit("Reshape", {A, c.ints({-1, *k})});
      std::string g2 = c.emit("Reshape", {g, c.ints({-1, *n})});
      dB = tb ? product(c, g2, a2, true, false, alpha) : product(c, a2, g2, true, false, alpha);
      c.give(ib, dB);
    } else {
      dB = tb ? product(c, g, A, true, ta, alpha) : product(c, A, g, !ta, false, alpha);
      c.set_type(dB, batched_type(*tY, tB->shape[rb - 2], tB->shape[rb - 1]));
      c.give(ib, c.sum_to(dB, dB, B));
    }
  }
}

void matmul_rule(RuleContext& c) {
  const std::string &a = c.node().inputs[0], &b = c.node().inputs[1], &y = c.node().outputs[0];
  const int64_t ra = c.rank_or_fail(a), rb = c.rank_or_fail(b);
  if (ra >= 2 && rb >= 2) {
    product_grads(c, 0, 1, false, false, 1, c.dy(), y);
    return;
  }
  // numpy's 1-D promotion: a [K] is [1, K], b [K] is [K, 1]; those dims are dropped from y.
  std::string g = c.dy();
  auto ty = c.type(y);
  auto ta = c.type(a), tb = c.type(b);
  std::vector<Dim> ydims = ty->shape.dims();
  if (ra == 1) ydims.insert(ydims.end() - (rb == 1 ? 0 : 1), Dim(1));
  if (rb == 1) ydims.push_back(Dim(1));
  std::vector<int64_t> axes;
  if (ra == 1) axes.push_back(static_cast<int64_t>(ydims.size()) - 2);
  if (rb == 1) axes.push_back(static_cast<int64_t>(ydims.size()) - 1);
  std::string g2 = c.emit("Unsqueeze", {g, c.ints(axes)});
  ValueType t2 = ValueType::tensor(ty->dtype, Shape(ydims));
  c.set_type(g2, t2);
  std::string a2 = a, b2 = b;
  if (ra == 1) {
    a2 = c.emit("Unsqueeze", {a, c.ints({0})});
    c.set_type(a2, ValueType::tensor(ta->dtype, Shape({Dim(1), ta->shape[0]})));
  }
  if (rb == 1) {
    b2 = c.emit("Unsqueeze", {b, c.ints({1})});
    c.set_type(b2, ValueType::tensor(tb->dtype, Shape({tb->shape[0], Dim(1)})));
  }
  if (c.wants(0)) {
    std::string dA = product(c, g2, b2, false, true, 1);
    c.set_type(dA, batched_type(t2, ra == 1 ? Dim(1) : ta->shape[ra - 2], ta->shape[ra - 1]));
    std::string s = c.sum_to(dA, dA, a2);
    c.give(0, ra == 1 ? c.emit("Reshape", {s, c.ints({-1})}) : s);
  }
  if (c.wants(1)) {
    std::string dB = product(c, a2, g2, true, false, 1);
    c.set_type(dB, batched_type(t2, tb->shape[rb == 1 ? 0 : rb - 2], rb == 1 ? Dim(1) : tb->shape[rb - 1]));
    std::string s = c.sum_to(dB, dB, b2);
    c.give(1, rb == 1 ? c.emit("Reshape", {s, c.ints({-1})}) : s);
  }
}

// Gemm / hodu.FusedGemm: Y = act(alpha·op(A)op(B) + beta·C [+ Z]).
void gemm_rule(RuleContext& c) {
  const Node& n = c.node();
  const std::string& y = n.outputs[0];
  const bool fused = n.domain == "hodu";
  std::string g = c.dy();
  if (fused) g = activation_grad(c, g, y, [&] {
    Node plain = n;
    plain.remove_attr("activation");
    plain.remove_attr("activation_params");
    return c.emit("FusedGemm", plain.inputs, plain.attributes, "hodu");
  });
  product_grads(c, 0, 1, n.get_int("transA", 0) != 0, n.get_int("transB", 0) != 0, n.get_float("alpha", 1.f), g, y);
  if (c.wants(2)) {
    double beta = n.get_float("beta", 1.f);
    c.give_broadcast(2, beta == 1 ? g : c.mul(g, c.scalar_like(beta, g)), y);
  }
  if (fused) c.give_broadcast(3, g, y);
}

// hodu.FusedMatMul: Y = act(alpha·op(A)op(B) + bias + Z).
void fused_matmul_rule(RuleContext& c) {
  const Node& n = c.node();
  const std::string& y = n.outputs[0];
  std::string g = activation_grad(c, c.dy(), y, [&] {
    Node plain = n;
    plain.remove_attr("activation");
    plain.remove_attr("activation_params");
    return c.emit("FusedMatMul", plain.inputs, plain.attributes, "hodu");
  });
  if (c.rank_or_fail(n.inputs[0]) < 2 || c.rank_or_fail(n.inputs[1]) < 2)
    c.unsupported("FusedMatMul with a 1-D operand");
  product_grads(c, 0, 1, n.get_int("transA", 0) != 0, n.get_int("transB", 0) != 0, n.get_float("alpha", 1.f), g, y);
  c.give_broadcast(2, g, y);
  c.give_broadcast(3, g, y);
}

}  // namespace

std::string product(RuleContext& c, const std::string& a, const std::string& b, bool ta, bool tb, double alpha) {
  std::vector<Attribute> attrs;
  if (alpha != 1) attrs.push_back(Attribute::make_float("alpha", static_cast<float>(alpha)));
  if (ta) attrs.push_back(Attribute::make_int("transA", 1));
  if (tb) attrs.push_back(Attribute::make_int("transB", 1));
  return c.emit("FusedMatMul", {a, b}, std::move(attrs), "hodu");
}

void add_linalg_rules(RuleTable& t) {
  t[{"", "MatMul"}] = matmul_rule;
  t[{"", "Gemm"}] = gemm_rule;
  t[{"hodu", "FusedGemm"}] = gemm_rule;
  t[{"hodu", "FusedMatMul"}] = fused_matmul_rule;
}

}  // namespace hodu::passes::autodiff
