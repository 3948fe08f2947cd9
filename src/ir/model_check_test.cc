#include "ir/model_check.h"

#include <gtest/gtest.h>

namespace hodu {
namespace {

Node node(const std::string& name, const std::string& op, std::vector<std::string> ins, std::string out) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = {std::move(out)};
  return n;
}

TEST(ModelCheck, ListsEveryProblemNotJustTheFirst) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"a", ValueType::tensor(DType::F32, Shape{2, 3}), ""});
  g.inputs.push_back({"b", ValueType::tensor(DType::F32, Shape{4, 5}), ""});
  g.inputs.push_back({"k", ValueType::tensor(DType::I64, Shape{2, 3}), ""});
  g.nodes.push_back(node("mm", "MatMul", {"a", "b"}, "p"));    // inner dims 3 vs 4
  g.nodes.push_back(node("add", "Add", {"a", "k"}, "q"));      // float + int64
  g.nodes.push_back(node("relu", "Relu", {"q"}, "r"));         // fine on its own
  g.outputs.push_back({"p", {}, ""});
  g.outputs.push_back({"r", {}, ""});
  auto problems = find_model_problems(m);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].node, "mm");
  EXPECT_EQ(problems[0].op, "MatMul");
  EXPECT_NE(problems[0].message.find("inner dimensions"), std::string::npos) << problems[0].message;
  EXPECT_EQ(problems[1].node, "add");
  EXPECT_NE(problems[1].message.find("same type"), std::string::npos) << problems[1].message;
}

TEST(ModelCheck, AValidModelHasNone) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("batch"), 3}), ""});
  g.nodes.push_back(node("relu", "Relu", {"x"}, "y"));
  g.outputs.push_back({"y", {}, ""});
  EXPECT_TRUE(find_model_problems(m).empty());
}

// A Conv on a 2-D input (no spatial dims): every engine refuses it when it runs, so inference
// must flag it (it returned an unknown shape and hodu info --check said "none found").
TEST(ModelCheck, ConvOnARankTwoInput) {
  Model m;
  m.opset_imports[""] = 13;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{2, 3}), ""});
  g.set_initializer("w", Tensor::zeros(DType::F32, {2, 3, 3}));
  g.nodes.push_back(node("conv", "Conv", {"x", "w"}, "y"));
  g.outputs.push_back({"y", {}, ""});
  auto problems = find_model_problems(m);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].node, "conv");
  EXPECT_NE(problems[0].message.find("rank >= 3"), std::string::npos) << problems[0].message;
}

TEST(ModelCheck, ImpossibleSizes) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{int64_t{1} << 40, int64_t{1} << 40}), ""});
  g.nodes.push_back(node("relu", "Relu", {"x"}, "y"));
  g.outputs.push_back({"y", {}, ""});
  auto problems = find_model_problems(m);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("2^62"), std::string::npos);
}

}  // namespace
}  // namespace hodu
