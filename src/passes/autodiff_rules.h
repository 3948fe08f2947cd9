// The inside of the autodiff pass (passes/autodiff.h): the state a gradient
// rule works with, and the rule table. A rule reads one forward node and the
// gradients of its outputs, emits backward nodes into the same graph and hands
// each wanted input its gradient (one file of rules per op family:
// autodiff_rules_*.cc).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::passes::autodiff {

class Differentiator;

// What a rule sees while it differentiates one node.
class RuleContext {
 public:
  // `index`: the node's position in the graph (rules may give it an output it omitted).
  RuleContext(Differentiator& d, const Node& node, size_t index = ~size_t{0}) : d_(d), node_(node), index_(index) {}
  const Node& node() const { return node_; }
  // dL/d(output i): a value of that output's shape, or "" when no gradient reaches output i.
  std::string dy(size_t i = 0) const;
  // Input i is a float tensor that depends on a wrt value (its gradient is wanted).
  bool wants(size_t i) const;
  // Hands input i a gradient of exactly its shape (summed with other contributions).
  void give(size_t i, const std::string& grad);
  // Hands input i a gradient of the shape of `like` (a value input i was broadcast to):
  // summed over the broadcast dims back to input i's shape.
  void give_broadcast(size_t i, const std::string& grad, const std::string& like);

  // Output i of the forward node, named now if the node omitted it (Dropout's mask).
  std::string forward_output(size_t i);

  // Emits a node; returns its first output (a new value).
  std::string emit(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs = {},
                   const std::string& domain = "");
  // Emits a node with `n_outputs` outputs ("" in `skip` positions are left omitted).
  std::vector<std::string> emit_n(const std::string& op, std::vector<std::string> inputs, size_t n_outputs,
                                  std::vector<Attribute> attrs = {}, const std::string& domain = "",
                                  std::vector<bool> wanted = {});
  // Scalar constant of `dt` (the value's dtype when a value name is given instead).
  std::string scalar(double v, DType dt);
  std::string scalar_like(double v, const std::string& value);
  std::string ints(const std::vector<int64_t>& v);  // a 1-D int64 constant
  std::string shape_of(const std::string& value);   // Shape(value), emitted once per value
  std::string zeros_like(const std::string& value);
  // A constant's value (initializer, not an overridable input), or null.
  const Tensor* constant(const std::string& value) const;
  // The type of a forward value (or of a gradient: its value's type; or one set_type gave).
  std::optional<ValueType> type(const std::string& value) const;
  // Records the type of a value a rule made, for later sum_to / reshape_like on it.
  void set_type(const std::string& value, ValueType t);
  DType dtype(const std::string& value) const;  // Unsupported when unknown
  std::optional<int64_t> rank(const std::string& value) const;
  int64_t rank_or_fail(const std::string& value) const;
  // A dim of a value when it is a known number.
  std::optional<int64_t> static_dim(const std::string& value, int64_t axis) const;

  // Common gradient shapes.
  std::string mul(const std::string& a, const std::string& b) { return emit("Mul", {a, b}); }
  std::string add(const std::string& a, const std::string& b) { return emit("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) { return emit("Sub", {a, b}); }
  std::string div(const std::string& a, const std::string& b) { return emit("Div", {a, b}); }
  std::string neg(const std::string& a) { return emit("Neg", {a}); }
  // Reshape(x, Shape(like)) or to `like`'s static shape.
  std::string reshape_like(const std::string& x, const std::string& like);
  // Sums `grad` (the shape of `like`) over the dims in which `target` was broadcast to `like`.
  std::string sum_to(const std::string& grad, const std::string& like, const std::string& target);

  [[noreturn]] void unsupported(const std::string& why) const;

 private:
  Differentiator& d_;
  const Node& node_;
  size_t index_;
};

using Rule = void (*)(RuleContext&);

// hodu.FusedMatMul(a, b) with transA/transB and alpha: a product whose operands are read
// transposed in place.
std::string product(RuleContext& c, const std::string& a, const std::string& b, bool ta, bool tb, double alpha);

// dL/d(pre) of y = act(pre) for a fused op's activation (attributes activation,
// activation_params) from dL/dy = `g`: from the output `y` where the derivative is a function
// of it (Relu, LeakyRelu, Sigmoid, Tanh), else from `pre()`, which emits the pre-activation
// (hodu.ActivationGrad reads it).
std::string activation_grad(RuleContext& c, const std::string& g, const std::string& y,
                            const std::function<std::string()>& pre);

// (domain, op) → rule; domain "" is ai.onnx.
using RuleTable = std::map<std::pair<std::string, std::string>, Rule>;
const RuleTable& rule_table();

// One registration function per family of rules.
void add_math_rules(RuleTable& t);    // autodiff_rules_math.cc: arithmetic, unary math, activations
void add_linalg_rules(RuleTable& t);  // autodiff_rules_linalg.cc: MatMul, Gemm, fused products
void add_tensor_rules(RuleTable& t);  // autodiff_rules_tensor.cc: shape/layout/indexing, reductions, Cast
void add_nn_rules(RuleTable& t);      // autodiff_rules_nn.cc: softmax, dropout, normalization, conv, pooling, losses
void add_attention_rules(RuleTable& t);  // autodiff_rules_attention.cc: hodu.Attention, ONNX Attention

}  // namespace hodu::passes::autodiff
