// Softmax / LogSoftmax / Hardmax along any axis and in f64, LayerNormalization over trailing
// dims with its Mean and InvStdDev outputs, and f64 MatMul on the cpu engine: the interpreter's
// values, none of them on the interpreter's kernel.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using namespace testing;  // NOLINT

Tensor doubles(const std::vector<int64_t>& shape, uint32_t seed) {
  return random_floats(shape, seed).cast(DType::F64);
}

void expect_no_fallback(const PlannedModel& p) {
  EXPECT_TRUE(p.interp_ops().empty()) << "ran on the interpreter: " << *p.interp_ops().begin();
  EXPECT_EQ(p.plan->fallback_count(), 0);
}

TEST(CpuAxisNormOps, SoftmaxFamilyAlongInnerAxesAndInDouble) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{2, 3, 4});
  b.input("d", DType::F64, std::vector<int64_t>{3, 5});
  b.node("Softmax", {"x"}, {"s1"}, {Attribute::make_int("axis", 1)});
  b.node("LogSoftmax", {"x"}, {"s0"}, {Attribute::make_int("axis", 0)});
  b.node("Hardmax", {"x"}, {"h"}, {Attribute::make_int("axis", -1)});
  b.node("Softmax", {"d"}, {"sd"}, {});
  b.node("LogSoftmax", {"d"}, {"ld"}, {Attribute::make_int("axis", 0)});
  for (const char* o : {"s1", "s0", "h", "sd", "ld"}) b.output(o);
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_floats({2, 3, 4}, 3, 4.0f))},
                                            {"d", RuntimeValue(doubles({3, 5}, 4))}};
  auto p = expect_matches_interpreter(m, feeds, 0, 0);  // the interpreter's arithmetic, bit for bit
  expect_no_fallback(*p);
  auto out = p->run(feeds);
  auto s1 = out[0].tensor.to_doubles();  // sums to 1 along axis 1
  double sum = s1[0] + s1[4] + s1[8];
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(out[3].tensor.dtype(), DType::F64);
}

TEST(CpuAxisNormOps, LayerNormalizationWithStatisticsOverTrailingDims) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{2, 3, 4});
  b.input("d", DType::F64, std::vector<int64_t>{4, 6});
  b.constant("scale", random_floats({3, 4}, 5));
  b.constant("bias", random_floats({4}, 6));  // broadcast to the normalized [3, 4]
  b.constant("dscale", doubles({6}, 7));
  b.node("LayerNormalization", {"x", "scale", "bias"}, {"y", "mean", "inv"}, {Attribute::make_int("axis", 1)});
  b.node("LayerNormalization", {"d", "dscale"}, {"yd", "meand", "invd"},
         {Attribute::make_int("stash_type", 11), Attribute::make_float("epsilon", 1e-3f)});
  b.node("LayerNormalization", {"x", "scale"}, {"y2"}, {Attribute::make_int("axis", -2)});  // no statistics
  for (const char* o : {"y", "mean", "inv", "yd", "meand", "invd", "y2"}) b.output(o);
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_floats({2, 3, 4}, 8, 3.0f))},
                                            {"d", RuntimeValue(doubles({4, 6}, 9))}};
  auto p = expect_matches_interpreter(m, feeds, 0, 0);
  expect_no_fallback(*p);
  auto out = p->run(feeds);
  EXPECT_EQ(out[1].tensor.shape(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(out[1].tensor.dtype(), DType::F32);
  EXPECT_EQ(out[4].tensor.dtype(), DType::F64);
  EXPECT_EQ(out[4].tensor.shape(), (std::vector<int64_t>{4, 1}));
  // The statistics are the row's: mean of the 12 values of x[0].
  auto x = feeds["x"].tensor.to_doubles();
  double mu = 0;
  for (int i = 0; i < 12; ++i) mu += x[i] / 12;
  EXPECT_NEAR(out[1].tensor.to_doubles()[0], mu, 1e-5);
}

TEST(CpuAxisNormOps, DoubleMatMulBroadcastsBatches) {
  GraphBuilder b;
  b.input("a", DType::F64, std::vector<int64_t>{2, 3, 4});
  b.input("v", DType::F64, std::vector<int64_t>{4});
  b.constant("w", doubles({4, 5}, 10));
  b.node("MatMul", {"a", "w"}, {"y"});
  b.node("MatMul", {"a", "v"}, {"yv"});  // 1-D right operand: its dim dropped
  b.output("y");
  b.output("yv");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds{{"a", RuntimeValue(doubles({2, 3, 4}, 11))},
                                            {"v", RuntimeValue(doubles({4}, 12))}};
  auto p = expect_matches_interpreter(m, feeds, 1e-14, 1e-14);
  expect_no_fallback(*p);
  EXPECT_EQ(p->count("f64 product loop"), 2);
  EXPECT_EQ(p->run(feeds)[1].tensor.shape(), (std::vector<int64_t>{2, 3}));
}

// RotaryEmbedding (rotary.cc) sits beside these as another row loop of attention blocks.
TEST(CpuAxisNormOps, RotaryEmbeddingInBothLayouts) {
  GraphBuilder b;
  b.m.opset_imports[""] = 23;
  b.input("x4", DType::F32, std::vector<int64_t>{2, 3, 5, 8});  // [B, H, S, D]
  b.input("x3", DType::F32, std::vector<int64_t>{2, 5, 16});    // [B, S, H·D], 2 heads
  b.input("pos", DType::I64, std::vector<int64_t>{2, 5});
  b.constant("cos", random_floats({12, 4}, 20));
  b.constant("sin", random_floats({12, 4}, 21));
  b.constant("cos3", random_floats({2, 5, 2}, 22));
  b.constant("sin3", random_floats({2, 5, 2}, 23));
  b.node("RotaryEmbedding", {"x4", "cos", "sin", "pos"}, {"y4"});
  b.node("RotaryEmbedding", {"x3", "cos3", "sin3"}, {"y3"},
         {Attribute::make_int("interleaved", 1), Attribute::make_int("num_heads", 2),
          Attribute::make_int("rotary_embedding_dim", 4)});  // half of each head rotated
  b.output("y4");
  b.output("y3");
  Model m = b.finish();
  std::vector<int64_t> pos = {0, 3, 11, 2, 2, 5, 6, 7, 1, 9};
  std::map<std::string, RuntimeValue> feeds{{"x4", RuntimeValue(random_floats({2, 3, 5, 8}, 24))},
                                            {"x3", RuntimeValue(random_floats({2, 5, 16}, 25))},
                                            {"pos", RuntimeValue(int64s(pos, {2, 5}))}};
  auto p = expect_matches_interpreter(m, feeds, 1e-6, 1e-6);
  expect_no_fallback(*p);
  EXPECT_EQ(p->count("rotary embedding loop"), 2);
  feeds["pos"] = RuntimeValue(int64s({0, 3, 12, 2, 2, 5, 6, 7, 1, 9}, {2, 5}));
  try {
    p->run(feeds);
    FAIL() << "a position past the cache must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::cpu
