// inline_constant_ifs: shape guards (If on a condition the input shapes decide) become the taken
// branch's nodes; names the branch shares with the outer graph are renamed; results unchanged.
#include <gtest/gtest.h>

#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "ir/verifier.h"
#include "passes/passes.h"
#include "passes/test_graph.h"

namespace hodu::passes {
namespace {

using hodu::testing::count_op;
using hodu::testing::test_node;

// y = If(rank(x) == 2) then (x * 2, through an inner If on a constant) else (x + t), where the
// then branch defines "t" too (the outer graph's name for x + 1).
Model guarded_model() {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape({Dim::sym("a"), Dim::sym("b")})), ""});
  g.set_initializer("one", Tensor::scalar<float>(DType::F32, 1));
  g.set_initializer("two", Tensor::scalar<int64_t>(DType::I64, 2));
  g.nodes.push_back(test_node("Add", {"x", "one"}, {"t"}));
  g.nodes.push_back(test_node("Shape", {"x"}, {"s"}));
  g.nodes.push_back(test_node("Size", {"s"}, {"r"}));
  g.nodes.push_back(test_node("Equal", {"r", "two"}, {"c"}));
  auto inner_then = std::make_shared<Graph>(), inner_else = std::make_shared<Graph>();
  inner_then->nodes.push_back(test_node("Mul", {"t", "t"}, {"u"}));  // "t" here is the branch's own
  inner_then->outputs.push_back({"u", {}, ""});
  inner_else->nodes.push_back(test_node("Neg", {"t"}, {"v"}));
  inner_else->outputs.push_back({"v", {}, ""});
  auto then_b = std::make_shared<Graph>(), else_b = std::make_shared<Graph>();
  then_b->set_initializer("k", Tensor::scalar<float>(DType::F32, 2));
  then_b->set_initializer("yes", Tensor::scalar<bool>(DType::Bool, true));
  then_b->nodes.push_back(test_node("Mul", {"x", "k"}, {"t"}));
  then_b->nodes.push_back(test_node("If", {"yes"}, {"w"},
                                    {Attribute::make_graph("then_branch", inner_then),
                                     Attribute::make_graph("else_branch", inner_else)}));
  then_b->outputs.push_back({"w", {}, ""});
  else_b->nodes.push_back(test_node("Add", {"x", "t"}, {"e"}));
  else_b->outputs.push_back({"e", {}, ""});
  g.nodes.push_back(test_node("If", {"c"}, {"y"},
                              {Attribute::make_graph("then_branch", then_b), Attribute::make_graph("else_branch", else_b)}));
  g.nodes.push_back(test_node("Add", {"y", "t"}, {"z"}));  // the outer "t" after the If
  g.outputs.push_back({"z", {}, ""});
  g.outputs.push_back({"y", {}, ""});
  infer_types(g);
  return m;
}

TEST(IfInlining, ShapeGuardsBecomeTheTakenBranch) {
  Model m = guarded_model();
  std::map<std::string, RuntimeValue> feeds = {
      {"x", Tensor::from_vector<float>(DType::F32, {2, 3}, {1, -2, 3, 0.5f, 5, -6})}};
  auto want = interp::Interpreter(m).run(feeds);
  Model o = m;
  optimize(o, {1, {{"x", {2, 3}}}});
  EXPECT_EQ(count_op(o.graph, "If"), 0);
  EXPECT_NO_THROW(verify_model(o));
  auto got = interp::Interpreter(o).run(feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].tensor.to_doubles(), want[i].tensor.to_doubles());
}

TEST(IfInlining, DynamicConditionStays) {
  Model m = guarded_model();
  m.graph.nodes[3].inputs = {"r", "r"};  // Equal(r, r): not folded without shapes either way
  Graph g = m.graph;
  g.nodes.erase(g.nodes.begin() + 1, g.nodes.begin() + 4);
  g.inputs.push_back({"c", ValueType::tensor(DType::Bool, Shape::scalar()), ""});
  EXPECT_FALSE(inline_constant_ifs(g));
  EXPECT_EQ(count_op(g, "If"), 1);
}

}  // namespace
}  // namespace hodu::passes
