// The plans of a model with free input dims (one per input shape) share their packed weights
// (packed_weight_cache.h), and a model fed ever new shapes keeps a bounded number of plans:
// a decoder-like model (products with constant weights, a conv, an attention-like product of
// run-time operands) run at many sequence lengths, every result equal to the interpreter's.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::random_floats;

// x [1, 16, T] -> Conv1d k3 (16 -> 16) + Relu -> Transpose [0, 2, 1] -> MatMul W [16, 24]
// -> y [1, T, 24]; s = y · yᵀ [1, T, T] (run-time operands).
Model sequence_model() {
  GraphBuilder b;
  b.input("x", DType::F32, Shape({Dim(1), Dim(16), Dim::sym("t")}));
  b.constant("wc", random_floats({16, 16, 3}, 1, 0.3f));
  b.constant("bc", random_floats({16}, 2));
  b.constant("w", random_floats({16, 24}, 3, 0.3f));
  b.node("Conv", {"x", "wc", "bc"}, {"c"}, {Attribute::make_ints("pads", {1, 1})});
  b.node("Relu", {"c"}, {"r"});
  b.node("Transpose", {"r"}, {"rt"}, {Attribute::make_ints("perm", {0, 2, 1})});
  b.node("MatMul", {"rt", "w"}, {"y"});
  b.node("Transpose", {"y"}, {"yt"}, {Attribute::make_ints("perm", {0, 2, 1})});
  b.node("MatMul", {"y", "yt"}, {"s"});
  b.output("y");
  b.output("s");
  return b.finish();
}

TEST(PackedWeightCache, PlansOfNewShapesShareTheirPackedWeights) {
  Model m = sequence_model();
  engine_rewrites(m, -1);
  auto cache = std::make_shared<PackedWeightCache>();
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  size_t after_first = 0;
  for (int64_t t : {5, 9, 33}) {
    SCOPED_TRACE("t " + std::to_string(t));
    std::map<std::string, std::vector<int64_t>> shapes = {{"x", {1, 16, t}}};
    Model opt = m;
    passes::optimize(opt, {3, shapes});
    PlanOptions o;
    o.weight_cache = cache;
    Plan plan(opt, shapes, o, eng);
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 16, t}, 7))}};
    auto want = interp::Interpreter(m).run(feeds);
    auto got = plan.run(feeds, stream);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-5, m.graph.outputs[i].name);
    if (!after_first) after_first = cache->size();
    EXPECT_GT(after_first, 0u);  // the conv's and the product's weights, their biases
    EXPECT_EQ(cache->size(), after_first) << "a plan for a new shape packed its weights again";
  }
}

TEST(PackedWeightCache, ManyShapesThroughOneExecutableMatchInterpreter) {
  Model m = sequence_model();
  EngineOptions o;
  o.threads = 2;
  auto exe = make_cpu_engine()->prepare(m, o);
  // More shapes than the executable keeps plans for, then the first ones again (rebuilt).
  std::vector<int64_t> lengths;
  for (int64_t t = 3; t < 23; ++t) lengths.push_back(t);
  lengths.insert(lengths.end(), {3, 4, 22, 3});
  for (int64_t t : lengths) {
    SCOPED_TRACE("t " + std::to_string(t));
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 16, t}, static_cast<uint32_t>(t)))}};
    auto want = interp::Interpreter(m).run(feeds);
    auto got = exe->run(feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-5, m.graph.outputs[i].name);
  }
}

}  // namespace
}  // namespace hodu::cpu
