// MaxPool of a plain f32 NCHW tensor against the interpreter: strides, pads, dilations,
// ceil_mode, windows reaching past the edges. Below AVX-512 (ctest cpu_engine_test_avx2) oneDNN
// 2.6 has only its simple_nchw kernel for that layout and the plan takes the engine's plane
// loop (dnnl_pool.cc); no plan runs a reference pooling.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::PlannedModel;
using testing::random_floats;

// The plan of `m` (one pool) runs no reference or simple_nchw pooling, nor the interpreter, and
// its output matches the interpreter's within `tol` (relative and absolute).
void expect_no_reference_pool_and_matches(const Model& m, const std::map<std::string, RuntimeValue>& feeds,
                                          double tol) {
  auto want = interp::Interpreter(m).run(feeds);
  PlannedModel p(m, feeds, 2);
  SCOPED_TRACE(p.steps());
  EXPECT_EQ(p.count("simple_nchw"), 0);
  EXPECT_EQ(p.count("onednn ref"), 0);
  EXPECT_EQ(p.count(": interp"), 0);
  auto got = p.run(feeds);
  ASSERT_EQ(got.size(), 1u);
  testing::expect_close(got[0], want[0], tol, tol, "y");
}

struct PoolCase {
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceil = false;
};

TEST(CpuPool, PlainMaxPoolMatchesInterpreter) {
  const std::vector<PoolCase> cases = {
      {{3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true},   // SqueezeNet's 3x3/2, ceil_mode
      {{2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, false},  // openWakeWord's 2x2/2
      {{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false},  // padded, stride 1
      {{3, 2}, {2, 3}, {1, 0, 2, 1}, {2, 1}, false},  // uneven pads, dilation, mixed strides
      {{1, 3}, {1, 2}, {0, 2, 0, 2}, {1, 1}, true},   // a pad as wide as the window's reach
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    GraphBuilder b;
    b.input("x", DType::F32, std::vector<int64_t>{2, 5, 13, 11});
    b.node("MaxPool", {"x"}, {"y"},
           {Attribute::make_ints("kernel_shape", c.kernel), Attribute::make_ints("strides", c.strides),
            Attribute::make_ints("pads", c.pads), Attribute::make_ints("dilations", c.dilations),
            Attribute::make_int("ceil_mode", c.ceil ? 1 : 0)});
    b.output("y");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 5, 13, 11}, 7 + i, 2.0f))}};
    expect_no_reference_pool_and_matches(m, feeds, 0.0);
  }
}

// MaxPool after a conv that writes channels-last (AVX-512's brgemm kernel on the image, as in
// SqueezeNet's stem): hodu's nhwc loop takes it as it lies, no reorder; oneDNN 2.6's jit kernel
// for nhwc was 1.5x slower than ONNX Runtime's. Exact against the interpreter on the same conv
// output (the max adds no rounding), ceil_mode windows reaching past the edge included.
TEST(CpuPool, MaxPoolOfChannelsLastConvMatchesInterpreter) {
  for (int64_t channels : {32, 24}) {
    SCOPED_TRACE("channels " + std::to_string(channels));
    GraphBuilder b;
    b.input("x", DType::F32, std::vector<int64_t>{2, 3, 29, 31});
    b.constant("w", random_floats({channels, 3, 3, 3}, 5, 0.5f));
    b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("strides", {2, 2})});
    b.node("MaxPool", {"c"}, {"y"},
           {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
            Attribute::make_int("ceil_mode", 1)});
    b.output("y");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 3, 29, 31}, 3, 1.0f))}};
    auto p = testing::expect_matches_interpreter(m, feeds, 1e-5, 1e-5, 2);
    SCOPED_TRACE(p->steps());
    EXPECT_EQ(p->count("onednn ref"), 0);
    if (p->count("brgconv") == 1) {
      EXPECT_EQ(p->count("cpu max pool (nhwc)"), 1);
    }
  }
}

// A window of -inf values gives -inf (the interpreter's), not the float type's least finite
// value, and a NaN in a window is skipped as the interpreter skips it, on whichever kernel the
// plan takes for a plain input (hodu's plane loop below AVX-512: ctest cpu_engine_test_avx2).
TEST(CpuPool, MaxPoolOfInfinitiesAndNaNsMatchesInterpreter) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 2, 4, 4});
  b.node("MaxPool", {"x"}, {"y"}, {Attribute::make_ints("kernel_shape", {2, 2}), Attribute::make_ints("strides", {2, 2})});
  b.output("y");
  Model m = b.finish();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(32, -inf);  // channel 0: all -inf
  for (int i = 16; i < 32; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  v[16] = nan;  // channel 1: a NaN beside finite values
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(Tensor::from_vector(DType::F32, {1, 2, 4, 4}, v))}};
  auto want = interp::Interpreter(m).run(feeds);
  EXPECT_EQ(want[0].tensor.data<float>()[0], -inf);
  expect_no_reference_pool_and_matches(m, feeds, 0.0);
}

// AveragePool (counting its pads or not) of a plain input: below
// AVX-512 oneDNN's kernels for that layout are simple_nchw, so the plan reorders the input to
// channel blocks for its jit kernel (Inception v3's pools: 41 -> 1.2 ms at AVX2).
TEST(CpuPool, PlainAveragePoolRunsAJitKernelAndMatchesInterpreter) {
  for (int64_t include : {0, 1})
    for (const std::vector<int64_t>& pads : {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{0, 2, 1, 0}}) {
      SCOPED_TRACE("count_include_pad " + std::to_string(include) + " pads " + std::to_string(pads[1]));
      GraphBuilder b;
      b.input("x", DType::F32, std::vector<int64_t>{2, 13, 9, 12});
      b.node("Transpose", {"x"}, {"t"}, {Attribute::make_ints("perm", {0, 1, 3, 2})});  // a plain input
      b.node("AveragePool", {"t"}, {"y"},
             {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("pads", pads),
              Attribute::make_int("count_include_pad", include)});
      b.output("y");
      Model m = b.finish();
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({2, 13, 9, 12}, 11, 2.0f))}};
      expect_no_reference_pool_and_matches(m, feeds, 1e-6);
    }
}

}  // namespace
}  // namespace hodu::cpu
