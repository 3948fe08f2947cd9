// Every differentiable op against central finite differences in f64: the
// analytic vector-Jacobian product <v, J e_i> for a random v must match
// (f(x + h e_i) - f(x - h e_i)) / 2h · v for every input element.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradients of sum(f(inputs) * v) for each input that requires grad.
void gradcheck(const std::string& what, const Fn& f, std::vector<Tensor> inputs, double atol = 1e-7,
               double rtol = 1e-5) {
  SCOPED_TRACE(what);
  for (auto& x : inputs)
    if (x.is_floating_point()) x.requires_grad_();
  Tensor out = f(inputs);
  hodu::Generator gen(7);
  Tensor v = hodu::randn(out.shape(), &gen, hodu::kFloat64);
  std::vector<Tensor> need;
  for (auto& x : inputs)
    if (x.requires_grad()) need.push_back(x);
  auto grads = hodu::autograd::grad({(out * v).sum()}, need, {}, false, false, true);
  const double h = 1e-6;
  size_t gi = 0;
  for (auto& x : inputs) {
    if (!x.requires_grad()) continue;
    Tensor g = grads[gi++];
    std::vector<double> analytic = g.defined() ? g.contiguous().to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    Tensor base = x.detach().clone();
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto eval = [&](double delta) {
        hodu::NoGradGuard guard;
        Tensor xp = base.clone();
        double* p = xp.data<double>();
        p[i] += delta;
        std::vector<Tensor> args;
        for (auto& y : inputs) args.push_back(y.is_same(x) ? xp : y.detach());
        return (f(args) * v).sum().item();
      };
      const double numeric = (eval(h) - eval(-h)) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::abs(numeric))
          << what << ": input of shape " << hodu::Tensor(x).type_string() << ", element " << i;
    }
  }
}

Tensor r(std::vector<int64_t> shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  hodu::Generator g(seed);
  return hodu::rand(shape, &g, hodu::kFloat64) * (hi - lo) + lo;
}

TEST(GradCheck, Arithmetic) {
  gradcheck("add", [](auto& a) { return a[0] + a[1]; }, {r({2, 3}, 1), r({3}, 2)});
  gradcheck("sub", [](auto& a) { return a[0] - a[1]; }, {r({2, 1}, 1), r({1, 3}, 2)});
  gradcheck("mul", [](auto& a) { return a[0] * a[1]; }, {r({2, 3}, 1), r({2, 1}, 2)});
  gradcheck("div", [](auto& a) { return a[0] / a[1]; }, {r({2, 3}, 1), r({3}, 2, 0.5, 2.0)});
  gradcheck("pow", [](auto& a) { return hodu::pow(a[0], a[1]); }, {r({2, 3}, 1, 0.5, 2.0), r({2, 3}, 2)});
  gradcheck("pow scalar", [](auto& a) { return a[0].pow(3.0); }, {r({4}, 3)});
  gradcheck("scalar ops", [](auto& a) { return (2.0 - a[0]) * 3.0 / (a[0] + 4.0); }, {r({5}, 4)});
  gradcheck("add alpha", [](auto& a) { return hodu::add(a[0], a[1], 0.5); }, {r({3}, 1), r({3}, 2)});
  gradcheck("maximum", [](auto& a) { return hodu::maximum(a[0], a[1]); }, {r({2, 3}, 1), r({2, 3}, 2)});
  gradcheck("minimum", [](auto& a) { return hodu::minimum(a[0], a[1]); }, {r({2, 3}, 1), r({3}, 2)});
  // A generator seeded inside the function: the same mask in every evaluation.
  gradcheck("dropout", [](auto& a) {
    hodu::Generator g(5);
    return hodu::dropout(a[0], 0.3, true, &g);
  }, {r({12}, 1)});
  gradcheck("where", [](auto& a) { return hodu::where(a[0].gt(0.0), a[0], a[1]); }, {r({2, 3}, 1), r({3}, 2)});
  gradcheck("masked_fill", [](auto& a) { return a[0].masked_fill(a[0].lt(0.0), 2.0); }, {r({6}, 1)});
}

TEST(GradCheck, Unary) {
  gradcheck("neg", [](auto& a) { return -a[0]; }, {r({4}, 1)});
  gradcheck("abs", [](auto& a) { return a[0].abs(); }, {r({4}, 1)});
  gradcheck("exp", [](auto& a) { return a[0].exp(); }, {r({4}, 1)});
  gradcheck("log", [](auto& a) { return a[0].log(); }, {r({4}, 1, 0.5, 3.0)});
  gradcheck("log1p", [](auto& a) { return a[0].log1p(); }, {r({4}, 1, 0.0, 3.0)});
  gradcheck("sqrt", [](auto& a) { return a[0].sqrt(); }, {r({4}, 1, 0.5, 3.0)});
  gradcheck("rsqrt", [](auto& a) { return a[0].rsqrt(); }, {r({4}, 1, 0.5, 3.0)});
  gradcheck("square", [](auto& a) { return a[0].square(); }, {r({4}, 1)});
  gradcheck("reciprocal", [](auto& a) { return a[0].reciprocal(); }, {r({4}, 1, 0.5, 3.0)});
  gradcheck("sin", [](auto& a) { return a[0].sin(); }, {r({4}, 1)});
  gradcheck("cos", [](auto& a) { return a[0].cos(); }, {r({4}, 1)});
  gradcheck("tanh", [](auto& a) { return a[0].tanh(); }, {r({4}, 1)});
  gradcheck("sigmoid", [](auto& a) { return a[0].sigmoid(); }, {r({4}, 1)});
  gradcheck("relu", [](auto& a) { return a[0].relu(); }, {r({6}, 1)});
  gradcheck("erf", [](auto& a) { return a[0].erf(); }, {r({4}, 1)});
  gradcheck("clamp", [](auto& a) { return a[0].clamp(-0.5, 0.5); }, {r({8}, 1)});
  gradcheck("gelu", [](auto& a) { return hodu::gelu(a[0]); }, {r({5}, 1, -3, 3)});
  gradcheck("gelu tanh", [](auto& a) { return hodu::gelu(a[0], "tanh"); }, {r({5}, 1, -3, 3)});
  gradcheck("silu", [](auto& a) { return hodu::silu(a[0]); }, {r({5}, 1, -3, 3)});
  gradcheck("leaky_relu", [](auto& a) { return hodu::leaky_relu(a[0], 0.1); }, {r({6}, 1)});
  gradcheck("elu", [](auto& a) { return hodu::elu(a[0], 0.7); }, {r({6}, 1)});
  gradcheck("softplus", [](auto& a) { return hodu::softplus(a[0], 2.0, 1.5); }, {r({6}, 1, -2, 2)});
}

TEST(GradCheck, Reductions) {
  gradcheck("sum", [](auto& a) { return a[0].sum(); }, {r({2, 3}, 1)});
  gradcheck("sum dims", [](auto& a) { return a[0].sum({0, 2}, true); }, {r({2, 3, 4}, 1)});
  gradcheck("sum dim", [](auto& a) { return a[0].sum(-1) + a[0].mean(1); }, {r({2, 3}, 1)});
  gradcheck("mean", [](auto& a) { return a[0].mean({1}); }, {r({2, 3, 4}, 1)});
  gradcheck("amax", [](auto& a) { return a[0].amax({1}); }, {r({3, 4}, 1)});
  gradcheck("amin", [](auto& a) { return a[0].amin({0}, true); }, {r({3, 4}, 1)});
  gradcheck("max all", [](auto& a) { return a[0].max(); }, {r({3, 4}, 1)});
  gradcheck("max dim", [](auto& a) { return a[0].max(1).first; }, {r({3, 4}, 1)});
  gradcheck("min dim keepdim", [](auto& a) { return a[0].min(0, true).first; }, {r({3, 4}, 1)});
  gradcheck("prod", [](auto& a) { return a[0].prod(1); }, {r({3, 4}, 1)});
  gradcheck("var", [](auto& a) { return a[0].var({1}); }, {r({3, 4}, 1)});
  gradcheck("std", [](auto& a) { return a[0].std({0, 1}, false); }, {r({3, 4}, 1)});
  gradcheck("logsumexp", [](auto& a) { return a[0].logsumexp({1}); }, {r({3, 4}, 1)});
  gradcheck("norm", [](auto& a) { return a[0].norm(); }, {r({3, 4}, 1)});
  gradcheck("norm 1", [](auto& a) { return a[0].norm(1.0); }, {r({3, 4}, 1)});
}

TEST(GradCheck, Shapes) {
  gradcheck("reshape", [](auto& a) { return a[0].reshape({3, 2}) * a[0].reshape({3, 2}); }, {r({2, 3}, 1)});
  gradcheck("permute", [](auto& a) { return a[0].permute({2, 0, 1}).contiguous(); }, {r({2, 3, 4}, 1)});
  gradcheck("transpose matmul", [](auto& a) { return a[0].t().matmul(a[0]); }, {r({3, 2}, 1)});
  gradcheck("flatten/unflatten", [](auto& a) { return a[0].flatten(1).unflatten(1, {4, 3}); }, {r({2, 3, 4}, 1)});
  gradcheck("squeeze/unsqueeze", [](auto& a) { return a[0].unsqueeze(1).squeeze(); }, {r({1, 3}, 1)});
  gradcheck("expand", [](auto& a) { return a[0].expand({2, 3, 4}); }, {r({3, 1}, 1)});
  gradcheck("repeat", [](auto& a) { return a[0].repeat({2, 1, 3}); }, {r({2, 2}, 1)});
  gradcheck("slice", [](auto& a) { return a[0].slice(1, 1, 4, 2); }, {r({2, 5}, 1)});
  gradcheck("select", [](auto& a) { return a[0].select(0, -1); }, {r({3, 2}, 1)});
  gradcheck("narrow", [](auto& a) { return a[0].narrow(1, 1, 2); }, {r({2, 4}, 1)});
  gradcheck("index", [](auto& a) { return a[0].index({hodu::Slice{0, 2}, hodu::NewAxis, 1}); }, {r({3, 4}, 1)});
  gradcheck("split", [](auto& a) { auto p = a[0].split(2, 1); return p[0] * p[1]; }, {r({2, 4}, 1)});
  gradcheck("chunk", [](auto& a) { auto p = a[0].chunk(3, 0); return p[2] - p[0]; }, {r({3, 2}, 1)});
  gradcheck("flip", [](auto& a) { return a[0].flip({0, 1}); }, {r({2, 3}, 1)});
  gradcheck("cat", [](auto& a) { return hodu::cat({a[0], a[1], a[0]}, 1); }, {r({2, 1}, 1), r({2, 3}, 2)});
  gradcheck("stack", [](auto& a) { return hodu::stack({a[0], a[1]}, 1); }, {r({2, 3}, 1), r({2, 3}, 2)});
  gradcheck("clone", [](auto& a) { return a[0].clone(); }, {r({3}, 1)});
}

TEST(GradCheck, Indexing) {
  Tensor idx = hodu::tensor(std::vector<int64_t>{2, 0, 2, 1});
  gradcheck("index_select", [&](auto& a) { return a[0].index_select(1, idx); }, {r({2, 3}, 1)});
  Tensor gidx = hodu::tensor(std::vector<int64_t>{0, 2, 1, 1, 0, 0}, {2, 3});
  gradcheck("gather", [&](auto& a) { return a[0].gather(1, gidx); }, {r({2, 3}, 1)});
  gradcheck("scatter_add (via max dim)", [&](auto& a) { return a[0].max(0).first; }, {r({4, 2}, 1)});
  Tensor eidx = hodu::tensor(std::vector<int64_t>{1, 3, 1, 0}, {2, 2});
  gradcheck("embedding", [&](auto& a) { return hodu::embedding(a[0], eidx); }, {r({4, 3}, 1)});
  // The padding row gets no gradient (PyTorch's padding_idx) even where it is read: away from it
  // the gradient is exact, and at it zero.
  gradcheck("embedding padding", [&](auto& a) { return hodu::embedding(a[0], eidx, 2); }, {r({4, 3}, 1)});
  Tensor w = r({4, 3}, 2).requires_grad_();
  hodu::embedding(w, eidx, 1).sum().backward();
  EXPECT_EQ(w.grad().select(0, 1).abs().sum().item(), 0.0);
  EXPECT_EQ(w.grad().select(0, 3).sum().item(), 3.0);
}

TEST(GradCheck, LinearAlgebra) {
  gradcheck("matmul 2d", [](auto& a) { return hodu::matmul(a[0], a[1]); }, {r({2, 3}, 1), r({3, 4}, 2)});
  gradcheck("matmul batched broadcast", [](auto& a) { return hodu::matmul(a[0], a[1]); }, {r({2, 1, 2, 3}, 1), r({3, 3, 2}, 2)});
  gradcheck("matmul vector", [](auto& a) { return hodu::matmul(a[0], a[1]); }, {r({3}, 1), r({3, 2}, 2)});
  gradcheck("matmul dot", [](auto& a) { return hodu::matmul(a[0], a[1]); }, {r({3}, 1), r({3}, 2)});
  gradcheck("matmul 3d by 2d", [](auto& a) { return hodu::matmul(a[0], a[1]); }, {r({2, 2, 3}, 1), r({3, 2}, 2)});
  gradcheck("linear", [](auto& a) { return hodu::linear(a[0], a[1], a[2]); }, {r({2, 3}, 1), r({4, 3}, 2), r({4}, 3)});
  gradcheck("linear 3d no bias", [](auto& a) { return hodu::linear(a[0], a[1]); }, {r({2, 2, 3}, 1), r({4, 3}, 2)});
}

TEST(GradCheck, Convolution) {
  gradcheck("conv2d", [](auto& a) { return hodu::conv2d(a[0], a[1], a[2], {1, 1}, {1, 1}); },
            {r({2, 2, 4, 4}, 1), r({3, 2, 3, 3}, 2), r({3}, 3)});
  gradcheck("conv2d strided dilated", [](auto& a) { return hodu::conv2d(a[0], a[1], {}, {2, 1}, {1, 0}, {1, 2}); },
            {r({1, 2, 5, 5}, 1), r({2, 2, 2, 2}, 2)});
  gradcheck("conv2d groups", [](auto& a) { return hodu::conv2d(a[0], a[1], a[2], {1, 1}, {0, 0}, {1, 1}, 2); },
            {r({1, 4, 3, 3}, 1), r({4, 2, 2, 2}, 2), r({4}, 3)});
  gradcheck("conv1d", [](auto& a) { return hodu::conv1d(a[0], a[1], a[2], 2, 1); },
            {r({2, 2, 6}, 1), r({3, 2, 3}, 2), r({3}, 3)});
}

TEST(GradCheck, Pooling) {
  // Distinct values keep the max away from ties.
  Tensor x = hodu::randperm(2 * 2 * 5 * 5).to(hodu::kFloat64).reshape({2, 2, 5, 5}) * 0.1;
  gradcheck("max_pool2d", [](auto& a) { return hodu::max_pool2d(a[0], {2, 2}); }, {x});
  gradcheck("max_pool2d pad stride", [](auto& a) { return hodu::max_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
  gradcheck("max_pool2d ceil", [](auto& a) { return hodu::max_pool2d(a[0], {2, 2}, {2, 2}, {0, 0}, {1, 1}, true); }, {x});
  gradcheck("avg_pool2d", [](auto& a) { return hodu::avg_pool2d(a[0], {2, 2}); }, {r({1, 2, 4, 4}, 1)});
  gradcheck("avg_pool2d pad", [](auto& a) { return hodu::avg_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}, false, false); },
            {r({1, 1, 5, 5}, 1)});
  gradcheck("avg_pool2d ceil", [](auto& a) { return hodu::avg_pool2d(a[0], {2, 2}, {2, 2}, {1, 1}, true, true); },
            {r({1, 1, 5, 5}, 1)});
  gradcheck("max_pool1d", [](auto& a) { return hodu::max_pool1d(a[0], 2); }, {x.reshape({2, 10, 5})});
  gradcheck("avg_pool1d", [](auto& a) { return hodu::avg_pool1d(a[0], 3, 1, 1); }, {r({1, 2, 5}, 1)});
  gradcheck("adaptive_avg_pool2d", [](auto& a) { return hodu::adaptive_avg_pool2d(a[0], {1, 1}); }, {r({2, 3, 2, 2}, 1)});
}

TEST(GradCheck, Normalization) {
  gradcheck("softmax", [](auto& a) { return hodu::softmax(a[0], 1); }, {r({2, 4}, 1, -2, 2)});
  gradcheck("softmax dim 0", [](auto& a) { return hodu::softmax(a[0], 0); }, {r({3, 2}, 1, -2, 2)});
  gradcheck("log_softmax", [](auto& a) { return hodu::log_softmax(a[0], -1); }, {r({2, 4}, 1, -2, 2)});
  gradcheck("layer_norm", [](auto& a) { return hodu::layer_norm(a[0], {4}, a[1], a[2]); },
            {r({3, 4}, 1), r({4}, 2), r({4}, 3)});
  gradcheck("layer_norm 2 dims no affine", [](auto& a) { return hodu::layer_norm(a[0], {2, 3}); }, {r({2, 2, 3}, 1)});
  gradcheck("batch_norm training",
            [](auto& a) { return hodu::batch_norm(a[0], {}, {}, a[1], a[2], true); },
            {r({3, 2, 2, 2}, 1), r({2}, 2), r({2}, 3)});
  Tensor rm = r({2}, 4), rv = r({2}, 5, 0.5, 2.0);
  gradcheck("batch_norm eval", [&](auto& a) { return hodu::batch_norm(a[0], rm, rv, a[1], a[2], false); },
            {r({3, 2, 2, 2}, 1), r({2}, 2), r({2}, 3)});
}

TEST(GradCheck, Losses) {
  Tensor target = hodu::tensor(std::vector<int64_t>{2, 0, 1});
  gradcheck("cross_entropy", [&](auto& a) { return hodu::nn::cross_entropy(a[0], target); }, {r({3, 4}, 1)});
  gradcheck("cross_entropy smoothing",
            [&](auto& a) { return hodu::nn::cross_entropy(a[0], target, "mean", 0.1); }, {r({3, 4}, 1)});
  Tensor ignore = hodu::tensor(std::vector<int64_t>{2, -100, 1});
  gradcheck("cross_entropy ignore sum",
            [&](auto& a) { return hodu::nn::cross_entropy(a[0], ignore, "sum", 0.2); }, {r({3, 4}, 1)});
  gradcheck("cross_entropy weights", [&](auto& a) { return hodu::nn::cross_entropy(a[0], target, "mean", 0.1, -100, a[1]); },
            {r({3, 4}, 1), r({4}, 2, 0.5, 1.5)});
  Tensor probs = r({3, 4}, 2).softmax(1);
  gradcheck("cross_entropy probabilities",
            [&](auto& a) { return hodu::nn::cross_entropy(a[0], probs, "mean", 0.1); }, {r({3, 4}, 1)});
  gradcheck("mse", [](auto& a) { return hodu::nn::mse_loss(a[0], a[1]); }, {r({3, 2}, 1), r({3, 2}, 2)});
  gradcheck("l1", [](auto& a) { return hodu::nn::l1_loss(a[0], a[1], "sum"); }, {r({3, 2}, 1), r({3, 2}, 2)});
  Tensor t01 = hodu::tensor(std::vector<double>{0, 1, 1, 0, 0.5, 1}, {3, 2});
  gradcheck("bce_with_logits", [&](auto& a) { return hodu::nn::binary_cross_entropy_with_logits(a[0], t01); },
            {r({3, 2}, 1, -3, 3)});
  gradcheck("bce_with_logits pos_weight",
            [&](auto& a) { return hodu::nn::binary_cross_entropy_with_logits(a[0], t01, "none", a[1]); },
            {r({3, 2}, 1, -3, 3), r({2}, 2, 0.5, 2)});
}

// Gradients of a module's output with respect to its own parameters, each parameter
// element perturbed in place.
void gradcheck_module(const std::string& what, hodu::nn::Module& m, const std::function<Tensor()>& f) {
  SCOPED_TRACE(what);
  Tensor out = f();
  hodu::Generator gen(11);
  Tensor v = hodu::randn(out.shape(), &gen, hodu::kFloat64);
  auto params = m.parameters();
  auto grads = hodu::autograd::grad({(out * v).sum()}, params, {}, false, false, true);
  const double h = 1e-6;
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor p = params[k];
    std::vector<double> analytic =
        grads[k].defined() ? grads[k].contiguous().to_vector<double>() : std::vector<double>(p.numel(), 0.0);
    double* data = p.data<double>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      auto eval = [&](double delta) {
        hodu::NoGradGuard guard;
        const double keep = data[i];
        data[i] = keep + delta;
        double r = (f() * v).sum().item();
        data[i] = keep;
        return r;
      };
      const double numeric = (eval(h) - eval(-h)) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << what << ": parameter " << m.named_parameters()[k].first << " element " << i;
    }
  }
}

TEST(GradCheck, Modules) {
  hodu::manual_seed(3);
  {
    hodu::nn::Linear m(3, 2);
    m.to(hodu::kFloat64);
    Tensor x = r({4, 3}, 1);
    gradcheck_module("Linear", m, [&] { return m(x); });
  }
  {
    hodu::nn::Conv2d m(2, 3, {3, 3}, {1, 1}, {1, 1});
    m.to(hodu::kFloat64);
    Tensor x = r({2, 2, 3, 3}, 1);
    gradcheck_module("Conv2d", m, [&] { return m(x); });
  }
  {
    hodu::nn::BatchNorm2d m(2);
    m.to(hodu::kFloat64);
    Tensor x = r({3, 2, 2, 2}, 1);
    hodu::Tensor w = m.weight;
    {
      hodu::NoGradGuard guard;
      w.copy_(r({2}, 5, 0.5, 1.5));
    }
    gradcheck_module("BatchNorm2d", m, [&] { return m(x); });
  }
  {
    hodu::nn::LayerNorm m({4});
    m.to(hodu::kFloat64);
    Tensor x = r({3, 4}, 1);
    gradcheck_module("LayerNorm", m, [&] { return m(x); });
  }
  {
    hodu::nn::Embedding m(5, 3, 0);
    m.to(hodu::kFloat64);
    Tensor idx = hodu::tensor(std::vector<int64_t>{1, 4, 2, 4});  // padding row 0 unread
    gradcheck_module("Embedding", m, [&] { return m(idx); });
  }
  {
    hodu::nn::MultiheadAttention m(4, 2, 0.0, true, true);
    m.to(hodu::kFloat64);
    Tensor q = r({2, 2, 4}, 1), kv = r({2, 3, 4}, 2);
    Tensor mask = hodu::tensor(std::vector<double>{0, -1e9, 0, 0, 0, 0}, {2, 3});
    Tensor kpm = hodu::tensor(std::vector<int64_t>{0, 0, 1, 0, 0, 0}, {2, 3}).to(hodu::kBool);
    gradcheck_module("MultiheadAttention", m, [&] { return m.forward(q, kv, kv, mask, kpm).first; });
    gradcheck("MultiheadAttention inputs", [&](auto& a) { return m.forward(a[0], a[1], a[1], mask, kpm, true).first; },
              {q, kv});
    gradcheck("MultiheadAttention weights", [&](auto& a) { return m.forward(a[0], a[1], a[1]).second; }, {q, kv});
  }
}

}  // namespace
