// Conv of a channel Concat → one conv per part, summed:
//   Conv(Concat(a, b), W, B) = Conv(a, W[:, :Ca]) + Conv(b, W[:, Ca:], B)
// and a pool of a channel Concat → the Concat of the pooled parts (pooling is per channel),
// so the Concat reaches a conv. SqueezeNet's fire modules and Inception blocks concatenate
// conv outputs only to feed the next conv: the sum (fused into the second conv as its
// residual by fuse_conv) costs less than copying every part into a new buffer.
#include <map>
#include <string>

#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// The Concat node producing `value` on axis 1 of a rank-4 f32 tensor, read only by `reader`.
const Node* channel_concat(const Graph& g, const std::map<std::string, int>& uses,
                           const std::map<std::string, std::vector<size_t>>& readers, const std::string& value,
                           size_t reader) {
  if (sole_reader(g, uses, readers, value) != static_cast<int>(reader)) return nullptr;
  int p = g.producer_of(value);
  if (p < 0) return nullptr;
  const Node& c = g.nodes[static_cast<size_t>(p)];
  if (c.op_type != "Concat" || !c.domain.empty() || c.inputs.size() < 2) return nullptr;
  auto shape = static_shape(g, value);
  if (!shape || shape->size() != 4) return nullptr;
  int64_t axis = c.get_int("axis", 0);
  if (axis != 1 && axis != -3) return nullptr;
  for (const auto& in : c.inputs) {
    auto t = g.type_of(in);
    auto s = static_shape(g, in);
    if (in.empty() || !t || t->dtype != DType::F32 || !s || s->size() != 4) return nullptr;
  }
  return &c;
}

}  // namespace

bool split_concat_convs(Graph& g, bool pool_only_into_one_conv) {
  bool changed = false;
  // Pools first: each moves a Concat down to the pool's reader.
  for (int round = 0; round < 4; ++round) {
    auto uses = use_counts(g);
    auto readers = consumers(g);
    std::vector<Node> out;
    std::set<std::string> dropped;  // Concat outputs whose node goes
    bool any = false;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const Node& n = g.nodes[k];
      bool pool = n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1 &&
                  (n.op_type == "MaxPool" || n.op_type == "AveragePool" || n.op_type == "GlobalAveragePool" ||
                   n.op_type == "GlobalMaxPool");
      const Node* c = pool ? channel_concat(g, uses, readers, n.inputs[0], k) : nullptr;
      if (c && pool_only_into_one_conv) {  // the Concat of the pooled parts must then split
        int r = sole_reader(g, uses, readers, n.outputs[0]);
        if (r < 0 || g.nodes[static_cast<size_t>(r)].op_type != "Conv" || !g.nodes[static_cast<size_t>(r)].domain.empty())
          c = nullptr;
      }
      if (!c) {
        out.push_back(n);
        continue;
      }
      Node cat = *c;
      for (auto& in : cat.inputs) {
        Node p = n;
        p.name = g.unique_name(n.name + "_" + in);
        p.inputs = {in};
        p.outputs = {g.unique_name(n.outputs[0] + "_" + in)};
        in = p.outputs[0];
        out.push_back(std::move(p));
      }
      cat.name = g.unique_name(c->name + "_after_" + n.name);
      cat.outputs = {n.outputs[0]};
      out.push_back(std::move(cat));
      dropped.insert(c->outputs[0]);
      any = true;
    }
    if (!any) break;
    std::vector<Node> kept;
    for (auto& n : out)
      if (!(n.op_type == "Concat" && n.outputs.size() == 1 && dropped.count(n.outputs[0]))) kept.push_back(std::move(n));
    g.nodes = std::move(kept);
    infer_types(g);
    changed = true;
  }

  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::vector<Node> out;
  std::set<std::string> dropped;
  // A weight's part made once and read by every conv split the same way: RAFT's update block,
  // unrolled 12 times over the same weights, held 12 copies of each part, each packed (51 MB
  // of packed weights for a 4 MB model).
  std::map<std::string, std::string> parts;  // "weight|first channel|channels" -> part's name
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    const Node* c = n.op_type == "Conv" && n.domain.empty() && n.inputs.size() >= 2 && n.get_int("group", 1) == 1
                        ? channel_concat(g, uses, readers, n.inputs[0], k)
                        : nullptr;
    const Tensor* w = c ? constant_of(g, n.inputs[1]) : nullptr;
    auto y = c ? static_shape(g, n.outputs[0]) : std::nullopt;
    auto x = c ? static_shape(g, n.inputs[0]) : std::nullopt;
    if (!w || w->dtype() != DType::F32 || w->rank() != 4 || !y || !x || w->dim(1) != (*x)[1] ||
        (n.has_input(2) && !constant_of(g, n.inputs[2]))) {
      out.push_back(n);
      continue;
    }
    // Worth it when the conv's output is no larger than the concat it saves copying: each
    // extra part re-reads and rewrites the output once.
    if (shape_numel(*y) * static_cast<int64_t>(c->inputs.size() - 1) > shape_numel(*x)) {
      out.push_back(n);
      continue;
    }
    int64_t parts_channels = 0;
    for (const auto& in : c->inputs) parts_channels += (*static_shape(g, in))[1];
    if (parts_channels != w->dim(1)) {
      out.push_back(n);
      continue;
    }
    // `w` points into the initializers, which the loop below adds to: keep what it needs.
    const Tensor wc = w->contiguous();
    const int64_t o = wc.dim(0), ctot = wc.dim(1), kh = wc.dim(2), kw = wc.dim(3), kk = kh * kw;
    int64_t at = 0;
    std::string sum;
    for (size_t i = 0; i < c->inputs.size(); ++i) {
      int64_t ci = (*static_shape(g, c->inputs[i]))[1];
      std::string& wn = parts[n.inputs[1] + "|" + std::to_string(at) + "|" + std::to_string(ci)];
      if (wn.empty()) {
        Tensor part = Tensor::empty(DType::F32, {o, ci, kh, kw});
        for (int64_t oc = 0; oc < o; ++oc)
          std::copy_n(wc.data<float>() + (oc * ctot + at) * kk, ci * kk, part.data<float>() + oc * ci * kk);
        wn = g.unique_name(n.inputs[1] + "_part" + std::to_string(i));
        g.set_initializer(wn, part);
      }
      at += ci;
      bool last = i + 1 == c->inputs.size();
      Node conv = n;
      conv.name = g.unique_name(n.name + "_part" + std::to_string(i));
      conv.inputs = {c->inputs[i], wn};
      if (last && n.has_input(2)) conv.inputs.push_back(n.inputs[2]);
      conv.outputs = {sum.empty() && last ? n.outputs[0] : g.unique_name(n.outputs[0] + "_part" + std::to_string(i))};
      out.push_back(conv);
      if (sum.empty()) {
        sum = conv.outputs[0];
        continue;
      }
      Node add;
      add.op_type = "Add";
      add.name = g.unique_name(n.name + "_sum" + std::to_string(i));
      add.inputs = {conv.outputs[0], sum};
      add.outputs = {last ? n.outputs[0] : g.unique_name(n.outputs[0] + "_sum" + std::to_string(i))};
      sum = add.outputs[0];
      out.push_back(std::move(add));
    }
    dropped.insert(c->outputs[0]);
    changed = true;
  }
  if (!dropped.empty()) {
    std::vector<Node> kept;
    for (auto& n : out)
      if (!(n.op_type == "Concat" && n.outputs.size() == 1 && dropped.count(n.outputs[0]))) kept.push_back(std::move(n));
    g.nodes = std::move(kept);
    for (const auto& v : dropped) g.value_types.erase(v);
  }
  return changed;
}

}  // namespace hodu::passes
