// Elementwise nodes after a conv taken as its post-ops (post_op_chain.cc), against the
// interpreter: Max/Min with a one-element constant as a one-sided clip (openWakeWord's
// embedding model: conv, LeakyRelu, Max(x, -0.4), MaxPool), in either input order, alone and
// after a LeakyRelu (-O3 may fuse the two into a FusedElementwise first).
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

TEST(PostOpChain, MaxMinWithConstantAfterConvMatchesInterpreter) {
  for (std::string op : {"Max", "Min"})
    for (bool leaky : {false, true})
      for (bool constant_first : {false, true}) {
      SCOPED_TRACE(std::string(leaky ? "LeakyRelu, " : "") + op + (constant_first ? "(c, x)" : "(x, c)"));
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{1, 5, 12, 10});
      b.constant("w", random_floats({16, 5, 3, 3}, 1, 0.5f));
      b.constant("bias", random_floats({16}, 2));
      // Max: a bound below (a rank-4 one-element tensor); Min: a scalar bound above.
      b.constant("k", op == "Max" ? Tensor::from_vector(DType::F32, {1, 1, 1, 1}, std::vector<float>{-0.4f})
                                  : Tensor::scalar<float>(DType::F32, 0.9f));
      b.node("Conv", {"x", "w", "bias"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      std::string v = "c";
      if (leaky) {
        b.node("LeakyRelu", {"c"}, {"l"}, {Attribute::make_float("alpha", 0.2f)});
        v = "l";
      }
      b.node(op, constant_first ? std::vector<std::string>{"k", v} : std::vector<std::string>{v, "k"}, {"m"});
      b.node("MaxPool", {"m"}, {"y"},
             {Attribute::make_ints("kernel_shape", {2, 2}), Attribute::make_ints("strides", {2, 2})});
      b.output("y");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 5, 12, 10}, 4, 2.0f))}};
      auto want = interp::Interpreter(m).run(feeds);
      PlannedModel p(m, feeds, 2);
      std::string steps;
      for (const auto& k : p.kernels()) steps += k + "\n";
      SCOPED_TRACE(steps);
      // Nothing runs between the conv and the pooling: no Max, Min or FusedElementwise step.
      EXPECT_EQ(p.count("(" + op + ")"), 0);
      EXPECT_EQ(p.count("(FusedElementwise)"), 0);
      EXPECT_EQ(p.count("as post-ops"), 1);
      auto got = p.run(feeds);
      ASSERT_EQ(got.size(), 1u);
      testing::expect_close(got[0], want[0], 1e-5, 1e-6, "y");
    }
}

// A 1-D conv of one input channel and torch's erf GELU (x * 0.5 * (1 + erf(x / sqrt 2)), fused
// into the conv at -O3; audio models' first conv): below AVX-512 oneDNN runs it as its gemm
// convolution, whose GELU post-op is scalar; the GELU then runs after it on packed_gemm's loop
// (ctest cpu_engine_test_avx2 takes that path).
TEST(PostOpChain, GemmConvGeluMatchesInterpreter) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 1, 4003});
  b.constant("w", random_floats({32, 1, 11}, 1, 0.5f));
  b.constant("bias", random_floats({32}, 2));
  b.constant("sqrt2", Tensor::scalar<float>(DType::F32, 1.41421356f));
  b.constant("one", Tensor::scalar<float>(DType::F32, 1.0f));
  b.constant("half", Tensor::scalar<float>(DType::F32, 0.5f));
  b.node("Conv", {"x", "w", "bias"}, {"c"}, {Attribute::make_ints("pads", {5, 5}), Attribute::make_ints("strides", {4})});
  b.node("Div", {"c", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"a"});
  b.node("Mul", {"c", "a"}, {"m"});
  b.node("Mul", {"m", "half"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 1, 4003}, 4, 2.0f))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, 2);
  std::string steps;
  for (const auto& k : p.kernels()) steps += k + "\n";
  SCOPED_TRACE(steps);
  // One step: the conv with its GELU (a post-op, or the loop after a gemm convolution).
  EXPECT_EQ(p.count("(hodu.FusedConv)"), 1);
  for (const char* op : {"(Div)", "(Erf)", "(Add)", "(Mul)", "(Gelu)", "(FusedElementwise)"}) EXPECT_EQ(p.count(op), 0) << op;
  EXPECT_EQ(p.count("gemm"), p.count("gelu loop"));
  auto got = p.run(feeds);
  ASSERT_EQ(got.size(), 1u);
  testing::expect_close(got[0], want[0], 1e-5, 1e-5, "y");
}

}  // namespace
}  // namespace hodu::cpu
