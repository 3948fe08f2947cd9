// The tape's semantics, as PyTorch's: accumulation, retain_graph, no-grad
// mode, detach, leaves and in-place checks, retain_grad, autograd::grad,
// higher-order gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "frontend/test_util.h"
#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using hodu::test::error_of;
using hodu::test::expect_close;

TEST(Autograd, BackwardAndAccumulation) {
  Tensor x = hodu::tensor(std::vector<float>{1, 2, 3}).requires_grad_();
  Tensor y = (x * x).sum();
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn_name(), "SumBackward");
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  // Gradients accumulate until zeroed.
  (x * 3.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 7, 9}));
  x.grad().zero_();
  (x.sum() * 2.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  // A value used twice sums both paths.
  Tensor z = hodu::tensor(std::vector<float>{2}).requires_grad_();
  (z * z * z + z).sum().backward();
  EXPECT_EQ(z.grad().item(), 13.0);
}

// Where a derivative is undefined, the gradient PyTorch 1.13 gives (not a nan).
TEST(Autograd, GradientsAtKinks) {
  Tensor z = hodu::zeros({3}).requires_grad_();
  z.norm().backward();
  EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{0, 0, 0})) << "norm at 0";
  Tensor x = hodu::tensor(std::vector<float>{3, 4}).requires_grad_();
  x.norm().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0.6f, 0.8f}));
  Tensor a = hodu::zeros({2}).requires_grad_();
  (a.abs() + a.relu()).sum().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0, 0})) << "abs and relu at 0";
}

TEST(Autograd, RetainGraph) {
  Tensor x = hodu::tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor y = (x.exp() * x).sum();
  y.backward({}, true);
  auto first = x.grad().to_vector<float>();
  y.backward();  // the graph was kept
  auto second = x.grad().to_vector<float>();
  EXPECT_FLOAT_EQ(second[0], 2 * first[0]);
  EXPECT_NE(error_of([&] { y.backward(); }).find("backward through the graph a second time"), std::string::npos);
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = hodu::ones({2}).requires_grad_();
  {
    hodu::NoGradGuard guard;
    EXPECT_FALSE(hodu::is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    {
      hodu::EnableGradGuard on;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
  }
  EXPECT_TRUE(hodu::is_grad_enabled());
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_NE(error_of([&] { (d * 2.0).sum().backward(); }).find("does not require grad"), std::string::npos);
  // A detached branch stops the gradient.
  Tensor y = (x * x.detach()).sum();
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_NE(error_of([] { hodu::ones({2}, hodu::kInt64).requires_grad_(); }).find("floating-point"), std::string::npos);
  EXPECT_NE(error_of([&] { (x * 2.0).backward(); }).find("one-element output"), std::string::npos);
}

TEST(Autograd, InPlaceChecks) {
  Tensor leaf = hodu::ones({2}).requires_grad_();
  EXPECT_NE(error_of([&] { leaf.add_(1.0); }).find("leaf tensor that requires grad"), std::string::npos);
  {
    hodu::NoGradGuard guard;
    leaf.add_(1.0);  // allowed without grad mode (optimizer updates)
  }
  EXPECT_EQ(leaf.to_vector<float>(), (std::vector<float>{2, 2}));
  // A saved value changed in place makes its backward fail.
  Tensor x = hodu::ones({2}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = h.exp();  // saves its output
  Tensor out = y.sum();
  y.mul_(2.0);
  EXPECT_NE(error_of([&] { out.backward(); }).find("modified by an in-place operation"), std::string::npos);
  // In-place on a non-leaf rewrites its history.
  Tensor a = hodu::tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor b = a * 3.0;
  b.mul_(a);  // b = 3a * a
  b.add_(1.0);
  b.sum().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{6, 12}));
  Tensor c = a * 1.0;
  Tensor view = c.slice(0, 0, 1);
  EXPECT_NE(error_of([&] { view.mul_(2.0); }).find("view"), std::string::npos);
}

TEST(Autograd, RetainGradAndGradFunction) {
  Tensor x = hodu::tensor(std::vector<float>{1, 2, 3}).requires_grad_();
  Tensor h = x * 2.0;
  h.retain_grad();
  Tensor y = (h * h).sum();
  y.backward();
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{4, 8, 12}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{8, 16, 24}));
  // autograd::grad returns instead of accumulating.
  Tensor w = hodu::tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor v = hodu::tensor(std::vector<float>{3, 4}).requires_grad_();
  Tensor f = (w * v).sum();
  auto g = hodu::autograd::grad({f}, {w, v});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_FALSE(w.grad().defined());
  Tensor unused = hodu::ones({1}).requires_grad_();
  Tensor f2 = (w * 2.0).sum();
  EXPECT_NE(error_of([&] { hodu::autograd::grad({f2}, {unused}); }).find("allow_unused"), std::string::npos);
  Tensor f3 = (w * 2.0).sum();
  EXPECT_FALSE(hodu::autograd::grad({f3}, {unused}, {}, false, false, true)[0].defined());
  // A non-scalar output with its gradient.
  Tensor m = w * w;
  m.backward(hodu::tensor(std::vector<float>{1, 10}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 40}));
}

TEST(Autograd, HigherOrder) {
  Tensor x = hodu::tensor(std::vector<double>{2.0}).requires_grad_();
  Tensor y = x * x * x;  // y' = 3x^2 = 12, y'' = 6x = 12
  auto g = hodu::autograd::grad({y.sum()}, {x}, {}, true, true);
  EXPECT_DOUBLE_EQ(g[0].item(), 12.0);
  EXPECT_TRUE(g[0].requires_grad());
  auto gg = hodu::autograd::grad({g[0].sum()}, {x});
  EXPECT_DOUBLE_EQ(gg[0].item(), 12.0);
  // Through activations and softmax.
  Tensor z = hodu::tensor(std::vector<double>{0.3, -0.7}).requires_grad_();
  auto dz = hodu::autograd::grad({(z.tanh() * z.sigmoid()).sum()}, {z}, {}, true, true);
  auto ddz = hodu::autograd::grad({dz[0].sum()}, {z});
  // d²/dz² (tanh z · sigmoid z) by finite differences.
  auto first = [](double v) {
    const double t = std::tanh(v), s = 1 / (1 + std::exp(-v));
    return (1 - t * t) * s + t * s * (1 - s);
  };
  const auto d = ddz[0].to_vector<double>();
  EXPECT_NEAR(d[0], (first(0.3 + 1e-6) - first(0.3 - 1e-6)) / 2e-6, 1e-6);
  EXPECT_NEAR(d[1], (first(-0.7 + 1e-6) - first(-0.7 - 1e-6)) / 2e-6, 1e-6);
}

TEST(Autograd, GradientsKeepDtypes) {
  Tensor a = hodu::ones({2}, hodu::kFloat64).requires_grad_();
  Tensor b = hodu::ones({2}, hodu::kFloat32).requires_grad_();
  (a * b).sum().backward();
  EXPECT_EQ(a.grad().dtype(), hodu::kFloat64);
  EXPECT_EQ(b.grad().dtype(), hodu::kFloat32);
  Tensor h = hodu::ones({2}, hodu::kFloat16).requires_grad_();
  (h * h).sum().backward();
  EXPECT_EQ(h.grad().dtype(), hodu::kFloat16);
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{2, 2}));
}

}  // namespace
