// Zero channels appended before a residual Add, as tf2onnx writes BlazeFace's blocks
// (Concat(x, zeros) on channels, or a Pad of the channel axis): a view of the conv output's
// blocked bytes (channel_zero_pad.cc) where the wider count stays within its last block, no
// Concat/Pad step and no reorder, results equal to the interpreter's; both ISAs (ctest
// cpu_engine_test_avx2 runs the *MatchesInterpreter* tests).
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::int64s;
using testing::PlannedModel;
using testing::random_floats;

enum class Widen { Concat, Pad, NonZeroConcat };

// x [N, 8, 12, 10] -> Conv 1x1 + `act` (c channels) -> depthwise 3x3 -> Conv 1x1 (c + extra)
// + the activation's output widened by `extra` zero channels -> Relu. An activation with
// f(0) != 0 (HardSigmoid) checks that the conv's padding channels are still zeros under it.
Model widening_block(int64_t batch, int64_t c, int64_t extra, Widen how, bool widened_is_output,
                     const std::string& act) {
  const int64_t h = 12, w = 10;
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{batch, 8, h, w});
  b.constant("w0", random_floats({c, 8, 1, 1}, 1, 0.4f));
  b.constant("b0", random_floats({c}, 2));
  b.constant("wd", random_floats({c, 1, 3, 3}, 3, 0.4f));
  b.constant("w1", random_floats({c + extra, c, 1, 1}, 4, 0.3f));
  b.constant("b1", random_floats({c + extra}, 5));
  b.node("Conv", {"x", "w0", "b0"}, {"c0"});
  b.node(act, {"c0"}, {"r0"});
  b.node("Conv", {"r0", "wd"}, {"d"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", c)});
  b.node("Conv", {"d", "w1", "b1"}, {"p"});
  if (how == Widen::Pad) {
    b.constant("pads", int64s({0, 0, 0, 0, 0, extra, 0, 0}));
    b.node("Pad", {"r0", "pads"}, {"wide"});
  } else {
    Tensor z = Tensor::zeros(DType::F32, {batch, extra, h, w});
    if (how == Widen::NonZeroConcat) z.data<float>()[3] = 0.5f;
    b.constant("zeros", z);
    b.node("Concat", {"r0", "zeros"}, {"wide"}, {Attribute::make_int("axis", 1)});
  }
  b.node("Add", {"p", "wide"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  if (widened_is_output) b.output("wide");
  return b.finish();
}

struct Case {
  int64_t channels, extra;
  Widen how;
  bool widened_is_output;
  std::string act = "Relu";
};

TEST(ChannelZeroPad, WideningBeforeResidualAddMatchesInterpreter) {
  const Case cases[] = {
      {28, 4, Widen::Concat, false},        // within the last block of 8 and of 16: a view at every ISA
      {28, 4, Widen::Pad, false},           // the same as tf2onnx's Pad
      {24, 4, Widen::Concat, false},        // BlazeFace's first block: a view on nChw16c (AVX-512) only
      {28, 4, Widen::NonZeroConcat, false},  // not zeros: a Concat step
      {28, 4, Widen::Concat, true},         // the widened tensor a graph output: copied, not a view
      {24, 4, Widen::Concat, false, "HardSigmoid"},  // oneDNN keeps the padding zero under f(0) = 0.5
      {28, 4, Widen::Pad, false, "HardSigmoid"},
  };
  const bool avx512 = vector_math::cpu_isa() == vector_math::Isa::Avx512;
  for (const Case& c : cases) {
    for (int64_t batch : {1, 2}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE("channels " + std::to_string(c.channels) + " + " + std::to_string(c.extra) + " how " +
                     std::to_string(static_cast<int>(c.how)) + (c.widened_is_output ? " (an output)" : "") + " " + c.act +
                     " batch " + std::to_string(batch) + " threads " + std::to_string(threads));
        Model m = widening_block(batch, c.channels, c.extra, c.how, c.widened_is_output, c.act);
        std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({batch, 8, 12, 10}, 11, 1.5f))}};
        auto want = interp::Interpreter(m).run(feeds);
        PlannedModel p(m, feeds, threads);
        std::string steps;
        for (const auto& k : p.kernels()) steps += k + "\n";
        SCOPED_TRACE(steps);
        EXPECT_TRUE(p.interp_ops().empty());
        const bool view = vector_math::cpu_isa() != vector_math::Isa::Plain && c.how != Widen::NonZeroConcat &&
                          !c.widened_is_output && (c.channels % 8 == 4 ? true : avx512);
        const int widen_steps = p.count("(Concat)") + p.count("(Pad)");
        if (view) {
          EXPECT_EQ(widen_steps, 0);
          // Layout changes: the image into the convs' layout and the output out of it.
          int reorders = 0;
          for (const auto& k : p.kernels()) reorders += k.rfind("reorder '", 0) == 0;
          EXPECT_EQ(reorders, 2);
        } else {
          EXPECT_EQ(widen_steps, 1);
        }
        for (int run = 0; run < 2; ++run) {  // the second run reuses the arena
          auto got = p.run(feeds);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i)
            testing::expect_close(got[i], want[i], 1e-4, 1e-5, m.graph.outputs[i].name + ", run " + std::to_string(run));
        }
      }
    }
  }
}

}  // namespace
}  // namespace hodu::cpu
