// fuse_quantized_lookups: the float ops between DequantizeLinears and a QuantizeLinear become
// byte tables, MaxPool and Concat on the integers — and the interpreter gives the same bits
// before and after, for every byte value; what it cannot prove exact (a pool before a decreasing
// op, a float value read twice) stays as it is.
#include <gtest/gtest.h>

#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/passes.h"
#include "passes/test_graph.h"

namespace hodu::passes {
namespace {

using hodu::testing::count_op;
using hodu::testing::test_node;

Tensor scalar8(DType dt, int v) {
  return dt == DType::U8 ? Tensor::scalar<uint8_t>(dt, static_cast<uint8_t>(v))
                         : Tensor::scalar<int8_t>(dt, static_cast<int8_t>(v));
}

// Every byte value in each of the two inputs [1, 4, 8, 8] (256 values each), the second shifted.
std::map<std::string, RuntimeValue> all_bytes(DType dt) {
  std::vector<uint8_t> a(256), b(256);
  for (int i = 0; i < 256; ++i) {
    a[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    b[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 37 + 11);
  }
  return {{"a", Tensor::from_vector(dt, {1, 4, 8, 8}, a)}, {"b", Tensor::from_vector(dt, {1, 4, 8, 8}, b)}};
}

struct Case {
  DType in = DType::U8, out = DType::U8;
  std::string op_after_pool = "Relu";  // between the MaxPool and the Q
  bool second_reader = false;         // the Relu's output is a graph output too
};

// a → DQ → Relu → MaxPool → <op> ┐
// b → DQ → HardSwish → Mul(0.5) ─┴→ Concat → Q → y
Model fire(const Case& c) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  for (const char* in : {"a", "b"})
    g.inputs.push_back({in, ValueType::tensor(c.in, Shape::from({1, 4, 8, 8})), ""});
  const bool s = c.in == DType::I8;
  g.set_initializer("as", Tensor::scalar<float>(DType::F32, 0.0531f));
  g.set_initializer("az", scalar8(c.in, s ? -2 : 126));
  g.set_initializer("bs", Tensor::scalar<float>(DType::F32, 0.0313f));
  g.set_initializer("bz", scalar8(c.in, s ? 17 : 145));
  g.set_initializer("half", Tensor::scalar<float>(DType::F32, 0.5f));
  g.set_initializer("ys", Tensor::scalar<float>(DType::F32, 0.0268f));
  g.set_initializer("yz", scalar8(c.out, c.out == DType::I8 ? -100 : 3));
  g.nodes.push_back(test_node("DequantizeLinear", {"a", "as", "az"}, {"af"}));
  g.nodes.push_back(test_node("Relu", {"af"}, {"ar"}));
  g.nodes.push_back(test_node("MaxPool", {"ar"}, {"ap"},
                              {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {1, 1}),
                               Attribute::make_ints("pads", {1, 1, 1, 1})}));
  g.nodes.push_back(test_node(c.op_after_pool, {"ap"}, {"aa"}));
  g.nodes.push_back(test_node("DequantizeLinear", {"b", "bs", "bz"}, {"bf"}));
  g.nodes.push_back(test_node("HardSwish", {"bf"}, {"bh"}));
  g.nodes.push_back(test_node("Mul", {"half", "bh"}, {"bm"}));
  g.nodes.push_back(test_node("Concat", {"aa", "bm"}, {"cat"}, {Attribute::make_int("axis", 1)}));
  g.nodes.push_back(test_node("QuantizeLinear", {"cat", "ys", "yz"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  if (c.second_reader) g.outputs.push_back({"ar", {}, ""});
  infer_types(g);
  return m;
}

void expect_same_bits(const Model& before, const Model& after, DType dt) {
  auto feeds = all_bytes(dt);
  auto want = interp::Interpreter(before).run(feeds);
  auto got = interp::Interpreter(after).run(feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tensors_bitwise_equal(got[i].tensor, want[i].tensor)) << "output " << i;
}

TEST(QuantizedLookup, FloatTreeBecomesTablesPoolAndConcatOnIntegers) {
  for (DType in : {DType::U8, DType::I8})
    for (DType out : {DType::U8, DType::I8}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(out)));
      Model m = fire({in, out});
      Model f = m;
      ASSERT_TRUE(fuse_quantized_lookups(f.graph));
      EXPECT_EQ(count_op(f.graph, "LookupTable"), 2);
      EXPECT_EQ(count_op(f.graph, "MaxPool"), 1);
      EXPECT_EQ(count_op(f.graph, "Concat"), 1);
      for (const char* op : {"DequantizeLinear", "QuantizeLinear", "Relu", "HardSwish", "Mul"})
        EXPECT_EQ(count_op(f.graph, op), 0) << op;
      for (const auto& n : f.graph.nodes)
        if (n.op_type == "MaxPool" || n.op_type == "Concat") {
          EXPECT_EQ(f.graph.type_of(n.outputs[0])->dtype, out) << n.op_type;
        }
      expect_same_bits(m, f, in);
    }
}

// After the pool: Neg decreases, so the pool must see the float values; Sigmoid does not.
TEST(QuantizedLookup, PoolMovesOnlyBeforeWhatNeverDecreases) {
  Model neg = fire({DType::U8, DType::U8, "Neg"});
  Model f = neg;
  EXPECT_FALSE(fuse_quantized_lookups(f.graph));
  EXPECT_EQ(count_op(f.graph, "QuantizeLinear"), 1);
  Model sig = fire({DType::U8, DType::U8, "Sigmoid"});
  Model s = sig;
  EXPECT_TRUE(fuse_quantized_lookups(s.graph));
  EXPECT_EQ(count_op(s.graph, "Sigmoid"), 0);
  expect_same_bits(sig, s, DType::U8);
}

TEST(QuantizedLookup, FloatValueReadElsewhereStays) {
  Model m = fire({DType::U8, DType::U8, "Relu", true});
  Model f = m;
  EXPECT_FALSE(fuse_quantized_lookups(f.graph));
  EXPECT_EQ(count_op(f.graph, "LookupTable"), 0);
  expect_same_bits(m, f, DType::U8);
}

// DQ → Q with the same scale and zero point: the integers themselves (an Identity).
TEST(QuantizedLookup, SameQuantizationIsTheIntegersThemselves) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"a", ValueType::tensor(DType::U8, Shape::from({1, 4, 8, 8})), ""});
  g.inputs.push_back({"b", ValueType::tensor(DType::U8, Shape::from({1, 4, 8, 8})), ""});
  g.set_initializer("s", Tensor::scalar<float>(DType::F32, 0.1f));
  g.set_initializer("z", scalar8(DType::U8, 7));
  g.nodes.push_back(test_node("DequantizeLinear", {"a", "s", "z"}, {"af"}));
  g.nodes.push_back(test_node("DequantizeLinear", {"b", "s", "z"}, {"bf"}));
  g.nodes.push_back(test_node("Concat", {"af", "bf"}, {"cat"}, {Attribute::make_int("axis", 2)}));
  g.nodes.push_back(test_node("QuantizeLinear", {"cat", "s", "z"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  infer_types(g);
  Model f = m;
  ASSERT_TRUE(fuse_quantized_lookups(f.graph));
  EXPECT_EQ(count_op(f.graph, "LookupTable"), 0);
  EXPECT_EQ(count_op(f.graph, "DequantizeLinear") + count_op(f.graph, "QuantizeLinear"), 0);
  expect_same_bits(m, f, DType::U8);
}

TEST(QuantizedLookup, TableOfTheWrongSizeIsAnError) {
  Model m;
  m.opset_imports[""] = 21;
  m.opset_imports["hodu"] = 1;
  Graph& g = m.graph;
  g.inputs.push_back({"a", ValueType::tensor(DType::U8, Shape::from({4})), ""});
  g.set_initializer("t", Tensor::from_vector(DType::U8, {16}, std::vector<uint8_t>(16, 1)));
  Node n = test_node("LookupTable", {"a", "t"}, {"y"});
  n.domain = "hodu";
  g.nodes.push_back(n);
  g.outputs.push_back({"y", {}, ""});
  std::map<std::string, RuntimeValue> feeds = {{"a", Tensor::from_vector(DType::U8, {4}, std::vector<uint8_t>(4, 0))}};
  try {
    interp::Interpreter(m).run(feeds);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::passes
