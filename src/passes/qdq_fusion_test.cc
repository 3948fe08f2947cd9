// fuse_qdq: a QDQ conv (DequantizeLinear on the input, the s8 weights and the int32 bias, a Relu,
// a QuantizeLinear) becomes QLinearConv → Max(·, zero point) whose integer output the
// interpreter computes within one quantum of the QDQ graph's; a DQ moves below a Reshape; what
// does not match (a float weight) stays.
#include <gtest/gtest.h>

#include <random>

#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/passes.h"
#include "passes/test_graph.h"

namespace hodu::passes {
namespace {

using hodu::testing::count_op;
using hodu::testing::test_node;

Model qdq_conv(bool quantized_weights) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  const int64_t C = 4, M = 6, H = 7;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape::from({1, C, H, H})), ""});
  g.set_initializer("xs", Tensor::scalar<float>(DType::F32, 0.05f));
  g.set_initializer("xz", Tensor::scalar<uint8_t>(DType::U8, 120));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(-127, 127);
  std::vector<int8_t> w(static_cast<size_t>(M * C * 9));
  for (auto& v : w) v = static_cast<int8_t>(d(rng));
  std::vector<float> ws(M), bs(M), wf(w.size());
  std::vector<int32_t> bq(M);
  for (int64_t m2 = 0; m2 < M; ++m2) {
    ws[m2] = 0.01f + 0.001f * static_cast<float>(m2);
    bs[m2] = 0.05f * ws[m2];
    bq[m2] = static_cast<int32_t>(m2 * 100 - 300);
  }
  for (size_t i = 0; i < w.size(); ++i) wf[i] = static_cast<float>(w[i]) * ws[i / (C * 9)];
  g.set_initializer("ws", Tensor::from_vector(DType::F32, {M}, ws));
  g.set_initializer("wz", Tensor::from_vector(DType::I8, {M}, std::vector<int8_t>(M, 0)));
  g.set_initializer("bq", Tensor::from_vector(DType::I32, {M}, bq));
  g.set_initializer("bs", Tensor::from_vector(DType::F32, {M}, bs));
  g.set_initializer("bz", Tensor::from_vector(DType::I32, {M}, std::vector<int32_t>(M, 0)));
  g.set_initializer("ys", Tensor::scalar<float>(DType::F32, 0.2f));
  g.set_initializer("yz", Tensor::scalar<uint8_t>(DType::U8, 30));
  g.set_initializer("flat", Tensor::from_vector<int64_t>(DType::I64, {2}, {1, C * H * H}));
  g.nodes.push_back(test_node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"}));
  g.nodes.push_back(test_node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"}));
  if (quantized_weights) {
    g.set_initializer("w", Tensor::from_vector(DType::I8, {M, C, 3, 3}, w));
    g.nodes.push_back(test_node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"}, {Attribute::make_int("axis", 0)}));
  } else {
    g.set_initializer("wd", Tensor::from_vector(DType::F32, {M, C, 3, 3}, wf));
  }
  g.nodes.push_back(test_node("DequantizeLinear", {"bq", "bs", "bz"}, {"bd"}, {Attribute::make_int("axis", 0)}));
  g.nodes.push_back(test_node("Conv", {"xd", "wd", "bd"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})}));
  g.nodes.push_back(test_node("Relu", {"c"}, {"r"}));
  g.nodes.push_back(test_node("QuantizeLinear", {"r", "ys", "yz"}, {"y"}));
  g.nodes.push_back(test_node("Reshape", {"xd", "flat"}, {"xflat"}));
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"xflat", {}, ""});
  infer_types(g);
  return m;
}

TEST(QdqFusion, ConvWithReluBecomesQLinearConvAndMax) {
  Model m = qdq_conv(true);
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0, 2);
  std::vector<float> x(4 * 49);
  for (auto& v : x) v = d(rng);
  std::map<std::string, RuntimeValue> feeds = {{"x", Tensor::from_vector(DType::F32, {1, 4, 7, 7}, x)}};
  auto want = interp::Interpreter(m).run(feeds);
  Model f = m;
  EXPECT_TRUE(fuse_qdq(f.graph));
  EXPECT_EQ(count_op(f.graph, "QLinearConv"), 1);
  EXPECT_EQ(count_op(f.graph, "Max"), 1);
  EXPECT_EQ(count_op(f.graph, "Conv") + count_op(f.graph, "Relu"), 0);
  // The Reshape now reads the quantized input, a DequantizeLinear after it.
  const int reshape = f.graph.producer_of("xflat");
  ASSERT_GE(reshape, 0);
  EXPECT_EQ(f.graph.nodes[reshape].op_type, "DequantizeLinear");
  auto got = interp::Interpreter(f).run(feeds);
  ASSERT_EQ(got.size(), 2u);
  auto a = got[0].tensor.to_int64s(), b = want[0].tensor.to_int64s();
  ASSERT_EQ(a.size(), b.size());
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max<int64_t>(worst, std::abs(a[i] - b[i]));
  EXPECT_LE(worst, 1);
  EXPECT_EQ(got[1].tensor.to_doubles(), want[1].tensor.to_doubles());
}

TEST(QdqFusion, FloatWeightsStay) {
  Model m = qdq_conv(false);
  Model f = m;
  fuse_qdq(f.graph);
  EXPECT_EQ(count_op(f.graph, "QLinearConv"), 0);
  EXPECT_EQ(count_op(f.graph, "Conv"), 1);
}

}  // namespace
}  // namespace hodu::passes
