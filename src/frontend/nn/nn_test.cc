// Modules: registration and names, PyTorch's initial distributions, modes,
// state dicts and files, BatchNorm statistics, Dropout, attention shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "frontend/test_util.h"
#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using hodu::test::error_of;
using hodu::test::expect_close;
namespace nn = hodu::nn;

struct Net : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;
  Net() : Module("Net") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(1, 4, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Linear>(4 * 16, 3));
  }
  Tensor forward(const Tensor& x) override { return fc->forward(bn->forward(conv->forward(x)).relu().flatten(1)); }
};

TEST(Nn, NamesAndStateDict) {
  Net net;
  std::vector<std::string> names;
  for (auto& [n, t] : net.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias",
                                             "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(net.parameters().size(), 6u);
  EXPECT_EQ(net.parameter_count(), 4 * 9 + 4 + 4 + 4 + 64 * 3 + 3);
  for (auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(net.named_modules().size(), 4u);
  EXPECT_NE(net.to_string().find("conv: Conv2d weight=f32[4, 1, 3, 3]"), std::string::npos);

  // Save, change, load back.
  const std::string path = testing::TempDir() + "/frontend_net.safetensors";
  net.save(path);
  Net other;
  EXPECT_FALSE(hodu::equal(other.fc->weight, net.fc->weight));
  other.load(path);
  for (size_t i = 0; i < net.state_dict().size(); ++i)
    EXPECT_TRUE(hodu::equal(other.state_dict()[i].second, net.state_dict()[i].second)) << net.state_dict()[i].first;
  std::remove(path.c_str());

  auto sd = net.state_dict();
  sd.pop_back();
  sd.emplace_back("bogus", hodu::zeros({1}));
  std::string err = error_of([&] { other.load_state_dict(sd); });
  EXPECT_NE(err.find("missing keys [bn.num_batches_tracked]"), std::string::npos) << err;
  EXPECT_NE(err.find("unexpected keys [bogus]"), std::string::npos) << err;
  other.load_state_dict(sd, false);  // non-strict takes what fits
  auto bad = net.state_dict();
  bad[0].second = hodu::zeros({2});
  EXPECT_NE(error_of([&] { other.load_state_dict(bad); }).find("'conv.weight' has shape [2]"), std::string::npos);
}

TEST(Nn, PyTorchInitialization) {
  hodu::manual_seed(0);
  nn::Linear fc(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);  // kaiming_uniform(a = sqrt 5) and the bias bound
  EXPECT_LE(fc.weight.abs().max().item(), bound);
  EXPECT_GT(fc.weight.abs().max().item(), bound * 0.98);
  EXPECT_LE(fc.bias.abs().max().item(), bound);
  // U(-b, b) has variance b²/3.
  EXPECT_NEAR(fc.weight.var({0, 1}).item(), bound * bound / 3, bound * bound / 3 * 0.05);
  nn::Conv2d conv(8, 16, {3, 3});
  const double cb = 1.0 / std::sqrt(8.0 * 9);
  EXPECT_LE(conv.weight.abs().max().item(), cb);
  nn::Embedding emb(1000, 16, 3);
  EXPECT_NEAR(emb.weight.std({0, 1}).item(), 1.0, 0.03);
  EXPECT_EQ(emb.weight.select(0, 3).abs().sum().item(), 0.0);
  nn::MultiheadAttention mha(32, 4);
  const double xb = std::sqrt(6.0 / (32 + 96));  // xavier_uniform of [3E, E]
  EXPECT_LE(mha.in_proj_weight.abs().max().item(), xb);
  EXPECT_GT(mha.in_proj_weight.abs().max().item(), xb * 0.95);
  EXPECT_EQ(mha.in_proj_bias.abs().sum().item(), 0.0);
  EXPECT_EQ(mha.out_proj->bias.abs().sum().item(), 0.0);
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(bn.weight.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bn.running_var.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_NEAR(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3), 1e-12);
}

TEST(Nn, BatchNormStatistics) {
  nn::BatchNorm2d bn(2, 1e-5, 0.1);
  hodu::Generator g(1);
  Tensor x = hodu::randn({4, 2, 3, 3}, &g) * 2.0 + 1.0;
  Tensor y = bn(x);
  // Training: normalized per channel with batch statistics.
  EXPECT_NEAR(y.mean({0, 2, 3}).abs().max().item(), 0.0, 1e-5);
  EXPECT_NEAR(y.var({0, 2, 3}, false).to_vector<float>()[0], 1.0, 1e-3);
  // running = 0.9 running + 0.1 batch (unbiased variance).
  Tensor m = x.mean({0, 2, 3}), v = x.var({0, 2, 3}, true);
  EXPECT_NEAR(bn.running_mean.to_vector<float>()[1], 0.1 * m.to_vector<float>()[1], 1e-5);
  EXPECT_NEAR(bn.running_var.to_vector<float>()[1], 0.9 + 0.1 * v.to_vector<float>()[1], 1e-5);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1);
  // Evaluation uses the running statistics and changes nothing.
  bn.eval();
  EXPECT_FALSE(bn.is_training());
  auto before = bn.running_mean.to_vector<float>();
  Tensor ye = bn(x);
  EXPECT_EQ(before, bn.running_mean.to_vector<float>());
  auto rm = bn.running_mean.to_vector<float>(), rv = bn.running_var.to_vector<float>();
  EXPECT_NEAR(ye.to_vector<float>()[0], (x.to_vector<float>()[0] - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-5);
  EXPECT_NE(error_of([&] { bn(hodu::zeros({2, 3, 2, 2})); }).find("3 channels"), std::string::npos);
}

TEST(Nn, DropoutAndModes) {
  nn::Dropout drop(0.25);
  hodu::manual_seed(1);
  Tensor x = hodu::ones({10000});
  Tensor y = drop(x);
  auto v = y.to_vector<float>();
  int64_t zeros = 0;
  for (float e : v) {
    if (e == 0) ++zeros;
    else EXPECT_FLOAT_EQ(e, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.02);
  drop.eval();
  EXPECT_TRUE(hodu::equal(drop(x), x));
  nn::Sequential seq(nn::Linear(4, 8), nn::ReLU(), nn::Dropout(0.5), nn::Linear(8, 2));
  EXPECT_EQ(seq.size(), 4u);
  seq.eval();
  Tensor in = hodu::randn({3, 4});
  EXPECT_TRUE(hodu::equal(seq(in), seq(in)));  // no dropout in eval
  EXPECT_EQ(seq(in).shape(), (hodu::Dims{3, 2}));
  EXPECT_EQ(seq.named_parameters()[2].first, "3.weight");
}

TEST(Nn, AttentionAndNorms) {
  nn::MultiheadAttention mha(8, 2, 0.0, true, true);
  Tensor q = hodu::randn({3, 5, 8}), kv = hodu::randn({3, 7, 8});
  auto [out, w] = mha.forward(q, kv, kv);
  EXPECT_EQ(out.shape(), (hodu::Dims{3, 5, 8}));
  EXPECT_EQ(w.shape(), (hodu::Dims{3, 5, 7}));
  EXPECT_NEAR(w.sum({2}).mean().item(), 1.0, 1e-5);
  // A causal mask leaves the first query attending to the first key only.
  Tensor causal = hodu::ones({5, 5}).gt(0.0).logical_not();
  Tensor upper = hodu::tensor(std::vector<float>{0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
                              {5, 5})
                     .gt(0.5);
  auto [o2, w2] = mha.forward(q, q, q, upper);
  EXPECT_NEAR(w2.select(1, 0).select(1, 0).mean().item(), 1.0, 1e-6);
  EXPECT_NE(error_of([&] { mha.forward(q, kv, kv, hodu::zeros({4, 4})); }).find("attn_mask"), std::string::npos);
  // forward_all (what capture calls): {q, k, v}, {q, kv} and {x}.
  EXPECT_TRUE(hodu::equal(mha.forward_all({q, kv, kv})[0], out));
  EXPECT_TRUE(hodu::equal(mha.forward_all({q, kv})[0], out));
  EXPECT_TRUE(hodu::equal(mha.forward_all({q})[0], mha.forward(q)));
  EXPECT_NE(error_of([&] { mha.forward_all({q, q, q, q}); }).find("4 inputs"), std::string::npos);
  nn::LayerNorm ln({8});
  Tensor y = ln(q);
  EXPECT_NEAR(y.mean({-1}).abs().max().item(), 0.0, 1e-5);
  EXPECT_NEAR(y.var({-1}, false).mean().item(), 1.0, 1e-3);
}

TEST(Nn, Losses) {
  Tensor logits = hodu::tensor(std::vector<float>{2, 0, 0, 0, 1, 0}, {2, 3});
  Tensor target = hodu::tensor(std::vector<int64_t>{0, 2});
  const double l0 = -std::log(std::exp(2.0) / (std::exp(2.0) + 2)), l1 = -std::log(1 / (std::exp(1.0) + 2));
  EXPECT_NEAR(nn::cross_entropy(logits, target).item(), (l0 + l1) / 2, 1e-6);
  EXPECT_NEAR(nn::cross_entropy(logits, target, "sum").item(), l0 + l1, 1e-5);
  EXPECT_EQ(nn::cross_entropy(logits, target, "none").shape(), (hodu::Dims{2}));
  // Label smoothing: (1 - e) * nll + e * mean over classes of -log p.
  Tensor lp = hodu::log_softmax(logits, 1);
  const double smooth = -lp.sum().item() / 2 / 3;
  EXPECT_NEAR(nn::cross_entropy(logits, target, "mean", 0.1).item(), 0.9 * (l0 + l1) / 2 + 0.1 * smooth, 1e-6);
  EXPECT_NE(error_of([&] { nn::cross_entropy(logits, hodu::tensor(std::vector<int64_t>{0, 3})); })
                .find("target 3 is out of range for 3 classes"),
            std::string::npos);
  // A negative target other than ignore_index is an error (PyTorch's too), not the last class.
  EXPECT_NE(error_of([&] { nn::cross_entropy(logits, hodu::tensor(std::vector<int64_t>{-1, 0})); })
                .find("target -1 is out of range"),
            std::string::npos);
  EXPECT_TRUE(std::isnan(nn::cross_entropy(logits, hodu::tensor(std::vector<int64_t>{-100, -100})).item()))
      << "every target ignored: 0 / 0, as PyTorch";
  // Negative indices are refused (PyTorch's index_select, gather, embedding and one_hot refuse them).
  nn::Embedding emb(4, 2);
  EXPECT_NE(error_of([&] { emb(hodu::tensor(std::vector<int64_t>{-1})); }).find("embedding: index -1 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { hodu::one_hot(hodu::tensor(std::vector<int64_t>{-1}), 3); }).find("index -1"), std::string::npos);
  EXPECT_NE(error_of([&] { logits.index_select(1, hodu::tensor(std::vector<int64_t>{-1})); }).find("index -1"),
            std::string::npos);
  EXPECT_NEAR(nn::mse_loss(hodu::ones({4}), hodu::zeros({4})).item(), 1.0, 0);
  Tensor x = hodu::tensor(std::vector<float>{0.5, -1}), t = hodu::tensor(std::vector<float>{1, 0});
  const double b = (std::log(1 + std::exp(-0.5)) + std::log(1 + std::exp(-1.0))) / 2;
  EXPECT_NEAR(nn::binary_cross_entropy_with_logits(x, t).item(), b, 1e-6);
  EXPECT_NE(error_of([&] { nn::mse_loss(x, t, "avg"); }).find("reduction 'avg'"), std::string::npos);
}

TEST(Nn, ToFloat64KeepsIdentity) {
  nn::Linear fc(2, 2);
  Tensor w = fc.weight;
  fc.to(hodu::kFloat64);
  EXPECT_EQ(fc.weight.dtype(), hodu::kFloat64);
  EXPECT_TRUE(w.is_same(fc.weight));
  EXPECT_EQ(w.dtype(), hodu::kFloat64);
  EXPECT_TRUE(fc.weight.requires_grad());
}

}  // namespace
