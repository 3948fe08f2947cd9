// hodu's tap-by-tap convolution (tap_conv.cc, kernels/cpu/tap_conv_avx2.h) against the
// interpreter's direct conv: dilations whose outer taps reach part of the outputs or none,
// paddings where no tap reaches every output, strides, 1-D convs, channels past one block of k,
// batches, fused bias and activations, one and two threads. Forced with HODU_CPU_TAP_CONV=on,
// so it runs on AVX-512 hosts too; ctest runs the suite again capped at AVX2, where `auto`
// must pick it for a dilated conv oneDNN would run as im2col + sgemm.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engines/cpu/tap_conv.h"
#include "engines/cpu/test_util.h"
#include "kernels/cpu/tap_conv_avx2.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

class TapConvEnv {
 public:
  explicit TapConvEnv(const char* value) { setenv("HODU_CPU_TAP_CONV", value, 1); }
  ~TapConvEnv() { unsetenv("HODU_CPU_TAP_CONV"); }
};

struct Case {
  std::vector<int64_t> x;  // N, C, (H,) W
  int64_t cout;
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string act;  // "", "Relu", "LeakyRelu", "Sigmoid", "Clip"
  int threads;
  int taps;  // the taps that reach some output
};

Model conv_model(const Case& c) {
  GraphBuilder b;
  b.input("x", DType::F32, c.x);
  std::vector<int64_t> ws = {c.cout, c.x[1]};
  ws.insert(ws.end(), c.kernel.begin(), c.kernel.end());
  b.constant("w", random_floats(ws, 7, 0.2f));
  b.constant("bias", random_floats({c.cout}, 8));
  b.node("Conv", {"x", "w", "bias"}, {"c"},
         {Attribute::make_ints("pads", c.pads), Attribute::make_ints("strides", c.strides),
          Attribute::make_ints("dilations", c.dilations)});
  std::string out = "c";
  if (c.act == "LeakyRelu") {
    b.node("LeakyRelu", {"c"}, {"a"}, {Attribute::make_float("alpha", 0.1f)});
    out = "a";
  } else if (c.act == "Clip") {
    b.constant("lo", Tensor::scalar<float>(DType::F32, -0.5f));
    b.constant("hi", Tensor::scalar<float>(DType::F32, 1.0f));
    b.node("Clip", {"c", "lo", "hi"}, {"a"});
    out = "a";
  } else if (!c.act.empty()) {
    b.node(c.act, {"c"}, {"a"});
    out = "a";
  }
  b.node("Identity", {out}, {"y"});
  b.output("y");
  return b.finish();
}

std::string describe(const Case& c) {
  std::string s = "x";
  for (int64_t d : c.x) s += " " + std::to_string(d);
  s += " cout " + std::to_string(c.cout) + " dilation " + std::to_string(c.dilations[0]) + " " + c.act + " threads " +
       std::to_string(c.threads);
  return s;
}

void check(const Case& c, bool expect_tap_conv) {
  const std::string what = describe(c);
  Model m = conv_model(c);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats(c.x, 3))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, c.threads);
  SCOPED_TRACE(p.steps());
  if (expect_tap_conv) {
    EXPECT_EQ(p.count("cpu tap conv avx2, " + std::to_string(c.taps) + " of"), 1) << what;
  }
  for (int run = 0; run < 2; ++run) {  // the second run reuses the plan's buffers
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 1u);
    testing::expect_close(got[0], want[0], 1e-4, 1e-4, what);
  }
}

TEST(TapConv, ForcedMatchesInterpreter) {
  if (!packed_gemm::available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2): the kernel cannot run";
  TapConvEnv env("on");
  const std::vector<Case> cases = {
      // DeepLab-style: dilation 4 at 16x16 (every tap reaches part), 20 input channels (a tail block).
      {{2, 20, 16, 16}, 16, {3, 3}, {1, 1}, {4, 4}, {4, 4, 4, 4}, "Relu", 2, 9},
      // Rate 12 at 10x10: only the centre tap reaches an output.
      {{1, 32, 10, 10}, 24, {3, 3}, {1, 1}, {12, 12}, {12, 12, 12, 12}, "", 1, 1},
      // Rate 6 at 9x11: outer taps reach a 3- or 5-wide band.
      {{1, 16, 9, 11}, 32, {3, 3}, {1, 1}, {6, 6}, {6, 6, 6, 6}, "Sigmoid", 2, 9},
      // No tap reaches every output (offsets -3 and +2 on each axis): y starts as the bias.
      {{1, 8, 7, 6}, 8, {2, 2}, {1, 1}, {5, 5}, {3, 3, 3, 3}, "Clip", 1, 4},
      // Stride 2 with dilation 2, unequal pads.
      {{2, 24, 15, 13}, 16, {3, 3}, {2, 2}, {2, 2}, {2, 1, 0, 2}, "LeakyRelu", 2, 9},
      // Unpadded: every tap reaches every output; the activation goes with the last product.
      {{1, 16, 12, 12}, 8, {3, 3}, {1, 1}, {2, 2}, {0, 0, 0, 0}, "Relu", 1, 9},
      // Input channels past one 256-deep block of k, a 5x3 kernel.
      {{1, 264, 12, 12}, 32, {5, 3}, {1, 1}, {3, 6}, {6, 6, 6, 6}, "", 2, 15},
      // 1-D (a dilated TCN layer): dilation 8 over 50 steps, a 1-D activation.
      {{2, 32, 50}, 24, {3}, {1}, {8}, {8, 8}, "Tanh", 2, 3},
  };
  for (const auto& c : cases) check(c, true);
}

// The taps that reach an output and the products they cost, without running anything.
TEST(TapConv, TapsReachingTheImage) {
  tap_conv::ConvShape s;
  s.cin = 8, s.cout = 8, s.h = s.w = s.oh = s.ow = 28, s.kh = s.kw = 3;
  for (auto [rate, taps, first_full] : {std::tuple{12, 9, true}, {24, 9, true}, {36, 1, true}}) {
    s.dilation_h = s.dilation_w = s.pad_top = s.pad_left = rate;
    auto t = tap_conv::taps_of(s);
    EXPECT_EQ(static_cast<int>(t.size()), taps) << "rate " << rate;
    ASSERT_FALSE(t.empty());
    EXPECT_EQ(t[0].covers_all(s), first_full) << "rate " << rate;
    EXPECT_EQ(t[0].ky, 1);
    EXPECT_EQ(t[0].kx, 1);
  }
  // Rate 24 at 28: an outer tap reaches 4 rows (or columns) of 28.
  s.dilation_h = s.dilation_w = s.pad_top = s.pad_left = 24;
  EXPECT_NEAR(tap_conv::valid_fraction(s), (28.0 + 2 * 4) * (28 + 2 * 4) / (9.0 * 28 * 28), 1e-12);
}

// Capped at AVX2 (ctest's cpu_engine_test_avx2), oneDNN 2.6 runs a dilation-4 conv as
// im2col + sgemm, so `auto` takes the tap conv; elsewhere oneDNN's own kernel stays. Outputs as
// the interpreter's either way, and HODU_CPU_TAP_CONV=off keeps oneDNN's kernel.
TEST(TapConv, AutoTakesDilatedConvsOneDnnRunsAsGemmAndMatchesInterpreter) {
  const Case c{{1, 64, 28, 28}, 64, {3, 3}, {1, 1}, {4, 4}, {4, 4, 4, 4}, "Relu", 2, 9};
  Model m = conv_model(c);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats(c.x, 3))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, c.threads);
  SCOPED_TRACE(p.steps());
  const bool onednn_gemm = p.count("gemm") == 1;
  if (vector_math::cpu_isa() == vector_math::Isa::Avx2) {
    EXPECT_EQ(p.count("cpu tap conv"), 1) << "oneDNN 2.6 below AVX-512 has no jit kernel for dilation 4";
  } else {
    EXPECT_EQ(p.count("cpu tap conv"), onednn_gemm && packed_gemm::available() ? 1 : 0);
  }
  testing::expect_close(p.run(feeds)[0], want[0], 1e-4, 1e-4, "auto");
  TapConvEnv off("off");
  PlannedModel q(m, feeds, c.threads);
  EXPECT_EQ(q.count("cpu tap conv"), 0);
  testing::expect_close(q.run(feeds)[0], want[0], 1e-4, 1e-4, "off");
}

TEST(TapConv, UnknownPolicyIsAnError) {
  TapConvEnv env("fast");
  EXPECT_THROW(tap_conv_policy(), Error);
}

}  // namespace
}  // namespace hodu::cpu
