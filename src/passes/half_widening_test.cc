// widen_half_precision: an f16 graph (f16 input, weights, a Cast to f16 inside, f16 output)
// computes in f32 between casts at its boundary; the caller sees f16 in and out, the results
// within f16 precision of the interpreter's per-op f16 arithmetic; f32 graphs stay as they are.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/passes.h"
#include "passes/test_graph.h"

namespace hodu::passes {
namespace {

Model half_model(DType half) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(half, Shape::from({2, 8})), ""});
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 0.5f);
  std::vector<float> w(8 * 4);
  for (auto& v : w) v = d(rng);
  g.set_initializer("w", Tensor::from_vector(DType::F32, {8, 4}, w).cast(half));
  g.set_initializer("b", Tensor::from_vector<float>(DType::F32, {4}, {0.5f, -1, 2, 0}).cast(half));
  auto node = [&](const std::string& op, std::vector<std::string> ins, const std::string& out,
                  std::vector<Attribute> attrs = {}) {
    g.nodes.push_back(hodu::testing::test_node(op, std::move(ins), {out}, std::move(attrs)));
  };
  node("MatMul", {"x", "w"}, "mm");
  node("Add", {"mm", "b"}, "a");
  node("Cast", {"a"}, "c32", {Attribute::make_int("to", 1)});
  node("Sigmoid", {"c32"}, "s32");
  node("Cast", {"s32"}, "y", {Attribute::make_int("to", static_cast<int64_t>(dtype_to_onnx(half)))});
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"a", {}, ""});
  infer_types(g);
  for (auto& o : g.outputs) o.type = *g.type_of(o.name);
  return m;
}

TEST(HalfWidening, HalfGraphComputesInF32BetweenItsBoundaryCasts) {
  for (DType half : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(half));
    Model m = half_model(half);
    std::vector<float> xv(16);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(static_cast<float>(i));
    std::map<std::string, RuntimeValue> feeds = {{"x", Tensor::from_vector(DType::F32, {2, 8}, xv).cast(half)}};
    auto want = interp::Interpreter(m).run(feeds);
    Model w = m;
    ASSERT_TRUE(widen_half_precision(w.graph));
    for (const auto& [name, t] : w.graph.initializers) EXPECT_EQ(t.dtype(), DType::F32) << name;
    EXPECT_EQ(w.graph.type_of("mm")->dtype, DType::F32);
    EXPECT_EQ(w.graph.inputs[0].type.dtype, half);
    auto got = interp::Interpreter(w).run(feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tensor.dtype(), half);
      auto a = got[i].tensor.to_doubles(), b = want[i].tensor.to_doubles();
      const double eps = half == DType::F16 ? 1e-3 : 8e-3;  // a few units in the last place
      for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], eps * (1 + std::fabs(b[k]))) << i << " " << k;
    }
  }
}

TEST(HalfWidening, WidenedAndFloatGraphsStay) {
  Model f = half_model(DType::F16);
  ASSERT_TRUE(widen_half_precision(f.graph));
  EXPECT_FALSE(widen_half_precision(f.graph));  // nothing half left but the boundary casts
  Model m;
  m.graph.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape::from({3})), ""});
  Node n;
  n.op_type = "Relu";
  n.inputs = {"x"};
  n.outputs = {"y"};
  m.graph.nodes.push_back(n);
  m.graph.outputs.push_back({"y", {}, ""});
  EXPECT_FALSE(widen_half_precision(m.graph));
}

}  // namespace
}  // namespace hodu::passes
