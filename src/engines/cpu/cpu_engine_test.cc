// Tests of the cpu engine: results equal the interpreter's on small CNN and
// transformer graphs, ops without a cpu kernel fall back, a run after the
// first allocates nothing, new shapes re-plan, threads do not spin when idle.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "engines/cpu/cpu_engine.h"
#include "engines/cpu/plan.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/passes.h"

namespace hodu::cpu {
namespace {

struct Builder {
  Model m;
  Graph& g = m.graph;
  Builder() { m.opset_imports[""] = 21; }
  void input(const std::string& name, Shape shape) {
    g.inputs.push_back({name, ValueType::tensor(DType::F32, std::move(shape)), ""});
  }
  void output(const std::string& name) { g.outputs.push_back({name, {}, ""}); }
  void node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
            std::vector<Attribute> attrs = {}) {
    Node n;
    n.name = outs[0];
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    n.attributes = std::move(attrs);
    g.nodes.push_back(n);
  }
  void constant(const std::string& name, std::vector<int64_t> shape, uint32_t seed, float lo = -0.5f, float hi = 0.5f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(shape_numel(shape));
    for (auto& x : v) x = d(rng);
    g.set_initializer(name, Tensor::from_vector(DType::F32, shape, v));
  }
  void scalar(const std::string& name, float v) { g.set_initializer(name, Tensor::scalar<float>(DType::F32, v)); }
  void ints(const std::string& name, std::vector<int64_t> v) {
    g.set_initializer(name, Tensor::from_vector<int64_t>(DType::I64, {static_cast<int64_t>(v.size())}, v));
  }
  Model finish() {
    infer_types(g);
    for (auto& o : g.outputs) o.type = *g.type_of(o.name);
    return m;
  }
};

Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(shape_numel(shape));
  for (auto& x : v) x = d(rng);
  return Tensor::from_vector(DType::F32, shape, v);
}

double rel_l2(const Tensor& a, const Tensor& b) {
  auto x = a.to_doubles(), y = b.to_doubles();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A small ResNet-like network: conv-bn-relu, maxpool, residual block, global pool, flatten, gemm, softmax.
Model small_cnn() {
  Builder b;
  b.input("x", Shape({Dim::sym("batch"), Dim(3), Dim(16), Dim(16)}));
  b.constant("w1", {16, 3, 3, 3}, 1);
  b.constant("g", {16}, 2, 0.5f, 1.5f);
  b.constant("be", {16}, 3);
  b.constant("mu", {16}, 4);
  b.constant("var", {16}, 5, 0.5f, 1.5f);
  b.constant("w2", {16, 16, 3, 3}, 6);
  b.constant("b2", {16}, 7);
  b.constant("w3", {16, 1, 3, 3}, 8);  // depthwise
  b.constant("fc", {10, 16}, 9);
  b.constant("fcb", {10}, 10);
  b.node("Conv", {"x", "w1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("BatchNormalization", {"c1", "g", "be", "mu", "var"}, {"bn1"});
  b.node("Relu", {"bn1"}, {"r1"});
  b.node("MaxPool", {"r1"}, {"p1"}, {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
                                     Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Conv", {"p1", "w2", "b2"}, {"c2"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Add", {"c2", "p1"}, {"s2"});
  b.node("Relu", {"s2"}, {"r2"});
  b.node("Conv", {"r2", "w3"}, {"c3"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", 16)});
  b.node("Sigmoid", {"c3"}, {"sg"});
  b.node("Mul", {"c3", "sg"}, {"silu"});
  b.node("GlobalAveragePool", {"silu"}, {"gap"});
  b.node("Flatten", {"gap"}, {"f"});
  b.node("Gemm", {"f", "fc", "fcb"}, {"logits"}, {Attribute::make_int("transB", 1)});
  b.node("Softmax", {"logits"}, {"y"}, {Attribute::make_int("axis", -1)});
  b.output("y");
  b.output("c3");  // an intermediate that is also an output (kept plain, not overwritten)
  return b.finish();
}

// A transformer encoder block at [1, 8, 32] with 4 heads.
Model small_transformer() {
  Builder b;
  const int64_t S = 8, D = 32, H = 4, Dh = 8;
  b.input("x", Shape({Dim(1), Dim(S), Dim(D)}));
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.constant(w, {D, D}, static_cast<uint32_t>(w[1]));
  b.constant("bq", {D}, 11);
  b.constant("ln_s", {D}, 12, 0.5f, 1.5f);
  b.constant("ln_b", {D}, 13);
  b.constant("mask", {1, 1, S, S}, 14);
  b.ints("split", {1, S, H, Dh});
  b.ints("merge", {1, S, D});
  b.scalar("sqrt_dh", std::sqrt(static_cast<float>(Dh)));
  b.scalar("sqrt2", std::sqrt(2.0f));
  b.scalar("one", 1.0f);
  b.scalar("half", 0.5f);
  b.node("MatMul", {"x", "wq"}, {"q0"});
  b.node("Add", {"q0", "bq"}, {"q1"});
  b.node("MatMul", {"x", "wk"}, {"k0"});
  b.node("MatMul", {"x", "wv"}, {"v0"});
  for (const char* t : {"q1", "k0", "v0"}) {
    std::string s = t;
    b.node("Reshape", {s, "split"}, {s + "r"});
    b.node("Transpose", {s + "r"}, {s + "t"}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
  }
  b.node("Transpose", {"k0t"}, {"kT"}, {Attribute::make_ints("perm", {0, 1, 3, 2})});
  b.node("MatMul", {"q1t", "kT"}, {"sc"});
  b.node("Div", {"sc", "sqrt_dh"}, {"scs"});
  b.node("Add", {"scs", "mask"}, {"scm"});
  b.node("Softmax", {"scm"}, {"p"}, {Attribute::make_int("axis", -1)});
  b.node("MatMul", {"p", "v0t"}, {"att"});
  b.node("Transpose", {"att"}, {"att_t"}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
  b.node("Reshape", {"att_t", "merge"}, {"att_m"});
  b.node("MatMul", {"att_m", "wo"}, {"o"});
  b.node("Add", {"o", "x"}, {"res"});
  b.node("LayerNormalization", {"res", "ln_s", "ln_b"}, {"ln"}, {Attribute::make_int("axis", -1)});
  // GELU as exported (erf form).
  b.node("Div", {"ln", "sqrt2"}, {"gd"});
  b.node("Erf", {"gd"}, {"ge"});
  b.node("Add", {"ge", "one"}, {"ge1"});
  b.node("Mul", {"ln", "ge1"}, {"gm"});
  b.node("Mul", {"gm", "half"}, {"y"});
  b.output("y");
  return b.finish();
}

std::vector<RuntimeValue> run_interp(const Model& m, const std::map<std::string, RuntimeValue>& feeds) {
  return interp::Interpreter(m).run(feeds);
}

std::unique_ptr<Executable> prepare_cpu(const Model& m, int threads = 1) {
  EngineOptions o;
  o.threads = threads;
  return make_cpu_engine()->prepare(m, o);
}

void expect_matches_interp(const Model& m, const std::map<std::string, RuntimeValue>& feeds, int threads = 1) {
  auto want = run_interp(m, feeds);
  auto exe = prepare_cpu(m, threads);
  for (int run = 0; run < 2; ++run) {  // the second run reuses the plan and its arena
    auto got = exe->run(feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].tensor.shape(), want[i].tensor.shape()) << "output " << i;
      EXPECT_LE(rel_l2(got[i].tensor, want[i].tensor), 1e-5) << "output " << i << " run " << run;
    }
  }
}

TEST(CpuEngine, SmallCnnMatchesInterpreter) {
  Model m = small_cnn();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 3, 16, 16}, 1))}});
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({2, 3, 16, 16}, 2))}}, 2);
}

TEST(CpuEngine, SmallCnnUsesOneDnnWithoutFallback) {
  Model m = small_cnn();
  passes::optimize(m, {3, {{"x", {1, 3, 16, 16}}}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {1, 3, 16, 16}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0);
  int onednn_convs = 0;
  for (const auto& c : plan.kernel_choices()) onednn_convs += c.find("FusedConv): onednn") != std::string::npos;
  EXPECT_EQ(onednn_convs, 3);
  EXPECT_GT(plan.arena_bytes(), 0u);
}

TEST(CpuEngine, TransformerBlockMatchesInterpreter) {
  Model m = small_transformer();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 8, 32}, 3))}});
  Model opt = m;
  passes::optimize(opt, {3, {}});
  int attention = 0, fused_mm = 0;
  for (const auto& n : opt.graph.nodes) {
    attention += n.op_type == "Attention";
    fused_mm += n.op_type == "FusedMatMul";
  }
  EXPECT_EQ(attention, 1);
  EXPECT_GE(fused_mm, 1);
}

// A chain of elementwise ops (one-element input broadcast, a scalar constant) becomes one
// FusedElementwise step that matches the interpreter at 1 and 2 threads, on sizes that are
// not a multiple of the kernel's chunk.
TEST(CpuEngine, FusedElementwiseMatchesInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(3), Dim(7), Dim(101)}));
  b.input("y", Shape({Dim(3), Dim(7), Dim(101)}));
  b.input("s", Shape({Dim(1)}));
  b.scalar("half", 0.5f);
  b.node("Add", {"x", "y"}, {"a"});
  b.node("Mul", {"a", "half"}, {"m"});
  b.node("Tanh", {"m"}, {"t"});
  b.node("Sub", {"t", "s"}, {"d"});
  b.node("Sigmoid", {"d"}, {"g"});
  b.node("Div", {"g", "y"}, {"z"});
  b.output("z");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({3, 7, 101}, 1))},
                                               {"y", RuntimeValue(random_tensor({3, 7, 101}, 2))},
                                               {"s", RuntimeValue(random_tensor({1}, 3))}};
  expect_matches_interp(m, feeds, 1);
  expect_matches_interp(m, feeds, 2);
  Model opt = m;
  passes::optimize(opt, {3, {}});
  ASSERT_EQ(opt.graph.nodes.size(), 1u);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, {{"x", {3, 7, 101}}, {"y", {3, 7, 101}}, {"s", {1}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0);
  ASSERT_EQ(plan.kernel_choices().size(), 1u);
  EXPECT_NE(plan.kernel_choices()[0].find("cpu fused loop (6 ops)"), std::string::npos);
}

// Two convs concatenated on channels feed a wider conv (a narrower one takes the parts
// separately, see split_concat_convs). The concat runs on the blocked layout the convs write (no reorder to plain and back) and matches the interpreter.
TEST(CpuEngine, ConcatOfBlockedConvOutputsStaysBlocked) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(16), Dim(9), Dim(9)}));
  b.constant("w1", {32, 16, 1, 1}, 1);
  b.constant("w3", {32, 16, 3, 3}, 2);
  b.constant("wn", {80, 64, 1, 1}, 3);  // wider than the concat: not split into two convs (-O2)
  b.node("Conv", {"x", "w1"}, {"c1"});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"x", "w3"}, {"c3"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c3"}, {"r3"});
  b.node("Concat", {"r1", "r3"}, {"cat"}, {Attribute::make_int("axis", 1)});
  b.node("Conv", {"cat", "wn"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 16, 9, 9}, 4))}};
  expect_matches_interp(m, feeds, 1);
  expect_matches_interp(m, feeds, 2);
  Model opt = m;
  passes::optimize(opt, {3, {}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, {{"x", {1, 16, 9, 9}}}, PlanOptions{}, eng);
  int concats = 0, reorders = 0;
  for (const auto& c : plan.kernel_choices()) {
    concats += c.find("(Concat): onednn concat") != std::string::npos;
    reorders += c.rfind("reorder", 0) == 0;
  }
  EXPECT_EQ(concats, 1);
  EXPECT_LE(reorders, 2);  // only at the edges: the input into the blocked layout, the output back
}

// EfficientNet's squeeze-excite: global pool, two 1x1 convs over [1, C, 1, 1] (run as GEMVs,
// not oneDNN calls), the sigmoid gate scaling the block's channels (in place on the conv
// output's own layout when nothing reads it later, a new buffer when something does).
Model squeeze_excite(bool x_read_later) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(3), Dim(12), Dim(12)}));
  b.constant("w0", {24, 3, 3, 3}, 1);
  b.constant("w1", {6, 24, 1, 1}, 2);
  b.constant("b1", {6}, 3);
  b.constant("w2", {24, 6, 1, 1}, 4);
  b.constant("b2", {24}, 5);
  b.constant("w3", {16, 24, 1, 1}, 6);
  b.node("Conv", {"x", "w0"}, {"c0"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c0"}, {"a"});
  b.node("GlobalAveragePool", {"a"}, {"g"});
  b.node("Conv", {"g", "w1", "b1"}, {"f1"});
  b.node("Relu", {"f1"}, {"r1"});
  b.node("Conv", {"r1", "w2", "b2"}, {"f2"});
  b.node("Sigmoid", {"f2"}, {"s"});
  b.node("Mul", {"a", "s"}, {"y"});
  b.node("Conv", {"y", "w3"}, {"z"});
  if (x_read_later) {
    b.node("ReduceMean", {"a"}, {"am"}, {Attribute::make_ints("axes", {2, 3})});
    b.output("am");
  }
  b.output("z");
  return b.finish();
}

TEST(CpuEngine, SqueezeExciteRunsGemvAndChannelScale) {
  for (bool read_later : {false, true}) {
    Model m = squeeze_excite(read_later);
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 3, 12, 12}, 9))}};
    expect_matches_interp(m, feeds, 1);
    expect_matches_interp(m, feeds, 2);
    Model opt = m;
    passes::optimize(opt, {3, {{"x", {1, 3, 12, 12}}}});
    auto want = run_interp(m, feeds);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    for (bool blocked : {true, false}) {
      PlanOptions o;
      o.blocked_layouts = blocked;
      Plan plan(opt, {{"x", {1, 3, 12, 12}}}, o, eng);
      int gemv = 0, scale = 0, in_place = 0;
      for (const auto& c : plan.kernel_choices()) {
        gemv += c.find("cpu gemv") != std::string::npos;
        scale += c.find("cpu channel scale") != std::string::npos;
        in_place += c.find("channel scale, in place") != std::string::npos;
      }
      EXPECT_EQ(gemv, 2) << "blocked " << blocked;
      EXPECT_EQ(scale, 1) << "blocked " << blocked;
      EXPECT_EQ(in_place, read_later ? 0 : 1) << "blocked " << blocked;
      for (int run = 0; run < 2; ++run) {
        auto got = plan.run(feeds, stream);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_LE(rel_l2(got[i].tensor, want[i].tensor), 1e-5) << "output " << i << " blocked " << blocked;
      }
    }
  }
}

// A value whose layout has the same bytes as the plain one (nhwc of [1, C, 1, 1]) is read
// through a view: no reorder step.
TEST(CpuEngine, SameBytesLayoutIsAViewNotAReorder) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  EXPECT_TRUE(same_bytes_as_plain(dnnl::memory::desc({1, 48, 1, 1}, dnnl::memory::data_type::f32,
                                                     dnnl::memory::format_tag::nhwc), {1, 48, 1, 1}, eng));
  EXPECT_TRUE(same_bytes_as_plain(dnnl::memory::desc({1, 32, 1, 1}, dnnl::memory::data_type::f32,
                                                     dnnl::memory::format_tag::nChw16c), {1, 32, 1, 1}, eng));
  EXPECT_FALSE(same_bytes_as_plain(dnnl::memory::desc({1, 24, 1, 1}, dnnl::memory::data_type::f32,
                                                      dnnl::memory::format_tag::nChw16c), {1, 24, 1, 1}, eng));
  EXPECT_FALSE(same_bytes_as_plain(dnnl::memory::desc({1, 8, 2, 2}, dnnl::memory::data_type::f32,
                                                      dnnl::memory::format_tag::nhwc), {1, 8, 2, 2}, eng));
}

TEST(CpuEngine, OpsWithoutCpuKernelFallBackToInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(4), Dim(5)}));
  b.g.set_initializer("axis", Tensor::scalar<int64_t>(DType::I64, 1));
  b.node("CumSum", {"x", "axis"}, {"cs"});
  b.node("Relu", {"cs"}, {"r"});
  b.node("Erf", {"r"}, {"y"});
  b.output("y");
  Model m = b.finish();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({4, 5}, 4))}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {4, 5}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 2);  // CumSum and Erf
}

// An interpreter kernel may return its input itself (inference Dropout does); that input
// lives in the arena, whose bytes a later step reuses once the input is dead.
TEST(CpuEngine, FallbackOutputThatIsItsInputSurvivesArenaReuse) {
  Builder b;
  b.input("x", Shape({Dim(64), Dim(64)}));
  b.node("Relu", {"x"}, {"a"});
  b.node("Dropout", {"a"}, {"d", "mask"});  // the mask is a graph output, so the Dropout stays
  b.node("Exp", {"d"}, {"e"});              // may take the dead `a`'s bytes
  b.node("Add", {"e", "d"}, {"y"});
  b.output("y");
  b.output("mask");
  Model m = b.finish();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({64, 64}, 7))}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {64, 64}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 1);  // the Dropout
}

TEST(CpuEngine, SliceTransposeConcatGatherMatchInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(2), Dim(6), Dim(5)}));
  b.ints("st", {1, -1});
  b.ints("en", {6, -6});
  b.ints("ax", {1, 2});
  b.ints("sp", {2, -2});
  b.g.set_initializer("idx", Tensor::from_vector<int64_t>(DType::I64, {2}, {2, -1}));
  b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"s"});  // [2, 3, 3]
  b.node("Transpose", {"s"}, {"t"}, {Attribute::make_ints("perm", {2, 0, 1})});
  b.node("Gather", {"x", "idx"}, {"gx"}, {Attribute::make_int("axis", 1)});  // [2, 2, 5]
  b.node("Concat", {"x", "gx"}, {"c"}, {Attribute::make_int("axis", 1)});
  b.output("t");
  b.output("c");
  Model m = b.finish();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({2, 6, 5}, 11))}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {2, 6, 5}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0);
}

TEST(CpuEngine, RunAfterTheFirstAllocatesNothing) {
  Model m = small_cnn();
  auto exe = prepare_cpu(m);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 3, 16, 16}, 5))}};
  exe->run(feeds);  // builds the plan
  exe->run(feeds);
  uint64_t before = Storage::allocation_count();
  for (int i = 0; i < 3; ++i) exe->run(feeds);  // outputs dropped each time: their buffers are reused
  EXPECT_EQ(Storage::allocation_count(), before);
  // Holding an output across runs gets a fresh buffer, and the held one is not overwritten.
  auto held = exe->run(feeds);
  Tensor copy = held[0].tensor.clone();
  exe->run({{"x", RuntimeValue(random_tensor({1, 3, 16, 16}, 6))}});
  EXPECT_TRUE(tensors_bitwise_equal(held[0].tensor, copy));
}

TEST(CpuEngine, NewInputShapeReplans) {
  Model m = small_cnn();
  auto exe = prepare_cpu(m);
  auto a = exe->run({{"x", RuntimeValue(random_tensor({1, 3, 16, 16}, 7))}});
  auto b = exe->run({{"x", RuntimeValue(random_tensor({3, 3, 16, 16}, 8))}});
  EXPECT_EQ(a[0].tensor.shape(), (std::vector<int64_t>{1, 10}));
  EXPECT_EQ(b[0].tensor.shape(), (std::vector<int64_t>{3, 10}));
}

TEST(CpuEngine, ThreadsDoNotSpinAfterARun) {
  Model m = small_cnn();
  auto exe = prepare_cpu(m, 2);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3, 16, 16}, 9))}};
  for (int i = 0; i < 3; ++i) exe->run(feeds);
  auto cpu_seconds = [] {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past OpenMP's short spin before sleeping
  double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(cpu_seconds() - before, 0.03);  // spinning threads would burn ~0.3 s per thread
}

TEST(CpuEngine, BadInputGivesError) {
  Model m = small_cnn();
  auto exe = prepare_cpu(m);
  EXPECT_THROW(exe->run({}), Error);
}

}  // namespace
}  // namespace hodu::cpu
