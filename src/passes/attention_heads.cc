// The head split and merge around a rank-4 hodu.Attention → its rank-3 form.
//   Q = Transpose(Reshape(X, [B, S, H, D]), [0, 2, 1, 3])   (and the Slice/Reshape/Transpose
//   chains other exporters write), Y → Transpose([0, 2, 1, 3]) → Reshape([B, S, H·D])
// become Attention(Reshape(X, [B, S, H·D]), ..., num_heads = H) → Y3 [B, S, H·D]: the engines
// read each head with strides and write the heads side by side, so the four copies a layer
// made (three head splits, one merge) are gone. Found by following the exact strided view each
// chain makes of its source, so any Reshape/Transpose spelling of the same layout matches.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// A strided view of a row-major buffer: element (i0, i1, ...) at Σ i_d · strides[d].
struct View {
  std::vector<int64_t> sizes, strides;
};

View contiguous(const std::vector<int64_t>& shape) {
  View v{shape, std::vector<int64_t>(shape.size(), 1)};
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) v.strides[d] = v.strides[d + 1] * shape[d + 1];
  return v;
}

// The view `v` reshaped to `shape` without copying, when possible.
std::optional<View> reshaped(const View& v, const std::vector<int64_t>& shape) {
  auto strides = reshape_strides(v.sizes, v.strides, shape);
  if (!strides) return std::nullopt;
  return View{shape, *strides};
}

// Strides equal where the size is not 1 (a unit dim's stride is never used).
bool same_layout(const View& v, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (v.sizes != sizes) return false;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && v.strides[d] != strides[d]) return false;
  return true;
}

bool is_view_op(const Node& n) { return is_reshape_op(n) || (n.op_type == "Transpose" && n.domain.empty()); }

// The view node `n` makes of a view `in` of its input (output shape from inference).
std::optional<View> apply(const Graph& g, const Node& n, const View& in) {
  auto out = static_shape(g, n.outputs[0]);
  if (!out) return std::nullopt;
  if (n.op_type != "Transpose") return reshaped(in, *out);
  const size_t r = in.sizes.size();
  auto perm = transpose_perm(n, r);
  if (perm.size() != r) return std::nullopt;
  View v;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(r)) return std::nullopt;
    v.sizes.push_back(in.sizes[p]);
    v.strides.push_back(in.strides[p]);
  }
  if (v.sizes != *out) return std::nullopt;
  return v;
}

// One operand's head split: the nodes making `value` ([B, H, S, D]) from a source X whose bytes
// are [B, S, H, D] row-major, found by walking back through view ops whose results only the
// chain reads.
struct HeadSplit {
  std::string source;
  std::vector<size_t> nodes;
};

std::optional<HeadSplit> head_split(const Graph& g, const std::map<std::string, int>& uses, const std::string& value) {
  auto shape = static_shape(g, value);
  if (!shape || shape->size() != 4) return std::nullopt;
  const int64_t B = (*shape)[0], H = (*shape)[1], S = (*shape)[2], D = (*shape)[3];
  HeadSplit h;
  std::string v = value;
  for (;;) {
    int p = g.producer_of(v);
    auto u = uses.find(v);
    if (p < 0 || !is_view_op(g.nodes[p]) || u == uses.end() || u->second != 1 || is_graph_output(g, v)) break;
    h.nodes.insert(h.nodes.begin(), static_cast<size_t>(p));
    v = g.nodes[p].inputs[0];
  }
  auto xs = static_shape(g, v);
  if (h.nodes.empty() || !xs) return std::nullopt;
  View view = contiguous(*xs);
  for (size_t n : h.nodes) {
    auto next = apply(g, g.nodes[n], view);
    if (!next) return std::nullopt;
    view = *next;
  }
  if (!same_layout(view, {B, H, S, D}, {S * H * D, D, H * D, 1})) return std::nullopt;
  h.source = v;
  return h;
}

// The head merge after the output Y ([B, H, S, Dv] as written): the view nodes up to the last
// value (along a chain of views read by nothing else) whose bytes are Y3 = [B, S, H·Dv] row-major.
std::optional<std::vector<size_t>> head_merge(const Graph& g, const std::map<std::string, int>& uses,
                                              const std::map<std::string, std::vector<size_t>>& readers,
                                              const std::string& y) {
  auto shape = static_shape(g, y);
  if (!shape || shape->size() != 4) return std::nullopt;
  const int64_t B = (*shape)[0], H = (*shape)[1], S = (*shape)[2], Dv = (*shape)[3];
  View view{{B, H, S, Dv}, {S * H * Dv, Dv, H * Dv, 1}};  // Y seen over Y3's bytes
  std::vector<size_t> nodes;
  std::optional<std::vector<size_t>> merge;
  std::string v = y;
  for (;;) {
    int r = sole_reader(g, uses, readers, v);
    if (r < 0 || !is_view_op(g.nodes[r]) || g.nodes[r].inputs[0] != v) return merge;
    auto next = apply(g, g.nodes[r], view);
    if (!next) return merge;
    view = *next;
    nodes.push_back(static_cast<size_t>(r));
    v = g.nodes[r].outputs[0];
    if (same_layout(view, view.sizes, contiguous(view.sizes).strides)) merge = nodes;
  }
}

}  // namespace

bool absorb_attention_heads(Graph& g) {
  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::set<size_t> removed;
  std::map<size_t, std::vector<Node>> before, after;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (n.domain != "hodu" || n.op_type != "Attention" || n.inputs.size() < 3 || removed.count(k)) continue;
    if (n.get_int("num_heads", 0) || n.get_int("kv_num_heads", 0)) continue;  // already rank 3
    std::vector<HeadSplit> splits;
    for (size_t i = 0; i < 3; ++i)
      if (auto h = head_split(g, uses, n.inputs[i])) splits.push_back(*h);
    auto merge = head_merge(g, uses, readers, n.outputs[0]);
    if (splits.size() != 3 || !merge) continue;
    bool clash = false;
    for (const auto& h : splits)
      for (size_t x : h.nodes) clash |= removed.count(x) > 0;
    for (size_t x : *merge) clash |= removed.count(x) > 0;
    if (clash) continue;
    auto qs = *static_shape(g, n.inputs[0]), ks = *static_shape(g, n.inputs[1]), ys = *static_shape(g, n.outputs[0]);
    for (size_t i = 0; i < 3; ++i) {
      auto s4 = *static_shape(g, n.inputs[i]);
      std::vector<int64_t> s3 = {s4[0], s4[2], s4[1] * s4[3]};
      std::string x = splits[i].source;
      if (*static_shape(g, x) != s3) {
        std::string view = n.outputs[0] + "/input" + std::to_string(i);
        before[k].push_back(make_reshape(g, x, view, s3));
        x = view;
      }
      n.inputs[i] = x;
      removed.insert(splits[i].nodes.begin(), splits[i].nodes.end());
    }
    n.set_attr(Attribute::make_int("num_heads", qs[1]));
    n.set_attr(Attribute::make_int("kv_num_heads", ks[1]));
    // The merged value: written by the Attention when it is [B, S, H·Dv], else a Reshape of it.
    const std::string merged = g.nodes[merge->back()].outputs[0];
    const std::vector<int64_t> y3 = {ys[0], ys[2], ys[1] * ys[3]};
    g.value_types.erase(n.outputs[0]);
    if (*static_shape(g, merged) == y3) {
      n.outputs[0] = merged;
    } else {
      n.outputs[0] = merged + "/attention";
      after[k].push_back(make_reshape(g, n.outputs[0], merged, *static_shape(g, merged)));
    }
    removed.insert(merge->begin(), merge->end());
  }
  if (removed.empty()) return false;
  splice_nodes(g, removed, std::move(before), std::move(after));
  return true;
}

}  // namespace hodu::passes
