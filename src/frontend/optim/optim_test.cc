// Optimizers against their formulas written out step by step, clipping,
// schedules, and state that resumes exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "frontend/test_util.h"
#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using hodu::test::error_of;
using hodu::test::expect_close;
namespace optim = hodu::optim;

// A quadratic with a known gradient: loss = sum(a * p^2) / 2, grad = a * p.
Tensor loss_of(const Tensor& p) { return (p * p * hodu::tensor(std::vector<double>{1, 2, 3})).sum() * 0.5; }

TEST(Optim, SgdMomentumNesterovDecay) {
  for (bool nesterov : {false, true}) {
    Tensor p = hodu::tensor(std::vector<double>{1, -2, 0.5}).requires_grad_();
    optim::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.nesterov = nesterov;
    optim::SGD opt({p}, o);
    std::vector<double> ref = {1, -2, 0.5}, buf(3, 0), a = {1, 2, 3};
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      loss_of(p).backward();
      opt.step();
      for (int i = 0; i < 3; ++i) {
        double d = a[i] * ref[i] + 0.01 * ref[i];
        buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
        d = nesterov ? d + 0.9 * buf[i] : buf[i];
        ref[i] -= 0.1 * d;
      }
      auto got = p.to_vector<double>();
      for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << "step " << step;
    }
  }
  Tensor p = hodu::ones({2}).requires_grad_();
  optim::SGDOptions bad;
  bad.nesterov = true;
  EXPECT_NE(error_of([&] { optim::SGD({p}, bad); }).find("Nesterov"), std::string::npos);
}

TEST(Optim, AdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      Tensor p = hodu::tensor(std::vector<double>{1, -2, 0.5}).requires_grad_();
      optim::AdamOptions o;
      o.lr = 0.05;
      o.weight_decay = 0.1;
      o.amsgrad = amsgrad;
      std::unique_ptr<optim::Optimizer> opt;
      if (decoupled) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o);
      else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
      std::vector<double> x = {1, -2, 0.5}, m(3, 0), v(3, 0), vmax(3, 0), a = {1, 2, 3};
      for (int t = 1; t <= 6; ++t) {
        opt->zero_grad();
        loss_of(p).backward();
        opt->step();
        for (int i = 0; i < 3; ++i) {
          double g = a[i] * x[i];
          if (decoupled) x[i] *= 1 - 0.05 * 0.1;
          else g += 0.1 * x[i];
          m[i] = 0.9 * m[i] + 0.1 * g;
          v[i] = 0.999 * v[i] + 0.001 * g * g;
          vmax[i] = std::max(vmax[i], v[i]);
          const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
          const double denom = std::sqrt(amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + 1e-8;
          x[i] -= 0.05 / bc1 * m[i] / denom;
        }
        auto got = p.to_vector<double>();
        for (int i = 0; i < 3; ++i)
          EXPECT_NEAR(got[i], x[i], 1e-12) << (decoupled ? "AdamW" : "Adam") << " amsgrad " << amsgrad << " t " << t;
      }
    }
  }
}

TEST(Optim, SkipsParametersWithoutGradients) {
  Tensor a = hodu::ones({2}).requires_grad_(), b = hodu::ones({2}).requires_grad_();
  optim::Adam opt({a, b});
  (a * 2.0).sum().backward();
  opt.step();
  EXPECT_NE(a.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(b.to_vector<float>()[0], 1.0f);
  EXPECT_NE(error_of([&] { optim::SGD({a * 2.0}); }).find("not a leaf"), std::string::npos);
}

TEST(Optim, Clipping) {
  Tensor a = hodu::ones({2}).requires_grad_(), b = hodu::ones({1}).requires_grad_();
  a.set_grad(hodu::tensor(std::vector<float>{3, 0}));
  b.set_grad(hodu::tensor(std::vector<float>{4}));
  const double norm = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(norm, 5.0, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(b.grad().item(), 4.0 / (5.0 + 1e-6), 1e-6);
  // Below the limit: unchanged.
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 10.0), 1.0, 1e-5);
  EXPECT_NEAR(b.grad().item(), 4.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 10.0, INFINITY), 0.8, 1e-5);
  b.set_grad(hodu::tensor(std::vector<float>{-7}));
  optim::clip_grad_value_({a, b}, 0.5);
  EXPECT_EQ(b.grad().item(), -0.5);
  b.set_grad(hodu::tensor(std::vector<float>{NAN}));
  EXPECT_NE(error_of([&] { optim::clip_grad_norm_({a, b}, 1.0, 2.0, true); }).find("nan"), std::string::npos);
}

TEST(Optim, Schedules) {
  Tensor p = hodu::ones({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 5; ++i) {
    step.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_EQ(lrs, (std::vector<double>{1, 0.5, 0.5, 0.25, 0.25}));
  optim::SGD opt2({p}, {.lr = 1.0});
  optim::CosineAnnealingLR cos(opt2, 4, 0.1);
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.1 + 0.9 * (1 + std::cos(M_PI / 4)) / 2, 1e-12);
  cos.set_step(4);
  EXPECT_NEAR(opt2.lr(), 0.1, 1e-12);
  optim::SGD opt3({p}, {.lr = 1.0});
  optim::LinearLR warm(opt3, 0.25, 1.0, 3);
  EXPECT_NEAR(opt3.lr(), 0.25, 1e-12);  // applied at construction, as PyTorch
  warm.step();
  EXPECT_NEAR(opt3.lr(), 0.5, 1e-12);
  warm.step();
  warm.step();
  warm.step();
  EXPECT_NEAR(opt3.lr(), 1.0, 1e-12);
  optim::SGD opt4({p}, {.lr = 2.0});
  optim::WarmupCosineLR wc(opt4, 1, 3);
  EXPECT_NEAR(opt4.lr(), 1.0, 1e-12);
  wc.step();
  EXPECT_NEAR(opt4.lr(), 2.0, 1e-12);
  wc.step();
  wc.step();
  EXPECT_NEAR(opt4.lr(), 0.0, 1e-12);
}

TEST(Optim, StateResumesExactly) {
  auto run = [](optim::Optimizer& opt, Tensor& p, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      (p * p * p).sum().backward();
      opt.step();
    }
  };
  for (int kind = 0; kind < 3; ++kind) {
    auto make = [&](Tensor p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
      if (kind == 1) return std::make_unique<optim::Adam>(std::vector<Tensor>{p});
      return std::make_unique<optim::AdamW>(std::vector<Tensor>{p});
    };
    Tensor p = hodu::tensor(std::vector<float>{0.3f, -0.2f, 0.1f}).requires_grad_();
    auto opt = make(p);
    run(*opt, p, 3);
    const std::string path = testing::TempDir() + "/frontend_opt.json";
    opt->save_state(path);
    Tensor q = p.detach().clone().requires_grad_();
    run(*opt, p, 4);
    auto q_opt = make(q);
    q_opt->load_state(path);
    run(*q_opt, q, 4);
    EXPECT_TRUE(hodu::equal(p, q)) << "optimizer " << kind;  // bit for bit
    std::remove(path.c_str());
    auto other = kind == 0 ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::Adam>(std::vector<Tensor>{q}))
                           : std::unique_ptr<optim::Optimizer>(std::make_unique<optim::SGD>(std::vector<Tensor>{q}));
    EXPECT_NE(error_of([&] { other->load_state_json(opt->state_json()); }).find("state of"), std::string::npos);
  }
}

// A hand-edited state (a key gone, a value of another type, no groups) is an error naming
// what is wrong, and the optimizer keeps the state it had.
TEST(Optim, BadStateIsAnErrorAndLosesNothing) {
  for (int kind = 0; kind < 2; ++kind) {
    Tensor p = hodu::tensor(std::vector<float>{0.3f, -0.2f, 0.1f}).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = 0.01});
    opt->zero_grad();
    (p * p).sum().backward();
    opt->step();
    const std::string good = opt->state_json();
    const std::string tensor_key = kind == 0 ? "\"momentum_buffer\"" : "\"exp_avg\"";
    const std::string option_key = kind == 0 ? "\"dampening\"" : "\"beta2\"";
    auto replaced = [&](const std::string& from, const std::string& to) {
      std::string s = good;
      const size_t at = s.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      return at == std::string::npos ? s : s.replace(at, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {replaced("\"lr\"", "\"lr_gone\""), "no 'lr'"},
        {replaced(option_key, "\"renamed\""), "no '" + option_key.substr(1, option_key.size() - 2) + "'"},
        {replaced(tensor_key, "\"renamed\""), "no '" + tensor_key.substr(1, tensor_key.size() - 2) + "'"},
        {replaced("\"maximize\": false", "\"maximize\": \"no\""), "'maximize' is a string"},
        {replaced("\"groups\"", "\"groups_gone\""), "0 groups for 1"},
    };
    for (const auto& [text, expect] : cases) {
      const std::string err = error_of([&] { opt->load_state_json(text); });
      EXPECT_NE(err.find(expect), std::string::npos) << "optimizer " << kind << ": " << err;
      EXPECT_EQ(opt->lr(), 0.01);
      EXPECT_EQ(opt->state_json(), good) << "a failed load changed the state";
    }
  }
}

}  // namespace
