// A residual Add after a matrix product → the product's Z input:
//   Add(MatMul/Gemm/FusedMatMul/FusedGemm(...) [→ Reshape/Squeeze/Unsqueeze/Flatten ...], z)
//   → FusedMatMul/FusedGemm(..., Z = z [reshaped to the product's shape]) [→ the same views].
// A transformer's out-projection and FFN output each end in one (their sum with the block's
// input): engines accumulate into the product's output instead of running a separate pass.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// A product whose output can take a residual: f32, no activation (it would come before the
// Add), no residual yet.
bool takes_residual(const Graph& g, const Node& n) {
  bool onnx = n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm");
  bool fused = n.domain == "hodu" && (n.op_type == "FusedMatMul" || n.op_type == "FusedGemm");
  if (!onnx && !fused) return false;
  if (fused && (!n.get_string("activation", "").empty() || (n.inputs.size() > 3 && !n.inputs[3].empty())))
    return false;
  auto t = g.type_of(n.outputs[0]);
  return t && t->is_tensor() && t->dtype == DType::F32;
}

struct Match {
  std::vector<size_t> views;  // the view nodes between the product and the Add, in order
  size_t add = 0;
  std::string z;
};

std::optional<Match> residual_after(const Graph& g, const std::map<std::string, int>& uses,
                                    const std::map<std::string, std::vector<size_t>>& readers, size_t k) {
  Match m;
  std::string y = g.nodes[k].outputs[0];
  auto ys = static_shape(g, y);
  if (!ys) return std::nullopt;
  for (;;) {
    int next = sole_reader(g, uses, readers, y);
    if (next < 0) return std::nullopt;
    const Node& r = g.nodes[next];
    if (is_reshape_op(r) && r.inputs[0] == y && r.outputs.size() == 1 && static_shape(g, r.outputs[0])) {
      m.views.push_back(static_cast<size_t>(next));
      y = r.outputs[0];
      continue;
    }
    if (r.op_type != "Add" || !r.domain.empty() || r.inputs.size() != 2) return std::nullopt;
    m.add = static_cast<size_t>(next);
    m.z = other_input(r, y);
    break;
  }
  const Node& add = g.nodes[m.add];
  auto zs = static_shape(g, m.z), outs = static_shape(g, add.outputs[0]);
  auto zt = g.type_of(m.z);
  if (m.z.empty() || !zs || !outs || *zs != *outs || shape_numel(*zs) != shape_numel(*ys) || !zt ||
      zt->dtype != DType::F32)
    return std::nullopt;
  // z must exist before the product runs: a graph input, a constant, or made by an earlier node.
  int zp = g.producer_of(m.z);
  if (zp >= static_cast<int>(k)) return std::nullopt;
  return m;
}

}  // namespace

bool fuse_residual_add(Graph& g) {
  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::set<size_t> removed;
  std::map<size_t, std::vector<Node>> before;  // Reshapes of z, inserted before their product
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (removed.count(k) || !takes_residual(g, g.nodes[k])) continue;
    auto m = residual_after(g, uses, readers, k);
    if (!m) continue;
    if (removed.count(m->add)) continue;  // taken by an earlier product (only Adds are removed)
    Node& n = g.nodes[k];
    const Node& add = g.nodes[m->add];
    std::string z = m->z;
    auto ys = *static_shape(g, n.outputs[0]);
    if (*static_shape(g, z) != ys) {
      // z as the product's shape: a Reshape (a view in the engines) just before the product.
      std::string view = n.outputs[0] + "/residual";
      before[k].push_back(make_reshape(g, z, view, ys));
      z = view;
    }
    if (n.domain.empty()) {
      n.domain = "hodu";
      n.op_type = n.op_type == "Gemm" ? "FusedGemm" : "FusedMatMul";
    }
    n.inputs.resize(4);
    n.inputs[3] = z;
    // The Add's output is now the last view's (or the product's) output.
    std::string sum = add.outputs[0];
    if (m->views.empty()) {
      finish_fusion(g, n, std::nullopt, sum);
    } else {
      Node& last = g.nodes[m->views.back()];
      g.value_types.erase(last.outputs[0]);
      last.outputs[0] = sum;
    }
    removed.insert(m->add);
  }
  if (removed.empty()) return false;
  splice_nodes(g, removed, std::move(before));
  return true;
}

}  // namespace hodu::passes
