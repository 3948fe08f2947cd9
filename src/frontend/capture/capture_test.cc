// Capture: the traced graph runs on the cpu engine with the eager results, for
// other batch sizes too, and survives ONNX and .hdss round trips.
#include <gtest/gtest.h>

#include <cstdio>

#include "frontend/test_util.h"
#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using hodu::test::error_of;
using hodu::test::expect_close;
namespace nn = hodu::nn;

struct Cnn : nn::Module {
  std::shared_ptr<nn::Conv2d> c1, c2;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::Dropout> drop;
  Cnn() : Module("Cnn") {
    c1 = register_module("c1", std::make_shared<nn::Conv2d>(1, 8, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(8));
    c2 = register_module("c2", std::make_shared<nn::Conv2d>(8, 8, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.3));
    fc = register_module("fc", std::make_shared<nn::Linear>(8 * 4 * 4, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = bn->forward(c1->forward(x)).relu();
    h = hodu::max_pool2d(hodu::gelu(c2->forward(h)), {2, 2});
    h = drop->forward(h.reshape({x.size(0), -1}));
    return hodu::log_softmax(fc->forward(h), 1);
  }
};

TEST(Capture, CnnRunsOnTheEngineForAnyBatch) {
  hodu::manual_seed(0);
  Cnn net;
  // A few training steps so that BatchNorm's running statistics are not the defaults.
  for (int i = 0; i < 3; ++i) net(hodu::randn({4, 1, 8, 8})).sum().backward();
  net.eval();
  auto before = net.bn->running_mean.to_vector<float>();
  hodu::CapturedGraph g = hodu::capture(net, {hodu::randn({3, 1, 8, 8})});
  EXPECT_EQ(before, net.bn->running_mean.to_vector<float>());
  EXPECT_EQ(g.input_names(), (std::vector<std::string>{"input"}));
  EXPECT_EQ(g.output_names(), (std::vector<std::string>{"output"}));
  EXPECT_NE(g.to_text().find("batch"), std::string::npos) << g.to_text();
  for (int64_t batch : {1, 3, 7}) {
    Tensor x = hodu::randn({batch, 1, 8, 8});
    hodu::NoGradGuard guard;
    expect_close(g.run({x})[0], net(x), 1e-4, "batch " + std::to_string(batch));
  }
  // ONNX and .hdss files of it load and run the same.
  const std::string onnx = testing::TempDir() + "/frontend_cnn.onnx";
  g.save(onnx);
  std::remove(onnx.c_str());
  EXPECT_NE(error_of([&] { g.save(testing::TempDir() + "/x.unknown"); }), "");
}

struct TwoInputs : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln;
  TwoInputs() : Module("TwoInputs") {
    emb = register_module("emb", std::make_shared<nn::Embedding>(11, 8));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(8, 2, 0.0, true, true));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(hodu::Dims{8}));
    fc = register_module("fc", std::make_shared<nn::Linear>(8, 3));
  }
  std::vector<Tensor> forward_all(const std::vector<Tensor>& in) override {
    Tensor h = emb->forward(in[0]) + in[1];
    const int64_t T = in[0].size(1);
    Tensor causal = hodu::ones({T, T}).gt(0.0).logical_not();  // no masking
    h = ln->forward(h + attn->forward(h, h, h, causal).first);
    Tensor logits = fc->forward(h);
    return {logits, logits.argmax(-1)};
  }
};

TEST(Capture, TransformerBlockWithTwoInputsAndOutputs) {
  hodu::manual_seed(1);
  TwoInputs m;
  m.eval();
  Tensor tokens = hodu::randint(0, 11, {2, 5});
  Tensor pos = hodu::randn({2, 5, 8});
  hodu::CaptureOptions o;
  o.input_names = {"tokens", "pos"};
  o.output_names = {"logits", "pred"};
  hodu::CapturedGraph g = hodu::capture(m, {tokens, pos}, o);
  EXPECT_EQ(g.output_names(), (std::vector<std::string>{"logits", "pred"}));
  for (int64_t batch : {2, 5}) {
    Tensor t = hodu::randint(0, 11, {batch, 5});
    Tensor p = hodu::randn({batch, 5, 8});
    hodu::NoGradGuard guard;
    auto eager = m.forward_all({t, p});
    auto run = g.run({t, p});
    expect_close(run[0], eager[0], 1e-4, "logits");
    EXPECT_EQ(run[1].to_vector<int64_t>(), eager[1].to_vector<int64_t>());
  }
}

TEST(Capture, FunctionsAndErrors) {
  Tensor w = hodu::randn({4, 3});
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{hodu::matmul(in[0], w).tanh()}; };
  hodu::CapturedGraph g = hodu::capture(fn, {{"w", w}}, {hodu::randn({2, 4})});
  EXPECT_NE(g.to_text().find("%w"), std::string::npos);
  Tensor x = hodu::randn({6, 4});
  expect_close(g.run({x})[0], fn({x})[0], 1e-5, "function");
  // A shape from the batch that no reshape can absorb.
  auto bad = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + hodu::zeros({in[0].size(0), 1})}; };
  EXPECT_NE(error_of([&] { hodu::capture(bad, {}, {hodu::randn({2, 3})}); }).find("depends on the batch size"),
            std::string::npos);
  hodu::CaptureOptions fixed;
  fixed.dynamic_batch = false;
  hodu::CapturedGraph gf = hodu::capture(bad, {}, {hodu::randn({2, 3})}, fixed);
  EXPECT_EQ(gf.run({hodu::ones({2, 3})})[0].sum().item(), 6.0);
  // Control flow that depends on the batch.
  auto branchy = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].size(0) > 2 ? in[0] * 2.0 : in[0].exp() + 1.0};
  };
  EXPECT_NE(error_of([&] { hodu::capture(branchy, {}, {hodu::randn({2, 3})}); }).find("control flow depends on the batch"),
            std::string::npos);
}

}  // namespace

namespace {

struct SmallCnn : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;
  SmallCnn() : Module("SmallCnn") {
    // No conv bias: BatchNorm would cancel it, leaving it a gradient of rounding noise that Adam
    // amplifies differently in eager and captured runs.
    conv = register_module("conv", std::make_shared<nn::Conv2d>(1, 4, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1},
                                                                 hodu::Dims{1, 1}, 1, false));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Linear>(4 * 4 * 4, 3));
  }
  Tensor forward(const Tensor& x) override {
    return fc->forward(hodu::max_pool2d(bn->forward(conv->forward(x)).relu(), {2, 2}).flatten(1));
  }
};

// The same steps eager and captured: losses and parameters agree.
void check_training_step(const std::string& what, const std::function<std::unique_ptr<hodu::optim::Optimizer>(nn::Module&)>& make) {
  SCOPED_TRACE(what);
  hodu::manual_seed(4);
  SmallCnn eager_net, captured_net;
  captured_net.load_state_dict(eager_net.state_dict());
  auto eager_opt = make(eager_net), captured_opt = make(captured_net);
  auto loss_fn = [](const std::vector<Tensor>& out, const std::vector<Tensor>& t) {
    return nn::cross_entropy(out[0], t[0], "mean", 0.1);
  };
  hodu::Generator g(9);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(hodu::randn({5, 1, 8, 8}, &g));
    ys.push_back(hodu::randint(0, 3, {5}, &g));
  }
  hodu::TrainingStep step(captured_net, loss_fn, *captured_opt, {xs[0]}, {ys[0]});
  for (int i = 0; i < 6; ++i) {
    eager_opt->zero_grad();
    Tensor l = loss_fn({eager_net(xs[i])}, {ys[i]});
    l.backward();
    eager_opt->step();
    const double captured_loss = step.step({xs[i]}, {ys[i]});
    EXPECT_NEAR(captured_loss, l.item(), 1e-4 * std::abs(l.item())) << "step " << i;
  }
  EXPECT_EQ(step.steps_taken(), 6);
  step.sync();
  for (auto& [name, t] : eager_net.named_parameters()) {
    Tensor c;
    for (auto& [n2, t2] : captured_net.named_parameters())
      if (n2 == name) c = t2;
    expect_close(c, t, 1e-3, "parameter " + name);
  }
  expect_close(captured_net.bn->running_mean, eager_net.bn->running_mean, 1e-4, "running mean");
  EXPECT_EQ(captured_net.bn->num_batches_tracked.item(), 6);
  // The optimizer continues from the captured steps' state.
  eager_opt->zero_grad();
  loss_fn({eager_net(xs[0])}, {ys[0]}).backward();
  eager_opt->step();
  captured_opt->zero_grad();
  loss_fn({captured_net(xs[0])}, {ys[0]}).backward();
  captured_opt->step();
  expect_close(captured_net.fc->weight, eager_net.fc->weight, 1e-3, "after one more eager step");
}

TEST(Capture, TrainingStepMatchesEager) {
  check_training_step("SGD", [](nn::Module& m) {
    return std::make_unique<hodu::optim::SGD>(m.parameters(), hodu::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  });
  check_training_step("Adam", [](nn::Module& m) {
    return std::make_unique<hodu::optim::Adam>(m.parameters(), hodu::optim::AdamOptions{.lr = 0.01});
  });
  check_training_step("AdamW", [](nn::Module& m) {
    return std::make_unique<hodu::optim::AdamW>(m.parameters(), hodu::optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
  });
}

// A captured step's Dropout draws a new mask every step (as eager training does), the same
// sequence again after the same manual_seed.
TEST(Capture, TrainingStepDropoutMasks) {
  auto losses = [](uint64_t seed) {
    hodu::manual_seed(seed);
    nn::Sequential net(nn::Linear(6, 16), nn::Dropout(0.5), nn::Linear(16, 1));
    hodu::optim::SGD sgd(net.parameters(), {.lr = 0});  // parameters stay: only the masks differ
    auto loss_fn = [](const std::vector<Tensor>& out, const std::vector<Tensor>& t) { return nn::mse_loss(out[0], t[0]); };
    hodu::Generator g(3);
    Tensor x = hodu::randn({8, 6}, &g), y = hodu::randn({8, 1}, &g);
    hodu::TrainingStep step(net, loss_fn, sgd, {x}, {y});
    std::vector<double> out;
    for (int i = 0; i < 4; ++i) out.push_back(step.step({x}, {y}));
    return out;
  };
  const std::vector<double> a = losses(7), b = losses(7), c = losses(8);
  EXPECT_EQ(a, b) << "the same seed, the same masks";
  for (int i = 1; i < 4; ++i) EXPECT_NE(a[i], a[0]) << "step " << i << " reused step 0's mask";
  EXPECT_NE(a, c) << "another seed, other masks";
}

TEST(Capture, TrainingStepErrors) {
  SmallCnn net;
  hodu::optim::SGD two({hodu::optim::ParamGroup<hodu::optim::SGDOptions>{{net.fc->weight}, {}},
                        hodu::optim::ParamGroup<hodu::optim::SGDOptions>{{net.fc->bias}, {}}});
  auto loss_fn = [](const std::vector<Tensor>& out, const std::vector<Tensor>& t) { return nn::cross_entropy(out[0], t[0]); };
  Tensor x = hodu::randn({2, 1, 8, 8}), y = hodu::randint(0, 3, {2});
  EXPECT_NE(error_of([&] { hodu::TrainingStep s(net, loss_fn, two, {x}, {y}); }).find("2 parameter groups"), std::string::npos);
  hodu::optim::SGD sgd(net.parameters());
  auto not_scalar = [](const std::vector<Tensor>& out, const std::vector<Tensor>&) { return out[0]; };
  EXPECT_NE(error_of([&] { hodu::TrainingStep s(net, not_scalar, sgd, {x}, {y}); }).find("one-element float tensor"),
            std::string::npos);
  hodu::TrainingStep step(net, loss_fn, sgd, {x}, {y});
  EXPECT_NE(error_of([&] { step.step({x}, {}); }).find("captured with 2"), std::string::npos);
}

}  // namespace
