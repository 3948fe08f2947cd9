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

// Softmax: dx = y · (dy − Σ dy·y); LogSoftmax: dx = dy − exp(y) · Σ dy (sums over the axis).
void softmax_rule(RuleContext& c) {
  const std::string& y = out(c);
  std::string g = c.dy();
  auto axes = c.ints({softmax_axis(c)});
  const std::vector<Attribute> keep = {Attribute::make_int("keepdims", 1)};
  if (c.node().op_type == "Softmax") {
    std::string s = c.emit("ReduceSum", {c.mul(g, y), axes}, keep);
    c.give(0, c.mul(y, c.sub(g, s)));
  } else {
    std::string s = c.emit("ReduceSum", {g, axes}, keep);
    c.give(0, c.sub(g, c.mul(c.emit("Exp", {y}), s)));
  }
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
}

}  // namespace hodu::passes::autodiff
