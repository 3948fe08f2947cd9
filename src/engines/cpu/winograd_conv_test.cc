// hodu's AVX2 Winograd F(2x2,3x3) and F(4x4,3x3) convolutions (winograd_conv.cc) against the
// interpreter's direct conv at odd sizes: channels not a multiple of 8, odd and unequal H/W, asymmetric padding,
// batches, fused bias, activations and residuals, one and two threads. ctest runs these at the
// host ISA and again capped at AVX2 (cpu_engine_test_avx2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "engines/cpu/test_util.h"
#include "engines/cpu/winograd_conv.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/winograd_avx2.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

// HODU_CPU_WINOGRAD set for one scope.
struct WinogradEnv : hodu::testing::ScopedEnv {
  explicit WinogradEnv(const char* value) : ScopedEnv("HODU_CPU_WINOGRAD", value) {}
};

// oneDNN's Winograd wherever it applies: under auto the engine refuses its F(2x3) kernel for some
// shapes (32 output channels or fewer, expansions of 3x and more: dnnl_conv.cc), these tests'
// among them; "onednn" always takes it. Below AVX-512 auto is hodu's kernel by its size rule.
const char* onednn_winograd_policy() { return vector_math::cpu_isa() == vector_math::Isa::Avx512 ? "onednn" : "auto"; }

struct Case {
  int64_t batch, cin, cout, h, w;
  std::vector<int64_t> pads;  // top, left, bottom, right
  std::string after;  // "", "Relu", "Sigmoid", "Clip", "LeakyRelu", "Add" (a residual), "AddRelu", "AddLeakyRelu"
  int threads;
};

// x → Conv(3x3, stride 1, bias) → [after] → y, plus a second input r for the residual.
Model conv_model(const Case& c) {
  GraphBuilder b;
  const int64_t oh = c.h + c.pads[0] + c.pads[2] - 2, ow = c.w + c.pads[1] + c.pads[3] - 2;
  b.input("x", DType::F32, std::vector<int64_t>{c.batch, c.cin, c.h, c.w});
  b.constant("w", random_floats({c.cout, c.cin, 3, 3}, 7, 0.3f));
  b.constant("bias", random_floats({c.cout}, 8));
  b.node("Conv", {"x", "w", "bias"}, {"c"}, {Attribute::make_ints("pads", c.pads)});
  std::string out = "c";
  if (c.after.rfind("Add", 0) == 0) {
    b.input("r", DType::F32, std::vector<int64_t>{c.batch, c.cout, oh, ow});
    b.node("Add", {"c", "r"}, {"s"});
    out = "s";
  }
  if (c.after == "Relu" || c.after == "AddRelu" || c.after == "Sigmoid") {
    b.node(c.after == "Sigmoid" ? "Sigmoid" : "Relu", {out}, {"a"});
    out = "a";
  } else if (c.after == "LeakyRelu" || c.after == "AddLeakyRelu") {
    b.node("LeakyRelu", {out}, {"a"}, {Attribute::make_float("alpha", 0.1f)});
    out = "a";
  } else if (c.after == "Clip") {
    b.constant("lo", Tensor::scalar<float>(DType::F32, -0.5f));
    b.constant("hi", Tensor::scalar<float>(DType::F32, 2.0f));
    b.node("Clip", {out, "lo", "hi"}, {"a"});
    out = "a";
  }
  // A 1x1 conv after it reads the blocked output as the next layer would (padding channels too).
  b.constant("w1", random_floats({3, c.cout, 1, 1}, 9));
  b.node("Conv", {out, "w1"}, {"y1"});
  b.node("Identity", {out}, {"y0"});
  b.output("y0");
  b.output("y1");
  return b.finish();
}

std::map<std::string, RuntimeValue> feeds_of(const Case& c) {
  const int64_t oh = c.h + c.pads[0] + c.pads[2] - 2, ow = c.w + c.pads[1] + c.pads[3] - 2;
  std::map<std::string, RuntimeValue> f = {{"x", RuntimeValue(random_floats({c.batch, c.cin, c.h, c.w}, 3))}};
  if (c.after.rfind("Add", 0) == 0) f["r"] = RuntimeValue(random_floats({c.batch, c.cout, oh, ow}, 4));
  return f;
}

// Relative L2 error and the largest error over the largest |want|.
void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to_doubles(), b = want.to_doubles();
  double err = 0, norm = 0, worst = 0, peak = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
    worst = std::max(worst, std::fabs(a[i] - b[i]));
    peak = std::max(peak, std::fabs(b[i]));
  }
  EXPECT_LE(std::sqrt(err / std::max(norm, 1e-30)), 2e-6) << what;
  EXPECT_LE(worst, 2e-5 * peak) << what;
}

void check(const Case& c, const std::string& kernel) {
  const std::string what = "batch " + std::to_string(c.batch) + " cin " + std::to_string(c.cin) + " cout " +
                           std::to_string(c.cout) + " " + std::to_string(c.h) + "x" + std::to_string(c.w) + " " +
                           c.after + " threads " + std::to_string(c.threads) + " " + kernel;
  Model m = conv_model(c);
  auto feeds = feeds_of(c);
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, c.threads);
  EXPECT_EQ(p.count("cpu winograd " + kernel), 1) << what;
  for (int run = 0; run < 2; ++run) {  // the second run reuses the plan's buffers
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 2u);
    expect_near(got[0].tensor, want[0].tensor, what + " y0");
    expect_near(got[1].tensor, want[1].tensor, what + " y1");
  }
}

TEST(WinogradConv, ForcedMatchesInterpreterAtOddSizes) {
  if (!winograd::available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2): the kernel cannot run";
  const std::vector<Case> cases = {
      {1, 16, 16, 8, 8, {1, 1, 1, 1}, "", 1},           // whole tiles (2 of F(4,3), 4 of F(2,3)) a side
      {1, 13, 21, 11, 9, {1, 1, 1, 1}, "Relu", 1},      // channels not a multiple of 8, odd H/W
      {2, 5, 3, 7, 13, {0, 2, 1, 0}, "", 2},            // batch 2, asymmetric pads, few channels
      {3, 24, 40, 15, 6, {1, 1, 1, 1}, "AddRelu", 2},   // residual and ReLU fused, batch 3
      {1, 9, 11, 12, 17, {2, 0, 0, 2}, "Add", 1},       // residual without activation
      {1, 8, 12, 10, 10, {1, 1, 1, 1}, "Sigmoid", 2},   // an activation not 0 at 0: padding lanes kept 0
      {2, 17, 7, 5, 5, {0, 0, 0, 0}, "Clip", 1},        // no padding, one partial tile
      {1, 64, 64, 28, 28, {1, 1, 1, 1}, "Relu", 2},     // a ResNet-like layer, more tiles than one product
      {3, 64, 40, 40, 40, {1, 1, 1, 1}, "AddRelu", 2},  // images in groups of 2 and 1 (F(4,3)) or 1 (F(2,3))
      // An image past the scratch budget: bands of tile rows (F(4,3): 23 + 15, F(2,3): 27 + 27 + 21).
      {2, 16, 12, 150, 150, {1, 1, 1, 1}, "AddRelu", 2},
  };
  for (const char* tile : {"f2", "f4"}) {
    WinogradEnv env((std::string("hodu-") + tile).c_str());
    for (const auto& c : cases) check(c, tile == std::string("f2") ? "F(2x2,3x3)" : "F(4x4,3x3)");
  }
}

// An image whose tiles and products pass the cache budget runs in bands of tile rows, unless
// re-reading the transformed weights once per band costs more than the tiles' trip through
// memory: FCN's 2048 -> 512 head at 28x28 ran in 7 bands of 7-row products, 2.5x slower.
TEST(WinogradConv, BandsOnlyWhereTheWeightsAreCheapToReread) {
  winograd::ConvShape s;
  s.tile = 4;
  s.cin = 2048, s.cout = 512, s.h = s.w = s.oh = s.ow = 28;  // 49 tiles, 151 MB of weights
  EXPECT_EQ(winograd::scratch_floats(s), 7 * 7 * 36 * (2048 + 512)) << "the whole image at once";
  s.cin = 64, s.cout = 32, s.h = s.w = s.oh = s.ow = 224;  // ESPCN: 56 tile rows, 295 KB of weights
  EXPECT_LT(winograd::scratch_floats(s), 56 * 56 * 36 * (64 + 32) / 4) << "bands of tile rows";
}

// oneDNN 2.6's Winograd (AVX-512) takes ReLU as its only fused activation: LeakyRelu (YOLOv3's,
// ESRGAN's) and Clip run after it on hodu's loop, a residual still inside it; an activation
// that is not 0 at 0 (Sigmoid) keeps the direct kernel, as it would write a blocked layout's
// padding channels.
TEST(WinogradConv, OneDnnWinogradRunsOtherActivationsAfterIt) {
  if (vector_math::cpu_isa() != vector_math::Isa::Avx512)
    GTEST_SKIP() << "oneDNN's Winograd needs AVX-512 (this CPU or HODU_MAX_ISA is below it)";
  WinogradEnv env(onednn_winograd_policy());
  const std::vector<Case> cases = {
      {1, 32, 32, 24, 24, {1, 1, 1, 1}, "LeakyRelu", 2},
      {2, 32, 20, 24, 22, {1, 1, 1, 1}, "AddLeakyRelu", 1},  // 20 channels: a padded last block
      {1, 32, 24, 24, 24, {1, 1, 1, 1}, "Clip", 2},
      {1, 32, 20, 24, 24, {1, 1, 1, 1}, "Sigmoid", 2},
  };
  for (const auto& c : cases) {
    const std::string what = c.after + " cout " + std::to_string(c.cout);
    Model m = conv_model(c);
    auto feeds = feeds_of(c);
    auto want = interp::Interpreter(m).run(feeds);
    PlannedModel p(m, feeds, c.threads);
    if (c.after == "Sigmoid") {
      EXPECT_EQ(p.count("wino"), 0) << what;
    } else {
      EXPECT_EQ(p.count("wino"), 1) << what;
      EXPECT_EQ(p.count(" loop"), 1) << what;
    }
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 2u);
    expect_near(got[0].tensor, want[0].tensor, what + " y0");
    expect_near(got[1].tensor, want[1].tensor, what + " y1");
  }
}

// Winograd's weights are about 4x a conv's: the convs take it largest output first while the
// extra stays within max(64 MiB, half the weights). Three 512 -> 512 3x3 convs (9.4 MB of
// weights each, about 28 MB extra) in a model of 28 MB: the first two (the larger maps) fit,
// the third runs the direct kernel. Outputs as the interpreter's either way.
TEST(WinogradConv, ConvsPastTheMemoryBudgetKeepTheDirectKernel) {
  if (vector_math::cpu_isa() != vector_math::Isa::Avx512 && !winograd::available())
    GTEST_SKIP() << "no Winograd kernel on this CPU (or below the HODU_MAX_ISA cap)";
  WinogradEnv env(onednn_winograd_policy());
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 512, 14, 14});
  b.constant("w0", random_floats({512, 512, 3, 3}, 21, 0.02f));
  b.constant("w1", random_floats({512, 512, 3, 3}, 22, 0.02f));
  b.constant("w2", random_floats({512, 512, 3, 3}, 23, 0.02f));
  b.node("Conv", {"x", "w0"}, {"c0"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});                // 14x14
  b.node("Conv", {"c0", "w1"}, {"c1"}, {Attribute::make_ints("pads", {0, 0, 0, 0})});               // 12x12
  b.node("Conv", {"c1", "w2"}, {"y"}, {Attribute::make_ints("pads", {0, 0, 0, 0})});                // 10x10
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 512, 14, 14}, 24))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, 2);
  SCOPED_TRACE(p.steps());
  auto wino = [&](const std::string& node) {
    for (const auto& k : p.kernels())
      if (k.find("'" + node + "'") != std::string::npos) return k.find("wino") != std::string::npos;
    return false;
  };
  EXPECT_TRUE(wino("c0"));
  EXPECT_TRUE(wino("c1"));
  EXPECT_FALSE(wino("y"));
  auto got = p.run(feeds);
  ASSERT_EQ(got.size(), 1u);
  testing::expect_close(got[0], want[0], 1e-4, 1e-4, "y");
}

// A weight read by convs of several sizes (a detector's head over pyramid levels) is packed in
// one Winograd form at most: oneDNN lays its Winograd weights out per size (64 channels: one
// form at 100x100 and 25x25, another at 13x13), so the reader whose form differs runs the
// direct kernel on a direct copy.
TEST(WinogradConv, SharedWeightKeepsOneWinogradForm) {
  if (vector_math::cpu_isa() != vector_math::Isa::Avx512)
    GTEST_SKIP() << "oneDNN's Winograd needs AVX-512 (this CPU or HODU_MAX_ISA is below it)";
  WinogradEnv env(onednn_winograd_policy());
  GraphBuilder b;
  b.input("p3", DType::F32, std::vector<int64_t>{1, 64, 100, 100});
  b.input("p4", DType::F32, std::vector<int64_t>{1, 64, 25, 25});
  b.input("p6", DType::F32, std::vector<int64_t>{1, 64, 13, 13});
  b.constant("w", random_floats({64, 64, 3, 3}, 31, 0.05f));
  b.constant("bias", random_floats({64}, 32));
  for (const char* level : {"p3", "p4", "p6"})
    b.node("Conv", {level, "w", "bias"}, {std::string("y_") + level}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  for (const char* y : {"y_p3", "y_p4", "y_p6"}) b.output(y);
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"p3", RuntimeValue(random_floats({1, 64, 100, 100}, 33))},
                                               {"p4", RuntimeValue(random_floats({1, 64, 25, 25}, 34))},
                                               {"p6", RuntimeValue(random_floats({1, 64, 13, 13}, 35))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, 2);
  SCOPED_TRACE(p.steps());
  EXPECT_EQ(p.count("wino"), 2);  // p3 and p4 share a form; p6's differs
  // One Winograd form (36/9 of the weights at F(4,3)) and one direct copy at most.
  const size_t w_bytes = 64 * 64 * 9 * sizeof(float);
  EXPECT_LE(p.plan->packed_bytes(), 4 * w_bytes + w_bytes + 2 * 64 * sizeof(float));
  auto got = p.run(feeds);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-4, "level " + std::to_string(i));
}

// hodu's AVX2 Winograd: a weight read by convs of several sizes (FCOS's and RetinaNet's heads
// over pyramid levels) is transformed once, in the first reader's tile, and every reader takes
// that form: the 16x16 level (F(2x2,3x3) by its size) runs F(4x4,3x3) on the shared matrices.
TEST(WinogradConv, HoduWinogradSharesOneTransformAcrossReaders) {
  if (!winograd::available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2)";
  WinogradEnv env("hodu");
  GraphBuilder b;
  const std::vector<std::pair<std::string, int64_t>> levels = {{"p3", 40}, {"p4", 24}, {"p5", 16}};
  b.constant("w", random_floats({32, 32, 3, 3}, 41, 0.05f));
  b.constant("bias", random_floats({32}, 42));
  std::map<std::string, RuntimeValue> feeds;
  for (const auto& [level, size] : levels) {
    b.input(level, DType::F32, std::vector<int64_t>{1, 32, size, size});
    b.node("Conv", {level, "w", "bias"}, {"y_" + level}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.output("y_" + level);
    feeds[level] = RuntimeValue(random_floats({1, 32, size, size}, static_cast<uint32_t>(size)));
  }
  Model m = b.finish();
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, 2);
  SCOPED_TRACE(p.steps());
  EXPECT_EQ(p.count("cpu winograd F(4x4,3x3)"), 3);
  // One F(4,3) form: 36 matrices of 32 x 32 (packed in 16-column panels), 4x the weights.
  const size_t form = 36 * 32 * 32 * sizeof(float);
  EXPECT_GE(p.plan->packed_bytes(), form);
  EXPECT_LT(p.plan->packed_bytes(), 2 * form);
  auto got = p.run(feeds);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-4, levels[i].first);
}

// auto: hodu's kernel only where the ISA is AVX2 (not on AVX-512, where oneDNN's Winograd stays),
// and not for small outputs; onednn and off never choose it.
TEST(WinogradConv, PolicyChoosesTheKernel) {
  Case c{1, 32, 32, 28, 28, {1, 1, 1, 1}, "Relu", 1};
  Model m = conv_model(c);
  auto feeds = feeds_of(c);
  {
    PlannedModel p(m, feeds);
    const bool avx2 = vector_math::cpu_isa() == vector_math::Isa::Avx2;
    EXPECT_EQ(p.count("cpu winograd"), avx2 ? 1 : 0) << "auto at " << (avx2 ? "AVX2" : "another ISA");
  }
  for (const char* mode : {"onednn", "off"}) {
    WinogradEnv env(mode);
    PlannedModel p(m, feeds);
    EXPECT_EQ(p.count("cpu winograd"), 0) << mode;
  }
  if (winograd::available()) {
    // hodu: the tile by the output's size (F(4,3) from 20x20, F(2,3) below).
    WinogradEnv env("hodu");
    PlannedModel p(m, feeds);
    EXPECT_EQ(p.count("cpu winograd F(4x4,3x3)"), 1);
    Case mid{1, 32, 32, 14, 14, {1, 1, 1, 1}, "", 1};
    Model mm = conv_model(mid);
    PlannedModel pm(mm, feeds_of(mid));
    EXPECT_EQ(pm.count("cpu winograd F(2x2,3x3)"), 1);
  }
  if (vector_math::cpu_isa() == vector_math::Isa::Avx2) {
    Case few{1, 8, 32, 28, 28, {1, 1, 1, 1}, "", 1};  // 8 input channels: the direct kernel under auto
    Model mf = conv_model(few);
    PlannedModel pf(mf, feeds_of(few));
    EXPECT_EQ(pf.count("cpu winograd"), 0);
  }
  Case small{1, 32, 32, 7, 7, {1, 1, 1, 1}, "", 1};  // 49 outputs a channel: the direct kernel
  Model ms = conv_model(small);
  PlannedModel ps(ms, feeds_of(small));
  EXPECT_EQ(ps.count("cpu winograd"), 0);
}

// A DenseNet layer: a 3x3 conv whose output is a part of a channel Concat beside a 1x1 conv's.
// On AVX-512 the parts are oneDNN's brgemm nhwc outputs and oneDNN's Winograd cannot take a
// part, so hodu's kernel runs it reading and writing nhwc; capped at AVX2, nChw8c. Checked
// against the interpreter at 1 and 2 threads, batch 1 and 2.
TEST(WinogradConv, ConcatPartMatchesInterpreter) {
  for (int64_t batch : {1, 2})
    for (int threads : {1, 2}) {
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{batch, 32, 20, 20});
      b.constant("wa", random_floats({64, 32, 1, 1}, 11, 0.3f));
      b.constant("wb", random_floats({32, 32, 1, 1}, 12, 0.3f));
      b.constant("w3", random_floats({32, 64, 3, 3}, 13, 0.2f));
      b.constant("b3", random_floats({32}, 14));
      b.constant("wo", random_floats({16, 64, 1, 1}, 15, 0.3f));
      b.node("Conv", {"x", "wa"}, {"a"});
      b.node("Relu", {"a"}, {"ar"});
      b.node("Conv", {"ar", "w3", "b3"}, {"c3"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      b.node("Conv", {"x", "wb"}, {"c1"});
      b.node("Concat", {"c1", "c3"}, {"cat"}, {Attribute::make_int("axis", 1)});
      b.node("Relu", {"cat"}, {"catr"});  // (a Conv straight after a Concat is split per part)
      b.node("Conv", {"catr", "wo"}, {"y"});
      b.output("y");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({batch, 32, 20, 20}, 16))}};
      auto want = interp::Interpreter(m).run(feeds);
      PlannedModel p(m, feeds, threads);
      const std::string what = "batch " + std::to_string(batch) + " threads " + std::to_string(threads);
      if (winograd::available() && vector_math::cpu_isa() == vector_math::Isa::Avx512 && !std::getenv("HODU_CPU_WINOGRAD")) {
        EXPECT_EQ(p.count("cpu winograd F(4x4,3x3) avx2 nhwc"), 1) << what << [&] { std::string k; for (const auto& l : p.kernels()) k += "\n" + l; return k; }();
      }
      for (int run = 0; run < 2; ++run) expect_near(p.run(feeds)[0].tensor, want[0].tensor, what);
    }
}

// DenseNet's pre-activation: Concat → BatchNormalization → Relu → 1x1 conv, the normalization
// and Relu applied by the concat's copy. On AVX-512 the parts are channels-last (a 24-channel 1x1
// conv's, whole blocks of no vector width, and the 3x3 Winograd's), copied a block of pixels
// input by input; capped at AVX2, nChw8c blocks. Against the interpreter at batch 1 and 2, 1 and
// 2 threads, with the normalization's shift making some values negative for the Relu.
TEST(WinogradConv, ConcatNormReluOfPartsMatchesInterpreter) {
  for (int64_t batch : {1, 2})
    for (int threads : {1, 2}) {
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{batch, 32, 19, 21});
      b.constant("wa", random_floats({64, 32, 1, 1}, 21, 0.3f));
      b.constant("wb", random_floats({24, 32, 1, 1}, 22, 0.3f));
      b.constant("w3", random_floats({32, 64, 3, 3}, 23, 0.2f));
      b.constant("gamma", random_floats({56}, 24, 1.0f));
      b.constant("beta", random_floats({56}, 25, 1.0f));
      b.constant("mean", random_floats({56}, 26, 0.5f));
      std::vector<float> var(56);
      for (size_t c = 0; c < var.size(); ++c) var[c] = 0.5f + 0.05f * static_cast<float>(c % 7);
      b.constant("var", Tensor::from_vector(DType::F32, {56}, var));
      b.constant("wo", random_floats({16, 56, 1, 1}, 28, 0.3f));
      b.node("Conv", {"x", "wa"}, {"a"});
      b.node("Relu", {"a"}, {"ar"});
      b.node("Conv", {"ar", "w3"}, {"c3"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      b.node("Relu", {"c3"}, {"c3r"});
      b.node("Conv", {"x", "wb"}, {"c1"});
      b.node("Relu", {"c1"}, {"c1r"});
      b.node("Concat", {"c1r", "c3r"}, {"cat"}, {Attribute::make_int("axis", 1)});
      b.node("BatchNormalization", {"cat", "gamma", "beta", "mean", "var"}, {"bn"});
      b.node("Relu", {"bn"}, {"bnr"});
      b.node("Conv", {"bnr", "wo"}, {"y"});
      b.output("y");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({batch, 32, 19, 21}, 29))}};
      auto want = interp::Interpreter(m).run(feeds);
      PlannedModel p(m, feeds, threads);
      const std::string what = "batch " + std::to_string(batch) + " threads " + std::to_string(threads);
      EXPECT_EQ(p.count("cpu blocked concat, batch normalization and relu fused"), 1) << what;
      for (int run = 0; run < 2; ++run) expect_near(p.run(feeds)[0].tensor, want[0].tensor, what);
    }
}

TEST(WinogradConv, BadPolicyIsAnError) {
  WinogradEnv env("fast");
  Case c{1, 8, 8, 8, 8, {1, 1, 1, 1}, "", 1};
  Model m = conv_model(c);
  try {
    PlannedModel p(m, feeds_of(c));
    FAIL() << "HODU_CPU_WINOGRAD=fast was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("HODU_CPU_WINOGRAD=fast"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::cpu
