// Tests of the cpu engine: results equal the interpreter's on small CNN and
// transformer graphs, ops without a cpu kernel fall back, a run after the
// first allocates nothing, new shapes re-plan, threads do not spin when idle.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "engines/cpu/cpu_engine.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/grouped_conv_merge.h"
#include "engines/cpu/plan.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "kernels/cpu/blocked_layout.h"
#include "kernels/cpu/vector_math.h"
#include "passes/passes.h"
#include "passes/test_graph.h"
#include "runtime/profiler.h"

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

// A transformer encoder block at [batch, 8, 32] with 4 heads.
Model small_transformer(int64_t batch = 1) {
  Builder b;
  const int64_t S = 8, D = 32, H = 4, Dh = 8;
  b.input("x", Shape({Dim(batch), Dim(S), Dim(D)}));
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.constant(w, {D, D}, static_cast<uint32_t>(w[1]));
  b.constant("bq", {D}, 11);
  b.constant("ln_s", {D}, 12, 0.5f, 1.5f);
  b.constant("ln_b", {D}, 13);
  b.constant("mask", {1, 1, S, S}, 14);
  b.ints("split", {batch, S, H, Dh});
  b.ints("merge", {batch, S, D});
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

// Broadcasts in a middle dim (Swin-T's attention mask [1, 64, 3, 49, 49] + [1, 64, 1, 49,
// 49]), where oneDNN 2.6 has only its reference binary: the engine's own loop, each op.
TEST(CpuEngine, MiddleDimBroadcastsRunTheirOwnLoop) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    Builder b;
    b.input("x", {1, 6, 3, 7, 5});
    b.input("m", {1, 6, 1, 7, 5});
    b.input("r", {3, 1, 1});
    b.node(op, {"x", "m"}, {"y"});
    b.node(op, {"y", "r"}, {"z"});  // a broadcast over the last two dims too
    b.output("z");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 6, 3, 7, 5}, 1))},
                                                 {"m", RuntimeValue(random_tensor({1, 6, 1, 7, 5}, 2))},
                                                 {"r", RuntimeValue(random_tensor({3, 1, 1}, 3))}};
    if (std::string(op) == "Div")
      for (const char* name : {"m", "r"}) {
        float* p = feeds[name].tensor.data<float>();
        for (int64_t i = 0; i < feeds[name].tensor.numel(); ++i) p[i] = 1.5f + std::abs(p[i]);
      }
    expect_matches_interp(m, feeds);
    expect_matches_interp(m, feeds, 2);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    Plan plan(m, {{"x", {1, 6, 3, 7, 5}}, {"m", {1, 6, 1, 7, 5}}, {"r", {3, 1, 1}}}, PlanOptions{}, eng);
    int loops = 0;
    for (const auto& c : plan.kernel_choices()) loops += c.find("broadcast loop") != std::string::npos;
    EXPECT_GE(loops, 1) << op;
  }
}

// DenseNet's pre-activation: BatchNormalization of a Concat of conv outputs, which no conv
// absorbs: oneDNN's batch normalization on the blocked layout, not the interpreter; the Relu
// after it in the same pass (oneDNN's fused ReLU) unless the normalized value is read elsewhere.
TEST(CpuEngine, BatchNormOfAConcatMatchesInterpreter) {
  for (bool bn_output : {true, false}) {
    Builder b;
    b.input("x", {1, 8, 9, 9});
    b.constant("w1", {16, 8, 3, 3}, 1);
    b.constant("w2", {16, 8, 1, 1}, 2);
    b.constant("w3", {8, 32, 1, 1}, 3);
    b.constant("gamma", {32}, 4, 0.5f, 1.5f);
    b.constant("beta", {32}, 5);
    b.constant("mean", {32}, 6);
    b.constant("var", {32}, 7, 0.2f, 2.f);
    b.node("Conv", {"x", "w1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.node("Conv", {"x", "w2"}, {"c2"});
    b.node("Concat", {"c1", "c2"}, {"cat"}, {Attribute::make_int("axis", 1)});
    b.node("BatchNormalization", {"cat", "gamma", "beta", "mean", "var"}, {"bn"},
           {Attribute::make_float("epsilon", 1e-3f)});
    b.node("Relu", {"bn"}, {"r"});
    b.node("Conv", {"r", "w3"}, {"y"});
    b.output("y");
    b.output("cat");  // read twice: the concat's copy does not take the normalization (see ConcatNormRelu)
    if (bn_output) b.output("bn");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 8, 9, 9}, 8))}};
    expect_matches_interp(m, feeds);
    expect_matches_interp(m, feeds, 2);
    passes::optimize(m, {2, {{"x", {1, 8, 9, 9}}}});
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    Plan plan(m, {{"x", {1, 8, 9, 9}}}, PlanOptions{}, eng);
    EXPECT_EQ(plan.fallback_count(), 0);
    int bn = 0, fused = 0, relu = 0;
    for (const auto& c : plan.kernel_choices()) {
      bn += c.find("onednn batch normalization") != std::string::npos;
      fused += c.find("batch normalization, relu fused") != std::string::npos;
      relu += c.find("(Relu)") != std::string::npos;
    }
    EXPECT_EQ(bn, 1) << bn_output;
    EXPECT_EQ(fused, bn_output ? 0 : 1);
    EXPECT_EQ(relu, bn_output ? 1 : 0);
  }
}

// A tagger's output layer: LogSoftmax over the classes on the engine's row kernel, with
// rows far apart in scale (a large logit must not overflow the sum of exponentials).
TEST(CpuEngine, LogSoftmaxRunsOnItsRowKernel) {
  Builder b;
  b.input("x", Shape({Dim(3), Dim(5), Dim(37)}));
  b.constant("k", {37}, 81);
  b.node("Mul", {"x", "k"}, {"s"});
  b.node("LogSoftmax", {"s"}, {"y"}, {Attribute::make_int("axis", -1)});
  b.output("y");
  Model m = b.finish();
  Tensor x = random_tensor({3, 5, 37}, 82);
  for (int64_t i = 0; i < 37; ++i) x.data<float>()[i] *= 400.0f;  // a row of huge logits
  expect_matches_interp(m, {{"x", RuntimeValue(x)}});
  expect_matches_interp(m, {{"x", RuntimeValue(x)}}, 2);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {3, 5, 37}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0);
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

// `m` on the cpu engine against the interpreter at 1 and 2 threads, then the kernels its plan
// for the feeds' shapes picks (Plan::kernel_choices, reorders included).
std::vector<std::string> checked_kernel_choices(const Model& m, const std::map<std::string, RuntimeValue>& feeds) {
  expect_matches_interp(m, feeds);
  expect_matches_interp(m, feeds, 2);
  Model opt = m;
  passes::optimize(opt, {3, {}});
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, v] : feeds) shapes[name] = v.tensor.shape();
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, shapes, PlanOptions{}, eng);
  return plan.kernel_choices();
}

// A model exported with free batch/height/width (torch's dynamic axes) is optimized per input
// shape, not first without shapes: the residual Add + Relu after a conv (x + f(x), as torch
// writes it) is the conv's sum post-op, as with a static model, not a separate loop with
// reorders around it.
TEST(CpuEngine, DynamicShapeResidualBlockFusesIntoTheConv) {
  Builder b;
  b.input("x", Shape({Dim::sym("n"), Dim(16), Dim::sym("h"), Dim::sym("w")}));
  b.constant("w1", {16, 16, 1, 1}, 1);
  b.constant("b1", {16}, 2);
  b.constant("w2", {16, 16, 3, 3}, 3);
  b.constant("b2", {16}, 4);
  b.node("Conv", {"x", "w1", "b1"}, {"c1"});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w2", "b2"}, {"c2"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Add", {"x", "c2"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  Model m = b.finish();
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 16, 12, 12}, std::vector<int64_t>{2, 16, 7, 9}}) {
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor(shape, 5))}};
    expect_matches_interp(m, feeds);
    auto exe = prepare_cpu(m);
    Profiler profiler;
    profiler.start();
    exe->run(feeds);
    profiler.stop();
    std::vector<std::string> ops;
    for (const auto& e : profiler.events())
      if (e.category == "Node" && e.op != "Reorder") ops.push_back(e.op);
    EXPECT_EQ(ops, (std::vector<std::string>{"FusedConv", "FusedConv"})) << "input " << shape[2] << "x" << shape[3];
  }
}

// EngineOptions::opt_level (SessionOptions', `hodu run -O N`) is the level a model with free
// input dims is optimized at per input shape: level 1 fuses nothing, level 3 what level 2 does.
TEST(CpuEngine, DynamicShapeModelIsOptimizedAtTheRequestedLevel) {
  Builder b;
  b.input("x", Shape({Dim::sym("n"), Dim(8), Dim::sym("h"), Dim::sym("w")}));
  b.constant("w1", {8, 8, 3, 3}, 1);
  b.constant("b1", {8}, 2);
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Add", {"x", "c1"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 8, 10, 10}, 6))}};
  const auto want = run_interp(m, feeds);
  for (int level : {1, 3}) {
    EngineOptions o;
    o.threads = 1;
    o.opt_level = level;
    auto exe = make_cpu_engine()->prepare(m, o);
    Profiler profiler;
    profiler.start();
    auto got = exe->run(feeds);
    profiler.stop();
    std::vector<std::string> ops;
    for (const auto& e : profiler.events())
      if (e.category == "Node" && e.op != "Reorder") ops.push_back(e.op);
    const auto fused = std::vector<std::string>{"FusedConv"};
    if (level == 1) EXPECT_NE(ops, fused);
    else EXPECT_EQ(ops, fused);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_LT(rel_l2(got[0].tensor, want[0].tensor), 1e-5) << "level " << level;
  }
}

// Max pooling of a conv's blocked output runs hodu's own loop: padding, ceil_mode, strides,
// a channel count that leaves a partial block and two images, checked against the interpreter.
TEST(CpuEngine, MaxPoolOnBlockedLayoutMatchesInterpreter) {
  struct Case {
    std::vector<int64_t> kernel, strides, pads;
    int64_t ceil;
  };
  // The loop runs on a conv's channel-blocked output: whether oneDNN writes one here (on Zen 4/5
  // with AVX-512 its brgemm conv writes nhwc), asked the way the engine asks.
  bool conv_writes_channel_blocks = [] {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    using tag = dnnl::memory::format_tag;
    auto md = [](dnnl::memory::dims d) { return dnnl::memory::desc(d, dnnl::memory::data_type::f32, tag::any); };
    dnnl::convolution_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, md({2, 8, 15, 13}),
         md({20, 8, 3, 3}), md({2, 20, 15, 13}), {1, 1}, {1, 1}, {1, 1}},
        eng);
    return onednn::channel_block(pd.dst_desc(), {2, 20, 15, 13}) > 0;
  }();
  for (const Case& c : {Case{{3, 3}, {2, 2}, {0, 0, 0, 0}, 1}, Case{{3, 3}, {1, 1}, {1, 1, 1, 1}, 0},
                        Case{{2, 3}, {2, 1}, {0, 1, 1, 0}, 1}, Case{{5, 5}, {3, 3}, {2, 2, 2, 2}, 0}}) {
    Builder b;
    // 8 channels in (an image's 3 or 4 would make the conv read and write nhwc), 20 out:
    // nChw8c/16c with a partial last block.
    b.input("x", Shape({Dim(2), Dim(8), Dim(15), Dim(13)}));
    b.constant("w", {20, 8, 3, 3}, 3);
    b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.node("MaxPool", {"c"}, {"y"},
           {Attribute::make_ints("kernel_shape", c.kernel), Attribute::make_ints("strides", c.strides),
            Attribute::make_ints("pads", c.pads), Attribute::make_int("ceil_mode", c.ceil)});
    b.output("y");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 8, 15, 13}, 4))}};
    auto want = run_interp(m, feeds);
    for (int threads : {1, 2}) {
      auto got = prepare_cpu(m, threads)->run(feeds);
      ASSERT_EQ(got[0].tensor.shape(), want[0].tensor.shape());
      // The conv's rounding differs from the interpreter's; a wrong window would differ by O(1).
      EXPECT_LE(rel_l2(got[0].tensor, want[0].tensor), 1e-6)
          << "threads " << threads << " kernel " << c.kernel[0] << "x" << c.kernel[1];
    }
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    passes::optimize(m, {3, {{"x", {2, 8, 15, 13}}}});
    Plan plan(m, {{"x", {2, 8, 15, 13}}}, PlanOptions{}, eng);
    int own = 0;
    for (const auto& k : plan.kernel_choices()) own += k.find("(MaxPool): cpu blocked max pool") != std::string::npos;
    EXPECT_EQ(own, conv_writes_channel_blocks ? 1 : 0);
  }
  if (!conv_writes_channel_blocks)
    GTEST_SKIP() << "results checked; oneDNN's conv writes nhwc on this CPU, so the blocked loop is not chosen "
                    "(BlockedMaxPoolLoopMatchesPlainLoop tests it directly)";
}

// The blocked max-pool loop itself (vector_math.h, shared by the engine and the kernel
// library), for both channel blocks (8: AVX2's conv layout, 16: AVX-512's, which this
// machine may not produce), against a plain loop over the window.
TEST(CpuEngine, BlockedMaxPoolLoopMatchesPlainLoop) {
  for (int64_t block : {8, 16}) {
    const int64_t images = 2, blocks = 3, h = 9, w = 7;
    vector_math::BlockedPool2d p{block, h, w, 0, 0, 3, 2, 2, 2, 1, 0};
    p.oh = (h + 2 * p.ph - p.kh + p.sh - 1) / p.sh + 1;  // ceil_mode
    p.ow = (w + 2 * p.pw - p.kw + p.sw - 1) / p.sw + 1;
    std::mt19937 rng(static_cast<uint32_t>(block));
    std::uniform_real_distribution<float> dist(-5.0f, 5.0f);
    std::vector<float> x(images * blocks * h * w * block), y(images * blocks * p.oh * p.ow * block, 0.0f);
    for (float& v : x) v = dist(rng);
    vector_math::max_pool_blocked(x.data(), y.data(), p, 0, images * blocks * p.oh);
    for (int64_t cb = 0; cb < images * blocks; ++cb)
      for (int64_t oy = 0; oy < p.oh; ++oy)
        for (int64_t ox = 0; ox < p.ow; ++ox)
          for (int64_t l = 0; l < block; ++l) {
            float want = -std::numeric_limits<float>::infinity();
            for (int64_t ky = 0; ky < p.kh; ++ky)
              for (int64_t kx = 0; kx < p.kw; ++kx) {
                int64_t iy = oy * p.sh - p.ph + ky, ix = ox * p.sw - p.pw + kx;
                if (iy >= 0 && iy < h && ix >= 0 && ix < w) want = std::max(want, x[((cb * h + iy) * w + ix) * block + l]);
              }
            ASSERT_EQ(y[((cb * p.oh + oy) * p.ow + ox) * block + l], want)
                << "block " << block << " at " << cb << "," << oy << "," << ox << "," << l;
          }
  }
}

// The SiLU loop run after convolutions, each instruction set this CPU has, against double
// precision: values across exp's clamps, lengths with vector tails.
TEST(CpuEngine, SiluLoopMatchesDouble) {
  std::vector<std::pair<const char*, void (*)(float*, int64_t)>> variants = {
      {"dispatch", vector_math::silu_in_place}};
  if (__builtin_cpu_supports("avx512f")) variants.emplace_back("avx512", vector_math::silu_in_place_avx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    variants.emplace_back("avx2", vector_math::silu_in_place_avx2);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (int64_t n : {1, 15, 16, 37, 1000}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    x[0] = n > 1 ? 0.0f : -0.5f;
    for (const auto& [name, silu] : variants) {
      std::vector<float> y = x;
      silu(y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        double want = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
        EXPECT_NEAR(y[i], want, 4e-7 * std::abs(want) + 1e-30) << name << " silu(" << x[i] << ")";
      }
    }
  }
}

// The softmax row loops (attention, Softmax), each instruction set this CPU has, against double
// precision: vector tails, -inf entries (masked: exactly 0), a large spread, a fully masked row.
TEST(CpuEngine, SoftmaxLoopsMatchDouble) {
  std::vector<std::pair<const char*, bool (*)(float*, int64_t)>> variants = {
      {"portable", [](float* y, int64_t n) { return vector_math::softmax_in_place(y, n); }},
      {"dispatch", vector_math::softmax_in_place_fast}};
  if (__builtin_cpu_supports("avx512f")) variants.emplace_back("avx512", vector_math::softmax_in_place_avx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    variants.emplace_back("avx2", vector_math::softmax_in_place_avx2);
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
  for (int64_t n : {1, 7, 16, 17, 128, 197}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    if (n > 3) x[1] = x[n - 1] = -inf;
    double mx = -inf, sum = 0;
    for (float v : x) mx = std::max<double>(mx, v);
    for (float v : x) sum += v == -inf ? 0 : std::exp(v - mx);
    for (const auto& [name, softmax] : variants) {
      std::vector<float> y = x;
      ASSERT_TRUE(softmax(y.data(), n)) << name;
      for (int64_t i = 0; i < n; ++i) {
        double want = x[i] == -inf ? 0.0 : std::exp(x[i] - mx) / sum;
        if (x[i] == -inf) {
          EXPECT_EQ(y[i], 0.0f) << name << " n " << n << " at " << i;
        } else {
          EXPECT_NEAR(y[i], want, 4e-6 * want + 1e-9) << name << " n " << n << " at " << i;  // float (x - max)
        }
      }
      std::vector<float> masked(n, -inf);
      EXPECT_FALSE(softmax(masked.data(), n)) << name;
      EXPECT_EQ(masked[0], -inf) << name << ": a fully masked row is left as it is";
    }
  }
}

// ConvNeXt's block: depthwise conv → Transpose to NHWC → LayerNorm → products → Transpose back
// → channel scale → residual Add, two blocks. The Transposes are views (the conv's output
// reordered once to nhwc; the products' rows taken as nhwc), not copies, and the second block's
// depthwise conv reads and writes the first block's nhwc as it is (no reorder of its output);
// a Transpose whose input is read again, or which is a graph output, stays a copy. Against the
// interpreter at 1 and 2 threads (and at AVX2 under ctest cpu_engine_test_avx2).
TEST(CpuEngine, ChannelsLastBlockWithTransposeViewsMatchesInterpreter) {
  for (bool shared_input : {false, true}) {
    Builder b;
    b.input("x", {2, 16, 9, 7});
    b.constant("ln_s", {16}, 3, 0.5f, 1.5f);
    b.constant("ln_b", {16}, 4);
    std::string in = "x";
    for (std::string k : {"1", "2"}) {
      const uint32_t seed = k == "1" ? 10 : 20;
      b.constant("dw" + k, {16, 1, 7, 7}, seed);
      b.constant("dwb" + k, {16}, seed + 1);
      b.constant("w1" + k, {16, 32}, seed + 2);
      b.constant("w2" + k, {32, 16}, seed + 3);
      b.constant("gamma" + k, {16, 1, 1}, seed + 4);
      b.node("Conv", {in, "dw" + k, "dwb" + k}, {"c" + k},
             {Attribute::make_ints("pads", {3, 3, 3, 3}), Attribute::make_int("group", 16)});
      b.node("Transpose", {"c" + k}, {"t" + k}, {Attribute::make_ints("perm", {0, 2, 3, 1})});
      b.node("LayerNormalization", {"t" + k, "ln_s", "ln_b"}, {"ln" + k}, {Attribute::make_int("axis", -1)});
      b.node("MatMul", {"ln" + k, "w1" + k}, {"h" + k});
      b.node("Relu", {"h" + k}, {"hr" + k});
      b.node("MatMul", {"hr" + k, "w2" + k}, {"o" + k});
      b.node("Transpose", {"o" + k}, {"ob" + k}, {Attribute::make_ints("perm", {0, 3, 1, 2})});
      b.node("Mul", {"ob" + k, "gamma" + k}, {"sc" + k});
      b.node("Add", {"sc" + k, in}, {"y" + k});
      in = "y" + k;
    }
    b.output("y2");
    if (shared_input) {
      b.node("Relu", {"o1"}, {"o1r"});  // o1 read twice: its Transpose copies
      b.output("o1r");
      b.output("t1");  // a graph output: a copy
    }
    Model m = b.finish();
    int copies = 0, second_conv_reorders = 0;
    for (const auto& k : checked_kernel_choices(m, {{"x", RuntimeValue(random_tensor({2, 16, 9, 7}, 8))}})) {
      copies += k.find("(Transpose)") != std::string::npos;
      second_conv_reorders += k.find("reorder 'c2'") != std::string::npos || k.find("reorder 'y1'") != std::string::npos;
    }
    EXPECT_EQ(copies, shared_input ? 2 : 0);
    if (!shared_input) {
      EXPECT_EQ(second_conv_reorders, 0);
    }
  }
}

// Grouped convs with groups narrower than a vector (ResNeXt's 32 groups of 4 channels): where
// oneDNN would take its im2col + sgemm kernel (at AVX2), k groups run as one with block-diagonal
// weights on a direct kernel. Bias, residual and activation fused, stride 1 and 2, widths 2, 4
// and 12, against the interpreter (also under ctest cpu_engine_test_avx2).
TEST(CpuEngine, NarrowGroupConvMatchesInterpreter) {
  struct Case {
    int64_t channels, group, stride;
  };
  for (Case c : {Case{32, 8, 1}, Case{32, 8, 2}, Case{16, 8, 1}, Case{48, 4, 1}}) {
    Builder b;
    b.input("x", {2, c.channels, 11, 10});
    b.constant("w", {c.channels, c.channels / c.group, 3, 3}, 1);
    b.constant("bias", {c.channels}, 2);
    b.node("Conv", {"x", "w", "bias"}, {"y"},
           {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", c.group),
            Attribute::make_ints("strides", {c.stride, c.stride})});
    std::string out = "y";
    if (c.stride == 1) {
      b.node("Add", {"y", "x"}, {"s"});
      b.node("Relu", {"s"}, {"r"});
      out = "r";
    }
    b.output(out);
    Model m = b.finish();
    int convs = 0;
    for (const auto& k : checked_kernel_choices(m, {{"x", RuntimeValue(random_tensor({2, c.channels, 11, 10}, 3))}})) {
      if (k.find("Conv") == std::string::npos) continue;
      ++convs;
      EXPECT_EQ(k.find("gemm"), std::string::npos) << k;
    }
    EXPECT_EQ(convs, 1) << c.channels << " channels in " << c.group << " groups";
  }
}

// RegNet's bottleneck: 1x1 conv → 3x3 conv of 16-channel groups → 1x1 conv. Where the 1x1
// convs write nhwc (oneDNN's brgemm kernels, AVX-512) the grouped conv reads and writes nhwc
// too: no reorder between the three. Against the interpreter at 1 and 2 threads.
TEST(CpuEngine, WideGroupConvBetweenNhwcConvsMatchesInterpreter) {
  Builder b;
  b.input("x", {1, 32, 14, 14});
  b.constant("w1", {64, 32, 1, 1}, 1);
  b.constant("wg", {64, 16, 3, 3}, 2);
  b.constant("w3", {32, 64, 1, 1}, 3);
  b.node("Conv", {"x", "w1"}, {"c1"});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "wg"}, {"g"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", 4)});
  b.node("Relu", {"g"}, {"rg"});
  b.node("Conv", {"rg", "w3"}, {"c3"});
  b.node("Add", {"c3", "x"}, {"y"});
  b.output("y");
  Model m = b.finish();
  bool brgemm_1x1 = false;
  int between = 0;
  for (const auto& k : checked_kernel_choices(m, {{"x", RuntimeValue(random_tensor({1, 32, 14, 14}, 4))}})) {
    brgemm_1x1 |= k.find("brgconv_1x1") != std::string::npos;
    between += k.find("reorder 'r1'") != std::string::npos || k.find("reorder 'rg'") != std::string::npos;
  }
  if (brgemm_1x1) {
    EXPECT_EQ(between, 0);
  }
}

// merge_group_weights places each output channel's weights at its group's slot in the wider
// group and zeros the rest.
TEST(CpuEngine, MergeGroupWeightsIsBlockDiagonal) {
  // 4 groups of 2 input and 1 output channel ([4, 2, 1, 1]), merged by 2: [4, 4, 1, 1].
  Tensor w = Tensor::from_vector(DType::F32, {4, 2, 1, 1}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  Tensor m = merge_group_weights(w, 4, 2);
  ASSERT_EQ(m.shape(), (std::vector<int64_t>{4, 4, 1, 1}));
  std::vector<float> want = {1, 2, 0, 0, 0, 0, 3, 4, 5, 6, 0, 0, 0, 0, 7, 8};
  EXPECT_EQ(std::vector<float>(m.data<float>(), m.data<float>() + 16), want);
  EXPECT_EQ(group_merge_factor(32, 4, 4, 8), 2);
  EXPECT_EQ(group_merge_factor(32, 2, 2, 8), 4);
  EXPECT_EQ(group_merge_factor(64, 1, 1, 8), 0);   // depthwise: 8x the multiplies
  EXPECT_EQ(group_merge_factor(3, 4, 4, 8), 0);    // no whole number of wider groups
  EXPECT_EQ(group_merge_factor(16, 12, 12, 8), 2);
  EXPECT_THROW(merge_group_weights(w, 3, 2), Error);
}

// A conv + SiLU (Mul(y, Sigmoid(y))) on a blocked layout with a partial channel block, into
// another conv: the SiLU loop runs over the padding channels too and must leave them zero. At
// 40x45 the loop's 43200 values split into chunks of whole vectors, a multiple of the threads.
Model conv_silu_chain(int64_t side) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(8), Dim(side), Dim(side + 5 * (side > 12))}));
  b.constant("w1", {20, 8, 3, 3}, 41);
  b.constant("b1", {20}, 42);
  b.constant("w2", {20, 1, 3, 3}, 43);  // depthwise over the 20 channels
  b.constant("w3", {24, 20, 1, 1}, 44);
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Sigmoid", {"c1"}, {"s1"});
  b.node("Mul", {"c1", "s1"}, {"a1"});
  b.node("Conv", {"a1", "w2"}, {"c2"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", 20)});
  b.node("Sigmoid", {"c2"}, {"s2"});
  b.node("Mul", {"s2", "c2"}, {"a2"});
  b.node("Conv", {"a2", "w3"}, {"y"});
  b.output("y");
  return b.finish();
}

TEST(CpuEngine, ConvSiluChainMatchesInterpreter) {
  Model big = conv_silu_chain(40);
  for (int threads : {1, 2, 3})
    expect_matches_interp(big, {{"x", RuntimeValue(random_tensor({1, 8, 40, 45}, 47))}}, threads);
  Model m = conv_silu_chain(12);
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 8, 12, 12}, 45))}});
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 8, 12, 12}, 46))}}, 2);
  passes::optimize(m, {3, {}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {1, 8, 12, 12}}}, PlanOptions{}, eng);
  int silu_loops = 0;
  // hodu's AVX2 Winograd conv (winograd_conv.h) applies the SiLU in its own store, padding kept zero.
  for (const auto& k : plan.kernel_choices())
    silu_loops += k.find(", silu loop") != std::string::npos || k.find("cpu winograd") != std::string::npos;
  EXPECT_EQ(silu_loops, 2);
}

// Residuals fused into products (FusedMatMul/FusedGemm input Z) accumulate in place where the
// residual's bytes die there; not where a view of them is read later, nor into a graph output
// (read after the last step, when the arena's bytes may hold something else).
TEST(CpuEngine, ResidualIntoProductsMatchesInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(8), Dim(32)}));
  for (const char* w : {"w0", "w1", "w2", "w3", "w4"}) b.constant(w, {32, 32}, static_cast<uint32_t>(w[1]));
  b.constant("bias", {32}, 50);
  b.ints("flat", {8, 32});
  b.ints("back", {1, 8, 32});
  b.node("MatMul", {"x", "w0"}, {"a"});
  b.node("MatMul", {"x", "w1"}, {"m1"});
  b.node("Add", {"m1", "a"}, {"r1"});  // a dies here: in place
  b.node("Reshape", {"r1", "flat"}, {"r1f"});
  b.node("Gemm", {"r1f", "w2", "bias"}, {"g"});
  b.node("Reshape", {"g", "back"}, {"g3"});
  b.node("Add", {"g3", "r1"}, {"r2"});  // r1 dies, but the product reads its bytes (r1f): copied
  b.node("Reshape", {"r2", "flat"}, {"r2f"});
  b.node("MatMul", {"r2", "w3"}, {"m3"});
  b.node("Add", {"m3", "r2"}, {"r3"});  // r2's view r2f is read later: copied
  b.node("MatMul", {"r2f", "w4"}, {"m4"});
  b.node("Reshape", {"m4", "back"}, {"m4b"});
  b.node("Add", {"r3", "m4b"}, {"y"});  // r3 (through a Reshape to [8, 32]) dies here: in place
  b.node("MatMul", {"y", "w0"}, {"m5"});
  b.node("Add", {"m5", "y"}, {"out"});  // a graph output: not in place (y is too)
  b.output("y");
  b.output("out");
  Model m = b.finish();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 8, 32}, 51))}});
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 8, 32}, 52))}}, 2);
  passes::optimize(m, {3, {}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {1, 8, 32}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0);
  int in_place = 0, copied = 0;
  for (const auto& k : plan.kernel_choices()) {
    in_place += k.find(", residual in place") != std::string::npos;
    copied += k.find(", residual") != std::string::npos && k.find("in place") == std::string::npos;
  }
  EXPECT_EQ(in_place, 2);
  EXPECT_EQ(copied, 3);
}

// Where oneDNN has only its sgemm (no AVX-512; ctest cpu_engine_test_avx2 caps oneDNN at
// AVX2 to get there on any CPU) products run as tiles on several threads at once. With a
// bias and a residual the sgemm accumulates in its scratchpad, which in oneDNN's library
// mode one primitive shares between threads: ViT's MLP gave wrong sums at batch 3 on two
// threads. Each tile call has its own scratchpad now.
// HODU_CPU_MATMUL set for one scope.
struct MatMulEnv {
  explicit MatMulEnv(const char* value) { setenv("HODU_CPU_MATMUL", value, 1); }
  ~MatMulEnv() { unsetenv("HODU_CPU_MATMUL"); }
};

TEST(CpuEngine, TiledProductWithBiasAndResidualOnTwoThreads) {
  MatMulEnv gemm("gemm");  // constant weights would otherwise run as a 1x1 conv
  Builder b;
  b.input("x", Shape({Dim::sym("rows"), Dim(512)}));
  b.input("r", Shape({Dim::sym("rows"), Dim(768)}));
  b.constant("w", {512, 768}, 61, -0.05f, 0.05f);
  b.constant("bias", {768}, 62);
  b.node("Relu", {"r"}, {"res"});
  b.node("MatMul", {"x", "w"}, {"p"});
  b.node("Add", {"p", "bias"}, {"pb"});
  b.node("Add", {"res", "pb"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_tensor({591, 512}, 63))},
                                            {"r", RuntimeValue(random_tensor({591, 768}, 64))}};
  expect_matches_interp(m, feeds, 2);
  std::map<std::string, std::vector<int64_t>> shapes{{"x", {591, 512}}, {"r", {591, 768}}};
  passes::optimize(m, {2, shapes});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  PlanOptions po;
  po.threads = 2;
  Plan plan(m, shapes, po, eng);
  bool tiled = false;
  for (const auto& k : plan.kernel_choices()) tiled |= k.find("tiled, residual") != std::string::npos;
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa && std::string(isa) == "AVX2") {
    EXPECT_TRUE(tiled) << "under an AVX2 cap the product runs as tiles";
  }
  if (!tiled) std::printf("note: this CPU's oneDNN matmul is not the tiled sgemm; run under ONEDNN_MAX_CPU_ISA=AVX2\n");
}

// Where oneDNN's matmul is its sgemm (below AVX-512; ctest cpu_engine_test_avx2 caps oneDNN
// there on any CPU), products with constant weights run as oneDNN's 1x1 convolution over
// channels-last rows (weights packed once): plain MatMul, MatMul with bias + GELU, Gemm with
// transB, alpha and beta, a residual, a rank-3 A folded into rows. Same sums as the
// interpreter, and the same bits on one thread as on two (the thread governor switches).
TEST(CpuEngine, ConstantWeightProductAs1x1ConvMatchesInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(2), Dim::sym("rows"), Dim(96)}));
  b.constant("w1", {96, 80}, 71, -0.1f, 0.1f);
  b.constant("b1", {80}, 72);
  b.constant("w2", {40, 80}, 73, -0.1f, 0.1f);  // Gemm with transB: stored [N, K]
  b.constant("b2", {40}, 74);
  b.constant("w3", {40, 80}, 75, -0.1f, 0.1f);
  b.constant("w4", {80, 24}, 76, -0.1f, 0.1f);
  b.scalar("half", 0.5f);
  b.scalar("one", 1.0f);
  b.scalar("sqrt2", std::sqrt(2.0f));
  b.ints("flat", {-1, 96});
  b.node("MatMul", {"x", "w1"}, {"m1"});  // [2, rows, 96]: folded into [2 rows, 96]
  b.node("Add", {"m1", "b1"}, {"h1"});
  b.node("Div", {"h1", "sqrt2"}, {"gd"});  // GELU as exported: a post-op of the product
  b.node("Erf", {"gd"}, {"ge"});
  b.node("Add", {"ge", "one"}, {"ge1"});
  b.node("Mul", {"h1", "ge1"}, {"gm"});
  b.node("Mul", {"gm", "half"}, {"g"});
  b.node("Reshape", {"x", "flat"}, {"xf"});
  b.node("MatMul", {"xf", "w1"}, {"p"});  // [2 rows, 80]
  b.node("Reshape", {"g", "flat80"}, {"gf"});
  b.node("Gemm", {"gf", "w2", "b2"}, {"q"},
         {Attribute::make_int("transB", 1), Attribute::make_float("alpha", 0.5f), Attribute::make_float("beta", 2.0f)});
  b.node("MatMul", {"q", "w3"}, {"s"});
  b.node("Relu", {"p"}, {"pr"});
  b.node("Add", {"s", "pr"}, {"y"});  // a residual
  b.node("MatMul", {"y", "w4"}, {"z"});
  b.ints("flat80", {-1, 80});
  b.output("z");
  b.output("q");
  b.constant("w5", {3, 10}, 78);  // K and N under a vector
  b.input("t", Shape({Dim::sym("t_rows"), Dim(3)}));
  b.node("MatMul", {"t", "w5"}, {"u"});
  b.output("u");
  Model m = b.finish();
  for (int64_t one_row : {1, 2}) {  // a single token: a one-pixel conv (at most 4 rows: on every ISA)
    std::map<std::string, RuntimeValue> small{{"x", RuntimeValue(random_tensor({2, one_row, 96}, 79))},
                                              {"t", RuntimeValue(random_tensor({2 * one_row, 3}, 80))}};
    expect_matches_interp(m, small, 2);
    auto one = prepare_cpu(m, 1)->run(small), two = prepare_cpu(m, 2)->run(small);
    ASSERT_EQ(one.size(), two.size());
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(std::memcmp(one[i].tensor.raw_data(), two[i].tensor.raw_data(), one[i].tensor.nbytes()), 0)
          << "output " << i << " differs between one and two threads at " << one_row << " row(s)";
  }
  const int64_t rows = 37;
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_tensor({2, rows, 96}, 77))},
                                            {"t", RuntimeValue(random_tensor({2 * rows, 3}, 81))}};
  expect_matches_interp(m, feeds, 1);
  expect_matches_interp(m, feeds, 2);
  auto one = prepare_cpu(m, 1)->run(feeds), two = prepare_cpu(m, 2)->run(feeds);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_EQ(std::memcmp(one[i].tensor.raw_data(), two[i].tensor.raw_data(), one[i].tensor.nbytes()), 0)
        << "output " << i << " differs between one and two threads";

  std::map<std::string, std::vector<int64_t>> shapes{{"x", {2, rows, 96}}, {"t", {2 * rows, 3}}};
  passes::optimize(m, {3, shapes});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  auto as_conv = [&] {
    PlanOptions po;
    po.threads = 2;
    Plan plan(m, shapes, po, eng);
    EXPECT_EQ(plan.fallback_count(), 0);
    int n = 0;
    for (const auto& k : plan.kernel_choices()) n += k.find(", as 1x1 conv") != std::string::npos;
    return n;
  };
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa && std::string(isa) == "AVX2") {
    EXPECT_EQ(as_conv(), 6) << "under an AVX2 cap every product here has constant weights";
  }
  // A classifier at batch 1 (one row of constant weights' product): against torch's [N, K]
  // weights (transB) the four-row dot products read them where they lie; against [K, N] ones
  // the 1x1 conv at any ISA.
  for (bool trans_b : {true, false}) {
    Builder h;
    h.input("f", Shape({Dim(1), Dim(1280)}));
    h.constant("wh", trans_b ? std::vector<int64_t>{1000, 1280} : std::vector<int64_t>{1280, 1000}, 82);
    h.constant("bh", {1000}, 83);
    h.node("Gemm", {"f", "wh", "bh"}, {"logits"}, {Attribute::make_int("transB", trans_b ? 1 : 0)});
    h.output("logits");
    Model head = h.finish();
    std::map<std::string, RuntimeValue> f{{"f", RuntimeValue(random_tensor({1, 1280}, 84))}};
    expect_matches_interp(head, f, 2);
    std::map<std::string, std::vector<int64_t>> fs{{"f", {1, 1280}}};
    passes::optimize(head, {3, fs});
    Plan plan(head, fs, PlanOptions{}, eng);
    int conv = 0, streamed = 0;
    for (const auto& k : plan.kernel_choices()) {
      conv += k.find(", as 1x1 conv") != std::string::npos;
      streamed += k.find("cpu stream gemv") != std::string::npos;
    }
    EXPECT_EQ(conv, trans_b ? 0 : 1) << "transB " << trans_b;
    EXPECT_EQ(streamed, trans_b ? 1 : 0) << "transB " << trans_b;
  }
  {
    MatMulEnv gemm("gemm");
    EXPECT_EQ(as_conv(), 0) << "HODU_CPU_MATMUL=gemm keeps oneDNN's matmul";
  }
  {
    MatMulEnv bad("fastest");
    try {
      as_conv();
      ADD_FAILURE() << "HODU_CPU_MATMUL=fastest was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("HODU_CPU_MATMUL=fastest"), std::string::npos) << e.what();
    }
  }
}


struct SplitEnv {
  explicit SplitEnv(const char* value) { setenv("HODU_CPU_MATMUL_SPLIT", value, 1); }
  ~SplitEnv() { unsetenv("HODU_CPU_MATMUL_SPLIT"); }
};

// Products on the 1x1 conv at 2 threads run in column chunks the threads take in turn
// (make_column_chunks): with bias, GELU, a residual in place and one without, transB, and a last
// chunk narrower than the others (200 columns: 64, 64, 64, 8). The same bits at 1 thread (one
// primitive) and 2; HODU_CPU_MATMUL_SPLIT=whole keeps one primitive; a bad value is an error.
TEST(CpuEngine, ColumnChunkedProductMatchesInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim::sym("rows"), Dim(192)}));
  b.input("r", Shape({Dim(1), Dim::sym("rows"), Dim(200)}));
  b.constant("w1", {192, 200}, 91, -0.1f, 0.1f);
  b.constant("b1", {200}, 92);
  b.constant("w2", {200, 200}, 93, -0.1f, 0.1f);  // [N, K]: transB
  b.constant("w3", {200, 200}, 94, -0.1f, 0.1f);
  b.scalar("half", 0.5f);
  b.scalar("one", 1.0f);
  b.scalar("sqrt2", std::sqrt(2.0f));
  b.node("MatMul", {"x", "w1"}, {"m1"});
  b.node("Add", {"m1", "b1"}, {"h1"});
  b.node("Div", {"h1", "sqrt2"}, {"gd"});  // GELU: the product's post-op
  b.node("Erf", {"gd"}, {"ge"});
  b.node("Add", {"ge", "one"}, {"ge1"});
  b.node("Mul", {"h1", "ge1"}, {"gm"});
  b.node("Mul", {"gm", "half"}, {"g"});
  b.ints("flat", {-1, 200});
  b.ints("back", {1, -1, 200});
  b.node("Reshape", {"g", "flat"}, {"gf"});
  b.node("Gemm", {"gf", "w2"}, {"q2"}, {Attribute::make_int("transB", 1)});
  b.node("Reshape", {"q2", "back"}, {"q"});
  b.node("Add", {"q", "r"}, {"s"});  // r is a graph input: the residual is copied in
  b.node("MatMul", {"s", "w3"}, {"p"});
  b.node("Add", {"p", "s"}, {"y"});  // s dies here: the residual in place
  b.output("y");
  Model m = b.finish();
  const int64_t rows = 45;
  std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(random_tensor({1, rows, 192}, 95))},
                                            {"r", RuntimeValue(random_tensor({1, rows, 200}, 96))}};
  expect_matches_interp(m, feeds, 2);
  auto one = prepare_cpu(m, 1)->run(feeds), two = prepare_cpu(m, 2)->run(feeds);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(std::memcmp(one[0].tensor.raw_data(), two[0].tensor.raw_data(), one[0].tensor.nbytes()), 0)
      << "one thread (one primitive) and two (column chunks) differ";
  std::map<std::string, std::vector<int64_t>> shapes{{"x", {1, rows, 192}}, {"r", {1, rows, 200}}};
  passes::optimize(m, {3, shapes});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  auto chunked = [&](int threads) {
    PlanOptions po;
    po.threads = threads;
    Plan plan(m, shapes, po, eng);
    int n = 0;
    for (const auto& k : plan.kernel_choices()) n += k.find("4 column chunks") != std::string::npos;
    return n;
  };
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!isa || std::string(isa) != "AVX2") GTEST_SKIP() << "results checked; the 1x1 conv runs the products below AVX-512";
  EXPECT_EQ(chunked(2), 3) << "each product in 4 column chunks at 2 threads";
  EXPECT_EQ(chunked(1), 0) << "one primitive at 1 thread";
  {
    SplitEnv whole("whole");
    EXPECT_EQ(chunked(2), 0) << "HODU_CPU_MATMUL_SPLIT=whole keeps one primitive";
  }
  SplitEnv bad("halves");
  try {
    chunked(2);
    ADD_FAILURE() << "HODU_CPU_MATMUL_SPLIT=halves was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HODU_CPU_MATMUL_SPLIT=halves"), std::string::npos) << e.what();
  }
}

// A conv and a product whose residual could be their buffer, but whose output is a graph
// output that later steps outlive: the output keeps its own bytes.
TEST(CpuEngine, ResidualConvIntoGraphOutputKeepsItsBytes) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(16), Dim(8), Dim(8)}));
  for (const char* w : {"w1", "w2", "w3", "w4", "w5"})
    b.constant(w, {16, 16, 3, 3}, static_cast<uint32_t>(w[1]), -0.2f, 0.2f);
  b.constant("fc", {64, 64}, 54);
  b.ints("rows", {16, 64});
  auto pads = Attribute::make_ints("pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "w1"}, {"c1"}, {pads});
  b.node("Conv", {"c1", "w2"}, {"c2"}, {pads});
  b.node("Add", {"c2", "c1"}, {"r"});  // c1 dies here, r is a graph output
  b.node("Conv", {"r", "w3"}, {"c3"}, {pads});
  b.node("Conv", {"c3", "w4"}, {"c4"}, {pads});  // may take c1's bytes once r is read
  b.node("Conv", {"c4", "w5"}, {"c5"}, {pads});
  b.node("Reshape", {"c5", "rows"}, {"f"});
  b.node("Relu", {"f"}, {"fr"});
  b.node("MatMul", {"f", "fc"}, {"m"});
  b.node("Add", {"m", "fr"}, {"s"});  // fr dies here, s is a graph output
  b.node("MatMul", {"s", "fc"}, {"t1"});
  b.node("MatMul", {"t1", "fc"}, {"t2"});  // may take fr's bytes once s is read
  b.node("MatMul", {"t2", "fc"}, {"t3"});
  b.node("Sigmoid", {"t3"}, {"y"});
  b.output("r");
  b.output("s");
  b.output("y");
  Model m = b.finish();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({1, 16, 8, 8}, 53))}});
}

// Attention in its rank-3 form (heads read and written through strides), a mask, batch 1 and 2.
TEST(CpuEngine, TransformerBlockMatchesInterpreter) {
  for (int64_t batch : {1, 2}) {
    Model m = small_transformer(batch);
    expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({batch, 8, 32}, 3))}});
    expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({batch, 8, 32}, 4))}}, 2);
    Model opt = m;
    passes::optimize(opt, {3, {}});
    int attention = 0, fused_mm = 0, transposes = 0;
    for (const auto& n : opt.graph.nodes) {
      attention += n.op_type == "Attention" && n.get_int("num_heads", 0) == 4;
      fused_mm += n.op_type == "FusedMatMul";
      transposes += n.op_type == "Transpose";
    }
    EXPECT_EQ(attention, 1);
    EXPECT_GE(fused_mm, 1);
    EXPECT_EQ(transposes, 0);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    Plan plan(opt, {{"x", {batch, 8, 32}}}, PlanOptions{}, eng);
    EXPECT_EQ(plan.fallback_count(), 0);
  }
}

// A key padding mask that masks a whole row (nn.MultiheadAttention with a fully padded
// sequence): softmax over all -inf is 0/0, NaN, in ONNX Runtime, torch and the interpreter.
// The engine's row kernel wrote 0 there, at -O1 and up (Softmax and the fused attention).
TEST(CpuEngine, FullyMaskedSoftmaxRowIsNaNAsInTheInterpreter) {
  Builder b;
  b.input("q", Shape{2, 2, 3, 4});
  b.input("k", Shape{2, 2, 3, 4});
  b.input("v", Shape{2, 2, 3, 4});
  b.input("mask", Shape{2, 1, 1, 3});
  b.node("Transpose", {"k"}, {"kT"}, {Attribute::make_ints("perm", {0, 1, 3, 2})});
  b.node("MatMul", {"q", "kT"}, {"s"});
  b.node("Add", {"s", "mask"}, {"sm"});
  b.node("Softmax", {"sm"}, {"p"}, {Attribute::make_int("axis", -1)});
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("p");
  b.output("y");
  Model m = b.finish();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor mask = Tensor::from_vector<float>(DType::F32, {2, 1, 1, 3}, {-inf, -inf, -inf, 0, -inf, 0});
  std::map<std::string, RuntimeValue> feeds = {{"q", RuntimeValue(random_tensor({2, 2, 3, 4}, 7))},
                                               {"k", RuntimeValue(random_tensor({2, 2, 3, 4}, 8))},
                                               {"v", RuntimeValue(random_tensor({2, 2, 3, 4}, 9))},
                                               {"mask", RuntimeValue(mask)}};
  auto want = run_interp(m, feeds);
  ASSERT_TRUE(std::isnan(want[0].tensor.get_double(0)));  // batch 0: every key masked
  for (int level : {0, 1, 2, 3}) {
    Model opt = m;
    passes::optimize(opt, {level, {}});  // as hodu run -O<level>
    auto got = prepare_cpu(opt)->run(feeds);
    for (size_t out = 0; out < 2; ++out) {
      const Tensor &g = got[out].tensor, &w = want[out].tensor;
      ASSERT_EQ(g.shape(), w.shape());
      for (int64_t i = 0; i < w.numel(); ++i) {
        const double a = g.get_double(i), e = w.get_double(i);
        if (std::isnan(e)) {
          EXPECT_TRUE(std::isnan(a)) << "-O" << level << " output " << out << " at " << i << ": " << a;
        } else {
          EXPECT_NEAR(a, e, 1e-5 * std::max(1.0, std::fabs(e))) << "-O" << level << " output " << out << " at " << i;
        }
      }
    }
  }
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

// The FusedElementwise loop's Exp, Sigmoid, Tanh and Erf (vector_math's vectorizable forms) and
// Pow by 2 and 3 (products) element by element against the C library's, over the values where
// approximations go wrong: around 0 (tanh's x itself below 4e-4), at exp's clamps and past them
// (subnormal results, 0, inf), at tanh's saturation, NaN.
TEST(CpuEngine, FusedMathAndPowMatchTheCLibrary) {
  std::vector<float> v;
  for (float x : {0.0f, -0.0f, 1e-8f, -3e-5f, 3.9e-4f, 4.1e-4f, 1e-3f, -0.3f, 0.7f, 1.0f, -2.5f, 5.0f, 7.9f, -8.0f,
                  9.0f, 20.0f, -30.0f, 50.0f, 87.5f, 88.5f, 89.0f, -87.5f, -100.0f, -104.0f, -110.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    v.push_back(x);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-12.0f, 12.0f);
  while (v.size() < 1000) v.push_back(d(rng));
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor x = Tensor::from_vector(DType::F32, {n}, v);
  struct Case {
    const char* op;
    std::function<double(double)> want;
    double rel, abs;  // allowed |got - want| <= abs + rel·|want|
  };
  const Case cases[] = {
      {"Exp", [](double t) { return std::exp(t); }, 4e-7, 0},
      // As the interpreter computes it, in float: 1 / (1 + inf) = 0 below x = -88.7.
      {"Sigmoid", [](double t) { return 1.0f / (1.0f + std::exp(-static_cast<float>(t))); }, 4e-7, 0},
      {"Tanh", [](double t) { return std::tanh(t); }, 4e-7, 0},
      {"Erf", [](double t) { return std::erf(t); }, 0, 4e-7},  // the engine's Erf op's, in float arithmetic
      {"Pow2", [](double t) { return t * t; }, 6e-8, 0},
      {"Pow3", [](double t) { return t * t * t; }, 1.2e-7, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    Builder b;
    b.input("x", Shape({Dim(n)}));
    b.scalar("zero", 0.0f);
    b.scalar("e", c.op[3] == '3' ? 3.0f : 2.0f);
    b.node("Add", {"x", "zero"}, {"a"});  // two ops: a FusedElementwise for the unary ones
    const std::string op = c.op;
    if (op.rfind("Pow", 0) == 0) b.node("Pow", {"a", "e"}, {"y"});
    else b.node(op, {"a"}, {"y"});
    b.output("y");
    Model m = b.finish();
    auto got = prepare_cpu(m)->run({{"x", RuntimeValue(x)}});
    ASSERT_EQ(got.size(), 1u);
    const float* y = got[0].tensor.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double want = c.want(static_cast<double>(v[static_cast<size_t>(i)]));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << "x = " << v[static_cast<size_t>(i)];
      } else if (std::isinf(want) || std::fabs(want) > std::numeric_limits<float>::max()) {
        EXPECT_EQ(static_cast<double>(y[i]), std::isinf(want) ? want : std::copysign(INFINITY, want))
            << "x = " << v[static_cast<size_t>(i)];
      } else {
        // Below the smallest normal float a result can only be as close as the subnormal spacing.
        const double tol = c.abs + c.rel * std::fabs(want) + 1.5e-45;
        EXPECT_LE(std::fabs(y[i] - want), tol) << "x = " << v[static_cast<size_t>(i)] << " got " << y[i];
      }
    }
  }
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
    concats += c.find("(Concat): cpu blocked concat") != std::string::npos;
    reorders += c.rfind("reorder", 0) == 0;
  }
  EXPECT_EQ(concats, 1);
  EXPECT_LE(reorders, 2);  // only at the edges: the input into the blocked layout, the output back
}

// DenseNet's pre-activation of every layer: Concat → BatchNormalization → Relu → Conv. The
// normalization and the Relu are applied by the concat's copy (one pass over the features, not
// three); without the Relu the normalization alone; with the concat read elsewhere too (a graph
// output here) nothing is fused. Two images, at 1 and 2 threads, against the interpreter.
TEST(CpuEngine, ConcatNormReluMatchesInterpreter) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Builder b;
    b.input("x", Shape({Dim(2), Dim(16), Dim(24), Dim(24)}));
    b.constant("w0", {32, 16, 1, 1}, 1);
    b.constant("w1", {16, 32, 3, 3}, 2);
    b.constant("gamma", {48}, 3, 0.5f, 1.5f);
    b.constant("beta", {48}, 4);
    b.constant("mean", {48}, 5);
    b.constant("var", {48}, 6, 0.2f, 2.f);
    b.constant("w2", {64, 48, 1, 1}, 7);  // wider than the concat: not split (-O2)
    b.node("Conv", {"x", "w0"}, {"c0"});
    b.node("Relu", {"c0"}, {"r0"});
    b.node("Conv", {"r0", "w1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.node("Relu", {"c1"}, {"r1"});
    b.node("Concat", {"r0", "r1"}, {"cat"}, {Attribute::make_int("axis", 1)});
    b.node("BatchNormalization", {"cat", "gamma", "beta", "mean", "var"}, {"bn"},
           {Attribute::make_float("epsilon", 1e-3f)});
    if (variant == 1) {
      b.node("Conv", {"bn", "w2"}, {"y"});
    } else {
      b.node("Relu", {"bn"}, {"a"});
      b.node("Conv", {"a", "w2"}, {"y"});
    }
    b.output("y");
    if (variant == 2) b.output("cat");
    Model m = b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 16, 24, 24}, 9))}};
    expect_matches_interp(m, feeds, 1);
    expect_matches_interp(m, feeds, 2);
    Model opt = m;
    passes::optimize(opt, {3, {}});
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    Plan plan(opt, {{"x", {2, 16, 24, 24}}}, PlanOptions{}, eng);
    int both = 0, norm = 0, bn_steps = 0;
    for (const auto& c : plan.kernel_choices()) {
      both += c.find("cpu blocked concat, batch normalization and relu fused") != std::string::npos;
      norm += c.find("cpu blocked concat, batch normalization fused") != std::string::npos;
      bn_steps += c.find("(BatchNormalization): onednn") != std::string::npos;
    }
    EXPECT_EQ(both, variant == 0 ? 1 : 0);
    EXPECT_EQ(norm, variant == 1 ? 1 : 0);
    EXPECT_EQ(bn_steps, variant == 2 ? 1 : 0);
  }
}

// DenseNet's concats: every layer's features concatenated again by each later layer, on the
// convs' blocked layout, copied as runs of whole channel blocks (two images: a run per image and
// input, cut into pieces for the threads; on channels-last convs, a run per pixel). A part of 12
// channels is no whole block of nChw8c/16c: that concat stays on oneDNN's primitive unless the
// convs write channels-last. All match the interpreter, at 1 and 2 threads.
TEST(CpuEngine, DenseBlockConcatsMatchInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(2), Dim(16), Dim(20), Dim(20)}));
  b.constant("w0", {32, 16, 1, 1}, 1);
  b.constant("w1", {32, 32, 3, 3}, 2);
  b.constant("w2", {80, 64, 1, 1}, 3);   // the consumers are wider than their concats: not split (-O2)
  b.constant("w3", {160, 144, 1, 1}, 4);
  b.constant("w4", {12, 32, 1, 1}, 5);
  b.constant("w5", {48, 44, 1, 1}, 6);
  b.node("Conv", {"x", "w0"}, {"c0"});
  b.node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"r0", "w1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Concat", {"r0", "r1"}, {"cat1"}, {Attribute::make_int("axis", 1)});
  b.node("Conv", {"cat1", "w2"}, {"c2"});
  b.node("Relu", {"c2"}, {"r2"});
  b.node("Concat", {"r0", "r1", "r2"}, {"cat2"}, {Attribute::make_int("axis", 1)});
  b.node("Conv", {"cat2", "w3"}, {"y"});
  b.node("Conv", {"r0", "w4"}, {"c4"});
  b.node("Relu", {"c4"}, {"r4"});
  b.node("Concat", {"r0", "r4"}, {"odd"}, {Attribute::make_int("axis", 1)});
  b.node("Conv", {"odd", "w5"}, {"y2"});
  b.output("y");
  b.output("y2");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 16, 20, 20}, 7))}};
  expect_matches_interp(m, feeds, 1);
  expect_matches_interp(m, feeds, 2);
  Model opt = m;
  passes::optimize(opt, {3, {}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, {{"x", {2, 16, 20, 20}}}, PlanOptions{}, eng);
  int rows = 0, onednn = 0;
  for (const auto& c : plan.kernel_choices()) {
    rows += c.find("(Concat): cpu blocked concat") != std::string::npos;
    onednn += c.find("(Concat): onednn concat") != std::string::npos;
  }
  EXPECT_GE(rows, 2);
  EXPECT_EQ(rows + onednn, 3);
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
  b.node("Shrink", {"x"}, {"cs"}, {Attribute::make_float("lambd", 0.3f)});
  b.node("Relu", {"cs"}, {"r"});
  b.node("LpNormalization", {"r"}, {"y"});
  b.output("y");
  Model m = b.finish();
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({4, 5}, 4))}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {4, 5}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 2);  // Shrink and LpNormalization
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

// With exclusive weights (a Session that loaded the model itself) a weight that every reader
// packs into oneDNN's layout is held once: its original bytes are given back after packing, and
// rebuilt exactly from the packed copy when something reads them again (a plan for a new shape).
TEST(CpuEngine, PackedWeightsAreHeldOnceAndRebuiltExactly) {
  Builder b;
  b.input("x", Shape({Dim::sym("batch"), Dim(64), Dim(12), Dim(12)}));
  b.constant("w", {64, 64, 5, 5}, 21);     // 400 KiB: packed by the conv
  b.constant("wino", {64, 64, 3, 3}, 24);  // Winograd's weights (where chosen) have no way back: kept
  b.constant("fc", {9216, 64}, 22);        // 2.25 MiB: packed by the matmul
  b.constant("tiny", {64, 64, 1, 1}, 23);  // 16 KiB: below the size worth a rebuild path
  b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {2, 2, 2, 2})});
  b.node("Conv", {"c", "wino"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Conv", {"c1", "tiny"}, {"c2"});
  b.node("Flatten", {"c2"}, {"f"});
  b.node("MatMul", {"f", "fc"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, Tensor> originals;
  for (const char* name : {"w", "wino", "fc", "tiny"}) originals[name] = m.graph.initializer(name)->clone();
  auto feeds = [](int64_t batch, uint32_t seed) {
    return std::map<std::string, RuntimeValue>{{"x", RuntimeValue(random_tensor({batch, 64, 12, 12}, seed))}};
  };
  auto want1 = run_interp(m, feeds(1, 31));
  auto want3 = run_interp(m, feeds(3, 32));
  auto released = [&](const char* name) { return m.graph.initializer(name)->storage()->released(); };

  EngineOptions shared;
  shared.threads = 1;
  auto keep = make_cpu_engine()->prepare(m, shared);
  keep->run(feeds(1, 31));
  EXPECT_FALSE(released("w")) << "a model the caller also holds keeps its weights";

  EngineOptions o;
  o.threads = 1;
  o.exclusive_weights = true;
  auto exe = make_cpu_engine()->prepare(m, o);
  auto got1 = exe->run(feeds(1, 31));
  EXPECT_LE(rel_l2(got1[0].tensor, want1[0].tensor), 1e-5);
  EXPECT_TRUE(released("w"));
  EXPECT_TRUE(released("fc"));
  EXPECT_FALSE(released("tiny"));
  // A new batch re-plans and reads the weights again: rebuilt from the packed copies.
  auto got3 = exe->run(feeds(3, 32));
  EXPECT_LE(rel_l2(got3[0].tensor, want3[0].tensor), 1e-5);
  EXPECT_LE(rel_l2(exe->run(feeds(1, 31))[0].tensor, want1[0].tensor), 1e-5);
  for (const auto& [name, t] : originals)
    EXPECT_TRUE(tensors_bitwise_equal(*m.graph.initializer(name), t)) << name << " rebuilt with other bits";
  EXPECT_FALSE(released("w"));  // read just now
}

// A model whose inputs are all static is planned once (the Session refuses other shapes), so
// with exclusive weights even a weight packed in a form with no way back (Winograd's transformed
// weights: hodu's below AVX-512, oneDNN's where chosen) is released once packed. Runs at the host
// ISA and, through ctest cpu_engine_test_avx2, on hodu's AVX2 Winograd.
TEST(CpuEngine, StaticModelReleasesEveryPackedWeightAndMatchesInterpreter) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(64), Dim(12), Dim(12)}));
  b.constant("w", {64, 64, 5, 5}, 21);
  b.constant("wino", {64, 64, 3, 3}, 24);
  b.constant("fc", {9216, 64}, 22);
  b.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {2, 2, 2, 2})});
  b.node("Conv", {"c", "wino"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Flatten", {"c1"}, {"f"});
  b.node("MatMul", {"f", "fc"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 64, 12, 12}, 33))}};
  auto want = run_interp(m, feeds);
  auto released = [&](const char* name) { return m.graph.initializer(name)->storage()->released(); };
  EngineOptions o;
  o.threads = 1;
  o.exclusive_weights = true;
  auto exe = make_cpu_engine()->prepare(m, o);
  for (int i = 0; i < 2; ++i) EXPECT_LE(rel_l2(exe->run(feeds)[0].tensor, want[0].tensor), 1e-5);
  for (const char* name : {"w", "wino", "fc"}) EXPECT_TRUE(released(name)) << name;
  // Driven past the Session with another shape, the engine says why it cannot plan it.
  try {
    exe->run({{"x", RuntimeValue(random_tensor({2, 64, 12, 12}, 34))}});
    ADD_FAILURE() << "a second plan of a static model read its released weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
}

// A classifier head of a few rows against a large weight (VGG-11's is 411 MB) streams the
// weight where it lies: no packed copy, whose making held the weights twice (peak RSS past ONNX
// Runtime's). More rows keep oneDNN's packed product. A plan for another batch that packs the
// weight and gives its bytes back (exclusive weights) leaves the streaming plan reading them rebuilt.
TEST(CpuEngine, LargeHeadOfFewRowsStreamsItsWeightsUnpacked) {
  Builder b;
  b.input("x", Shape({Dim::sym("batch"), Dim(16384)}));
  b.constant("w", {1024, 16384}, 41, -0.05f, 0.05f);  // 64 MiB, [N, K] as torch's Linear exports it
  b.constant("bias", {1024}, 42);
  b.node("Gemm", {"x", "w", "bias"}, {"g"}, {Attribute::make_int("transB", 1)});
  b.node("Relu", {"g"}, {"y"});
  b.output("y");
  Model m = b.finish();
  auto feeds = [](int64_t batch, uint32_t seed) {
    return std::map<std::string, RuntimeValue>{{"x", RuntimeValue(random_tensor({batch, 16384}, seed))}};
  };
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  for (int64_t batch : {1, 3, 8}) {
    Model opt = m;
    passes::optimize(opt, {3, {{"x", {batch, 16384}}}});
    Plan plan(opt, {{"x", {batch, 16384}}}, PlanOptions{}, eng);
    int streamed = 0;
    for (const auto& c : plan.kernel_choices()) streamed += c.find("cpu stream gemv") != std::string::npos;
    EXPECT_EQ(streamed, batch <= 4 ? 1 : 0) << "batch " << batch;
  }
  EngineOptions o;
  o.threads = 2;
  o.exclusive_weights = true;
  auto exe = make_cpu_engine()->prepare(m, o);
  for (int64_t batch : {1, 3, 8, 1}) {
    auto f = feeds(batch, 50 + static_cast<uint32_t>(batch));
    auto want = run_interp(m, f);
    auto got = exe->run(f);
    EXPECT_LE(rel_l2(got[0].tensor, want[0].tensor), 1e-5) << "batch " << batch;
  }
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

// 3x3 stride-1 convs run on oneDNN's Winograd kernels (where the CPU has them); results stay
// within the interpreter's tolerance. Strided and 1x1 convs keep the direct kernels.
TEST(CpuEngine, ThreeByThreeConvsUseWinograd) {
  // oneDNN's Winograd on AVX-512 wherever it applies (auto refuses its F(2x3) kernel for 32
  // output channels or fewer, as here); below AVX-512 auto is hodu's kernel by its size rule.
  hodu::testing::ScopedEnv env("HODU_CPU_WINOGRAD",
                               vector_math::cpu_isa() == vector_math::Isa::Avx512 ? "onednn" : nullptr);
  Builder b;
  b.input("x", Shape({Dim(1), Dim(32), Dim(28), Dim(28)}));
  b.constant("w3", {32, 32, 3, 3}, 1);
  b.constant("ws", {32, 32, 3, 3}, 2);
  b.constant("w1", {16, 32, 1, 1}, 3);
  b.node("Conv", {"x", "w3"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "ws"}, {"c2"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_ints("strides", {2, 2})});
  b.node("Conv", {"c2", "w1"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 32, 28, 28}, 5))}};
  expect_matches_interp(m, feeds, 1);
  expect_matches_interp(m, feeds, 2);
  Model opt = m;
  passes::optimize(opt, {3, {{"x", {1, 32, 28, 28}}}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, {{"x", {1, 32, 28, 28}}}, PlanOptions{}, eng);
  int wino = 0;
  for (const auto& c : plan.kernel_choices()) wino += c.find("wino") != std::string::npos;
  if (!dnnl::convolution_forward::primitive_desc(
           dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                                           dnnl::memory::desc({1, 32, 28, 28}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any),
                                           dnnl::memory::desc({32, 32, 3, 3}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any),
                                           dnnl::memory::desc({1, 32, 28, 28}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any),
                                           {1, 1}, {1, 1}, {1, 1}),
           eng, true)) {
    GTEST_SKIP() << "oneDNN has no Winograd convolution for this CPU";
  }
  EXPECT_EQ(wino, 1);
}

// --threads 1 runs on one thread: oneDNN fixes a primitive's parallel split when the plan
// creates it, so the plan must set the thread count first (it once ran convs on every core).
// CPU time can only exceed wall time when more than one thread works.
TEST(CpuEngine, OneThreadPlanUsesOneThread) {
  Builder b;
  b.input("x", Shape({Dim(1), Dim(32), Dim(56), Dim(56)}));
  b.constant("w", {32, 32, 3, 3}, 1);
  b.node("Conv", {"x", "w"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "w"}, {"c2"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"c2"}, {"y"});
  b.output("y");
  Model m = b.finish();
  auto exe = prepare_cpu(m, 1);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 32, 56, 56}, 3))}};
  exe->run(feeds);
  auto cpu_seconds = [] {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  };
  double cpu0 = cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(400)) exe->run(feeds);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LE(cpu_seconds() - cpu0, 1.25 * wall) << "a 1-thread plan kept more than one core busy";
}

// node_threads: a squeeze-excite 1x1 conv over [N, C, 1, 1] reads each weight once per image
// from memory, so MobileNetV3's 960 x 240 ones get the threads (60-70 µs on one), EfficientNet's
// 1152 x 48 and a 3x3 conv of the same multiply-adds over pixels stay on one; eight images
// reuse each weight eight times.
TEST(CpuEngine, GemvConvsOfLargeWeightsGetTheThreads) {
  auto threads_of = [](int64_t batch, int64_t cin, int64_t cout, int64_t side, int64_t k) {
    Builder b;
    b.input("x", Shape({Dim(batch), Dim(cin), Dim(side), Dim(side)}));
    b.constant("w", {cout, cin, k, k}, 1);
    b.node("Conv", {"x", "w"}, {"y"});
    b.output("y");
    Model m = b.finish();
    return node_threads(m.graph, m.graph.nodes[0], 2);
  };
  EXPECT_EQ(threads_of(1, 960, 240, 1, 1), 2);
  EXPECT_EQ(threads_of(1, 240, 960, 1, 1), 2);
  EXPECT_EQ(threads_of(1, 1152, 48, 1, 1), 1);
  EXPECT_EQ(threads_of(1, 120, 480, 1, 1), 1);
  EXPECT_EQ(threads_of(8, 960, 240, 1, 1), 2);   // 1.8M multiply-adds: threads either way
  EXPECT_EQ(threads_of(4, 240, 240, 1, 1), 1);   // 230K, each weight read for four images
  EXPECT_EQ(threads_of(1, 64, 64, 6, 3), 1);     // 4x4 pixels x 64 x 576 = 590K: they share the weights
}

// ---- Quantized ops (dnnl_int8.cc) ----

// Random 8-bit integers in [lo, hi].
Tensor random_ints(DType dt, std::vector<int64_t> shape, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int8_t> v(shape_numel(shape));
  for (auto& x : v) x = static_cast<int8_t>(static_cast<uint8_t>(d(rng)));  // two's complement bytes
  return Tensor::from_vector(dt, shape, v);
}
Tensor random_8bit(DType dt, std::vector<int64_t> shape, uint32_t seed) {
  return dt == DType::U8 ? random_ints(dt, shape, seed, 0, 255) : random_ints(dt, shape, seed, -128, 127);
}
Tensor int8_scalar(DType dt, int v) {
  return dt == DType::U8 ? Tensor::scalar<uint8_t>(dt, static_cast<uint8_t>(v)) : Tensor::scalar<int8_t>(dt, static_cast<int8_t>(v));
}
Tensor floats(std::vector<float> v) { return Tensor::from_vector(DType::F32, {static_cast<int64_t>(v.size())}, v); }

void typed_input(Builder& b, const std::string& name, DType dt, std::vector<int64_t> shape) {
  std::vector<Dim> dims;
  for (int64_t d : shape) dims.emplace_back(d);
  b.g.inputs.push_back({name, ValueType::tensor(dt, Shape(dims)), ""});
}

// Element differences between two integer tensors: the largest and how many.
std::pair<int64_t, int64_t> int_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_int64s(), y = b.to_int64s();
  EXPECT_EQ(x.size(), y.size());
  int64_t worst = 0, count = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    int64_t d = std::abs(x[i] - y[i]);
    worst = std::max(worst, d);
    count += d != 0;
  }
  return {worst, count};
}

// A quantized product's kernels: oneDNN's ("onednn int8 ...") or, at AVX2 without VNNI, hodu's
// int16 one ("hodu int8 conv ...", "hodu int8 matmul ...").
const char* const kInt8Product = "int8 ";

// Runs `m` on the interpreter and the cpu engine (1 and 2 threads, two runs each) and checks
// that the cpu plan runs `op` on `kernel` with no fallback, on any ISA (dnnl_int8.cc is exact
// with and without VNNI). Integer outputs: exact, or with `quantum_ok` within one unit on at most
// 1% of the elements; float outputs: exact, or within `float_tol` (absolute) when given.
void expect_int8_matches(const Model& m, const std::map<std::string, RuntimeValue>& feeds, const std::string& op,
                         const std::string& kernel, bool quantum_ok, int expected_kernels = 1, double float_tol = 0) {
  auto want = run_interp(m, feeds);
  for (int threads : {1, 2}) {
    auto exe = prepare_cpu(m, threads);
    for (int run = 0; run < 2; ++run) {
      auto got = exe->run(feeds);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const Tensor &g = got[i].tensor, &w = want[i].tensor;
        ASSERT_EQ(g.shape(), w.shape()) << op << " output " << i;
        ASSERT_EQ(g.dtype(), w.dtype()) << op << " output " << i;
        if (g.dtype() == DType::F32) {
          auto x = g.to_doubles(), y = w.to_doubles();
          double worst = 0;
          for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]));
          EXPECT_LE(worst, float_tol) << op << " output " << i << " threads " << threads;
        } else {
          auto [worst, count] = int_diff(g, w);
          EXPECT_LE(worst, quantum_ok ? 1 : 0) << op << " output " << i << " threads " << threads;
          EXPECT_LE(count * 100, quantum_ok ? g.numel() : 0) << op << " output " << i << " threads " << threads;
        }
      }
    }
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, v] : feeds) shapes[name] = v.tensor.shape();
  Plan plan(m, shapes, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), expected_kernels > 0 ? 0 : 1) << op;
  int chosen = 0;
  for (const auto& c : plan.kernel_choices()) chosen += c.find("(" + op + ")") != std::string::npos && c.find(kernel) != std::string::npos;
  EXPECT_EQ(chosen, expected_kernels) << op << " on " << kernel;
}

struct QConvCase {
  DType x_dt, w_dt;
  bool per_channel, bias;
  int64_t group = 1, stride = 1;
};

Model qlinear_conv_model(const QConvCase& c, int64_t C, int64_t M, int64_t H) {
  Builder b;
  typed_input(b, "x", c.x_dt, {1, C, H, H});
  int wzp = c.w_dt == DType::U8 ? 128 : 0;  // u8 weights: shifted to s8 by their zero point
  b.g.set_initializer("w", c.w_dt == DType::U8 ? random_ints(DType::U8, {M, C / c.group, 3, 3}, 21, 1, 255)
                                               : random_ints(DType::I8, {M, C / c.group, 3, 3}, 21, -127, 127));
  b.g.set_initializer("xs", Tensor::scalar<float>(DType::F32, 0.02f));
  b.g.set_initializer("xz", int8_scalar(c.x_dt, c.x_dt == DType::U8 ? 131 : -3));
  std::vector<float> ws;
  for (int64_t m = 0; m < (c.per_channel ? M : 1); ++m) ws.push_back(0.004f + 0.0005f * static_cast<float>(m));
  b.g.set_initializer("ws", floats(ws));
  b.g.set_initializer("wz", c.per_channel ? Tensor::from_vector(c.w_dt, {M}, std::vector<int8_t>(M, static_cast<int8_t>(wzp)))
                                          : int8_scalar(c.w_dt, wzp));
  b.g.set_initializer("ys", Tensor::scalar<float>(DType::F32, 0.35f / static_cast<float>(c.group)));
  b.g.set_initializer("yz", int8_scalar(c.x_dt, c.x_dt == DType::U8 ? 119 : 5));
  std::vector<std::string> ins = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"};
  if (c.bias) {
    std::vector<int32_t> bv;
    for (int64_t m = 0; m < M; ++m) bv.push_back(static_cast<int32_t>((m * 7919) % 20001) - 10000);
    b.g.set_initializer("bias", Tensor::from_vector(DType::I32, {M}, bv));
    ins.push_back("bias");
  }
  b.node("QLinearConv", ins, {"y"},
         {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("group", c.group),
          Attribute::make_ints("strides", {c.stride, c.stride})});
  b.output("y");
  return b.finish();
}

// QLinearConv on oneDNN: u8 and s8 activations, s8 and u8 (zero point 128) weights, per-tensor
// and per-channel weight scales, with and without an int32 bias, grouped and strided; padding
// counts as the input zero point. Within one quantum of the interpreter.
TEST(CpuEngine, QLinearConvRunsOnOneDnnInt8) {
  const int64_t C = 16, M = 24, H = 12;
  std::vector<QConvCase> cases;
  for (DType x_dt : {DType::U8, DType::I8})
    for (bool per_channel : {false, true})
      for (bool bias : {false, true}) cases.push_back({x_dt, DType::I8, per_channel, bias});
  cases.push_back({DType::U8, DType::U8, true, true});
  cases.push_back({DType::U8, DType::I8, true, true, 8, 2});
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << dtype_name(c.x_dt) << " w " << dtype_name(c.w_dt) << " per_channel "
                                    << c.per_channel << " bias " << c.bias << " group " << c.group);
    Model m = qlinear_conv_model(c, C, M, H);
    // At AVX2 without VNNI these full-range weights run on hodu's int16 conv (oneDNN's AVX2
    // kernels would need them split, and have no grouped int8 conv for 2 input channels per group).
    expect_int8_matches(m, {{"x", RuntimeValue(random_8bit(c.x_dt, {1, C, H, H}, 5))}}, "QLinearConv", kInt8Product,
                        true);
  }
}

// A weight zero point whose differences do not fit in s8 (w - 3 reaches 252): with VNNI the
// weights run shifted to s8 with window sums for the zero point, without it on hodu's int16 conv
// (AVX2) or split in two halves (AVX-512 without VNNI); exact either way.
TEST(CpuEngine, QLinearConvWithWideWeightZeroPointRunsExactly) {
  Model m = qlinear_conv_model({DType::U8, DType::U8, false, false}, 8, 8, 6);
  m.graph.set_initializer("wz", int8_scalar(DType::U8, 3));
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {1, 8, 6, 6}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0);
  int split = 0;
  const char* form = int8_exact_isa()                                          ? "weight zero point by window sums"
                     : vector_math::cpu_isa() == vector_math::Isa::Avx2 ? "hodu int8 conv on int16 products"
                                                                         : "weights split in two";
  for (const auto& c : plan.kernel_choices()) split += c.find(form) != std::string::npos;
  EXPECT_EQ(split, 1) << form;
  expect_int8_matches(m, {{"x", RuntimeValue(random_8bit(DType::U8, {1, 8, 6, 6}, 6))}}, "QLinearConv", kInt8Product,
                      false);
}

TEST(CpuEngine, ConvIntegerRunsOnOneDnnExactly) {
  Builder b;
  typed_input(b, "x", DType::U8, {1, 8, 10, 10});
  b.g.set_initializer("w", random_ints(DType::I8, {12, 8, 3, 3}, 22, -100, 100));
  b.g.set_initializer("xz", int8_scalar(DType::U8, 100));
  b.g.set_initializer("wz", Tensor::from_vector(DType::I8, {12}, std::vector<int8_t>{1, -2, 3, 0, 0, 5, -5, 7, 0, 1, 2, 3}));
  b.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"}, {Attribute::make_ints("pads", {1, 0, 1, 2})});
  b.output("y");
  Model m = b.finish();
  expect_int8_matches(m, {{"x", RuntimeValue(random_8bit(DType::U8, {1, 8, 10, 10}, 7))}}, "ConvInteger",
                      kInt8Product, false);
}

Model qlinear_matmul_model(DType a_dt, DType b_dt, std::vector<int64_t> a_shape, int64_t N, bool per_column) {
  Builder b;
  const int64_t K = a_shape.back();
  typed_input(b, "a", a_dt, a_shape);
  b.g.set_initializer("b", random_8bit(b_dt, {K, N}, 23));
  b.g.set_initializer("as", floats({0.03f}));
  b.g.set_initializer("az", int8_scalar(a_dt, a_dt == DType::U8 ? 127 : 2));
  std::vector<float> bs;
  for (int64_t j = 0; j < (per_column ? N : 1); ++j) bs.push_back(0.002f + 0.0001f * static_cast<float>(j));
  b.g.set_initializer("bs", floats(bs));
  // u8 weights with zero point 3: differences up to 252, oneDNN's weights zero point takes the rest.
  b.g.set_initializer("bz", int8_scalar(b_dt, b_dt == DType::U8 ? 3 : -1));
  b.g.set_initializer("ys", floats({0.09f}));
  b.g.set_initializer("yz", int8_scalar(a_dt, a_dt == DType::U8 ? 128 : -4));
  b.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  b.output("y");
  return b.finish();
}

// QLinearMatMul on oneDNN: 2-D and batched A, u8 and s8, per-column weight scales, u8 weights.
TEST(CpuEngine, QLinearMatMulRunsOnOneDnnInt8) {
  for (DType a_dt : {DType::U8, DType::I8})
    for (DType b_dt : {DType::I8, DType::U8})
      for (auto shape : {std::vector<int64_t>{9, 64}, std::vector<int64_t>{2, 5, 64}}) {
        bool per_column = b_dt == DType::I8;
        SCOPED_TRACE(::testing::Message() << "a " << dtype_name(a_dt) << " b " << dtype_name(b_dt) << " rank "
                                        << shape.size());
        Model m = qlinear_matmul_model(a_dt, b_dt, shape, 40, per_column);
        expect_int8_matches(m, {{"a", RuntimeValue(random_8bit(a_dt, shape, 8))}}, "QLinearMatMul", kInt8Product,
                            true);
      }
}

TEST(CpuEngine, MatMulIntegerRunsOnOneDnnExactly) {
  for (DType b_dt : {DType::I8, DType::U8}) {
    Builder b;
    typed_input(b, "a", DType::U8, {3, 6, 40});
    b.g.set_initializer("b", b_dt == DType::I8 ? random_ints(b_dt, {40, 24}, 24, -120, 120) : random_8bit(b_dt, {40, 24}, 24));
    b.g.set_initializer("az", int8_scalar(DType::U8, 7));
    if (b_dt == DType::I8) {  // per column, shifted into the weights
      std::vector<int8_t> z(24);
      for (int j = 0; j < 24; ++j) z[j] = static_cast<int8_t>(j % 5 - 2);
      b.g.set_initializer("bz", Tensor::from_vector(DType::I8, {24}, z));
    } else {
      b.g.set_initializer("bz", int8_scalar(DType::U8, 200));
    }
    b.node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"});
    b.output("y");
    Model m = b.finish();
    SCOPED_TRACE(dtype_name(b_dt));
    expect_int8_matches(m, {{"a", RuntimeValue(random_8bit(DType::U8, {3, 6, 40}, 9))}}, "MatMulInteger",
                        kInt8Product, false);
  }
}

// QuantizeLinear / DequantizeLinear: per tensor and per axis, halfway values (round half to
// even), saturation, NaN and infinities, sizes past the threading chunk: exactly the interpreter.
TEST(CpuEngine, QuantizeDequantizeMatchInterpreterExactly) {
  const int64_t C = 5, HW = 7001;
  std::vector<float> xv(static_cast<size_t>(2 * C * HW));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.25f * static_cast<float>(static_cast<int64_t>(i % 2001) - 1000);
  xv[3] = std::numeric_limits<float>::quiet_NaN();
  xv[4] = std::numeric_limits<float>::infinity();
  xv[5] = -std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector(DType::F32, {2, C, HW}, xv);
  for (DType dt : {DType::U8, DType::I8})
    for (bool per_axis : {false, true}) {
      Builder b;
      b.input("x", Shape({Dim(2), Dim(C), Dim(HW)}));
      if (per_axis) {
        b.g.set_initializer("s", floats({0.5f, 1.0f, 0.25f, 3.0f, 0.1f}));
        std::vector<int8_t> z = {0, 1, 2, 3, 4};
        if (dt == DType::U8) z = {static_cast<int8_t>(128), 0, 1, static_cast<int8_t>(200), 17};
        b.g.set_initializer("z", Tensor::from_vector(dt, {C}, z));
      } else {
        b.g.set_initializer("s", Tensor::scalar<float>(DType::F32, 0.5f));
        b.g.set_initializer("z", int8_scalar(dt, dt == DType::U8 ? 129 : -1));
      }
      b.node("QuantizeLinear", {"x", "s", "z"}, {"q"}, {Attribute::make_int("axis", 1)});
      b.node("DequantizeLinear", {"q", "s", "z"}, {"y"}, {Attribute::make_int("axis", -2)});
      b.output("q");
      b.output("y");
      Model m = b.finish();
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " per_axis " << per_axis);
      expect_int8_matches(m, {{"x", RuntimeValue(x)}}, "QuantizeLinear", ": cpu", false);
      expect_int8_matches(m, {{"x", RuntimeValue(x)}}, "DequantizeLinear", ": cpu", false);
    }
}

// A small quantized CNN: QuantizeLinear → QLinearConv → QLinearConv → DequantizeLinear, the
// int8 tensors between the convs in oneDNN's layout (no reorder between them). oneDNN and the
// interpreter may differ by one quantum in the first conv, which the second conv can spread:
// the float output is compared within two quanta of the last conv.
TEST(CpuEngine, QuantizedCnnChainRunsOnCpuKernels) {
  Builder b;
  const int64_t C = 8, M = 16, H = 14;
  b.input("x", Shape({Dim(1), Dim(C), Dim(H), Dim(H)}));
  b.g.set_initializer("xs", Tensor::scalar<float>(DType::F32, 0.02f));
  b.g.set_initializer("xz", int8_scalar(DType::U8, 128));
  b.g.set_initializer("w1", random_ints(DType::I8, {M, C, 3, 3}, 31, -127, 127));
  std::vector<float> ws1;
  for (int64_t m = 0; m < M; ++m) ws1.push_back(0.003f + 0.0002f * static_cast<float>(m));
  b.g.set_initializer("ws1", floats(ws1));
  b.g.set_initializer("wz1", Tensor::from_vector(DType::I8, {M}, std::vector<int8_t>(M, 0)));
  b.g.set_initializer("ys1", Tensor::scalar<float>(DType::F32, 0.05f));
  b.g.set_initializer("yz1", int8_scalar(DType::U8, 100));
  std::vector<int32_t> b1;
  for (int64_t m = 0; m < M; ++m) b1.push_back(static_cast<int32_t>(m * 300 - 2000));
  b.g.set_initializer("b1", Tensor::from_vector(DType::I32, {M}, b1));
  b.g.set_initializer("w2", random_ints(DType::I8, {M, M, 3, 3}, 32, -127, 127));
  b.g.set_initializer("ws2", Tensor::scalar<float>(DType::F32, 0.004f));
  b.g.set_initializer("wz2", int8_scalar(DType::I8, 0));
  b.g.set_initializer("ys2", Tensor::scalar<float>(DType::F32, 0.4f));
  b.g.set_initializer("yz2", int8_scalar(DType::U8, 128));
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"q"});
  b.node("QLinearConv", {"q", "xs", "xz", "w1", "ws1", "wz1", "ys1", "yz1", "b1"}, {"c1"},
         {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("QLinearConv", {"c1", "ys1", "yz1", "w2", "ws2", "wz2", "ys2", "yz2"}, {"c2"},
         {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_ints("strides", {2, 2})});
  b.node("DequantizeLinear", {"c2", "ys2", "yz2"}, {"y"});
  b.output("y");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, C, H, H}, 10))}};
  expect_int8_matches(m, feeds, "QLinearConv", kInt8Product, true, 2, 2 * 0.4 + 1e-6);
  if (IsSkipped()) return;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(m, {{"x", {1, C, H, H}}}, PlanOptions{}, eng);
  int cpu = 0, reorders = 0;
  for (const auto& c : plan.kernel_choices()) {
    cpu += (c.find("(QuantizeLinear)") != std::string::npos || c.find("(DequantizeLinear)") != std::string::npos) &&
           c.find(": cpu") != std::string::npos;
    reorders += c.rfind("reorder", 0) == 0;
  }
  EXPECT_EQ(cpu, 2);
  EXPECT_LE(reorders, 2);  // into the convs' layout and back, none between them
}

// A 0 dim (an empty batch, an empty detection list): oneDNN divides by the dims when it
// makes a primitive, and a MatMul of [0, 4] died of SIGFPE. Such nodes give their empty
// results without a kernel (no interpreter either).
TEST(CpuEngine, EmptyTensorsRunAndGiveEmptyResults) {
  Builder b;
  b.input("x", Shape({Dim::sym("n"), Dim(4)}));
  b.constant("w", {4, 5}, 71);
  b.constant("bias", {5}, 72);
  b.node("MatMul", {"x", "w"}, {"p"});
  b.node("Add", {"p", "bias"}, {"q"});
  b.node("Relu", {"q"}, {"y"});
  b.output("y");
  Model m = b.finish();
  auto exe = prepare_cpu(m, 2);
  auto empty = exe->run({{"x", RuntimeValue(Tensor::empty(DType::F32, {0, 4}))}});
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].tensor.shape(), (std::vector<int64_t>{0, 5}));
  // The same executable still computes a non-empty batch on its own kernels.
  expect_matches_interp(m, {{"x", RuntimeValue(random_tensor({3, 4}, 73))}}, 2);
  Model opt = m;
  passes::optimize(opt, {3, {{"x", {0, 4}}}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, {{"x", {0, 4}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0) << fmt::format("{}", fmt::join(plan.kernel_choices(), "\n"));
}

// Torch's slicing exports shape arithmetic on int64 vectors: a Slice past the end of a shape
// gives [0], concatenated with the rest (MViT: 128 such nodes). The empty Slice and the Concat
// of an empty part run on the engine's steps, equal to the interpreter's, as does a Shape of an
// empty tensor.
TEST(CpuEngine, ShapeArithmeticWithEmptyPartsStaysOnTheEngine) {
  Builder b;
  b.input("x", Shape({Dim(2), Dim(3), Dim(4), Dim(5)}));
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    b.g.set_initializer(name, Tensor::from_vector<int64_t>(DType::I64, {n}, v));
  };
  ints("s0", {4});
  ints("e0", {9});
  ints("ax", {0});
  b.node("Shape", {"x"}, {"shp"});
  b.node("Slice", {"shp", "s0", "e0", "ax"}, {"none"});  // [0]
  b.node("Concat", {"shp", "none"}, {"again"}, {Attribute::make_int("axis", 0)});
  b.node("Concat", {"none", "none"}, {"still_none"}, {Attribute::make_int("axis", 0)});
  b.node("Shape", {"still_none"}, {"zero"});
  b.node("Reshape", {"x", "again"}, {"y"});
  b.output("y");
  b.output("again");
  b.output("still_none");
  b.output("zero");
  Model m = b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3, 4, 5}, 74))}};
  auto want = run_interp(m, feeds);
  auto got = prepare_cpu(m)->run(feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tensor.shape(), want[i].tensor.shape()) << i;
    EXPECT_EQ(got[i].tensor.to_doubles(), want[i].tensor.to_doubles()) << i;
  }
  Model opt = m;
  passes::optimize(opt, {0, {{"x", {2, 3, 4, 5}}}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, {{"x", {2, 3, 4, 5}}}, PlanOptions{}, eng);
  const std::string steps = fmt::format("{}", fmt::join(plan.kernel_choices(), "\n"));
  EXPECT_EQ(plan.fallback_count(), 0) << steps;
  EXPECT_NE(steps.find("(Slice): cpu empty result"), std::string::npos) << steps;
}

TEST(CpuEngine, BadInputGivesError) {
  Model m = small_cnn();
  auto exe = prepare_cpu(m);
  EXPECT_THROW(exe->run({}), Error);
}

}  // namespace
}  // namespace hodu::cpu
