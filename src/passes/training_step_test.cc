// Tests of build_training_step: the graph's inputs and outputs, and the steps
// it computes compared with PyTorch 1.13's optimizers (SGD with momentum,
// dampening, Nesterov, weight decay, maximize; Adam with L2 and amsgrad; AdamW)
// on a small MLP, a learning rate changing every step. The reference numbers
// come from tests/autodiff/torch_training_reference.py, run here with Debian's
// python3 (skipped, saying so, where torch is missing).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/scratch_dir.h"
#include "engines/interp/interpreter.h"
#include "formats/tensor_io.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"

namespace hodu::passes {
namespace {

Node node(std::string op, std::vector<std::string> ins, std::string out, std::vector<Attribute> attrs = {}) {
  Node n;
  n.op_type = std::move(op);
  n.name = out + "_node";
  n.inputs = std::move(ins);
  n.outputs = {std::move(out)};
  n.attributes = std::move(attrs);
  return n;
}

// relu(x W1ᵀ + b1) W2ᵀ + b2, MSE against t: the module of the reference script.
Graph mlp(const std::map<std::string, Tensor>& weights) {
  Graph g;
  g.name = "mlp";
  g.inputs = {{"x", ValueType::tensor(DType::F32, Shape({Dim::sym("batch"), Dim(4)})), ""},
              {"t", ValueType::tensor(DType::F32, Shape({Dim::sym("batch"), Dim(3)})), ""}};
  for (const char* w : {"w1", "b1", "w2", "b2"}) g.set_initializer(w, weights.at(w));
  g.nodes = {node("Gemm", {"x", "w1", "b1"}, "h", {Attribute::make_int("transB", 1)}), node("Relu", {"h"}, "r"),
             node("Gemm", {"r", "w2", "b2"}, "y", {Attribute::make_int("transB", 1)}), node("Sub", {"y", "t"}, "d"),
             node("Mul", {"d", "d"}, "sq"), node("ReduceMean", {"sq"}, "loss", {Attribute::make_int("keepdims", 0)})};
  g.outputs = {{"loss", {}, ""}};
  return g;
}

std::map<std::string, Tensor> torch_reference() {
  const char* src = std::getenv("HODU_SOURCE_DIR");
  std::string script = std::string(src ? src : "..") + "/tests/autodiff/torch_training_reference.py";
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) return {};
  ScratchDir dir("hodu-training-ref-");
  std::string out = (dir.path() / "ref.npz").string();
  std::string cmd = "/usr/bin/python3 '" + script + "' '" + out + "'";
  if (std::system(cmd.c_str()) != 0) throw Error(ErrorCode::Internal, "failed: " + cmd);
  std::map<std::string, Tensor> ref;
  for (auto& [name, t] : read_tensor_file(out)) ref[name] = t;
  return ref;
}

const std::map<std::string, Tensor>& reference() {
  static const std::map<std::string, Tensor> ref = torch_reference();
  return ref;
}

void expect_close(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to_doubles(), w = want.to_doubles();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]) / std::max(1e-3, std::fabs(w[i])));
  EXPECT_LT(worst, rel) << what;
}

struct Config {
  const char* name;
  OptimizerSpec spec;
};

void run_config(const Config& c) {
  const auto& ref = reference();
  if (ref.empty()) GTEST_SKIP() << "Debian's /usr/bin/python3 with torch is needed for the reference numbers";
  Graph fw = mlp(ref);
  Graph step = build_training_step(fw, "loss", {"w1", "b1", "w2", "b2"}, c.spec);
  ASSERT_NO_THROW(verify_graph(step));
  Model m;
  m.opset_imports[""] = 21;
  m.graph = step;
  interp::Interpreter interp(m);
  std::map<std::string, Tensor> state = initial_training_state(fw, step);
  const bool sgd = c.spec.kind == OptimizerSpec::Kind::SGD;
  const Tensor& lrs = ref.at(sgd ? "lr_sgd" : "lr_adam");
  const Tensor& losses = ref.at(std::string(c.name) + ".losses");
  const auto names = training_state_names(step);
  for (int64_t k = 0; k < losses.numel(); ++k) {
    std::map<std::string, RuntimeValue> feeds;
    feeds["x"] = ref.at("x" + std::to_string(k));
    feeds["t"] = ref.at("t" + std::to_string(k));
    feeds["lr"] = Tensor::scalar<float>(DType::F32, static_cast<float>(lrs.get_double(k)));
    for (const auto& [name, t] : state) feeds[name] = t;
    auto outs = interp.run(feeds);
    ASSERT_EQ(outs.size(), 1 + names.size());
    double loss = outs[0].tensor.get_double(0), want = losses.get_double(k);
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << c.name << " step " << k;
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(step.outputs[1 + i].name, names[i] + ".next");
      state[names[i]] = outs[1 + i].tensor;
    }
  }
  for (const char* p : {"w1", "b1", "w2", "b2"}) {
    expect_close(state.at(p), ref.at(std::string(c.name) + "." + p), 1e-4, std::string(c.name) + " " + p);
    for (const char* s : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
      auto want = ref.find(std::string(c.name) + "." + p + "." + s);
      auto got = state.find(std::string(p) + "." + s);
      EXPECT_EQ(want != ref.end(), got != state.end()) << c.name << " state " << p << "." << s;
      if (want != ref.end() && got != state.end()) expect_close(got->second, want->second, 1e-4, got->first);
    }
  }
}

TEST(TrainingStep, SgdMatchesTorch) { run_config({"sgd", OptimizerSpec::sgd()}); }
TEST(TrainingStep, SgdMomentumDampeningWeightDecayMatchesTorch) {
  run_config({"sgd_momentum", OptimizerSpec::sgd(0.9f, 0.1f, false, 0.01f)});
}
TEST(TrainingStep, SgdNesterovMatchesTorch) { run_config({"sgd_nesterov", OptimizerSpec::sgd(0.8f, 0, true, 0.02f)}); }
TEST(TrainingStep, SgdMaximizeMatchesTorch) {
  OptimizerSpec o = OptimizerSpec::sgd(0.5f);
  o.maximize = true;
  run_config({"sgd_maximize", o});
}
TEST(TrainingStep, AdamMatchesTorch) { run_config({"adam", OptimizerSpec::adam(0.85f, 0.99f, 1e-6f, 0.01f)}); }
TEST(TrainingStep, AdamAmsgradMatchesTorch) {
  OptimizerSpec o = OptimizerSpec::adam();
  o.amsgrad = true;
  run_config({"adam_amsgrad", o});
}
TEST(TrainingStep, AdamWMatchesTorch) { run_config({"adamw", OptimizerSpec::adamw(0.9f, 0.95f, 1e-8f, 0.1f)}); }

TEST(TrainingStep, InputsOutputsAndInitialState) {
  std::map<std::string, Tensor> w = {{"w1", Tensor::zeros(DType::F32, {8, 4})}, {"b1", Tensor::zeros(DType::F32, {8})},
                                     {"w2", Tensor::zeros(DType::F32, {3, 8})}, {"b2", Tensor::zeros(DType::F32, {3})}};
  w["w1"].set_double(5, 2.5);
  Graph fw = mlp(w);
  Graph step = build_training_step(fw, "loss", {"w1", "b2"}, OptimizerSpec::adam());
  std::vector<std::string> ins, outs;
  for (const auto& v : step.inputs) ins.push_back(v.name);
  for (const auto& v : step.outputs) outs.push_back(v.name);
  EXPECT_EQ(ins, (std::vector<std::string>{"x", "t", "lr", "w1", "b2", "w1.exp_avg", "w1.exp_avg_sq", "b2.exp_avg",
                                           "b2.exp_avg_sq", "optimizer.step"}));
  EXPECT_EQ(outs, (std::vector<std::string>{"loss", "w1.next", "b2.next", "w1.exp_avg.next", "w1.exp_avg_sq.next",
                                            "b2.exp_avg.next", "b2.exp_avg_sq.next", "optimizer.step.next"}));
  EXPECT_EQ(step.initializer("w1"), nullptr) << "a param is fed, not a constant";
  EXPECT_NE(step.initializer("w2"), nullptr) << "an untrained weight stays a constant";
  EXPECT_EQ(step.input("lr")->type.to_string(), "f32[]");
  EXPECT_EQ(step.output("w1.next")->type.to_string(), "f32[8, 4]");
  auto init = initial_training_state(fw, step);
  ASSERT_EQ(init.size(), 7u);
  EXPECT_EQ(init.at("w1").get_double(5), 2.5);
  EXPECT_EQ(init.at("w1.exp_avg").shape(), (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(init.at("optimizer.step").get_double(0), 0.0);
  // A forward graph that does not output its loss: the step does.
  Graph quiet = fw;
  quiet.outputs = {{"y", {}, ""}};
  Graph qs = build_training_step(quiet, "loss", {"b2"}, OptimizerSpec::sgd());
  ASSERT_GE(qs.outputs.size(), 3u);
  EXPECT_EQ(qs.outputs[0].name, "y");
  EXPECT_EQ(qs.outputs[1].name, "loss");
  EXPECT_EQ(qs.outputs[2].name, "b2.next");
  // Plain SGD keeps no state and no step count.
  Graph sgd = build_training_step(fw, "loss", {"w1"}, OptimizerSpec::sgd());
  EXPECT_EQ(training_state_names(sgd), (std::vector<std::string>{"w1"}));
}

TEST(TrainingStep, BatchNormStatisticsAreState) {
  Graph g;
  g.inputs = {{"x", ValueType::tensor(DType::F32, Shape({Dim(4), Dim(2), Dim(3)})), ""}};
  g.set_initializer("scale", Tensor::from_vector(DType::F32, {2}, std::vector<float>{1, 2}));
  g.set_initializer("bias", Tensor::zeros(DType::F32, {2}));
  g.set_initializer("mean", Tensor::zeros(DType::F32, {2}));
  g.set_initializer("var", Tensor::from_vector(DType::F32, {2}, std::vector<float>{1, 1}));
  g.nodes = {node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, "y", {Attribute::make_int("training_mode", 1)}),
             node("ReduceSum", {"y"}, "s", {Attribute::make_int("keepdims", 0)}), node("Mul", {"s", "s"}, "loss")};
  g.outputs = {{"loss", {}, ""}};
  Graph step;
  try {
    step = build_training_step(g, "loss", {"scale"}, OptimizerSpec::sgd());
  } catch (const Error& e) {
    // Until BatchNormalization has its rule, the error names it.
    EXPECT_NE(std::string(e.what()).find("BatchNormalization"), std::string::npos) << e.what();
    return;
  }
  EXPECT_EQ(training_state_names(step), (std::vector<std::string>{"scale", "mean", "var"}));
  EXPECT_EQ(step.initializer("mean"), nullptr);
  EXPECT_EQ(trainable_initializers(g), (std::vector<std::string>{"scale", "bias"}));
  try {
    build_training_step(g, "loss", {"scale", "mean"}, OptimizerSpec::sgd());
    ADD_FAILURE() << "a running statistic as a param";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mean' is a running statistic"), std::string::npos) << e.what();
  }
}

TEST(TrainingStep, TrainableInitializers) {
  std::map<std::string, Tensor> w = {{"w1", Tensor::zeros(DType::F32, {8, 4})}, {"b1", Tensor::zeros(DType::F32, {8})},
                                     {"w2", Tensor::zeros(DType::F32, {3, 8})}, {"b2", Tensor::zeros(DType::F32, {3})}};
  Graph fw = mlp(w);
  fw.set_initializer("onnx::Mul_7", Tensor::zeros(DType::F32, {4}));
  fw.set_initializer("count", Tensor::zeros(DType::I64, {4}));
  fw.set_initializer("scalar", Tensor::scalar<float>(DType::F32, 2.f));
  EXPECT_EQ(trainable_initializers(fw), (std::vector<std::string>{"w1", "b1", "w2", "b2"}));
}

TEST(TrainingStep, BadRequests) {
  std::map<std::string, Tensor> w = {{"w1", Tensor::zeros(DType::F32, {8, 4})}, {"b1", Tensor::zeros(DType::F32, {8})},
                                     {"w2", Tensor::zeros(DType::F32, {3, 8})}, {"b2", Tensor::zeros(DType::F32, {3})}};
  Graph fw = mlp(w);
  auto message = [&](std::vector<std::string> params, OptimizerSpec o) {
    try {
      build_training_step(fw, "loss", params, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"x"}, OptimizerSpec::sgd()).find("'x' is not an initializer"), std::string::npos);
  EXPECT_NE(message({}, OptimizerSpec::sgd()).find("no parameters"), std::string::npos);
  EXPECT_NE(message({"w1", "w1"}, OptimizerSpec::sgd()).find("twice"), std::string::npos);
  EXPECT_NE(message({"w1"}, OptimizerSpec::sgd(0, 0, true)).find("Nesterov"), std::string::npos);
  EXPECT_NE(message({"w1"}, OptimizerSpec::adam(1.5f)).find("betas"), std::string::npos);
}

}  // namespace
}  // namespace hodu::passes
