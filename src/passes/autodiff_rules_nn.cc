// Gradient rules of the neural-network ops: softmax, dropout, normalization,
// convolution, pooling and losses.
#include "passes/autodiff_rules.h"

namespace hodu::passes::autodiff {
namespace {

const std::string& in(RuleContext& c, size_t i) { return c.node().inputs[i]; }
const std::string& out(RuleContext& c, size_t i = 0) { return c.node().outputs[i]; }

int64_t softmax_axis(RuleContext& c) {
  int64_t r = c.rank_or_fail(in(c, 0));
  int64_t a = c.node().get_int("axis", -1);
  return a < 0 ? a + r : a;
}

// Softmax / LogSoftmax: hodu.SoftmaxGrad from the output.
void softmax_rule(RuleContext& c) {
  c.give(0, c.emit("SoftmaxGrad", {c.dy(), out(c)},
                   {Attribute::make_int("axis", softmax_axis(c)),
                    Attribute::make_int("log", c.node().op_type == "LogSoftmax" ? 1 : 0)},
                   "hodu"));
}

std::vector<Attribute> copied(const Node& n, std::initializer_list<const char*> names) {
  std::vector<Attribute> out;
  for (const char* name : names)
    if (const Attribute* a = n.attr(name)) out.push_back(*a);
  return out;
}

// Conv and hodu.FusedConv (Y = act(Conv(X, W, B) + Z)): hodu.ConvGrad gives dX, dW, dB at once.
void conv_rule(RuleContext& c) {
  const Node& n = c.node();
  const std::string& y = out(c);
  std::string g = c.dy();
  if (n.domain == "hodu") {
    g = activation_grad(c, g, y, [&] {
      Node plain = n;
      plain.remove_attr("activation");
      plain.remove_attr("activation_params");
      return c.emit("FusedConv", plain.inputs, plain.attributes, "hodu");
    });
    c.set_type(g, *c.type(y));
    c.give_broadcast(3, g, y);
  }
  if (c.rank_or_fail(in(c, 0)) < 3) c.unsupported("a convolution without spatial dims");
  auto attrs = copied(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  auto grads = c.emit_n("ConvGrad", {g, in(c, 0), in(c, 1)}, 3, attrs, "hodu", {c.wants(0), c.wants(1), c.wants(2)});
  c.give(0, grads[0]);
  c.give(1, grads[1]);
  c.give(2, grads[2]);
}

void max_pool_rule(RuleContext& c) {
  if (!c.dy(1).empty()) c.unsupported("a gradient flowing into MaxPool's Indices");
  auto attrs = copied(c.node(), {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  c.give(0, c.emit("MaxPoolGrad", {c.dy(), in(c, 0)}, attrs, "hodu"));
}

void average_pool_rule(RuleContext& c) {
  auto attrs =
      copied(c.node(), {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"});
  c.give(0, c.emit("AveragePoolGrad", {c.dy(), in(c, 0)}, attrs, "hodu"));
}

// The elements each output element of a global pool read: Size(X) / Size(Y).
std::string pooled_count(RuleContext& c) {
  const std::string &x = in(c, 0), &y = out(c);
  auto tx = c.type(x), ty = c.type(y);
  auto nx = tx ? tx->shape.numel() : std::nullopt, ny = ty ? ty->shape.numel() : std::nullopt;
  if (nx && ny && *ny > 0) return c.scalar_like(static_cast<double>(*nx / *ny), x);
  auto to_float = [&](const std::string& v) {
    return c.emit("Cast", {v}, {Attribute::make_int("to", dtype_to_onnx(c.dtype(x)))});
  };
  return c.div(to_float(c.emit("Size", {x})), to_float(c.emit("Size", {y})));
}

void global_average_pool_rule(RuleContext& c) {
  c.give(0, c.emit("Expand", {c.div(c.dy(), pooled_count(c)), c.shape_of(in(c, 0))}));
}

// The gradient shared by the elements equal to the plane's maximum.
void global_max_pool_rule(RuleContext& c) {
  const std::string &x = in(c, 0), &y = out(c);
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < c.rank_or_fail(x); ++d) axes.push_back(d);
  std::string mask = c.emit("Cast", {c.emit("Equal", {x, y})}, {Attribute::make_int("to", dtype_to_onnx(c.dtype(x)))});
  std::string count = c.emit("ReduceSum", {mask, c.ints(axes)}, {Attribute::make_int("keepdims", 1)});
  c.give(0, c.mul(c.dy(), c.div(mask, count)));
}

// BatchNormalization. Training mode (batch statistics): hodu.BatchNormGrad. Inference mode: the
// constant affine map x·(scale/√(var+ε)) + ..., written out.
void batch_norm_rule(RuleContext& c) {
  const Node& n = c.node();
  if (!c.dy(1).empty() || !c.dy(2).empty()) c.unsupported("a gradient flowing into the running statistics");
  if (c.wants(3) || c.wants(4)) c.unsupported("gradients of the mean and variance inputs");
  const std::string& x = in(c, 0);
  std::vector<Attribute> eps = copied(n, {"epsilon"});
  if (n.get_int("training_mode", 0) != 0) {
    auto grads = c.emit_n("BatchNormGrad", {c.dy(), x, in(c, 1)}, 3, eps, "hodu", {c.wants(0), c.wants(1), c.wants(2)});
    for (size_t i = 0; i < 3; ++i) c.give(i, grads[i]);
    return;
  }
  const int64_t r = c.rank_or_fail(x);
  std::vector<int64_t> spread, reduce = {0};  // [C] → [C, 1, ...] over the spatial dims
  for (int64_t d = 2; d < r; ++d) {
    spread.push_back(d - 1);
    reduce.push_back(d);
  }
  auto per_channel = [&](const std::string& v) { return spread.empty() ? v : c.emit("Unsqueeze", {v, c.ints(spread)}); };
  std::string g = c.dy();
  std::string inv = c.emit("Reciprocal", {c.emit("Sqrt", {c.add(in(c, 4), c.scalar_like(n.get_float("epsilon", 1e-5f), x))})});
  if (c.wants(0)) c.give(0, c.mul(g, per_channel(c.mul(in(c, 1), inv))));
  const std::vector<Attribute> drop = {Attribute::make_int("keepdims", 0)};
  if (c.wants(1)) {
    std::string xhat = c.mul(c.sub(x, per_channel(in(c, 3))), per_channel(inv));
    c.give(1, c.emit("ReduceSum", {c.mul(g, xhat), c.ints(reduce)}, drop));
  }
  if (c.wants(2)) c.give(2, c.emit("ReduceSum", {g, c.ints(reduce)}, drop));
}

// LayerNormalization, RMSNormalization and hodu.LayerNorm: hodu.LayerNormGrad.
void layer_norm_rule(RuleContext& c) {
  const Node& n = c.node();
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (!c.dy(o).empty()) c.unsupported("a gradient flowing into the saved statistics");
  const bool rms = n.op_type == "RMSNormalization" || n.get_int("rms", 0) != 0;
  const std::string& x = in(c, 0);
  int64_t r = c.rank_or_fail(x), axis = n.get_int("axis", -1);
  if (axis < 0) axis += r;
  // The kernel reads a scale of the normalized dims' size; one broadcast from fewer dims is expanded.
  const auto tx = c.type(x);
  const std::vector<Dim>& xd = tx->shape.dims();
  const ValueType normalized = ValueType::tensor(c.dtype(x), Shape(std::vector<Dim>(xd.begin() + axis, xd.end())));
  std::string scale = in(c, 1);
  auto ts = c.type(scale);
  if (!ts || !ts->shape.rank_known() || ts->shape.rank() != r - axis) {
    std::string dims = c.emit("Slice", {c.shape_of(x), c.ints({axis}), c.ints({r})});
    scale = c.emit("Expand", {scale, dims});
    c.set_type(scale, normalized);
  }
  std::vector<Attribute> attrs = {Attribute::make_int("axis", axis),
                                  Attribute::make_float("epsilon", n.get_float("epsilon", 1e-5f)),
                                  Attribute::make_int("rms", rms ? 1 : 0)};
  auto grads = c.emit_n("LayerNormGrad", {c.dy(), x, scale}, 3, attrs, "hodu", {c.wants(0), c.wants(1), c.wants(2)});
  c.give(0, grads[0]);
  if (c.wants(1)) c.give(1, scale == in(c, 1) ? grads[1] : c.sum_to(grads[1], scale, in(c, 1)));
  if (c.wants(2)) {  // hodu.LayerNorm with rms=1 may have a bias too
    std::string db = grads[2];
    auto tb = c.type(in(c, 2));
    if (!tb || !tb->shape.rank_known() || tb->shape.rank() != r - axis) {
      c.set_type(db, normalized);
      db = c.sum_to(db, db, in(c, 2));  // a bias broadcast from fewer dims
    }
    c.give(2, db);
  }
}

std::vector<Attribute> loss_attrs(const Node& n) { return copied(n, {"ignore_index", "reduction"}); }

// SoftmaxCrossEntropyLoss(scores, labels[, weights]) → loss[, log_prob].
void softmax_cross_entropy_rule(RuleContext& c) {
  const Node& n = c.node();
  if (c.wants(2)) c.unsupported("the gradient of the class weights");
  std::string g = c.dy(0), glp = c.dy(1);
  std::string log_prob = c.forward_output(1);
  std::string d;
  if (!g.empty()) {
    std::vector<std::string> ins = {g, log_prob, in(c, 1)};
    if (n.has_input(2)) ins.push_back(in(c, 2));
    d = c.emit("SoftmaxCrossEntropyLossGrad", ins, loss_attrs(n), "hodu");
  }
  if (!glp.empty()) {
    std::string e = c.emit("SoftmaxGrad", {glp, log_prob}, {Attribute::make_int("axis", 1), Attribute::make_int("log", 1)}, "hodu");
    d = d.empty() ? e : c.add(d, e);
  }
  c.give(0, d);
}

void nll_rule(RuleContext& c) {
  const Node& n = c.node();
  if (c.wants(2)) c.unsupported("the gradient of the class weights");
  std::vector<std::string> ins = {c.dy(), in(c, 0), in(c, 1)};
  if (n.has_input(2)) ins.push_back(in(c, 2));
  c.give(0, c.emit("NegativeLogLikelihoodLossGrad", ins, loss_attrs(n), "hodu"));
}

// Dropout in training mode: dx = dy · mask / (1 − ratio); in inference mode the identity.
void dropout_rule(RuleContext& c) {
  const Node& n = c.node();
  std::string g = c.dy();
  const Tensor* training = n.has_input(2) ? c.constant(in(c, 2)) : nullptr;
  if (!n.has_input(2) || (training && training->numel() == 1 && training->get_double(0) == 0)) return c.give(0, g);
  std::string scale;
  const Tensor* ratio = n.has_input(1) ? c.constant(in(c, 1)) : nullptr;
  if (!n.has_input(1) || ratio) {
    double r = ratio ? ratio->get_double(0) : 0.5;
    if (r >= 1) return c.give(0, c.zeros_like(in(c, 0)));
    scale = c.scalar_like(1 / (1 - r), g);
  } else {
    std::string rt = c.emit("Cast", {in(c, 1)}, {Attribute::make_int("to", dtype_to_onnx(c.dtype(g)))});
    scale = c.div(c.scalar_like(1, g), c.sub(c.scalar_like(1, g), rt));
  }
  std::string mask = c.emit("Cast", {c.forward_output(1)}, {Attribute::make_int("to", dtype_to_onnx(c.dtype(g)))});
  std::string dx = c.mul(c.mul(g, mask), scale);
  if (!training) dx = c.emit("Where", {in(c, 2), dx, g});  // training mode decided at run time
  c.give(0, dx);
}

}  // namespace

void add_nn_rules(RuleTable& t) {
  t[{"", "Softmax"}] = softmax_rule;
  t[{"", "LogSoftmax"}] = softmax_rule;
  t[{"", "Dropout"}] = dropout_rule;
  t[{"", "Conv"}] = conv_rule;
  t[{"hodu", "FusedConv"}] = conv_rule;
  t[{"", "MaxPool"}] = max_pool_rule;
  t[{"", "AveragePool"}] = average_pool_rule;
  t[{"", "GlobalAveragePool"}] = global_average_pool_rule;
  t[{"", "GlobalMaxPool"}] = global_max_pool_rule;
  t[{"", "BatchNormalization"}] = batch_norm_rule;
  t[{"", "LayerNormalization"}] = layer_norm_rule;
  t[{"", "RMSNormalization"}] = layer_norm_rule;
  t[{"hodu", "LayerNorm"}] = layer_norm_rule;
  t[{"", "SoftmaxCrossEntropyLoss"}] = softmax_cross_entropy_rule;
  t[{"", "NegativeLogLikelihoodLoss"}] = nll_rule;
}

}  // namespace hodu::passes::autodiff
