// Tests of the cpu engine on gradient graphs (passes/autodiff.h): each of
// hodu's gradient ops runs on the engine's backward kernel (oneDNN's backward
// primitives, the hand loops) — not the interpreter — and gives the
// interpreter's results, with inputs in the layouts a forward conv leaves;
// a training step's params and optimizer state are written in place.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engines/cpu/cpu_engine.h"
#include "engines/cpu/plan.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/autodiff.h"
#include "passes/autodiff_test_util.h"
#include "passes/passes.h"

namespace hodu::cpu {
namespace {

Tensor rnd(std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
  return autodiff_test::rnd(std::move(shape), seed, lo, hi, DType::F32);
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

Attribute ai(const char* n, int64_t v) { return Attribute::make_int(n, v); }
Attribute ais(const char* n, std::vector<int64_t> v) { return Attribute::make_ints(n, std::move(v)); }

using autodiff_test::Net;

// The gradient graph of sum(y · w) (w a fixed random weight) run on the cpu engine and the
// interpreter: every output matches, and each op in `ops` ran on an engine kernel whose label
// contains `kernel`.
void check_backward(const Net& src, const std::string& y, const std::vector<std::string>& wrt,
                    const std::vector<std::string>& ops, const std::string& kernel = ": onednn", int threads = 1) {
  Net net(src);
  net.g.outputs = {Value{y, {}, ""}};
  {
    auto out = interp::Interpreter(net.m).run(net.feeds);
    net.input("w_loss", rnd(out[0].tensor.shape(), 1234));
  }
  net.node("Mul", {y, "w_loss"}, {"weighted"}).node("ReduceSum", {"weighted"}, {"loss"}, {ai("keepdims", 0)});
  net.g.outputs = {Value{"loss", {}, ""}};
  Model m = net.m;
  m.graph = passes::build_gradient_graph(net.g, {"loss", wrt});
  auto want = interp::Interpreter(m).run(net.feeds);
  EngineOptions o;
  o.threads = threads;
  auto exe = make_cpu_engine()->prepare(m, o);
  for (int run = 0; run < 2; ++run) {
    auto got = exe->run(net.feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(rel_l2(got[i].tensor, want[i].tensor), 2e-5) << m.graph.outputs[i].name << " run " << run;
  }
  // The plan the engine made: the gradient ops on its own kernels.
  Model opt = m;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, v] : net.feeds) shapes[name] = v.tensor.shape();
  passes::optimize(opt, {3, shapes});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  Plan plan(opt, shapes, PlanOptions{}, eng);
  for (const auto& op : ops) {
    int found = 0;
    for (const auto& c : plan.kernel_choices())
      if (c.find("(hodu." + op + ")") != std::string::npos) {
        ++found;
        EXPECT_NE(c.find(kernel), std::string::npos) << c;
      }
    EXPECT_GE(found, 1) << op << " is not in the plan";
  }
  // oneDNN's backward primitives wait at barriers for the team they were made for.
  if (kernel == ": onednn") {
    EXPECT_TRUE(plan.threads_pinned()) << "a oneDNN gradient plan may drop to one thread";
  }
}

TEST(CpuBackward, ConvGrad) {
  struct C {
    std::vector<int64_t> x, w;
    std::vector<Attribute> attrs;
    bool bias;
  };
  for (const C& c : {C{{2, 3, 9, 9}, {8, 3, 3, 3}, {ais("pads", {1, 1, 1, 1})}, true},
                     C{{2, 16, 8, 8}, {32, 16, 3, 3}, {ais("pads", {1, 1, 1, 1}), ais("strides", {2, 2})}, true},
                     C{{1, 8, 10, 9}, {8, 1, 3, 3}, {ai("group", 8), ais("pads", {1, 1, 1, 1})}, false},
                     C{{1, 4, 11, 11}, {6, 2, 3, 2}, {ai("group", 2), ais("dilations", {2, 1}), ais("pads", {2, 0, 1, 1})}, true},
                     C{{2, 4, 12}, {5, 4, 3}, {ais("strides", {2})}, true}}) {
    SCOPED_TRACE(shape_to_string(c.x) + " * " + shape_to_string(c.w));
    Net n;
    n.input("x", rnd(c.x, 1)).input("w", rnd(c.w, 2));
    std::vector<std::string> ins = {"x", "w"}, wrt = {"x", "w"};
    if (c.bias) {
      n.input("b", rnd({c.w[0]}, 3));
      ins.push_back("b");
      wrt.push_back("b");
    }
    n.node("Conv", ins, {"y"}, c.attrs);
    check_backward(n, "y", wrt, {"ConvGrad"});
    check_backward(n, "y", {"w"}, {"ConvGrad"}, ": onednn", 2);  // weights only (the first conv of a network)
  }
}

// Pooling after a conv: the pooled tensor is in the conv's blocked layout.
TEST(CpuBackward, PoolGradAfterAConv) {
  struct P {
    const char* op;
    std::vector<Attribute> attrs;
  };
  for (const P& p : {P{"MaxPool", {ais("kernel_shape", {2, 2}), ais("strides", {2, 2})}},
                     P{"MaxPool", {ais("kernel_shape", {3, 3}), ais("strides", {2, 2}), ais("pads", {1, 1, 1, 1})}},
                     P{"MaxPool", {ais("kernel_shape", {3, 3}), ais("strides", {2, 2}), ai("ceil_mode", 1)}},
                     P{"AveragePool", {ais("kernel_shape", {3, 3}), ais("pads", {1, 1, 1, 1})}},
                     P{"AveragePool", {ais("kernel_shape", {2, 2}), ais("strides", {2, 2}), ai("count_include_pad", 1),
                                       ais("pads", {1, 1, 0, 0})}}}) {
    SCOPED_TRACE(p.op);
    Net n;
    n.input("x", rnd({2, 16, 9, 9}, 4)).input("w", rnd({16, 16, 3, 3}, 5));
    n.node("Conv", {"x", "w"}, {"c"}, {ais("pads", {1, 1, 1, 1})}).node(p.op, {"c"}, {"y"}, p.attrs);
    check_backward(n, "y", {"x", "w"}, {std::string(p.op) + "Grad", "ConvGrad"});
  }
}

TEST(CpuBackward, ActivationGrad) {
  for (const char* op : {"Relu", "LeakyRelu", "Elu", "Sigmoid", "Tanh", "Gelu", "Softplus", "HardSigmoid", "HardSwish"}) {
    SCOPED_TRACE(op);
    bool own = std::string(op) == "HardSigmoid" || std::string(op) == "HardSwish";
    bool via_activation_grad = std::string(op) != "Sigmoid" && std::string(op) != "Tanh";  // those: Mul chains
    Net n;
    n.input("x", rnd({2, 16, 7, 7}, 6, -4, 4)).input("w", rnd({16, 16, 3, 3}, 7));
    n.node("Conv", {"x", "w"}, {"c"}, {ais("pads", {1, 1, 1, 1})}).node(op, {"c"}, {"y"});
    std::vector<std::string> ops = {"ConvGrad"};
    if (via_activation_grad) ops.push_back("ActivationGrad");
    check_backward(n, "y", {"x", "w"}, ops, own ? ": " : ": onednn");
    // Plain layout too (no conv before it).
    Net p;
    p.input("x", rnd({5, 33}, 8, -4, 4)).node(op, {"x"}, {"y"});
    if (via_activation_grad) check_backward(p, "y", {"x"}, {"ActivationGrad"}, own ? ": cpu loop" : ": onednn");
  }
}

TEST(CpuBackward, BatchNormGrad) {
  Net n;
  n.input("x", rnd({4, 16, 5, 5}, 9)).input("w", rnd({16, 16, 3, 3}, 10)).input("scale", rnd({16}, 11, 0.5, 1.5));
  n.input("bias", rnd({16}, 12)).input("mean", rnd({16}, 13)).input("var", rnd({16}, 14, 0.5, 2));
  n.node("Conv", {"x", "w"}, {"c"}, {ais("pads", {1, 1, 1, 1})});
  n.node("BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"y"}, {ai("training_mode", 1)});
  check_backward(n, "y", {"x", "w", "scale", "bias"}, {"BatchNormGrad", "ConvGrad"});
}

// The forward of BatchNormalization in training mode: batch statistics, running mean/var updated.
TEST(CpuBackward, BatchNormTrainingForward) {
  for (int threads : {1, 2}) {
    Net n;
    n.input("x", rnd({4, 16, 5, 5}, 31)).input("w", rnd({16, 16, 3, 3}, 32)).input("scale", rnd({16}, 33, 0.5, 1.5));
    n.input("bias", rnd({16}, 34)).input("mean", rnd({16}, 35)).input("var", rnd({16}, 36, 0.5, 2));
    n.node("Conv", {"x", "w"}, {"c"}, {ais("pads", {1, 1, 1, 1})});  // a blocked layout into the BN
    n.node("BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"y", "rm", "rv"},
           {ai("training_mode", 1), Attribute::make_float("momentum", 0.8f)});
    n.g.outputs = {Value{"y", {}, ""}, Value{"rm", {}, ""}, Value{"rv", {}, ""}};
    infer_types(n.g);
    auto want = interp::Interpreter(n.m).run(n.feeds);
    EngineOptions o;
    o.threads = threads;
    auto got = make_cpu_engine()->prepare(n.m, o)->run(n.feeds);
    for (size_t i = 0; i < 3; ++i) EXPECT_LE(rel_l2(got[i].tensor, want[i].tensor), 1e-5) << n.g.outputs[i].name;
    Model opt = n.m;
    passes::optimize(opt, {3, {}});
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    Plan plan(opt, {}, PlanOptions{}, eng);
    int bn = 0;
    for (const auto& c : plan.kernel_choices()) bn += c.find("onednn batch normalization training") != std::string::npos;
    EXPECT_EQ(bn, 1);
  }
}

TEST(CpuBackward, SoftmaxLayerNormAndLossGrads) {
  {
    Net n;  // softmax over the last axis and over a middle one; log-softmax
    n.input("x", rnd({3, 5, 7}, 20, -3, 3));
    n.node("Softmax", {"x"}, {"s"}).node("Softmax", {"x"}, {"m"}, {ai("axis", 1)}).node("LogSoftmax", {"x"}, {"l"});
    n.node("Sum", {"s", "m", "l"}, {"y"});
    check_backward(n, "y", {"x"}, {"SoftmaxGrad"}, ": cpu rows", 2);
  }
  for (int64_t axis : {-1, 1}) {
    Net n;
    n.input("x", rnd({4, 6, 32}, 21, -2, 2)).input("scale", rnd(axis == -1 ? std::vector<int64_t>{32} : std::vector<int64_t>{6, 32}, 22));
    n.input("bias", rnd(axis == -1 ? std::vector<int64_t>{32} : std::vector<int64_t>{6, 32}, 23));
    n.node("LayerNormalization", {"x", "scale", "bias"}, {"y"}, {ai("axis", axis)});
    check_backward(n, "y", {"x", "scale", "bias"}, {"LayerNormGrad"}, ": cpu rows", 2);
    Net r;  // RMS norm (hodu.LayerNorm rms=1), only dX wanted
    r.input("x", rnd({4, 6, 32}, 24, -2, 2)).input("scale", rnd({32}, 25));
    r.node("LayerNorm", {"x", "scale"}, {"y"}, {ai("rms", 1)}, "hodu");
    check_backward(r, "y", {"x"}, {"LayerNormGrad"}, ": cpu rows");
  }
  for (const char* reduction : {"mean", "sum", "none"}) {
    SCOPED_TRACE(reduction);
    Net n;
    n.input("x", rnd({6, 5}, 26, -2, 2)).input("wt", rnd({5}, 27, 0.5, 2));
    n.g.inputs.push_back({"t", ValueType::tensor(DType::I64, Shape({Dim(6)})), ""});
    n.feeds["t"] = Tensor::from_vector(DType::I64, {6}, std::vector<int64_t>{0, 4, 2, 2, 1, 3});
    std::vector<Attribute> attrs = {Attribute::make_string("reduction", reduction), ai("ignore_index", 2)};
    n.node("SoftmaxCrossEntropyLoss", {"x", "t", "wt"}, {"a"}, attrs);
    n.node("LogSoftmax", {"x"}, {"lp"}).node("NegativeLogLikelihoodLoss", {"lp", "t"}, {"b"}, attrs);
    n.node("Add", {"a", "b"}, {"y"});
    check_backward(n, "y", {"x"}, {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}, ": cpu loop");
  }
}

// A CNN's training step on the cpu engine: params and momentum updated in the fed tensors
// (written there, no copy), equal to the interpreter's steps.
TEST(CpuBackward, TrainingStepUpdatesStateInPlace) {
  Net n;
  n.input("x", rnd({8, 1, 8, 8}, 15));
  n.g.inputs.push_back({"labels", ValueType::tensor(DType::I64, Shape({Dim(8)})), ""});
  n.feeds["labels"] = Tensor::from_vector(DType::I64, {8}, std::vector<int64_t>{0, 3, 1, 2, 3, 0, 1, 2});
  n.g.set_initializer("w1", rnd({8, 1, 3, 3}, 16, -0.5, 0.5));
  n.g.set_initializer("b1", rnd({8}, 17, -0.1, 0.1));
  n.g.set_initializer("w2", rnd({4, 128}, 18, -0.1, 0.1));
  n.g.set_initializer("b2", rnd({4}, 19, -0.1, 0.1));
  n.g.set_initializer("shape", Tensor::from_vector(DType::I64, {2}, std::vector<int64_t>{-1, 128}));
  n.node("Conv", {"x", "w1", "b1"}, {"c"}, {ais("pads", {1, 1, 1, 1})}).node("Relu", {"c"}, {"r"});
  n.node("MaxPool", {"r"}, {"p"}, {ais("kernel_shape", {2, 2}), ais("strides", {2, 2})});
  n.node("Reshape", {"p", "shape"}, {"f"}).node("Gemm", {"f", "w2", "b2"}, {"logits"}, {ai("transB", 1)});
  n.node("SoftmaxCrossEntropyLoss", {"logits", "labels"}, {"loss"});
  n.g.outputs = {Value{"loss", {}, ""}};
  Model step = n.m;
  step.graph = passes::build_training_step(n.g, "loss", {"w1", "b1", "w2", "b2"}, passes::OptimizerSpec::sgd(0.9f));
  auto state = passes::initial_training_state(n.g, step.graph);
  std::map<std::string, Tensor> ref_state;
  for (const auto& [k, v] : state) ref_state[k] = v.clone();
  EngineOptions o;
  o.threads = 2;
  o.update_state_in_place = true;
  auto exe = make_cpu_engine()->prepare(step, o);
  interp::Interpreter interp(step);
  const auto names = passes::training_state_names(step.graph);
  for (int k = 0; k < 3; ++k) {
    std::map<std::string, RuntimeValue> feeds = n.feeds, ref_feeds = n.feeds;
    feeds["lr"] = ref_feeds["lr"] = Tensor::scalar<float>(DType::F32, 0.1f);
    for (const auto& [name, t] : state) feeds[name] = t;
    for (const auto& [name, t] : ref_state) ref_feeds[name] = t;
    auto got = exe->run(feeds);
    auto want = interp.run(ref_feeds);
    EXPECT_NEAR(got[0].tensor.get_double(0), want[0].tensor.get_double(0), 1e-5) << "loss, step " << k;
    for (size_t i = 0; i < names.size(); ++i) {
      const Tensor& out = got[1 + i].tensor;
      EXPECT_EQ(out.raw_data(), state.at(names[i]).raw_data()) << names[i] << ".next is not the fed tensor";
      EXPECT_LE(rel_l2(state.at(names[i]), want[1 + i].tensor), 1e-5) << names[i] << " step " << k;
      ref_state[names[i]] = want[1 + i].tensor;
    }
  }
  // The plan: every param's and buffer's update written in place, the convolutions on oneDNN.
  Model opt = step;
  passes::optimize(opt, {3, {{"x", {8, 1, 8, 8}}, {"labels", {8}}}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  PlanOptions po;
  po.state_in_place = true;
  Plan plan(opt, {{"x", {8, 1, 8, 8}}, {"labels", {8}}}, po, eng);
  // optimizer.step's scalar Add too (a TensorStep kernel; on the interpreter it would be copied back).
  EXPECT_EQ(plan.in_place_outputs().size(), names.size());
  int onednn = 0;
  for (const auto& c : plan.kernel_choices())
    onednn += (c.find("Conv): onednn") != std::string::npos || c.find("ConvGrad): onednn") != std::string::npos);
  EXPECT_EQ(onednn, 2) << "the forward conv with fed weights and its gradient";
}

}  // namespace
}  // namespace hodu::cpu

namespace hodu::cpu {
namespace {

// A training step's Dropout: the same mask every run by default; with reseed_each_run a new one
// per run, the same sequence from a fresh executable.
TEST(CpuBackward, ReseedEachRunGivesDropoutNewMasks) {
  Net n;
  n.input("x", rnd({64, 32}, 30, 0.5, 1.5));
  n.g.set_initializer("ratio", Tensor::scalar<float>(DType::F32, 0.5f));
  n.g.set_initializer("train", Tensor::scalar<bool>(DType::Bool, true));
  n.node("Dropout", {"x", "ratio", "train"}, {"y", "mask"});
  n.g.outputs = {Value{"y", {}, ""}};
  infer_types(n.g);
  auto runs = [&](bool reseed) {
    EngineOptions o;
    o.reseed_each_run = reseed;
    auto exe = make_cpu_engine()->prepare(n.m, o);
    std::vector<Tensor> out;
    for (int k = 0; k < 3; ++k) out.push_back(exe->run(n.feeds)[0].tensor.clone());
    return out;
  };
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_doubles() == b.to_doubles(); };
  auto fixed = runs(false);
  EXPECT_TRUE(same(fixed[0], fixed[1]) && same(fixed[1], fixed[2]));
  auto fresh = runs(true), again = runs(true);
  EXPECT_TRUE(same(fresh[0], fixed[0])) << "run 0 draws what it draws without reseeding";
  EXPECT_FALSE(same(fresh[0], fresh[1]));
  EXPECT_FALSE(same(fresh[1], fresh[2]));
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(same(fresh[k], again[k])) << "run " << k << " is reproducible";
}

}  // namespace
}  // namespace hodu::cpu
