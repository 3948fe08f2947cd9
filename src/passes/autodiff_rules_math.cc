// Gradient rules of arithmetic, unary math and activations. Broadcasting
// binary ops hand each operand the output's gradient summed back to its shape.
// Where a derivative is a function of the output (Exp, Tanh, Sigmoid, Sqrt)
// the rule reads the output, so nothing is recomputed.
#include <cmath>

#include "passes/autodiff_rules.h"

namespace hodu::passes::autodiff {
namespace {

const std::string& in(RuleContext& c, size_t i) { return c.node().inputs[i]; }
const std::string& out(RuleContext& c) { return c.node().outputs[0]; }

// Where(cond, dy, 0).
std::string masked(RuleContext& c, const std::string& cond, const std::string& dy) {
  return c.emit("Where", {cond, dy, c.scalar_like(0, dy)});
}

void identity_rule(RuleContext& c) { c.give(0, c.dy()); }

void add_rule(RuleContext& c) {
  std::string g = c.dy();
  c.give_broadcast(0, g, out(c));
  c.give_broadcast(1, g, out(c));
}

void sub_rule(RuleContext& c) {
  std::string g = c.dy();
  c.give_broadcast(0, g, out(c));
  if (c.wants(1)) c.give_broadcast(1, c.neg(g), out(c));
}

void sum_rule(RuleContext& c) {
  std::string g = c.dy();
  for (size_t i = 0; i < c.node().inputs.size(); ++i) c.give_broadcast(i, g, out(c));
}

// Mean of n inputs: each gets dy / n, summed to its shape.
void mean_rule(RuleContext& c) {
  std::string g = c.div(c.dy(), c.scalar_like(static_cast<double>(c.node().inputs.size()), c.dy()));
  for (size_t i = 0; i < c.node().inputs.size(); ++i) c.give_broadcast(i, g, out(c));
}

void mul_rule(RuleContext& c) {
  // x * x gets both contributions (by value name): 2·g·x.
  std::string g = c.dy();
  if (c.wants(0)) c.give_broadcast(0, c.mul(g, in(c, 1)), out(c));
  if (c.wants(1)) c.give_broadcast(1, c.mul(g, in(c, 0)), out(c));
}

void div_rule(RuleContext& c) {
  std::string g = c.dy();
  if (c.wants(0)) c.give_broadcast(0, c.div(g, in(c, 1)), out(c));
  if (c.wants(1)) c.give_broadcast(1, c.neg(c.mul(g, c.div(out(c), in(c, 1)))), out(c));  // -g·a/b² = -g·y/b
}

void neg_rule(RuleContext& c) { c.give(0, c.neg(c.dy())); }

void pow_rule(RuleContext& c) {
  std::string g = c.dy();
  const std::string &a = in(c, 0), &p = in(c, 1);
  if (c.wants(0)) {
    const Tensor* pc = c.constant(p);
    std::string da;
    if (pc && pc->numel() == 1) {
      double e = pc->get_double(0);
      if (e == 0) da = "";
      else if (e == 1) da = g;
      else if (e == 2) da = c.mul(g, c.mul(a, c.scalar_like(2, a)));
      else da = c.mul(g, c.mul(c.scalar_like(e, a), c.emit("Pow", {a, c.scalar_like(e - 1, a)})));
    } else {
      std::string pm1 = c.sub(p, c.scalar_like(1, p));
      da = c.mul(g, c.mul(p, c.emit("Pow", {a, pm1})));
    }
    if (!da.empty()) c.give_broadcast(0, da, out(c));
  }
  if (c.wants(1)) c.give_broadcast(1, c.mul(g, c.mul(out(c), c.emit("Log", {a}))), out(c));
}

void sqrt_rule(RuleContext& c) { c.give(0, c.div(c.dy(), c.mul(out(c), c.scalar_like(2, out(c))))); }
void exp_rule(RuleContext& c) { c.give(0, c.mul(c.dy(), out(c))); }
void log_rule(RuleContext& c) { c.give(0, c.div(c.dy(), in(c, 0))); }
void reciprocal_rule(RuleContext& c) { c.give(0, c.neg(c.mul(c.dy(), c.mul(out(c), out(c))))); }
void abs_rule(RuleContext& c) { c.give(0, c.mul(c.dy(), c.emit("Sign", {in(c, 0)}))); }

void tanh_rule(RuleContext& c) {
  const std::string& y = out(c);
  c.give(0, c.mul(c.dy(), c.sub(c.scalar_like(1, y), c.mul(y, y))));
}

void sigmoid_rule(RuleContext& c) {
  const std::string& y = out(c);
  c.give(0, c.mul(c.dy(), c.mul(y, c.sub(c.scalar_like(1, y), y))));
}

// hodu.ActivationGrad(dY, v): dY · f'(v). Relu reads its output (relu'(x) = [y > 0] = relu'(y)),
// so a Conv or product before it can still take it as a fused activation.
std::string activation_grad_op(RuleContext& c, const std::string& g, const std::string& v, const std::string& act,
                               std::vector<float> params = {}) {
  std::vector<Attribute> attrs = {Attribute::make_string("activation", act)};
  if (!params.empty()) attrs.push_back(Attribute::make_floats("activation_params", std::move(params)));
  return c.emit("ActivationGrad", {g, v}, std::move(attrs), "hodu");
}

void relu_rule(RuleContext& c) { c.give(0, activation_grad_op(c, c.dy(), out(c), "Relu")); }

void leaky_relu_rule(RuleContext& c) {
  c.give(0, activation_grad_op(c, c.dy(), in(c, 0), "LeakyRelu", {c.node().get_float("alpha", 0.01f)}));
}

void elu_rule(RuleContext& c) {
  c.give(0, activation_grad_op(c, c.dy(), in(c, 0), "Elu", {c.node().get_float("alpha", 1.f)}));
}

void hard_sigmoid_rule(RuleContext& c) {
  c.give(0, activation_grad_op(c, c.dy(), in(c, 0), "HardSigmoid",
                               {c.node().get_float("alpha", 0.2f), c.node().get_float("beta", 0.5f)}));
}

void hard_swish_rule(RuleContext& c) { c.give(0, activation_grad_op(c, c.dy(), in(c, 0), "HardSwish")); }

void sin_rule(RuleContext& c) { c.give(0, c.mul(c.dy(), c.emit("Cos", {in(c, 0)}))); }
void cos_rule(RuleContext& c) { c.give(0, c.neg(c.mul(c.dy(), c.emit("Sin", {in(c, 0)})))); }

// Floor, Ceil, Round, Sign: piecewise constant, a zero gradient (as PyTorch gives).
void zero_rule(RuleContext&) {}

void erf_rule(RuleContext& c) {
  const std::string& x = in(c, 0);
  std::string e = c.emit("Exp", {c.neg(c.mul(x, x))});
  c.give(0, c.mul(c.dy(), c.mul(e, c.scalar_like(2 / std::sqrt(M_PI), x))));
}

void softplus_rule(RuleContext& c) { c.give(0, activation_grad_op(c, c.dy(), in(c, 0), "Softplus")); }

// Clip: the gradient passes where min <= x <= max (PyTorch's clamp).
void clip_rule(RuleContext& c) {
  const std::string& x = in(c, 0);
  std::string cond;
  if (c.node().has_input(1)) cond = c.emit("GreaterOrEqual", {x, in(c, 1)});
  if (c.node().has_input(2)) {
    std::string le = c.emit("LessOrEqual", {x, in(c, 2)});
    cond = cond.empty() ? le : c.emit("And", {cond, le});
  }
  c.give(0, cond.empty() ? c.dy() : masked(c, cond, c.dy()));
  if (c.wants(1) || c.wants(2)) c.unsupported("gradients of Clip's bounds are not supported");
}

// Max/Min of two tensors: the gradient goes to the larger (smaller) operand, half to each on a tie.
void minmax_rule(RuleContext& c) {
  if (c.node().inputs.size() != 2) c.unsupported("Max/Min of other than two inputs");
  const std::string &a = in(c, 0), &b = in(c, 1), &y = out(c);
  const char* better = c.node().op_type == "Max" ? "Greater" : "Less";
  std::string g = c.dy();
  std::string half = c.mul(c.emit("Where", {c.emit("Equal", {a, b}), c.scalar_like(0.5, g), c.scalar_like(0, g)}), g);
  auto share = [&](const std::string& self, const std::string& other) {
    return c.emit("Where", {c.emit(better, {self, other}), g, half});
  };
  if (c.wants(0)) c.give_broadcast(0, share(a, b), y);
  if (c.wants(1)) c.give_broadcast(1, share(b, a), y);
}

void where_rule(RuleContext& c) {
  std::string g = c.dy();
  const std::string &cond = in(c, 0), &y = out(c);
  std::string zero = c.scalar_like(0, g);
  if (c.wants(1)) c.give_broadcast(1, c.emit("Where", {cond, g, zero}), y);
  if (c.wants(2)) c.give_broadcast(2, c.emit("Where", {cond, zero, g}), y);
}

// ONNX Gelu (opset 20) and hodu.Gelu (Gelu(X + bias)).
void gelu_rule(RuleContext& c) {
  const Node& n = c.node();
  std::string x = in(c, 0);
  const bool biased = n.domain == "hodu" && n.has_input(1);
  if (biased) {
    x = c.add(x, in(c, 1));
    c.set_type(x, *c.type(out(c)));
  }
  const std::string approx = n.get_string("approximate", "none");
  if (approx != "none" && approx != "tanh") c.unsupported("Gelu approximate='" + approx + "'");
  std::string dx = activation_grad_op(c, c.dy(), x, approx == "tanh" ? "GeluTanh" : "Gelu");
  c.give(0, dx);
  if (biased) c.give_broadcast(1, dx, out(c));
}

}  // namespace

std::string activation_grad(RuleContext& c, const std::string& g, const std::string& y,
                            const std::function<std::string()>& pre) {
  const std::string act = c.node().get_string("activation", "");
  const std::vector<float> p = c.node().get_floats("activation_params");
  auto k = [&](double v) { return c.scalar_like(v, y); };
  if (act.empty()) return g;
  // Relu and LeakyRelu with a positive slope: the sign of the output is that of the input.
  if (act == "Relu" || (act == "LeakyRelu" && (p.empty() || p[0] > 0))) return activation_grad_op(c, g, y, act, p);
  if (act == "Sigmoid") return c.mul(g, c.mul(y, c.sub(k(1), y)));
  if (act == "Tanh") return c.mul(g, c.sub(k(1), c.mul(y, y)));
  for (const char* a : {"LeakyRelu", "Gelu", "GeluTanh", "Silu", "Clip", "HardSigmoid", "HardSwish", "Elu", "Softplus"})
    if (act == a) return activation_grad_op(c, g, pre(), act, p);
  c.unsupported("activation '" + act + "'");
}

void add_math_rules(RuleTable& t) {
  t[{"", "Identity"}] = identity_rule;
  t[{"", "Add"}] = add_rule;
  t[{"", "Sub"}] = sub_rule;
  t[{"", "Sum"}] = sum_rule;
  t[{"", "Mean"}] = mean_rule;
  t[{"", "Mul"}] = mul_rule;
  t[{"", "Div"}] = div_rule;
  t[{"", "Neg"}] = neg_rule;
  t[{"", "Pow"}] = pow_rule;
  t[{"", "Sqrt"}] = sqrt_rule;
  t[{"", "Exp"}] = exp_rule;
  t[{"", "Log"}] = log_rule;
  t[{"", "Reciprocal"}] = reciprocal_rule;
  t[{"", "Abs"}] = abs_rule;
  t[{"", "Tanh"}] = tanh_rule;
  t[{"", "Sigmoid"}] = sigmoid_rule;
  t[{"", "Relu"}] = relu_rule;
  t[{"", "LeakyRelu"}] = leaky_relu_rule;
  t[{"", "Erf"}] = erf_rule;
  t[{"", "Softplus"}] = softplus_rule;
  t[{"", "Clip"}] = clip_rule;
  t[{"", "Max"}] = minmax_rule;
  t[{"", "Min"}] = minmax_rule;
  t[{"", "Where"}] = where_rule;
  t[{"", "Elu"}] = elu_rule;
  t[{"", "Sin"}] = sin_rule;
  t[{"", "Cos"}] = cos_rule;
  for (const char* op : {"Floor", "Ceil", "Round", "Sign"}) t[{"", op}] = zero_rule;
  t[{"", "HardSigmoid"}] = hard_sigmoid_rule;
  t[{"", "HardSwish"}] = hard_swish_rule;
  t[{"", "Gelu"}] = gelu_rule;
  t[{"hodu", "Gelu"}] = gelu_rule;
}

}  // namespace hodu::passes::autodiff
