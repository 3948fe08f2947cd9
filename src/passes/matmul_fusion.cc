// MatMul [+ bias] [+ activation] → hodu.FusedMatMul; Gemm [+ activation] →
// hodu.FusedGemm. Y = act(alpha * op(A) op(B) + bias).
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// A Transpose that swaps the last two dims and keeps the others.
bool swaps_last_two(const Node& t, int64_t rank) {
  if (t.op_type != "Transpose" || !t.domain.empty()) return false;
  auto p = t.get_ints("perm");
  if (static_cast<int64_t>(p.size()) != rank || rank < 2) return false;
  for (int64_t i = 0; i < rank - 2; ++i)
    if (p[i] != i) return false;
  return p[rank - 2] == rank - 1 && p[rank - 1] == rank - 2;
}

}  // namespace

bool fuse_matmul(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (removed.count(k) || !n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm")) continue;
    auto out_type = g.type_of(n.outputs[0]);
    if (!out_type || !out_type->is_tensor() || out_type->dtype != DType::F32 || !out_type->shape.rank_known())
      continue;
    bool is_gemm = n.op_type == "Gemm";
    std::string y = n.outputs[0];
    std::set<size_t> absorbed;
    int next = sole_reader(g, uses, readers, y);
    std::string bias;
    if (!is_gemm && next >= 0 && g.nodes[next].op_type == "Add" && g.nodes[next].domain.empty()) {
      const Node& add = g.nodes[next];
      std::string other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      const Tensor* c = constant_of(g, other);
      int64_t ncols = out_type->shape.rank() >= 1 ? out_type->shape.dims().back().value : -1;
      // A bias over the last dim only: [N] or [1, ..., 1, N].
      bool last_dim_only = c && ncols > 0 && c->numel() == ncols && c->rank() <= out_type->shape.rank();
      if (last_dim_only && c->rank() >= 1 && c->dim(-1) != ncols) last_dim_only = false;
      if (last_dim_only) {
        bias = other;
        absorbed.insert(next);
        y = add.outputs[0];
        next = sole_reader(g, uses, readers, y);
      }
    }
    std::optional<Activation> act;
    if (next >= 0 && (act = as_activation(g, g.nodes[next]))) {
      absorbed.insert(next);
      y = g.nodes[next].outputs[0];
    }
    // Transposed B (weights stored [N, K] as in nn.Linear's export).
    int64_t trans_b = is_gemm ? n.get_int("transB", 0) : 0;
    if (!is_gemm) {
      int pb = g.producer_of(n.inputs[1]);
      auto bt = g.type_of(n.inputs[1]);
      if (pb >= 0 && bt && bt->is_tensor() && bt->shape.rank_known() &&
          swaps_last_two(g.nodes[pb], bt->shape.rank()) && uses[n.inputs[1]] == 1) {
        n.inputs[1] = g.nodes[pb].inputs[0];
        trans_b = 1;
        removed.insert(pb);
      }
    }
    if (is_gemm && !act) continue;  // a Gemm alone is already one kernel
    if (!is_gemm && bias.empty() && !act && !trans_b) continue;
    n.domain = "hodu";
    if (is_gemm) {
      n.op_type = "FusedGemm";
    } else {
      n.op_type = "FusedMatMul";
      if (!bias.empty()) n.inputs.push_back(bias);
      if (trans_b) n.set_attr(Attribute::make_int("transB", 1));
    }
    finish_fusion(g, n, act, y);
    removed.insert(absorbed.begin(), absorbed.end());
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
