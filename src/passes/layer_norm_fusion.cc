// LayerNorm / RMSNorm → hodu.LayerNorm (rms=1 for RMSNorm). Matches the ONNX
// ops and the decomposed forms exporters write:
//   LayerNorm: m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2)); y = Div(d, Sqrt(Add(v, eps))) [* s] [+ b]
//   RMSNorm:   v = ReduceMean(Pow(x, 2)); y = Mul(x, Reciprocal(Sqrt(Add(v, eps)))) or Div(x, Sqrt(...)) [* s]
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool is_op(const Node& n, const char* op) { return n.op_type == op && n.domain.empty(); }

// ReduceMean over exactly the last axis with keepdims: returns true.
bool mean_over_last(const Graph& g, const Node& n) {
  if (!is_op(n, "ReduceMean") || n.get_int("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes;
  if (n.has_input(1)) {
    const Tensor* t = constant_of(g, n.inputs[1]);
    if (!t) return false;
    axes = t->to_int64s();
  } else {
    axes = n.get_ints("axes");
  }
  if (axes.size() != 1) return false;
  if (axes[0] == -1) return true;
  auto t = g.type_of(n.inputs[0]);
  return t && t->is_tensor() && t->shape.rank_known() && axes[0] == t->shape.rank() - 1;
}

}  // namespace

bool fuse_layer_norm(Graph& g) {
  bool changed = false;
  // 1. The ONNX ops.
  for (auto& n : g.nodes) {
    bool rms = is_op(n, "RMSNormalization");
    if (!rms && !(is_op(n, "LayerNormalization") && !n.has_output(1) && !n.has_output(2))) continue;
    // hodu.LayerNorm normalizes from `axis` to the end, as ONNX does.
    std::vector<Attribute> attrs = {Attribute::make_int("axis", n.get_int("axis", -1)),
                                    Attribute::make_float("epsilon", n.get_float("epsilon", 1e-5f))};
    if (rms) attrs.push_back(Attribute::make_int("rms", 1));
    n.op_type = "LayerNorm";
    n.domain = "hodu";
    n.attributes = std::move(attrs);
    changed = true;
  }
  // 2. Decomposed forms, found from the Sqrt.
  auto uses = use_counts(g);
  auto readers = consumers(g);
  auto only_reader = [&](const std::string& v) { return sole_reader(g, uses, readers, v); };
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& sq = g.nodes[k];
    if (!is_op(sq, "Sqrt") || removed.count(k)) continue;
    int add_eps = g.producer_of(sq.inputs[0]);
    if (add_eps < 0 || !is_op(g.nodes[add_eps], "Add")) continue;
    const Node& ae = g.nodes[add_eps];
    int var_mean = g.producer_of(ae.inputs[0]);
    auto eps = scalar_constant(g, ae.inputs[1]);
    if (!eps) { var_mean = g.producer_of(ae.inputs[1]); eps = scalar_constant(g, ae.inputs[0]); }
    if (var_mean < 0 || !eps || !mean_over_last(g, g.nodes[var_mean])) continue;
    int pw = g.producer_of(g.nodes[var_mean].inputs[0]);
    if (pw < 0 || !is_op(g.nodes[pw], "Pow")) continue;
    auto two = scalar_constant(g, g.nodes[pw].inputs[1]);
    if (!two || *two != 2.0) continue;
    std::string d = g.nodes[pw].inputs[0];  // x - mean (LayerNorm) or x (RMSNorm)
    std::set<size_t> chain = {static_cast<size_t>(pw), static_cast<size_t>(var_mean), static_cast<size_t>(add_eps), k};
    // Normalization step: Div(d, sqrt) or Mul(d, Reciprocal(sqrt)).
    int norm = only_reader(sq.outputs[0]);
    if (norm < 0) continue;
    if (is_op(g.nodes[norm], "Reciprocal")) {
      chain.insert(norm);
      norm = only_reader(g.nodes[norm].outputs[0]);
      if (norm < 0 || !is_op(g.nodes[norm], "Mul") || other_input(g.nodes[norm], g.nodes[*chain.rbegin()].outputs[0]) != d)
        continue;
    } else if (!is_op(g.nodes[norm], "Div") || g.nodes[norm].inputs[0] != d || g.nodes[norm].inputs[1] != sq.outputs[0]) {
      continue;
    }
    chain.insert(norm);
    bool rms = true;
    std::string x = d;
    int sub = g.producer_of(d);
    if (sub >= 0 && is_op(g.nodes[sub], "Sub")) {
      int m = g.producer_of(g.nodes[sub].inputs[1]);
      if (m >= 0 && mean_over_last(g, g.nodes[m]) && g.nodes[m].inputs[0] == g.nodes[sub].inputs[0]) {
        // d is read by Pow and by the normalization step only.
        if (uses[d] != 2 || uses[g.nodes[m].outputs[0]] != 1) continue;
        rms = false;
        x = g.nodes[sub].inputs[0];
        chain.insert(sub);
        chain.insert(m);
      }
    }
    if (rms && uses[d] != 2) continue;
    // Optional scale and bias, constants over the last dim.
    std::string y = g.nodes[norm].outputs[0], scale, bias;
    int mul = only_reader(y);
    if (mul >= 0 && is_op(g.nodes[mul], "Mul") && constant_of(g, other_input(g.nodes[mul], y))) {
      scale = other_input(g.nodes[mul], y);
      chain.insert(mul);
      y = g.nodes[mul].outputs[0];
      int add = only_reader(y);
      if (add >= 0 && is_op(g.nodes[add], "Add") && constant_of(g, other_input(g.nodes[add], y))) {
        bias = other_input(g.nodes[add], y);
        chain.insert(add);
        y = g.nodes[add].outputs[0];
      }
    }
    auto xt = g.type_of(x);
    if (!xt || !xt->is_tensor() || !xt->shape.rank_known() || xt->shape.dims().back().value <= 0) continue;
    if (scale.empty()) {
      // hodu.LayerNorm needs a scale: ones.
      int64_t n = xt->shape.dims().back().value;
      scale = g.unique_name(y + "_ones");
      g.set_initializer(scale, Tensor::from_vector(DType::F32, {n}, std::vector<float>(n, 1.0f)));
    }
    bool overlap = false;
    for (size_t c : chain) overlap |= removed.count(c) > 0;
    if (overlap) continue;
    size_t last = *chain.rbegin();
    Node ln;
    ln.name = g.nodes[last].name;
    ln.op_type = "LayerNorm";
    ln.domain = "hodu";
    ln.inputs = {x, scale};
    if (!bias.empty()) ln.inputs.push_back(bias);
    ln.outputs = {y};
    ln.attributes = {Attribute::make_int("axis", -1), Attribute::make_float("epsilon", static_cast<float>(*eps))};
    if (rms) ln.attributes.push_back(Attribute::make_int("rms", 1));
    chain.erase(last);
    g.nodes[last] = ln;
    removed.insert(chain.begin(), chain.end());
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
