// Cutting a model in two: the head then the tail compute what the whole model
// does, the tail reads graph inputs the head does not, a graph output computed
// in the head stays the head's, and bad cut points are refused with a reason.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/edge/model_split.h"
#include "ir/hoduscript.h"
#include "runtime/session.h"

namespace hodu::edge {
namespace {

// a = Relu(x); b = a @ w; y = b + x (the tail reads x too); a is also a graph output.
constexpr const char* kModel = R"(hodu 1
model ir 8 opset 17
graph main(%x: f32[batch, 2]) -> (%y: f32[batch, 2], %a: f32[batch, 2]) {
  init %w = f32[2, 2] [1, 2, 3, 4]
  %a = Relu(%x)
  %b = MatMul(%a, %w)
  %y = Add(%b, %x)
}
)";

TEST(ModelSplit, HeadThenTailIsTheWholeModel) {
  Model m = parse_hoduscript(kModel, "split.hodu");
  ModelSplit s = split_model(m, "a");
  EXPECT_EQ(s.sent, (std::vector<std::string>{"a"}));
  ASSERT_EQ(s.head.graph.nodes.size(), 1u);
  EXPECT_EQ(s.head.graph.nodes[0].op_type, "Relu");
  ASSERT_EQ(s.head.graph.outputs.size(), 1u);  // a: sent, and a graph output
  EXPECT_EQ(s.head.graph.outputs[0].name, "a");
  EXPECT_EQ(s.head.graph.outputs[0].type.to_string(), "f32[batch, 2]");
  EXPECT_TRUE(s.head.graph.initializers.empty());
  ASSERT_EQ(s.tail.graph.inputs.size(), 2u);
  EXPECT_EQ(s.tail.graph.inputs[0].name, "a");
  EXPECT_EQ(s.tail.graph.inputs[1].name, "x");
  ASSERT_EQ(s.tail.graph.outputs.size(), 1u);
  EXPECT_EQ(s.tail.graph.outputs[0].name, "y");
  ASSERT_EQ(s.tail.graph.initializers.size(), 1u);

  Tensor x = Tensor::from_vector<float>(DType::F32, {2, 2}, {1, -2, 3, 4});
  auto whole = Session::from_model(m)->run({{"x", RuntimeValue(x)}});
  auto head = Session::from_model(s.head)->run({{"x", RuntimeValue(x)}});
  auto tail = Session::from_model(s.tail)->run({{"a", head[0].value}, {"x", RuntimeValue(x)}});
  EXPECT_TRUE(tensors_bitwise_equal(tail[0].value.tensor, whole[0].value.tensor));  // y
  EXPECT_TRUE(tensors_bitwise_equal(head[0].value.tensor, whole[1].value.tensor));  // a
}

// The tail's If reads the head's value only inside its branches.
constexpr const char* kIfModel = R"(hodu 1
model ir 8 opset 17
graph main(%x: f32[2], %c: bool[]) -> (%y: f32[2]) {
  %a = Relu(%x)
  %y = If(%c) {then_branch: graph then() -> (%t: f32[2]) {
    %t = Neg(%a)
  }, else_branch: graph else() -> (%e: f32[2]) {
    %e = Abs(%a)
  }}
}
)";

TEST(ModelSplit, ValuesReadInsideSubgraphsCross) {
  Model m = parse_hoduscript(kIfModel, "if.hodu");
  ModelSplit s = split_model(m, "a");
  EXPECT_EQ(s.sent, (std::vector<std::string>{"a"}));
  ASSERT_EQ(s.tail.graph.inputs.size(), 2u);
  EXPECT_EQ(s.tail.graph.inputs[1].name, "c");
  Tensor x = Tensor::from_vector<float>(DType::F32, {2}, {-1, 2});
  for (bool c : {true, false}) {
    RuntimeValue cv(Tensor::scalar<uint8_t>(DType::Bool, c ? 1 : 0));
    auto whole = Session::from_model(m)->run({{"x", RuntimeValue(x)}, {"c", cv}});
    auto head = Session::from_model(s.head)->run({{"x", RuntimeValue(x)}});
    auto tail = Session::from_model(s.tail)->run({{"a", head[0].value}, {"c", cv}});
    EXPECT_TRUE(tensors_bitwise_equal(tail[0].value.tensor, whole[0].value.tensor)) << c;
  }
}

TEST(ModelSplit, BadCutPointsAreRefused) {
  Model m = parse_hoduscript(kModel, "split.hodu");
  auto message = [&](const std::string& v) {
    try {
      split_model(m, v);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("x").find("graph input"), std::string::npos);
  EXPECT_NE(message("nope").find("no node produces"), std::string::npos);
  EXPECT_NE(message("y").find("no node after it reads it"), std::string::npos);
}

}  // namespace
}  // namespace hodu::edge
