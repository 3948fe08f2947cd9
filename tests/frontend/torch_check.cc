// hodu's C++ frontend against PyTorch 1.13 (torch_reference.py writes the
// references): op values and gradients, and 100 training steps of a CNN and an
// attention model with SGD (momentum, Nesterov, weight decay), Adam and AdamW
// from the same initial weights on the same batches.
// Usage: HODU_TORCH_REF=DIR frontend_torch_check
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
namespace F = hodu::nn;

std::string ref_dir() {
  const char* d = std::getenv("HODU_TORCH_REF");
  return d ? d : "";
}

using Case = std::function<Tensor(const std::vector<Tensor>&)>;

std::map<std::string, Case> cases() {
  std::map<std::string, Case> c;
  c["add_broadcast"] = [](auto& a) { return a[0] + a[1]; };
  c["mul_div"] = [](auto& a) { return a[0] * a[1] / (a[1] + 1.0); };
  c["pow"] = [](auto& a) { return hodu::pow(a[0], a[1]); };
  c["maximum"] = [](auto& a) { return hodu::maximum(a[0], a[1]); };
  c["exp_log_sqrt"] = [](auto& a) { return a[0].exp() + a[0].log() + a[0].sqrt() + a[0].rsqrt(); };
  c["tanh_sigmoid"] = [](auto& a) { return a[0].tanh() * a[0].sigmoid(); };
  c["relu_gelu_silu"] = [](auto& a) {
    return hodu::relu(a[0]) + hodu::gelu(a[0]) + hodu::silu(a[0]) + hodu::gelu(a[0], "tanh");
  };
  c["leaky_elu_softplus"] = [](auto& a) { return hodu::leaky_relu(a[0], 0.1) + hodu::elu(a[0]) + hodu::softplus(a[0]); };
  c["clamp"] = [](auto& a) { return a[0].clamp(-0.5, 0.7); };
  c["sum_mean"] = [](auto& a) { return a[0].sum({0, 2}, true) * a[0].mean({1}, true); };
  c["amax"] = [](auto& a) { return a[0].amax({1}); };
  c["max_dim"] = [](auto& a) { return a[0].max(0).first; };
  c["var_std"] = [](auto& a) { return a[0].var({1}, true, true) + a[0].std({0}, false); };
  c["logsumexp"] = [](auto& a) { return a[0].logsumexp({1}); };
  c["softmax"] = [](auto& a) { return hodu::softmax(a[0], 1); };
  c["log_softmax_dim0"] = [](auto& a) { return hodu::log_softmax(a[0], 0); };
  c["matmul"] = [](auto& a) { return hodu::matmul(a[0], a[1]); };
  c["matmul_batched"] = [](auto& a) { return hodu::matmul(a[0], a[1]); };
  c["linear"] = [](auto& a) { return hodu::linear(a[0], a[1], a[2]); };
  c["linear_3d"] = [](auto& a) { return hodu::linear(a[0], a[1], a[2]); };
  c["conv2d"] = [](auto& a) { return hodu::conv2d(a[0], a[1], a[2], {1, 1}, {1, 1}); };
  c["conv2d_stride_groups"] = [](auto& a) { return hodu::conv2d(a[0], a[1], a[2], {2, 1}, {1, 0}, {1, 2}, 2); };
  c["conv1d"] = [](auto& a) { return hodu::conv1d(a[0], a[1], a[2], 2, 1); };
  c["max_pool2d"] = [](auto& a) { return hodu::max_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}, {1, 1}, true); };
  c["avg_pool2d"] = [](auto& a) { return hodu::avg_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}); };
  c["avg_pool2d_ceil"] = [](auto& a) { return hodu::avg_pool2d(a[0], {2, 2}, {2, 2}, {1, 1}, true, false); };
  c["adaptive_avg_pool2d"] = [](auto& a) { return hodu::adaptive_avg_pool2d(a[0], {1, 1}); };
  c["layer_norm"] = [](auto& a) { return hodu::layer_norm(a[0], {6}, a[1], a[2]); };
  c["batch_norm_train"] = [](auto& a) { return hodu::batch_norm(a[0], {}, {}, a[1], a[2], true); };
  c["batch_norm_eval"] = [](auto& a) {
    return hodu::batch_norm(a[0], hodu::linspace(-0.5, 0.5, 3), hodu::linspace(0.5, 2, 3), a[1], a[2], false);
  };
  c["embedding"] = [](auto& a) { return hodu::embedding(a[0], a[1], 2); };
  c["gather"] = [](auto& a) { return a[0].gather(1, a[1]); };
  c["index_select"] = [](auto& a) { return a[0].index_select(0, a[1]); };
  c["where_cat_stack"] = [](auto& a) {
    return hodu::cat({hodu::where(a[0].gt(0.0), a[0], a[1]), hodu::stack({a[0], a[1]}, 0).sum({0})}, 1);
  };
  c["reshape_permute_slice"] = [](auto& a) {
    return a[0].permute({2, 0, 1}).reshape({4, 6}).index({hodu::Slice{1, hodu::kEnd}, hodu::Slice{0, hodu::kEnd, 2}}) * 2.0;
  };
  c["cross_entropy"] = [](auto& a) { return F::cross_entropy(a[0], a[1]); };
  c["cross_entropy_smooth"] = [](auto& a) { return F::cross_entropy(a[0], a[1], "mean", 0.1); };
  c["cross_entropy_weight"] = [](auto& a) {
    return F::cross_entropy(a[0], a[1], "mean", 0.2, -100, hodu::tensor(std::vector<float>{0.5, 1.0, 1.5, 2.0, 0.75}));
  };
  c["nll_sum"] = [](auto& a) { return F::nll_loss(hodu::log_softmax(a[0], 1), a[1], "sum"); };
  c["mse"] = [](auto& a) { return F::mse_loss(a[0], a[1]); };
  c["bce_with_logits"] = [](auto& a) {
    return F::binary_cross_entropy_with_logits(a[0], a[1], "mean", hodu::tensor(std::vector<float>{0.5, 1.0, 2.0}));
  };
  c["multihead_attention"] = [](auto& a) {
    // F.multi_head_attention_forward with the module's parameters as inputs.
    F::MultiheadAttention m(8, 2, 0.0, true, true);
    m.in_proj_weight = a[3];
    m.in_proj_bias = a[4];
    m.out_proj->weight = a[5];
    m.out_proj->bias = a[6];
    auto [out, w] = m.forward(a[0], a[1], a[2]);
    return out + w.sum();
  };
  c["multihead_attention_masked"] = [](auto& a) {
    F::MultiheadAttention m(8, 2, 0.0, true, true);
    m.in_proj_weight = a[1];
    m.in_proj_bias = a[2];
    m.out_proj->weight = a[3];
    m.out_proj->bias = a[4];
    const int64_t L = a[0].size(1);
    Tensor i = hodu::arange(static_cast<double>(L));
    Tensor causal = hodu::where(i.unsqueeze(0).gt(i.unsqueeze(1)), hodu::full({L, L}, -INFINITY), hodu::zeros({L, L}));
    Tensor padding = hodu::stack({hodu::zeros({L}), i.ge(static_cast<double>(L - 2)).to(hodu::kFloat32)}).gt(0.5);
    auto [out, w] = m.forward(a[0], a[0], a[0], causal, padding);
    return out + w.sum();
  };
  c["cross_entropy_ignore"] = [](auto& a) {
    return F::cross_entropy(a[0], a[1], "mean", 0.1, -100, hodu::tensor(std::vector<float>{0.5, 1.0, 1.5, 2.0, 0.75}));
  };
  c["cross_entropy_spatial"] = [](auto& a) { return F::cross_entropy(a[0], a[1]); };
  c["layer_norm_2d"] = [](auto& a) { return hodu::layer_norm(a[0], {3, 4}, a[1], a[2]); };
  c["max_pool2d_dilation"] = [](auto& a) { return hodu::max_pool2d(a[0], {2, 2}, {1, 1}, {1, 1}, {2, 2}); };
  c["conv2d_depthwise"] = [](auto& a) { return hodu::conv2d(a[0], a[1], Tensor(), {2, 2}, {2, 2}, {1, 1}, 4); };
  c["softmax_masked"] = [](auto& a) {
    Tensor mask = hodu::tensor(std::vector<float>{0, 1, 0, 1, 0, 0}).gt(0.5).unsqueeze(0).expand({3, 6});
    return hodu::softmax(a[0].masked_fill(mask, -INFINITY), 1);
  };
  c["unary_more"] = [](auto& a) {
    return a[0].log1p() + a[0].abs() * a[0].sin() + a[0].cos() + a[0].square() + (a[0] + 2.0).reciprocal() + a[0].erf();
  };
  c["prod_norm"] = [](auto& a) { return a[0].prod(1) * a[0].norm(); };
  c["matmul_transposed"] = [](auto& a) { return a[0].matmul(a[1].transpose(-1, -2)); };
  return c;
}

// The largest |got - want| / (atol + rtol |want|): below 1 is numpy's allclose.
double allclose_ratio(const Tensor& got, const Tensor& want, double rtol, double atol) {
  auto g = got.contiguous().to_vector<double>(), w = want.contiguous().to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]) / (atol + rtol * std::abs(w[i])));
  return worst;
}

TEST(TorchCheck, OpsAndGradients) {
  auto ref = hodu::data::load_npz(ref_dir() + "/ops.npz");
  auto all = cases();
  int checked = 0;
  for (auto& [name, fn] : all) {
    SCOPED_TRACE(name);
    std::vector<Tensor> ins;
    for (int i = 0; ref.count(name + ".in" + std::to_string(i)); ++i) {
      Tensor t = ref.at(name + ".in" + std::to_string(i)).clone();
      if (t.is_floating_point()) t.requires_grad_();
      ins.push_back(t);
    }
    ASSERT_FALSE(ins.empty()) << "no reference inputs for " << name;
    Tensor y = fn(ins);
    ASSERT_EQ(y.shape(), ref.at(name + ".y").shape());
    EXPECT_LT(allclose_ratio(y, ref.at(name + ".y"), 1e-4, 1e-5), 1.0) << name << ": output (rtol 1e-4, atol 1e-5)";
    std::vector<Tensor> floats;
    for (auto& t : ins)
      if (t.requires_grad()) floats.push_back(t);
    auto grads = hodu::autograd::grad({(y * ref.at(name + ".gy")).sum()}, floats, {}, false, false, true);
    for (size_t i = 0; i < floats.size(); ++i) {
      const Tensor& want = ref.at(name + ".g" + std::to_string(i));
      Tensor got = grads[i].defined() ? grads[i] : hodu::zeros_like(floats[i]);
      EXPECT_LT(allclose_ratio(got, want, 1e-4, 1e-5), 1.0) << name << ": gradient of input " << i << " (rtol 1e-4, atol 1e-5)";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 52);
}

// The two models of torch_reference.py.
struct Cnn : F::Module {
  std::shared_ptr<F::Conv2d> conv1, conv2;
  std::shared_ptr<F::BatchNorm2d> bn;
  std::shared_ptr<F::Linear> fc;
  Cnn() : Module("Cnn") {
    conv1 = register_module("conv1", std::make_shared<F::Conv2d>(1, 8, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    bn = register_module("bn", std::make_shared<F::BatchNorm2d>(8));
    conv2 = register_module("conv2", std::make_shared<F::Conv2d>(8, 16, hodu::Dims{3, 3}, hodu::Dims{1, 1}, hodu::Dims{1, 1}));
    fc = register_module("fc", std::make_shared<F::Linear>(16 * 4 * 4, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = hodu::max_pool2d(bn->forward(conv1->forward(x)).relu(), {2, 2});
    return fc->forward(conv2->forward(h).relu().flatten(1));
  }
};

struct Attn : F::Module {
  std::shared_ptr<F::Embedding> embed;
  std::shared_ptr<F::MultiheadAttention> attn;
  std::shared_ptr<F::LayerNorm> ln;
  std::shared_ptr<F::Linear> fc;
  Attn() : Module("Attn") {
    embed = register_module("embed", std::make_shared<F::Embedding>(12, 16));
    attn = register_module("attn", std::make_shared<F::MultiheadAttention>(16, 2, 0.0, true, true));
    ln = register_module("ln", std::make_shared<F::LayerNorm>(hodu::Dims{16}));
    fc = register_module("fc", std::make_shared<F::Linear>(16, 12));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = embed->forward(x);
    h = ln->forward(h + attn->forward(h, h, h, {}, {}, false).first);
    return fc->forward(hodu::gelu(h));
  }
};

void check_training(const std::string& model, const std::string& kind) {
  SCOPED_TRACE(model + " " + kind);
  auto ref = hodu::data::load_npz(ref_dir() + "/train_" + model + "_" + kind + ".npz");
  std::unique_ptr<F::Module> net;
  if (model == "cnn") net = std::make_unique<Cnn>();
  else net = std::make_unique<Attn>();
  F::NamedTensors init;
  for (auto& [k, v] : ref)
    if (k.rfind("init.", 0) == 0) init.emplace_back(k.substr(5), v);
  net->load_state_dict(init);
  std::unique_ptr<hodu::optim::Optimizer> opt;
  if (kind == "sgd") opt = std::make_unique<hodu::optim::SGD>(net->parameters(), hodu::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
  else if (kind == "nesterov") opt = std::make_unique<hodu::optim::SGD>(net->parameters(), hodu::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
  else if (kind == "adam") opt = std::make_unique<hodu::optim::Adam>(net->parameters(), hodu::optim::AdamOptions{.lr = 2e-3});
  else opt = std::make_unique<hodu::optim::AdamW>(net->parameters(), hodu::optim::AdamOptions{.lr = 2e-3, .weight_decay = 0.05});
  const auto want = ref.at("losses").to_vector<double>();
  ASSERT_EQ(want.size(), 100u);
  double worst = 0, last = 0, last_loss = 0;
  for (int step = 0; step < 100; ++step) {
    Tensor x = ref.at("x." + std::to_string(step)), y = ref.at("y." + std::to_string(step));
    opt->zero_grad();
    Tensor out = net->forward(x);
    Tensor loss = F::cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1}), "mean", 0.1);
    loss.backward();
    opt->step();
    last_loss = loss.item();
    const double rel = std::abs(last_loss - want[step]) / std::abs(want[step]);
    worst = std::max(worst, rel);
    last = rel;
  }
  std::printf("%-5s %-8s step 100 loss %.6f (torch %.6f): relative difference %.2e, worst over 100 steps %.2e\n",
              model.c_str(), kind.c_str(), last_loss, want.back(), last, worst);
  EXPECT_LT(last, 1e-4) << "relative loss difference after 100 steps";
  EXPECT_LT(worst, 1e-4) << "relative loss difference, worst step";
  // The parameters end where PyTorch's did. Not, under Adam, those whose gradient is zero in
  // exact arithmetic (a conv bias before BatchNorm, the key bias of attention: softmax ignores a
  // shift of all scores) and what depends on them: their gradients are rounding noise, which
  // Adam's normalization turns into full-size steps in both libraries, differently.
  const bool adam = kind == "adam" || kind == "adamw";
  for (auto& [name, t] : net->state_dict()) {
    if (adam && (name == "conv1.bias" || name == "bn.running_mean" || name == "attn.in_proj_bias")) continue;
    const Tensor& w = ref.at("final." + name);
    EXPECT_LT(allclose_ratio(t, w, 1e-3, 1e-5), 1.0) << "final " << name << " (rtol 1e-3, atol 1e-5)";
  }
}

TEST(TorchCheck, TrainingCnn) {
  for (const char* kind : {"sgd", "nesterov", "adam", "adamw"}) check_training("cnn", kind);
}

TEST(TorchCheck, TrainingAttention) {
  for (const char* kind : {"sgd", "nesterov", "adam", "adamw"}) check_training("attn", kind);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (ref_dir().empty()) {
    std::fprintf(stderr, "error: set HODU_TORCH_REF to the folder torch_reference.py wrote\n");
    return 2;
  }
  hodu::set_num_threads(1);
  return RUN_ALL_TESTS();
}
