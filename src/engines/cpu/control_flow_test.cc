// If, Loop and Scan on the cpu engine: results equal the interpreter's, bodies run on the
// engine's kernels (no interpreter fallback inside), outer values and carried values behave.
#include <gtest/gtest.h>

#include "engines/cpu/subgraph.h"
#include "engines/cpu/test_util.h"
#include "passes/passes.h"
#include "runtime/profiler.h"

namespace hodu::cpu {
namespace {

using namespace testing;  // NOLINT

// A subgraph built node by node.
struct Body {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Body& input(const std::string& name, DType dt, std::vector<int64_t> shape) {
    g->inputs.push_back({name, ValueType::tensor(dt, Shape::from(shape)), ""});
    return *this;
  }
  Body& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
             std::vector<Attribute> attrs = {}) {
    g->nodes.push_back(hodu::testing::test_node(op, std::move(ins), std::move(outs), std::move(attrs)));
    return *this;
  }
  Body& output(const std::string& name, DType dt, Shape shape) {
    g->outputs.push_back({name, ValueType::tensor(dt, std::move(shape)), ""});
    return *this;
  }
};

Model if_model(bool static_shapes) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{2, 3});
  b.input("c", DType::Bool, std::vector<int64_t>{});
  b.constant("w", random_floats({3}, 1));
  Body then_b, else_b;
  // then: (x * w + x), through an If whose condition is a constant (inlined when planned).
  Body inner_t, inner_e;
  inner_t.node("Add", {"t1", "x"}, {"t2"}).output("t2", DType::F32, Shape::from({2, 3}));
  inner_e.node("Sub", {"t1", "x"}, {"t3"}).output("t3", DType::F32, Shape::from({2, 3}));
  then_b.g->set_initializer("yes", boolean(true));
  then_b.node("Mul", {"x", "w"}, {"t1"})
      .node("If", {"yes"}, {"t4"},
            {Attribute::make_graph("then_branch", inner_t.g), Attribute::make_graph("else_branch", inner_e.g)})
      .output("t4", DType::F32, Shape::from({2, 3}));
  if (static_shapes) {
    else_b.output("x", DType::F32, Shape::from({2, 3}));  // the outer value itself
  } else {
    else_b.node("Concat", {"x", "x"}, {"e1"}, {Attribute::make_int("axis", 0)})
        .output("e1", DType::F32, Shape::from({4, 3}));
  }
  b.node("If", {"c"}, {"y"},
         {Attribute::make_graph("then_branch", then_b.g), Attribute::make_graph("else_branch", else_b.g)});
  b.node("Sigmoid", {"y"}, {"z"});
  b.output("z");
  b.output("y");
  return b.finish();
}

TEST(CpuControlFlow, IfRunsTheTakenBranchOnEngineKernels) {
  for (bool static_shapes : {true, false})
    for (bool cond : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "static " << static_shapes << " cond " << cond);
      Model m = if_model(static_shapes);
      std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({2, 3}, 2)}, {"c", boolean(cond)}};
      auto p = expect_matches_interpreter(m, feeds);
      EXPECT_EQ(p->count("(If): cpu subgraph"), 1);
      // A Sigmoid of an If output whose shape depends on the branch: a kernel sized when it runs.
      EXPECT_EQ(p->interp_ops(), std::set<std::string>{});
      if (cond) {
        // The inner If with a constant condition became the branch's nodes.
        EXPECT_EQ(p->count("(If)"), 1);
        EXPECT_EQ(p->count("(Add)"), 1);
      }
    }
}

// v = If(c, x, x[start:end] along `axis`): a value whose shape the plan cannot know.
void if_of_two_shapes(GraphBuilder& b, int64_t start, int64_t end, int64_t axis) {
  Body then_b, else_b;
  then_b.node("Identity", {"x"}, {"t"}).output("t", DType::F32, Shape::unknown_rank());
  b.constant("starts", Tensor::from_vector<int64_t>(DType::I64, {1}, {start}));
  b.constant("ends", Tensor::from_vector<int64_t>(DType::I64, {1}, {end}));
  b.constant("axes", Tensor::from_vector<int64_t>(DType::I64, {1}, {axis}));
  else_b.node("Slice", {"x", "starts", "ends", "axes"}, {"e"}).output("e", DType::F32, Shape::unknown_rank());
  b.node("If", {"c"}, {"v"},
         {Attribute::make_graph("then_branch", then_b.g), Attribute::make_graph("else_branch", else_b.g)});
}

// MViT's pooling behind a Loop: a conv, a 3-D max pool and an Erf GELU (fused to Gelu) whose
// input shape comes out of an If of two branch shapes, known only while running. Each is
// planned for its shapes when it runs (no interpreter kernel), one plan per shape seen; the
// results equal the interpreter's for both branches, in turn.
TEST(CpuControlFlow, NodesOfShapesKnownWhileRunningArePlannedThen) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 4, 6, 8, 8});
  b.input("c", DType::Bool, std::vector<int64_t>{});
  b.constant("w", random_floats({4, 1, 3, 3, 3}, 3, 0.3f));
  if_of_two_shapes(b, 2, 6, 2);
  b.node("Conv", {"v", "w"}, {"cv"},
         {Attribute::make_int("group", 4), Attribute::make_ints("pads", {1, 1, 1, 1, 1, 1})});
  b.node("MaxPool", {"cv"}, {"mp"},
         {Attribute::make_ints("kernel_shape", {3, 3, 3}), Attribute::make_ints("strides", {1, 2, 2}),
          Attribute::make_ints("pads", {1, 1, 1, 1, 1, 1})});
  b.constant("half", Tensor::scalar<float>(DType::F32, 0.5f));
  b.constant("one", Tensor::scalar<float>(DType::F32, 1.0f));
  b.constant("rsqrt2", Tensor::scalar<float>(DType::F32, 0.70710678f));
  b.node("Mul", {"mp", "rsqrt2"}, {"g0"});
  b.node("Erf", {"g0"}, {"g1"});
  b.node("Add", {"g1", "one"}, {"g2"});
  b.node("Mul", {"mp", "g2"}, {"g3"});
  b.node("Mul", {"g3", "half"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({1, 4, 6, 8, 8}, 4)}, {"c", boolean(true)}};
  PlannedModel p(m, feeds);
  for (bool cond : {true, false, true}) {
    SCOPED_TRACE(cond);
    feeds["c"] = boolean(cond);
    auto want = interp::Interpreter(m).run(feeds);
    auto got = p.run(feeds);
    expect_close(got[0], want[0], 1e-5, 1e-6, "y");
  }
  EXPECT_EQ(p.interp_ops(), std::set<std::string>{}) << p.steps();
  EXPECT_GE(p.count("planned for its shapes while running"), 2) << p.steps();
  EXPECT_EQ(p.count("FusedConv): onednn"), 2) << p.steps();  // one plan per branch's shape
}

// A conv after a Slice to a fed end sees a new shape every run, 14 of them, then the first ones
// again: planned per shape, the 8 most recently used kept (the free-dim plan a Subgraph tries
// past 8 shapes would run the conv on the interpreter's kernel, so it is refused). All equal to
// the interpreter's; no interpreter kernel, no more than 8 plans.
TEST(CpuControlFlow, NodePlannedWhileRunningOverManyShapes) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 4, 16, 8});
  b.input("end", DType::I64, std::vector<int64_t>{1});
  b.constant("w", random_floats({6, 4, 3, 3}, 7, 0.3f));
  b.constant("zero", Tensor::from_vector<int64_t>(DType::I64, {1}, {0}));
  b.constant("axis", Tensor::from_vector<int64_t>(DType::I64, {1}, {2}));
  b.node("Slice", {"x", "zero", "end", "axis"}, {"v"});
  b.node("Conv", {"v", "w"}, {"y"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({1, 4, 16, 8}, 8)},
                                                {"end", Tensor::from_vector<int64_t>(DType::I64, {1}, {16})}};
  PlannedModel p(m, feeds);
  for (int64_t k = 0; k < 18; ++k) {
    const int64_t end = 3 + k % 14;
    SCOPED_TRACE(end);
    feeds["end"] = Tensor::from_vector<int64_t>(DType::I64, {1}, {end});
    auto want = interp::Interpreter(m).run(feeds);
    auto got = p.run(feeds);
    expect_close(got[0], want[0], 1e-5, 1e-6, "y");
  }
  EXPECT_EQ(p.count("planned for its shapes while running"), 1) << p.steps();
  EXPECT_EQ(p.count("FusedConv): onednn"), 8) << p.steps();
  EXPECT_EQ(p.interp_ops(), std::set<std::string>{}) << p.steps();
}

// Torchvision's Mask R-CNN head: 3x3 convs over however many regions the detector kept. Each
// is planned per shape while running, on a direct kernel (a Winograd one would hold its own
// transformed weights, 4x the weights, per plan), the plans taking one shared arena, and a
// 17 MB result not kept by its plan between runs. Equal to the interpreter's over alternating
// shapes, so no plan reads another's bytes.
TEST(CpuControlFlow, ConvsPlannedWhileRunningShareAnArenaAndTakeNoWinograd) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 64, 264, 256});
  b.input("end", DType::I64, std::vector<int64_t>{1});
  b.constant("w1", random_floats({64, 64, 3, 3}, 11, 0.1f));
  b.constant("w2", random_floats({64, 64, 3, 3}, 12, 0.1f));
  b.constant("zero", Tensor::from_vector<int64_t>(DType::I64, {1}, {0}));
  b.constant("axis", Tensor::from_vector<int64_t>(DType::I64, {1}, {2}));
  b.node("Slice", {"x", "zero", "end", "axis"}, {"v"});
  b.node("Conv", {"v", "w1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w2"}, {"y"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.output("y");
  b.output("r1");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({1, 64, 264, 256}, 13)},
                                                {"end", Tensor::from_vector<int64_t>(DType::I64, {1}, {264})}};
  PlannedModel p(m, feeds);
  for (int64_t end : {264, 24, 264}) {
    SCOPED_TRACE(end);
    feeds["end"] = Tensor::from_vector<int64_t>(DType::I64, {1}, {end});
    auto want = interp::Interpreter(m).run(feeds);
    auto got = p.run(feeds);
    // Two chained 576-term sums summed in another order below AVX-512 (hodu's own kernels):
    // a value near 0 can differ by 1e-5.
    expect_close(got[0], want[0], 1e-4, 5e-5, "y");
    expect_close(got[1], want[1], 1e-4, 5e-5, "r1");
  }
  EXPECT_EQ(p.interp_ops(), std::set<std::string>{}) << p.steps();
  EXPECT_EQ(p.count("planned for its shapes while running"), 2) << p.steps();
  EXPECT_EQ(p.count("wino"), 0) << p.steps();
}

// Convs planned while running (a Slice's run-time shape in front) whose results are 16 MiB and
// more write into the buffers their caller let go earlier in the run: a chain of such convs
// allocates two results, however long (Keypoint R-CNN's eight head convs at 100 detections held
// 328 MB at the peak, each result a new buffer). Results equal to the interpreter's.
TEST(CpuControlFlow, LargeResultsOfConvsPlannedWhileRunningReuseTheCallersBuffers) {
  auto chain = [](int convs) {
    GraphBuilder b;
    b.input("x", DType::F32, std::vector<int64_t>{1, 64, 264, 256});
    b.input("end", DType::I64, std::vector<int64_t>{1});
    b.constant("zero", Tensor::from_vector<int64_t>(DType::I64, {1}, {0}));
    b.constant("axis", Tensor::from_vector<int64_t>(DType::I64, {1}, {2}));
    // (Names built with +=: GCC 12 warns falsely (-Wrestrict) on "c" + std::to_string(i).)
    auto name = [](const char* prefix, int i) {
      std::string s = prefix;
      s += std::to_string(i);
      return s;
    };
    b.node("Slice", {"x", "zero", "end", "axis"}, {"c0"});
    for (int i = 1; i <= convs; ++i) {
      b.constant(name("w", i), random_floats({64, 64, 1, 1}, 20 + static_cast<uint32_t>(i), 0.1f));
      b.node("Conv", {name("c", i - 1), name("w", i)}, {name("c", i)});
    }
    b.output(name("c", convs));
    return b.finish();
  };
  std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({1, 64, 264, 256}, 13)},
                                                {"end", Tensor::from_vector<int64_t>(DType::I64, {1}, {264})}};
  std::vector<uint64_t> per_run;
  for (int convs : {3, 6}) {
    SCOPED_TRACE(convs);
    Model m = chain(convs);
    auto p = testing::expect_matches_interpreter(m, feeds, 1e-4, 1e-5);
    EXPECT_EQ(p->count("planned for its shapes while running"), convs) << p->steps();
    p->run(feeds);
    const uint64_t before = Storage::allocation_count();
    p->run(feeds);
    per_run.push_back(Storage::allocation_count() - before);
  }
  // Three convs more, no allocation more.
  EXPECT_EQ(per_run[1], per_run[0]);
}

TEST(CpuControlFlow, SharedArenaGivesEveryPlanTheSameBytes) {
  auto arena = std::make_shared<SharedArena>();
  auto a = arena->take(1 << 20), c = arena->take(64 << 20);
  ASSERT_TRUE(a && c);
  EXPECT_EQ(a->data(), c->data());
  EXPECT_EQ(c->bytes(), size_t{64} << 20);
  static_cast<char*>(c->data())[(64 << 20) - 1] = 1;  // writable to its end
  EXPECT_EQ(arena->take(size_t{1} << 40), nullptr);     // past the range: the plan allocates its own
  arena.reset();
  static_cast<char*>(a->data())[0] = 2;  // the range outlives the arena while a plan holds it
}

// Values of shapes known only while running are let go after their last use when large (16 MiB
// and up), their buffers taken by later outputs of the same size in the run: a chain of 24 MiB
// values behind an If, one of them also read through a Reshape view after the value itself is
// released, and a graph output. Equal to the interpreter's on three runs of alternating shapes.
TEST(CpuControlFlow, LargeValuesOfRunTimeShapesAreReleasedAndReused) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{6, 1024, 1024});
  b.input("c", DType::Bool, std::vector<int64_t>{});
  if_of_two_shapes(b, 1, 5, 0);
  b.constant("flat", Tensor::from_vector<int64_t>(DType::I64, {2}, {-1, 1024}));
  b.node("Neg", {"v"}, {"a"});
  b.node("Reshape", {"a", "flat"}, {"a_rows"});  // a view of a, read last
  b.node("Abs", {"a"}, {"b1"});                  // a's last direct use
  b.node("Sqrt", {"b1"}, {"b2"});                // may take a buffer let go above
  b.node("Exp", {"b2"}, {"b3"});
  b.node("Sigmoid", {"a_rows"}, {"s"});
  b.node("Reshape", {"b3", "flat"}, {"b3_rows"});
  b.node("Add", {"s", "b3_rows"}, {"y"});
  b.node("Softmax", {"y"}, {"sm"}, {Attribute::make_int("axis", -1)});  // rows of a run-time shape
  b.output("y");
  b.output("b2");
  b.output("sm");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({6, 1024, 1024}, 5)}, {"c", boolean(true)}};
  PlannedModel p(m, feeds, 2);
  for (bool cond : {true, false, true}) {
    SCOPED_TRACE(cond);
    feeds["c"] = boolean(cond);
    auto want = interp::Interpreter(m).run(feeds);
    auto got = p.run(feeds);
    ASSERT_EQ(got.size(), 3u);
    expect_close(got[0], want[0], 1e-5, 1e-6, "y");
    expect_close(got[1], want[1], 1e-5, 1e-6, "b2");
    expect_close(got[2], want[2], 1e-5, 1e-7, "sm");
  }
  EXPECT_EQ(p.count("(Softmax): cpu softmax along an axis"), 1) << p.steps();
  EXPECT_EQ(p.interp_ops(), std::set<std::string>{}) << p.steps();
}

TEST(CpuControlFlow, IfAlternatingBranchesKeepsOutputsApart) {
  Model m = if_model(true);
  PlannedModel p(m, {{"x", random_floats({2, 3}, 3)}, {"c", boolean(true)}});
  interp::Interpreter in(m);
  std::vector<std::vector<RuntimeValue>> held;
  for (int i = 0; i < 6; ++i) {
    std::map<std::string, RuntimeValue> feeds = {{"x", random_floats({2, 3}, 10 + i)}, {"c", boolean(i % 3 != 0)}};
    held.push_back(p.run(feeds));  // the caller keeps every run's outputs
    auto want = in.run(feeds);
    for (size_t k = 0; k < want.size(); ++k) expect_close(held.back()[k], want[k], 1e-5, 1e-6, "run output");
  }
  // Outputs kept by the caller were not overwritten by later runs.
  for (int i = 0; i < 6; ++i) {
    auto want = in.run({{"x", random_floats({2, 3}, 10 + i)}, {"c", boolean(i % 3 != 0)}});
    for (size_t k = 0; k < want.size(); ++k) expect_close(held[i][k], want[k], 1e-5, 1e-6, "held output");
  }
}

// for i in range(M) while cond: acc = acc * 0.5 + i; cond = i < stop; scan outputs acc and i.
Model loop_model(bool with_cond) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{3});
  b.input("M", DType::I64, std::vector<int64_t>{});
  b.input("stop", DType::I64, std::vector<int64_t>{});
  b.constant("half", Tensor::scalar<float>(DType::F32, 0.5f));
  Body body;
  body.input("i", DType::I64, {}).input("cin", DType::Bool, {}).input("acc", DType::F32, {3});
  body.node("Cast", {"i"}, {"fi"}, {Attribute::make_int("to", 1)})
      .node("Mul", {"acc", "half"}, {"a1"})
      .node("Add", {"a1", "fi"}, {"acc_out"})
      .node("Less", {"i", "stop"}, {"cout"})
      .node("Identity", {"i"}, {"i_out"})
      .output("cout", DType::Bool, Shape::scalar())
      .output("acc_out", DType::F32, Shape::from({3}))
      .output("acc_out", DType::F32, Shape::from({3}))
      .output("i_out", DType::I64, Shape::scalar());
  b.constant("yes", boolean(true));
  b.node("Loop", {"M", with_cond ? "yes" : "", "x"}, {"final", "accs", "iters"}, {Attribute::make_graph("body", body.g)});
  b.node("Relu", {"accs"}, {"r"});
  b.output("final");
  b.output("r");
  b.output("iters");
  return b.finish();
}

TEST(CpuControlFlow, LoopCarriesValuesAndStacksScanOutputsInPlace) {
  for (bool with_cond : {true, false})
    for (int64_t trip : {0, 1, 5, 40})
      for (int64_t stop : {2, 100}) {
        SCOPED_TRACE(::testing::Message() << "cond " << with_cond << " M " << trip << " stop " << stop);
        Model m = loop_model(with_cond);
        auto p = expect_matches_interpreter(
            m, {{"x", random_floats({3}, 4)}, {"M", int64s({trip})}, {"stop", int64s({stop})}});
        EXPECT_EQ(p->count("(Loop): cpu subgraph"), 1);
        // The body's arithmetic on engine kernels (Cast and Less have none yet); the Relu of the
        // scan output, whose length is the trip count, is planned without a shape.
        auto on_interp = p->interp_ops();
        for (const char* op : {"Cast", "Less", "Relu"}) on_interp.erase(op);
        EXPECT_TRUE(on_interp.empty()) << *on_interp.begin();
      }
}

// A while loop whose carried value grows each iteration (seq = Concat(seq, [i])): more shapes than
// the body plans per shape, then one plan with the growing dim left symbolic. Declared either
// symbolic or as torch traces it: the carried value [0] at the first iteration (an empty start,
// as in torchvision's paste-masks loop), the Concat after it [1].
TEST(CpuControlFlow, LoopWithGrowingCarriedValueMatchesInterpreter) {
  for (bool traced : {false, true}) {
    SCOPED_TRACE(traced ? "declared as traced" : "declared symbolic");
    GraphBuilder b;
    b.input("n", DType::I64, std::vector<int64_t>{});
    b.constant("seed", traced ? Tensor::empty(DType::I64, {0}) : int64s({7}, {1}));
    b.constant("axes", int64s({0}, {1}));
    Body body;
    body.input("i", DType::I64, {}).input("cin", DType::Bool, {}).input("seq", DType::I64, {0});
    if (!traced) body.g->inputs[2].type = ValueType::tensor(DType::I64, Shape({Dim::sym("len")}));
    body.node("Unsqueeze", {"i", "axes"}, {"i1"})
        .node("Concat", {"seq", "i1"}, {"seq_out"}, {Attribute::make_int("axis", 0)})
        .node("Less", {"i", "n"}, {"cout"})
        .node("Identity", {"seq_out"}, {"seq_next"})
        .output("cout", DType::Bool, Shape::scalar())
        .output("seq_next", DType::I64, traced ? Shape::from({1}) : Shape({Dim::sym("len2")}));
    if (traced) body.g->value_types["seq_out"] = ValueType::tensor(DType::I64, Shape::from({1}));
    b.node("Loop", {"", "", "seed"}, {"all"}, {Attribute::make_graph("body", body.g)});
    b.output("all");
    Model m = b.finish();
    // No trip count, no condition input: runs until the body's condition turns false.
    m.graph.nodes[0].inputs = {"", "", "seed"};
    auto p = expect_matches_interpreter(m, {{"n", int64s({20})}});
    // One plan per length up to 8, then one for any length, whose Concat copies the shapes it is
    // given while running (tensor_ops.cc) rather than fall back to the interpreter; the empty
    // start's Concat copies the same way (make_empty_tensor_ops).
    EXPECT_EQ(p->count("(Concat): cpu"), 9);
    EXPECT_EQ(p->count("(Concat): cpu block copies (shapes known while running)"), traced ? 2 : 1);
    EXPECT_EQ(p->count("(Loop): cpu subgraph"), 1);
  }
}

// Scan with two scan inputs (axis 0 forward, axis 1 reversed) and two scan outputs (axis 0
// reversed, axis 1 forward) around a state.
TEST(CpuControlFlow, ScanAxesAndDirectionsMatchInterpreter) {
  GraphBuilder b;
  b.input("s0", DType::F32, std::vector<int64_t>{2});
  b.input("a", DType::F32, std::vector<int64_t>{5, 2});
  b.input("c", DType::F32, std::vector<int64_t>{2, 5});
  b.constant("two", Tensor::scalar<float>(DType::F32, 2.0f));
  Body body;
  body.input("s", DType::F32, {2}).input("ai", DType::F32, {2}).input("ci", DType::F32, {2});
  body.node("Add", {"s", "ai"}, {"s1"})
      .node("Mul", {"ci", "two"}, {"c2"})
      .node("Add", {"s1", "c2"}, {"s_out"})
      .node("Sub", {"ai", "s_out"}, {"y1"})
      .node("Tanh", {"s_out"}, {"y2"})
      .output("s_out", DType::F32, Shape::from({2}))
      .output("y1", DType::F32, Shape::from({2}))
      .output("y2", DType::F32, Shape::from({2}));
  b.node("Scan", {"s0", "a", "c"}, {"s_final", "ys1", "ys2"},
         {Attribute::make_graph("body", body.g), Attribute::make_int("num_scan_inputs", 2),
          Attribute::make_ints("scan_input_axes", {0, 1}), Attribute::make_ints("scan_input_directions", {0, 1}),
          Attribute::make_ints("scan_output_axes", {0, 1}), Attribute::make_ints("scan_output_directions", {1, 0})});
  b.output("s_final");
  b.output("ys1");
  b.output("ys2");
  Model m = b.finish();
  auto p = expect_matches_interpreter(
      m, {{"s0", random_floats({2}, 5)}, {"a", random_floats({5, 2}, 6)}, {"c", random_floats({2, 5}, 7)}});
  EXPECT_EQ(p->count("(Scan): cpu subgraph"), 1);
  EXPECT_EQ(p->count(": interp"), 0);
}

// A body plan's outputs are fed back as its inputs: once warm, iterations allocate nothing (the
// plan alternates two buffers per output; scan outputs go into one buffer sized by the trip count).
TEST(CpuControlFlow, LoopIterationsAllocateNothingOnceWarm) {
  GraphBuilder b;
  b.input("x", DType::F32, std::vector<int64_t>{1, 64});
  b.input("M", DType::I64, std::vector<int64_t>{});
  b.constant("half", Tensor::scalar<float>(DType::F32, 0.5f));
  b.constant("w", random_floats({64, 64}, 9, 0.1f));
  Body body;
  body.input("i", DType::I64, {}).input("cin", DType::Bool, {}).input("acc", DType::F32, {1, 64});
  body.node("MatMul", {"acc", "w"}, {"a0"})
      .node("Mul", {"a0", "half"}, {"a1"})
      .node("Tanh", {"a1"}, {"acc_out"})
      .node("Identity", {"cin"}, {"cout"})
      .output("cout", DType::Bool, Shape::scalar())
      .output("acc_out", DType::F32, Shape::from({1, 64}))
      .output("a0", DType::F32, Shape::from({1, 64}));
  b.node("Loop", {"M", "", "x"}, {"final", "all"}, {Attribute::make_graph("body", body.g)});
  b.output("final");
  b.output("all");
  Model m = b.finish();
  auto feeds = [](int64_t trip) {
    return std::map<std::string, RuntimeValue>{{"x", random_floats({1, 64}, 4)}, {"M", int64s({trip})}};
  };
  auto p = expect_matches_interpreter(m, feeds(7));
  EXPECT_EQ(p->count(": interp"), 0);
  auto allocations = [&](int64_t trip) {
    uint64_t before = Storage::allocation_count();
    p->run(feeds(trip));
    return Storage::allocation_count() - before;
  };
  allocations(300);
  // Per run: the scan output's buffer (the caller held the last one) and the graph outputs.
  EXPECT_LE(allocations(300), 4u);
  EXPECT_LE(allocations(20), 4u);
}

// In a profile, a body's steps sit inside their control-flow step (depth 1), so that per-op
// totals (depth 0) count each moment once.
TEST(CpuControlFlow, ProfileNestsBodySteps) {
  Model m = if_model(true);
  PlannedModel p(m, {{"x", random_floats({2, 3}, 2)}, {"c", boolean(true)}});
  Profiler profiler;
  profiler.start();
  p.run({{"x", random_floats({2, 3}, 2)}, {"c", boolean(true)}});
  profiler.stop();
  int top = 0, nested = 0;
  for (const auto& e : profiler.events()) {
    if (e.category != "Node") continue;
    (e.depth == 0 ? top : nested)++;
    if (e.depth == 0) {
      EXPECT_TRUE(e.op == "If" || e.op == "Sigmoid") << e.op;
    }
  }
  EXPECT_EQ(top, 2);
  EXPECT_GE(nested, 2);  // the branch's Mul and Add
}

TEST(CpuControlFlow, FreeValuesAreTheOuterNamesABodyReads) {
  Body inner;
  inner.node("Add", {"a", "outer2"}, {"b"}).output("b", DType::F32, Shape::scalar());
  Body body;
  body.input("i", DType::F32, {});
  body.g->set_initializer("k", Tensor::scalar<float>(DType::F32, 1));
  body.node("Mul", {"i", "outer1"}, {"a"})
      .node("If", {"cond"}, {"r"},
            {Attribute::make_graph("then_branch", inner.g), Attribute::make_graph("else_branch", inner.g)})
      .node("Add", {"r", "k"}, {"o"})
      .output("o", DType::F32, Shape::scalar())
      .output("outer3", DType::F32, Shape::scalar());
  EXPECT_EQ(free_values(*body.g), (std::vector<std::string>{"outer1", "cond", "outer2", "outer3"}));
}

TEST(CpuControlFlow, BadConditionGivesAnError) {
  Model m = if_model(true);
  m.graph.inputs[1].type = ValueType::tensor(DType::Bool, Shape({Dim::sym("n")}));
  PlannedModel p(m, {{"x", random_floats({2, 3}, 2)}, {"c", Tensor::from_vector<uint8_t>(DType::Bool, {2}, {1, 0})}});
  try {
    p.run({{"x", random_floats({2, 3}, 2)}, {"c", Tensor::from_vector<uint8_t>(DType::Bool, {2}, {1, 0})}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cond must be a single boolean value"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::cpu
