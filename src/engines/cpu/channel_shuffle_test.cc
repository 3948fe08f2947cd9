// ShuffleNet's channel shuffle (Concat -> Reshape [N, g, C/g, H, W] -> Transpose [0, 2, 1, 3, 4]
// -> Reshape [N, C, H, W] -> Slices or Split) between convs, as torch and paddle2onnx export it:
// one cpu channel shuffle step in the convs' layout, no Transpose, Slice, Concat or reorder of
// its own, results equal to the interpreter's at channel counts that leave part of a block
// empty, batch 2, both ISAs (ctest cpu_engine_test_avx2 runs the *MatchesInterpreter* tests).
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::int64s;
using testing::PlannedModel;
using testing::random_floats;

enum class Take { Slices, Split, Whole };

struct Case {
  int64_t left, right;  // channels of the two branches concatenated
  int64_t groups;
  Take take;
  bool paddle_shape;  // Reshape shapes [0, g, -1, H, W] and [0, -1, H, W] instead of explicit ones
};

std::string describe(const Case& c, int64_t batch, int threads) {
  return "left " + std::to_string(c.left) + " right " + std::to_string(c.right) + " groups " +
         std::to_string(c.groups) + " take " + std::to_string(static_cast<int>(c.take)) + (c.paddle_shape ? " paddle" : "") +
         " batch " + std::to_string(batch) + " threads " + std::to_string(threads);
}

// x [N, 8, 10, 12] -> Conv 3x3 + Relu (left channels) and Conv 1x1 (right channels) -> the shuffle
// -> its halves (Slices or a Split) each into a 1x1 Conv, or the whole into one 1x1 Conv.
Model shuffle_block(const Case& c, int64_t batch) {
  const int64_t ch = c.left + c.right, h = 10, w = 12;
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{batch, 8, h, w});
  b.constant("w0", random_floats({c.left, 8, 3, 3}, 1, 0.4f));
  b.constant("b0", random_floats({c.left}, 2));
  b.constant("w1", random_floats({c.right, 8, 1, 1}, 3, 0.4f));
  const int64_t half = ch / 2;
  b.constant("wa", random_floats({7, half, 1, 1}, 4, 0.3f));
  b.constant("wb", random_floats({9, ch - half, 1, 1}, 5, 0.3f));
  b.constant("ww", random_floats({11, ch, 1, 1}, 6, 0.2f));
  auto ints = [](const char* n, std::vector<int64_t> v) { return Attribute::make_ints(n, std::move(v)); };
  b.node("Conv", {"x", "w0", "b0"}, {"c0"}, {ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"x", "w1"}, {"c1"});
  b.node("Concat", {"r0", "c1"}, {"cat"}, {Attribute::make_int("axis", 1)});
  b.constant("s5", c.paddle_shape ? int64s({0, c.groups, -1, h, w}) : int64s({batch, c.groups, ch / c.groups, h, w}));
  b.constant("s4", c.paddle_shape ? int64s({0, -1, h, w}) : int64s({batch, ch, h, w}));
  b.node("Reshape", {"cat", "s5"}, {"r5"});
  b.node("Transpose", {"r5"}, {"t5"}, {ints("perm", {0, 2, 1, 3, 4})});
  b.node("Reshape", {"t5", "s4"}, {"shuffled"});
  if (c.take == Take::Whole) {
    b.node("Conv", {"shuffled", "ww"}, {"y"});
    b.output("y");
    return b.finish();
  }
  if (c.take == Take::Slices) {
    b.constant("zero", int64s({0}));
    b.constant("mid", int64s({half}));
    b.constant("end", int64s({ch}));
    b.constant("axis", int64s({1}));
    b.node("Slice", {"shuffled", "zero", "mid", "axis"}, {"a"});
    b.node("Slice", {"shuffled", "mid", "end", "axis"}, {"bh"});
  } else {
    b.constant("sizes", int64s({half, ch - half}));
    b.node("Split", {"shuffled", "sizes"}, {"a", "bh"}, {Attribute::make_int("axis", 1)});
  }
  b.node("Conv", {"a", "wa"}, {"ya"});
  b.node("Conv", {"bh", "wb"}, {"yb"});
  b.output("ya");
  b.output("yb");
  return b.finish();
}

TEST(ChannelShuffle, ShuffleBetweenConvsMatchesInterpreter) {
  const Case cases[] = {
      {13, 13, 2, Take::Slices, false},  // halves of 13: blocks of 8/16 left part empty
      {24, 24, 2, Take::Slices, false},  {16, 16, 2, Take::Split, true},   {29, 29, 2, Take::Split, false},
      {9, 12, 3, Take::Whole, true},     // unequal branches, three groups, the whole tensor into a conv
      {12, 20, 4, Take::Slices, true},
  };
  for (const Case& c : cases) {
    for (int64_t batch : {1, 2}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(describe(c, batch, threads));
        Model m = shuffle_block(c, batch);
        std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({batch, 8, 10, 12}, 11, 1.5f))}};
        auto want = interp::Interpreter(m).run(feeds);
        PlannedModel p(m, feeds, threads);
        std::string steps;
        for (const auto& k : p.kernels()) steps += k + "\n";
        SCOPED_TRACE(steps);
        EXPECT_EQ(p.count("cpu channel shuffle"), 1);
        EXPECT_EQ(p.count("into its 2 slices"), c.take == Take::Whole ? 0 : 1);
        // Nothing of the shuffle runs as a step of its own, and the convs' layout goes through it:
        // the only layout changes are the image's (into the convs' layout) and the graph outputs'.
        EXPECT_EQ(p.count("(Transpose)"), 0);
        EXPECT_EQ(p.count("(Slice)"), 0);
        EXPECT_EQ(p.count("(Split)"), 0);
        EXPECT_EQ(p.count("(Reshape)"), 0);
        EXPECT_EQ(p.count("(Concat)"), 1);  // the shuffle's step, labelled with the Concat it starts at
        int reorders = 0;
        for (const auto& k : p.kernels()) reorders += k.rfind("reorder '", 0) == 0 && k.rfind("reorder 'x'", 0) != 0;
        EXPECT_EQ(reorders, static_cast<int>(m.graph.outputs.size()));
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

// A shuffle of a graph input (plain, no Concat: the chain starts at the Reshape) into graph
// outputs, and one whose shuffled tensor is also a graph output (the Slices then stay steps).
TEST(ChannelShuffle, PlainShuffleMatchesInterpreter) {
  for (bool whole_out : {false, true}) {
    SCOPED_TRACE(whole_out ? "shuffled tensor an output" : "slices the outputs");
    GraphBuilder b;
    b.input("x", DType::F32, std::vector<int64_t>{2, 10, 3, 5});
    b.constant("s5", int64s({2, 2, 5, 3, 5}));
    b.constant("s4", int64s({2, 10, 3, 5}));
    b.constant("zero", int64s({0}));
    b.constant("mid", int64s({5}));
    b.constant("end", int64s({10}));
    b.constant("axis", int64s({1}));
    b.node("Reshape", {"x", "s5"}, {"r5"});
    b.node("Transpose", {"r5"}, {"t5"}, {Attribute::make_ints("perm", {0, 2, 1, 3, 4})});
    b.node("Reshape", {"t5", "s4"}, {"shuffled"});
    b.node("Slice", {"shuffled", "zero", "mid", "axis"}, {"a"});
    b.node("Slice", {"shuffled", "mid", "end", "axis"}, {"c"});
    b.output("a");
    b.output("c");
    if (whole_out) b.output("shuffled");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 10, 3, 5}, 3))}};
    auto want = interp::Interpreter(m).run(feeds);
    PlannedModel p(m, feeds);
    EXPECT_EQ(p.count("cpu channel shuffle (2 groups, plain"), 1);
    EXPECT_EQ(p.count("(Slice)"), whole_out ? 2 : 0);
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), want.size());
    // A copy: the values equal the interpreter's exactly.
    for (size_t i = 0; i < got.size(); ++i) testing::expect_close(got[i], want[i], 0, 0, m.graph.outputs[i].name);
  }
}

}  // namespace
}  // namespace hodu::cpu
