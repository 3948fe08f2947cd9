// Conv + BatchNormalization → Conv with scaled weights and shifted bias:
// bn(conv(x, W) + B) = conv(x, W * s) + (B - mean) * s + beta, s = gamma / sqrt(var + eps).
#include <cmath>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {

bool fold_conv_batchnorm(Graph& g) {
  bool changed = false;
  auto uses = use_counts(g);
  std::set<size_t> removed;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& bn = g.nodes[k];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() < 5) continue;
    if (bn.get_int("training_mode", 0) != 0 || bn.has_output(1) || bn.has_output(2)) continue;
    int p = g.producer_of(bn.inputs[0]);
    if (p < 0 || removed.count(p)) continue;
    Node& conv = g.nodes[p];
    if (conv.op_type != "Conv" || !conv.domain.empty() || uses[conv.outputs[0]] != 1 ||
        is_graph_output(g, conv.outputs[0]))
      continue;
    const Tensor* w = constant_of(g, conv.inputs[1]);
    const Tensor* b = conv.has_input(2) ? constant_of(g, conv.inputs[2]) : nullptr;
    const Tensor* gamma = constant_of(g, bn.inputs[1]);
    const Tensor* beta = constant_of(g, bn.inputs[2]);
    const Tensor* mean = constant_of(g, bn.inputs[3]);
    const Tensor* var = constant_of(g, bn.inputs[4]);
    if (!w || (conv.has_input(2) && !b) || !gamma || !beta || !mean || !var) continue;
    if (w->dtype() != DType::F32 || w->rank() < 3) continue;
    int64_t m = w->dim(0);
    if (gamma->numel() != m || beta->numel() != m || mean->numel() != m || var->numel() != m) continue;
    double eps = bn.get_float("epsilon", 1e-5f);
    Tensor nw = w->contiguous().clone();
    Tensor nb = Tensor::empty(DType::F32, {m});
    float* pw = nw.data<float>();
    int64_t per = nw.numel() / m;
    for (int64_t c = 0; c < m; ++c) {
      double s = gamma->get_double(c) / std::sqrt(var->get_double(c) + eps);
      for (int64_t i = 0; i < per; ++i) pw[c * per + i] = static_cast<float>(pw[c * per + i] * s);
      double bias = b ? b->get_double(c) : 0.0;
      nb.data<float>()[c] = static_cast<float>((bias - mean->get_double(c)) * s + beta->get_double(c));
    }
    std::string wn = g.unique_name(conv.inputs[1] + "_bn"), bnn = g.unique_name(bn.outputs[0] + "_bias");
    g.set_initializer(wn, nw);
    g.set_initializer(bnn, nb);
    conv.inputs.resize(3);
    conv.inputs[1] = wn;
    conv.inputs[2] = bnn;
    conv.outputs[0] = bn.outputs[0];
    g.value_types.erase(conv.outputs[0]);
    removed.insert(k);
    changed = true;
  }
  erase_nodes(g, removed);
  return changed;
}

}  // namespace hodu::passes
