// hodu's 1-D depthwise conv (depthwise_conv1d.cc) against the interpreter's direct conv: kernel
// sizes, strides, dilations, asymmetric and auto_pad paddings where taps reach only part of the
// outputs (or none), short and long rows, channel multipliers, batches, the fused activation and
// residual, one and two threads; HODU_CPU_DEPTHWISE_CONV1D=off hands the conv back to oneDNN.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

class DepthwiseEnv {
 public:
  explicit DepthwiseEnv(const char* value) { setenv("HODU_CPU_DEPTHWISE_CONV1D", value, 1); }
  ~DepthwiseEnv() { unsetenv("HODU_CPU_DEPTHWISE_CONV1D"); }
};

struct Case {
  std::vector<int64_t> x;  // N, C, W
  int64_t multiplier = 1;  // output channels per input channel
  int64_t kernel = 5, stride = 1, dilation = 1;
  std::vector<int64_t> pads = {2, 2};  // begin, end; empty: auto_pad
  std::string auto_pad = "";
  std::string act = "";  // "", "Relu", "Sigmoid" (Conv·Sigmoid(Conv): SiLU), "Clip"
  bool residual = false;
  int threads = 1;
};

Model depthwise_model(const Case& c) {
  GraphBuilder b;
  b.input("x", DType::F32, c.x);
  const int64_t cout = c.x[1] * c.multiplier;
  b.constant("w", random_floats({cout, 1, c.kernel}, 7, 0.5f));
  b.constant("bias", random_floats({cout}, 8));
  std::vector<Attribute> attrs = {Attribute::make_int("group", c.x[1]), Attribute::make_ints("strides", {c.stride}),
                                  Attribute::make_ints("dilations", {c.dilation})};
  if (c.auto_pad.empty()) attrs.push_back(Attribute::make_ints("pads", c.pads));
  else attrs.push_back(Attribute::make_string("auto_pad", c.auto_pad));
  b.node("Conv", {"x", "w", "bias"}, {"c"}, attrs);
  std::string out = "c";
  if (c.residual) {  // the conv's output shape is its input's here
    b.node("Add", {out, "x"}, {"r"});
    out = "r";
  }
  if (c.act == "Sigmoid") {
    b.node("Sigmoid", {out}, {"s"});
    b.node("Mul", {out, "s"}, {"a"});
    out = "a";
  } else if (c.act == "Clip") {
    b.constant("lo", Tensor::scalar<float>(DType::F32, -0.5f));
    b.constant("hi", Tensor::scalar<float>(DType::F32, 1.0f));
    b.node("Clip", {out, "lo", "hi"}, {"a"});
    out = "a";
  } else if (!c.act.empty()) {
    b.node(c.act, {out}, {"a"});
    out = "a";
  }
  b.node("Identity", {out}, {"y"});
  b.output("y");
  return b.finish();
}

void check(const Case& c) {
  Model m = depthwise_model(c);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats(c.x, 3))}};
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, c.threads);
  SCOPED_TRACE(p.steps());
  EXPECT_EQ(p.count("cpu depthwise conv1d"), 1);
  EXPECT_EQ(p.kernels().size(), 1u) << "bias, residual and activation run in the conv's step";
  EXPECT_TRUE(p.interp_ops().empty());
  for (int run = 0; run < 2; ++run) {
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 1u);
    testing::expect_close(got[0], want[0], 1e-5, 1e-5, "y");
  }
}

TEST(DepthwiseConv1d, SileroShapeMatchesInterpreter) {
  // Silero VAD v4's: 258 channels, 5 taps, 8 steps; and its narrow 16- and 32-channel ones.
  check({.x = {1, 258, 8}});
  check({.x = {1, 16, 4}});
  check({.x = {1, 32, 1}});  // one output: the outer taps reach only the padding
}

TEST(DepthwiseConv1d, WindowsMatchInterpreter) {
  check({.x = {2, 12, 37}, .kernel = 3, .stride = 2, .pads = {1, 1}});  // stride 2
  check({.x = {1, 9, 40}, .kernel = 3, .dilation = 4, .pads = {4, 4}});
  check({.x = {1, 8, 30}, .kernel = 7, .stride = 3, .dilation = 2, .pads = {0, 5}});  // uneven pads
  // A Conformer-style kernel longer than the input.
  check({.x = {1, 8, 11}, .kernel = 31, .pads = {15, 15}});
  check({.x = {1, 6, 20}, .kernel = 4, .pads = {}, .auto_pad = "SAME_UPPER"});  // even kernel
  check({.x = {1, 6, 20}, .kernel = 4, .stride = 2, .pads = {}, .auto_pad = "SAME_LOWER"});
  check({.x = {1, 6, 20}, .kernel = 4, .pads = {}, .auto_pad = "VALID"});
  check({.x = {2, 5, 16}, .multiplier = 3, .kernel = 3, .pads = {1, 1}});  // 3 outputs an input channel
  // Long rows: strided, dilated taps whose ranges end at different outputs.
  check({.x = {1, 4, 600}, .kernel = 9, .stride = 2, .dilation = 3, .pads = {5, 7}});
  check({.x = {1, 4, 700}, .kernel = 31, .pads = {15, 15}});
  check({.x = {1, 3, 2100}, .kernel = 3, .dilation = 1000, .pads = {2, 2}});  // taps 1000 apart
}

TEST(DepthwiseConv1d, FusedMatchesInterpreter) {
  check({.x = {1, 40, 50}, .act = "Relu"});
  check({.x = {1, 40, 50}, .act = "Sigmoid"});  // SiLU: the vector loop
  check({.x = {1, 40, 50}, .act = "Clip"});
  check({.x = {2, 24, 33}, .act = "Relu", .residual = true});  // residual, then the activation
}

TEST(DepthwiseConv1d, TwoThreadsMatchInterpreter) {
  // Enough work to use both threads: each output is the same sum as at one thread.
  Case c{.x = {2, 256, 200}, .kernel = 15, .pads = {7, 7}, .threads = 2};
  check(c);
  Model m = depthwise_model(c);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats(c.x, 5))}};
  auto one = PlannedModel(m, feeds, 1).run(feeds), two = PlannedModel(m, feeds, 2).run(feeds);
  EXPECT_EQ(std::memcmp(one[0].tensor.raw_data(), two[0].tensor.raw_data(), one[0].tensor.nbytes()), 0);
}

TEST(DepthwiseConv1d, OffKeepsOneDnnAndBadValueIsAnError) {
  Case c{.x = {1, 16, 10}};
  Model m = depthwise_model(c);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats(c.x, 3))}};
  {
    DepthwiseEnv off("off");
    PlannedModel p(m, feeds);
    EXPECT_EQ(p.count("cpu depthwise conv1d"), 0) << p.steps();
    EXPECT_EQ(p.count("onednn"), 1) << p.steps();
  }
  DepthwiseEnv bad("fast");
  try {
    PlannedModel p(m, feeds);
    ADD_FAILURE() << "HODU_CPU_DEPTHWISE_CONV1D=fast was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HODU_CPU_DEPTHWISE_CONV1D=fast"), std::string::npos) << e.what();
  }
}

TEST(DepthwiseConv1d, OtherConvsKeepTheirKernels) {
  // Two input channels a group, and a 2-D depthwise conv: not this kernel's.
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 8, 12});
  b.input("x2", DType::F32, std::vector<int64_t>{1, 8, 6, 6});
  b.constant("w", random_floats({8, 2, 3}, 7));
  b.constant("w2", random_floats({8, 1, 3, 3}, 9));
  b.node("Conv", {"x", "w"}, {"y"}, {Attribute::make_int("group", 4), Attribute::make_ints("pads", {1, 1})});
  b.node("Conv", {"x2", "w2"}, {"y2"}, {Attribute::make_int("group", 8), Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.output("y");
  b.output("y2");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 8, 12}, 3))},
                                               {"x2", RuntimeValue(random_floats({1, 8, 6, 6}, 4))}};
  auto p = testing::expect_matches_interpreter(m, feeds);
  EXPECT_EQ(p->count("cpu depthwise conv1d"), 0) << p->steps();
}

}  // namespace
}  // namespace hodu::cpu
