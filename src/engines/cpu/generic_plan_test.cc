// A model fed a dim that keeps changing (a decoder's growing cache, text of any length) gets one
// plan with that dim free after a few shapes (cpu_engine.cc), where its kernels allow: the
// products of run-time shapes (MatMul, hodu.FusedMatMul's scaled Q·Kᵀ) run on oneDNN's sgemm
// per run. Every result equal to the interpreter's; the free-dim plan seen in the profile.
#include <gtest/gtest.h>

#include "engines/cpu/test_util.h"
#include "runtime/profiler.h"

namespace hodu::cpu {
namespace {

using testing::GraphBuilder;
using testing::random_floats;

// x [1, T, 16] -> y = x·W [1, T, 24]; s = softmax(0.125 · y·yᵀ + m) [1, T, T], m a [T, T] input.
Model attention_like() {
  GraphBuilder b;
  b.input("x", DType::F32, Shape({Dim(1), Dim::sym("t"), Dim(16)}));
  b.input("m", DType::F32, Shape({Dim::sym("t"), Dim::sym("t")}));
  b.constant("w", random_floats({16, 24}, 3, 0.3f));
  b.node("MatMul", {"x", "w"}, {"y"});
  b.node("Transpose", {"y"}, {"yt"}, {Attribute::make_ints("perm", {0, 2, 1})});
  b.node("MatMul", {"y", "yt"}, {"p"});
  b.constant("scale", Tensor::scalar<float>(DType::F32, 0.125f));
  b.node("Mul", {"p", "scale"}, {"ps"});
  b.node("Add", {"ps", "m"}, {"pm"});
  b.node("Softmax", {"pm"}, {"s"}, {Attribute::make_int("axis", -1)});
  b.output("y");
  b.output("s");
  return b.finish();
}

TEST(GenericPlan, GrowingDimRunsOnOnePlanAndMatchesInterpreter) {
  Model m = attention_like();
  for (int threads : {1, 2}) {
    EngineOptions o;
    o.threads = threads;
    auto exe = make_cpu_engine()->prepare(m, o);
    for (int64_t t = 2; t < 12; ++t) {
      SCOPED_TRACE("t " + std::to_string(t) + " threads " + std::to_string(threads));
      std::map<std::string, RuntimeValue> feeds = {
          {"x", RuntimeValue(random_floats({1, t, 16}, static_cast<uint32_t>(t)))},
          {"m", RuntimeValue(random_floats({t, t}, static_cast<uint32_t>(100 + t)))}};
      auto want = interp::Interpreter(m).run(feeds);
      Profiler profiler;
      profiler.start();
      auto got = exe->run(feeds);
      profiler.stop();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-5, m.graph.outputs[i].name);
      int run_time_products = 0, interp = 0;
      for (const auto& e : profiler.events()) {
        if (e.category != "Node") continue;
        run_time_products += e.kernel.find("shapes known while running") != std::string::npos;
        interp += e.kernel == "interp";
      }
      EXPECT_EQ(interp, 0);
      // The first shapes get plans of their own (their products on oneDNN primitives); from the
      // fourth new shape on, the free-dim plan runs both products on sgemm.
      EXPECT_EQ(run_time_products, t >= 5 ? 2 : 0);
    }
    // A length the free-dim plan ran comes again: then it gets a plan of its own (oneDNN's
    // products), still equal to the interpreter's.
    for (int again = 0; again < 2; ++again) {
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, 7, 16}, 70))},
                                                   {"m", RuntimeValue(random_floats({7, 7}, 71))}};
      auto want = interp::Interpreter(m).run(feeds);
      Profiler profiler;
      profiler.start();
      auto got = exe->run(feeds);
      profiler.stop();
      for (size_t i = 0; i < got.size(); ++i) testing::expect_close(got[i], want[i], 1e-4, 1e-5, m.graph.outputs[i].name);
      int run_time_products = 0;
      for (const auto& e : profiler.events())
        run_time_products += e.category == "Node" && e.kernel.find("shapes known while running") != std::string::npos;
      EXPECT_EQ(run_time_products, 0) << "run " << again << " of a length seen before";
    }
  }
}

// A reshape of a value allocated while running is a view of it, not a copy (a decoder stacking
// its growing cache): the value is still read after the view by another node, and both runs of
// each length (the second reuses the plan's buffers) equal the interpreter's.
TEST(GenericPlan, RunTimeReshapeViewMatchesInterpreter) {
  GraphBuilder b;
  b.input("x", DType::F32, Shape({Dim(1), Dim::sym("t"), Dim(8)}));
  b.constant("w", random_floats({8, 8}, 5, 0.5f));
  b.constant("axes", testing::int64s({0}));
  b.node("MatMul", {"x", "w"}, {"a"});
  b.node("Unsqueeze", {"a", "axes"}, {"u"});
  b.node("Concat", {"u", "u"}, {"c"}, {Attribute::make_int("axis", 0)});
  b.node("Relu", {"c"}, {"y"});
  b.node("Sigmoid", {"a"}, {"s"});
  b.output("y");
  b.output("s");
  Model m = b.finish();
  EngineOptions o;
  o.threads = 1;
  auto exe = make_cpu_engine()->prepare(m, o);
  for (int64_t t = 2; t < 12; ++t)
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE("t " + std::to_string(t) + " run " + std::to_string(run));
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_floats({1, t, 8}, static_cast<uint32_t>(t * 2 + run)))}};
      auto want = interp::Interpreter(m).run(feeds);
      auto got = exe->run(feeds);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) testing::expect_close(got[i], want[i], 1e-5, 1e-6, m.graph.outputs[i].name);
    }
}

}  // namespace
}  // namespace hodu::cpu
