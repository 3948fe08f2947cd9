// Nearest Resize between convs: read and written in the convs' blocked layout (nChw8c/16c, or
// nhwc where AVX-512's brgemm convs use it), against the interpreter: integer and fractional
// scales, sizes, every nearest_mode, channels not a multiple of the block, batch 2, 1 and 2
// threads. ctest runs these at the host ISA and capped at AVX2.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

struct NearestCase {
  std::vector<float> scales;    // or empty: sizes
  std::vector<int64_t> sizes;
  std::string ctm, nearest_mode;
};

TEST(CpuResize, BlockedNearestBetweenConvsMatchesInterpreter) {
  const std::vector<NearestCase> cases = {
      {{1, 1, 2, 2}, {}, "asymmetric", "floor"},                   // an FPN neck's x2 upsampling
      {{1, 1, 2, 3}, {}, "half_pixel", "round_prefer_floor"},
      {{}, {2, 20, 13, 11}, "half_pixel", "round_prefer_ceil"},   // sizes, not a multiple
      {{1, 1, 0.5f, 0.75f}, {}, "align_corners", "ceil"},         // downsampling
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (int threads : {1, 2}) {
      const NearestCase& c = cases[i];
      SCOPED_TRACE("case " + std::to_string(i) + " threads " + std::to_string(threads));
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{2, 8, 9, 7});
      b.constant("w0", random_floats({20, 8, 3, 3}, 5, 0.3f));
      b.node("Conv", {"x", "w0"}, {"c0"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      if (c.scales.empty()) {
        b.constant("sizes", Tensor::from_vector<int64_t>(DType::I64, {4}, c.sizes));
        b.node("Resize", {"c0", "", "", "sizes"}, {"r"},
               {Attribute::make_string("mode", "nearest"), Attribute::make_string("coordinate_transformation_mode", c.ctm),
                Attribute::make_string("nearest_mode", c.nearest_mode)});
      } else {
        b.constant("scales", Tensor::from_vector<float>(DType::F32, {4}, c.scales));
        b.node("Resize", {"c0", "", "scales"}, {"r"},
               {Attribute::make_string("mode", "nearest"), Attribute::make_string("coordinate_transformation_mode", c.ctm),
                Attribute::make_string("nearest_mode", c.nearest_mode)});
      }
      b.constant("w1", random_floats({6, 20, 3, 3}, 6, 0.3f));
      b.node("Conv", {"r", "w1"}, {"y"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
      b.output("y");
      b.output("r");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 8, 9, 7}, 4))}};
      auto want = interp::Interpreter(m).run(feeds);
      PlannedModel p(m, feeds, threads);
      SCOPED_TRACE(p.steps());
      EXPECT_EQ(p.count("nearest resize"), 1);
      for (int run = 0; run < 2; ++run) {
        auto got = p.run(feeds);
        ASSERT_EQ(got.size(), 2u);
        testing::expect_close(got[0], want[0], 1e-4, 1e-4, "y");  // the convs: Winograd's rounding
        testing::expect_close(got[1], want[1], 1e-5, 1e-5, "r");
      }
    }
}

}  // namespace
}  // namespace hodu::cpu
