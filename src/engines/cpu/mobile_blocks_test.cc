// Mobile convnet blocks (PaddleOCR, MobileNetV3): a conv, hardswish as the exporters write it,
// a depthwise conv, a squeeze-excite block. The hardswishes run as the convs' post-ops and the
// whole chain stays in the convs' blocked layout: no reorder between the first conv and the
// graph output; results equal the interpreter's at odd channel counts, batch > 1, both ISAs
// (ctest cpu_engine_test_avx2 runs the *MatchesInterpreter* tests under HODU_MAX_ISA=avx2).
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {

// From row_kernels.h, which the tests (built without OpenMP) cannot include: its parallel_for
// pragma warns there. A signature that drifts fails to link.
void blocked_means(const float* x, float* y, int64_t pixels, int64_t block, int64_t begin, int64_t end);
void nhwc_means(const float* x, float* y, int64_t pixels, int64_t channels, int64_t begin, int64_t end);
void scale_rows(const float* x, const float* v, float* y, int64_t len, int64_t rows_per_v, bool scalar_per_row,
                int64_t begin, int64_t end);

namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

Tensor scalar(float v) { return Tensor::scalar<float>(DType::F32, v); }

// x [N, 3, 16, 20] → Conv 3x3/2 (C channels) → x * Clip(x + 3, 0, 6) / 6 → depthwise 3x3 →
// x * HardSigmoid(x, 1/6, 1/2) → squeeze-excite (GlobalAveragePool, 1x1 Conv C→C/4, Relu,
// 1x1 Conv C/4→C, HardSigmoid, Mul) → 1x1 Conv (C→11) + the residual of a second 1x1 conv.
Model mobile_block(int64_t channels) {
  const int64_t c = channels, r = std::max<int64_t>(1, channels / 4);
  GraphBuilder b;
  b.input("x", DType::F32, Shape({Dim::sym("batch"), Dim(3), Dim(16), Dim(20)}));
  b.constant("w0", random_floats({c, 3, 3, 3}, 1, 0.6f));
  b.constant("b0", random_floats({c}, 2));
  b.constant("wd", random_floats({c, 1, 3, 3}, 3, 0.6f));
  b.constant("w1", random_floats({r, c, 1, 1}, 4, 0.5f));
  b.constant("b1", random_floats({r}, 5));
  b.constant("w2", random_floats({c, r, 1, 1}, 6, 0.5f));
  b.constant("b2", random_floats({c}, 7));
  b.constant("w3", random_floats({11, c, 1, 1}, 8, 0.3f));
  b.constant("w4", random_floats({11, c, 1, 1}, 9, 0.3f));
  b.constant("three", scalar(3));
  b.constant("zero", scalar(0));
  b.constant("six", scalar(6));
  auto ints = [](const char* n, std::vector<int64_t> v) { return Attribute::make_ints(n, std::move(v)); };
  b.node("Conv", {"x", "w0", "b0"}, {"c0"}, {ints("pads", {1, 1, 1, 1}), ints("strides", {2, 2})});
  b.node("Add", {"c0", "three"}, {"a0"});
  b.node("Clip", {"a0", "zero", "six"}, {"k0"});
  b.node("Mul", {"c0", "k0"}, {"m0"});
  b.node("Div", {"m0", "six"}, {"h0"});
  b.node("Conv", {"h0", "wd"}, {"d0"}, {ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", c)});
  b.node("HardSigmoid", {"d0"}, {"g0"}, {Attribute::make_float("alpha", 1.0f / 6), Attribute::make_float("beta", 0.5f)});
  b.node("Mul", {"d0", "g0"}, {"h1"});
  b.node("GlobalAveragePool", {"h1"}, {"p"});
  b.node("Conv", {"p", "w1", "b1"}, {"f1"});
  b.node("Relu", {"f1"}, {"r1"});
  b.node("Conv", {"r1", "w2", "b2"}, {"f2"});
  b.node("HardSigmoid", {"f2"}, {"s"}, {Attribute::make_float("alpha", 0.2f), Attribute::make_float("beta", 0.5f)});
  b.node("Mul", {"h1", "s"}, {"se"});
  b.node("Conv", {"se", "w4"}, {"z"});
  b.node("Conv", {"se", "w3"}, {"y0"});
  b.node("Add", {"y0", "z"}, {"y"});
  b.output("y");
  return b.finish();
}

TEST(MobileBlocks, HardSwishAndSqueezeExciteStayBlockedMatchesInterpreter) {
  for (int64_t channels : {13, 24, 32}) {
    for (int64_t batch : {1, 2}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE("channels " + std::to_string(channels) + " batch " + std::to_string(batch) + " threads " +
                     std::to_string(threads));
        Model m = mobile_block(channels);
        std::map<std::string, RuntimeValue> feeds = {
            {"x", RuntimeValue(random_floats({batch, 3, 16, 20}, 11, 2.0f))}};
        auto want = interp::Interpreter(m).run(feeds);
        PlannedModel p(m, feeds, threads);
        std::string steps;
        for (const auto& k : p.kernels()) steps += k + "\n";
        SCOPED_TRACE(steps);
        // Both hardswishes ride on their convs; nothing of them runs as a step of its own.
        EXPECT_EQ(p.count("1 nodes as post-ops"), 2);
        EXPECT_EQ(p.count("(HardSwish)"), 0);
        EXPECT_EQ(p.count("(Div)"), 0);
        EXPECT_EQ(p.count("FusedElementwise"), 0);
        // Squeeze-excite: its 1x1 convs as products with a vector per image, its Mul on the
        // blocked layout (batch 2 too: a vector of scales per image).
        EXPECT_EQ(p.count("cpu gemv"), 2);
        EXPECT_EQ(p.count("cpu channel scale"), 1);
        // The image into the first conv and the graph output: the only layout changes.
        EXPECT_LE(p.count("reorder"), 2);
        for (int run = 0; run < 2; ++run) {  // the second run reuses the arena
          auto got = p.run(feeds);
          ASSERT_EQ(got.size(), 1u);
          testing::expect_close(got[0], want[0], 1e-4, 1e-5, "y, run " + std::to_string(run));
        }
      }
    }
  }
}

// A HardSwish the conv's output is not alone in reading stays a step of its own (the conv's
// output is needed as it is), and a HardSwish producing a graph output still comes out plain.
TEST(MobileBlocks, HardSwishTheConvCannotTakeMatchesInterpreter) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 5, 9, 7});
  b.constant("w", random_floats({13, 5, 3, 3}, 1, 0.6f));
  b.constant("v", random_floats({13, 5, 1, 1}, 2, 0.6f));
  b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("HardSwish", {"c"}, {"h"});
  b.node("Relu", {"c"}, {"r"});  // a second reader of c
  b.node("Conv", {"x", "v"}, {"d"});
  b.node("HardSwish", {"d"}, {"hd"});  // a graph output
  b.output("h");
  b.output("r");
  b.output("hd");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 5, 9, 7}, 3, 2.0f))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds);
  EXPECT_EQ(p.count("nodes as post-ops"), 0);
  EXPECT_EQ(p.count("(HardSwish)"), 2);
  auto got = p.run(feeds);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-5, m.graph.outputs[i].name);
}

// The channel scale of a batch: one vector per image ([N, C, 1, 1]) or one for all ([1, C, 1, 1]),
// on a conv's blocked output at channel counts that leave the last block part empty.
TEST(MobileBlocks, BatchChannelScaleMatchesInterpreter) {
  for (int64_t channels : {20, 13}) {
    for (bool shared : {false, true}) {
      SCOPED_TRACE("channels " + std::to_string(channels) + (shared ? " one vector" : " a vector per image"));
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{3, 5, 6, 7});
      b.input("s", DType::F32, std::vector<int64_t>{shared ? 1 : 3, channels, 1, 1});
      b.constant("w", random_floats({channels, 5, 3, 3}, 1, 0.5f));
      b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      b.node("Mul", {"c", "s"}, {"m"});
      b.node("Relu", {"m"}, {"y"});  // m read by a step after the Mul (not in place)
      b.node("Abs", {"c"}, {"z"});    // c read after the Mul too
      b.output("y");
      b.output("z");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {
          {"x", RuntimeValue(random_floats({3, 5, 6, 7}, 2))},
          {"s", RuntimeValue(random_floats({shared ? 1 : 3, channels, 1, 1}, 3))}};
      auto want = interp::Interpreter(m).run(feeds);
      PlannedModel p(m, feeds, 2);
      EXPECT_EQ(p.count("cpu channel scale"), 1);
      auto got = p.run(feeds);
      ASSERT_EQ(got.size(), 2u);
      for (size_t i = 0; i < 2; ++i) testing::expect_close(got[i], want[i], 1e-5, 1e-6, m.graph.outputs[i].name);
    }
  }
}

// GlobalAveragePool of a depthwise conv (squeeze-excite) and ReduceMean over H, W of a 1x1 conv
// (MnasNet's head) read the convs' outputs where they lie, no reorder (RowKernels.* below test
// the blocked loop directly: which layout a small conv writes is oneDNN's choice): channel counts that fill their blocks and that leave the
// last one part empty, more than 16 channels (nhwc's tasks of 16), pixel counts odd and even.
TEST(MobileBlocks, MeansOverPixelsOfConvOutputsMatchInterpreter) {
  for (int64_t channels : {13, 20, 32, 48}) {
    for (int64_t side : {5, 8}) {
      SCOPED_TRACE("channels " + std::to_string(channels) + ", " + std::to_string(side) + "x" + std::to_string(side));
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{3, 3, side, side + 1});
      b.constant("w", random_floats({channels, 3, 3, 3}, 1, 0.5f));
      b.constant("w1", random_floats({channels, 3, 1, 1}, 2, 0.5f));
      b.constant("axes", Tensor::from_vector<int64_t>(DType::I64, {2}, {-1, 2}));
      b.constant("wd", random_floats({channels, 1, 3, 3}, 4, 0.5f));
      b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      b.node("Conv", {"c", "wd"}, {"d"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", channels)});
      b.node("Relu", {"d"}, {"r"});
      b.node("GlobalAveragePool", {"r"}, {"g"});
      b.node("Conv", {"x", "w1"}, {"c1"});
      b.node("ReduceMean", {"c1", "axes"}, {"m"}, {Attribute::make_int("keepdims", 0)});
      b.output("g");
      b.output("m");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({3, 3, side, side + 1}, 3))}};
      auto want = interp::Interpreter(m).run(feeds);
      PlannedModel p(m, feeds, 2);
      EXPECT_EQ(p.count("cpu blocked mean") + p.count("cpu nhwc mean"), 2);
      EXPECT_EQ(p.count("reorder 'r'") + p.count("reorder 'c1'"), 0);  // read in the convs' layouts
      auto got = p.run(feeds);
      ASSERT_EQ(got.size(), 2u);
      for (size_t i = 0; i < 2; ++i) testing::expect_close(got[i], want[i], 1e-5, 1e-6, m.graph.outputs[i].name);
    }
  }
}

// The loops under those steps against sums in double, at the CPU's ISA and (ctest
// cpu_engine_test_avx2) at AVX2: nChw8c/16c rows, nhwc images in tasks of 16 channels with a
// partial last one, pixel counts below, at and past the loops' unroll; the channel scale's
// 8/16-lane rows in place, several rows per vector.
TEST(RowKernels, ChannelMeansAndScaleMatchPlainLoops) {
  for (int64_t pixels : {1, 3, 4, 7, 49}) {
    for (int64_t block : {8, 16}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", pixels " + std::to_string(pixels));
      const int64_t rows = 5;
      Tensor xt = random_floats({rows, pixels, block}, 11);
      const float* x = xt.data<float>();
      std::vector<float> y(rows * block, -1.0f);
      blocked_means(x, y.data(), pixels, block, 1, rows);  // row 0 left alone
      for (int64_t l = 0; l < block; ++l) EXPECT_EQ(y[l], -1.0f);
      for (int64_t r = 1; r < rows; ++r)
        for (int64_t l = 0; l < block; ++l) {
          double sum = 0;
          for (int64_t p = 0; p < pixels; ++p) sum += x[(r * pixels + p) * block + l];
          EXPECT_NEAR(y[r * block + l], sum / pixels, 1e-6) << "row " << r << " lane " << l;
        }
      // In place: y = x * v[r / 3], three rows a vector.
      Tensor vt = random_floats({2, block}, 12);
      const float* v = vt.data<float>();
      std::vector<float> z(x, x + rows * pixels * block);
      scale_rows(z.data(), v, z.data(), block, 3, false, 0, rows);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < block; ++j) EXPECT_EQ(z[r * block + j], x[r * block + j] * v[r / 3 * block + j]);
    }
    for (int64_t channels : {13, 16, 40}) {
      SCOPED_TRACE("nhwc, channels " + std::to_string(channels) + ", pixels " + std::to_string(pixels));
      const int64_t images = 2, chunks = (channels + 15) / 16;
      Tensor xt = random_floats({images, pixels, channels}, 13);
      const float* x = xt.data<float>();
      std::vector<float> y(images * channels, -1.0f);
      nhwc_means(x, y.data(), pixels, channels, 0, images * chunks);
      for (int64_t n = 0; n < images; ++n)
        for (int64_t c = 0; c < channels; ++c) {
          double sum = 0;
          for (int64_t p = 0; p < pixels; ++p) sum += x[(n * pixels + p) * channels + c];
          EXPECT_NEAR(y[n * channels + c], sum / pixels, 1e-6) << "image " << n << " channel " << c;
        }
      // Channels holding the same values get the same mean, bit for bit, the last partial task's
      // too (SqueezeNet's saturated head: a softmax over tied logits).
      std::vector<float> same(pixels * channels), m(channels);
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t c = 0; c < channels; ++c) same[p * channels + c] = 1e9f + 977.0f * static_cast<float>(p % 7);
      nhwc_means(same.data(), m.data(), pixels, channels, 0, chunks);
      for (int64_t c = 1; c < channels; ++c) EXPECT_EQ(m[c], m[0]) << "channel " << c;
    }
  }
}

// PP-LCNetV3 (PaddleOCR v4): conv → Mul(scale) → Add(shift) → HardSwish → Mul → Add → conv.
// The -O3 elementwise fusion makes the scalar Mul/Add pairs hodu.FusedElementwise nodes; the
// conv takes all five nodes as post-ops. A chain stops at what a post-op cannot say (6 / x).
TEST(MobileBlocks, ScaleShiftHardSwishChainMatchesInterpreter) {
  for (bool stop : {false, true}) {
    SCOPED_TRACE(stop ? "6 / x ends the chain" : "whole chain");
    GraphBuilder b;
    b.input("x", DType::F32, std::vector<int64_t>{2, 8, 10, 12});
    b.constant("w", random_floats({19, 8, 3, 3}, 1, 0.5f));
    b.constant("bias", random_floats({19}, 2));
    b.constant("wd", random_floats({19, 1, 5, 5}, 3, 0.4f));
    b.constant("a0", scalar(0.75f));
    b.constant("b0", scalar(-0.4f));
    b.constant("a1", scalar(1.3f));
    b.constant("b1", scalar(0.2f));
    b.constant("six", scalar(6.0f));
    auto pads = Attribute::make_ints("pads", {1, 1, 1, 1});
    b.node("Conv", {"x", "w", "bias"}, {"c"}, {pads});
    b.node("Mul", {"a0", "c"}, {"m0"});
    b.node("Add", {"m0", "b0"}, {"s0"});
    b.node("HardSwish", {"s0"}, {"h"});
    b.node("Mul", {"h", "a1"}, {"m1"});
    b.node("Sub", {"m1", "b1"}, {"s1"});
    if (stop) {
      b.node("Abs", {"s1"}, {"s1a"});
      b.node("Add", {"s1a", "six"}, {"s1b"});
      b.node("Div", {"six", "s1b"}, {"s2"});
    } else {
      b.node("Div", {"s1", "six"}, {"s2"});
    }
    b.node("Conv", {"s2", "wd"}, {"y"},
           {Attribute::make_ints("pads", {2, 2, 2, 2}), Attribute::make_int("group", 19)});
    b.output("y");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 8, 10, 12}, 4, 2.0f))}};
    auto want = interp::Interpreter(m).run(feeds);
    PlannedModel p(m, feeds, 2);
    std::string steps;
    for (const auto& k : p.kernels()) steps += k + "\n";
    SCOPED_TRACE(steps);
    // Whole: the conv takes FusedElementwise(scale, shift), HardSwish and FusedElementwise(scale,
    // shift, / 6) (the second affine as binary post-ops: oneDNN 2.6 keeps one eltwise_linear's
    // parameters per primitive); nothing runs between the two convs. Stopped: the conv takes the
    // first two nodes, the body with 6 / x runs as its own loop.
    EXPECT_EQ(p.count(stop ? "2 nodes as post-ops" : "3 nodes as post-ops"), 1);
    EXPECT_EQ(p.count("FusedElementwise"), stop ? 1 : 0);
    EXPECT_EQ(p.count("(HardSwish)"), 0);
    EXPECT_EQ(p.count("reorder"), stop ? 4 : 2);
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 1u);
    testing::expect_close(got[0], want[0], 1e-4, 1e-5, "y");
  }
}

// A conv with a residual (the sum post-op) and a ReLU, then a scale and a HardSwish: sum, activation,
// then the chain, in that order.
TEST(MobileBlocks, ResidualConvWithChainMatchesInterpreter) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{2, 16, 9, 11});
  b.constant("w1", random_floats({16, 16, 1, 1}, 1, 0.4f));
  b.constant("w2", random_floats({16, 16, 3, 3}, 2, 0.2f));
  b.constant("wd", random_floats({16, 1, 3, 3}, 3, 0.5f));
  b.constant("half", scalar(0.5f));
  b.constant("shift", scalar(-1.0f));
  auto pads = Attribute::make_ints("pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "w1"}, {"c1"});
  b.node("Conv", {"x", "w2"}, {"c2"}, {pads});
  b.node("Add", {"c2", "c1"}, {"r"});
  b.node("Relu", {"r"}, {"a"});
  b.node("Mul", {"a", "half"}, {"m"});
  b.node("Add", {"m", "shift"}, {"s"});
  b.node("HardSwish", {"s"}, {"h"});
  b.node("Conv", {"h", "wd"}, {"y"}, {pads, Attribute::make_int("group", 16)});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 16, 9, 11}, 4, 2.0f))}};
  auto want = interp::Interpreter(m).run(feeds);
  for (int threads : {1, 2}) {
    PlannedModel p(m, feeds, threads);
    std::string steps;
    for (const auto& k : p.kernels()) steps += k + "\n";
    SCOPED_TRACE(steps);
    EXPECT_EQ(p.count("2 nodes as post-ops"), 1);  // FusedElementwise(scale, shift), HardSwish
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 1u);
    testing::expect_close(got[0], want[0], 1e-4, 1e-5, "y");
  }
}

}  // namespace
}  // namespace hodu::cpu
