// Eager tensors: creation, dtypes and promotion, broadcasting, views, shape
// ops, reductions, and the oneDNN kernels against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <dlpack/dlpack.h>

#include "frontend/test_util.h"
#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using hodu::test::error_of;
using hodu::test::expect_close;

std::vector<float> F(const Tensor& t) { return t.contiguous().to_vector<float>(); }

TEST(Tensor, Creation) {
  Tensor z = hodu::zeros({2, 3});
  EXPECT_EQ(z.dtype(), hodu::kFloat32);
  EXPECT_EQ(z.shape(), (hodu::Dims{2, 3}));
  EXPECT_EQ(z.sum().item(), 0.0);
  EXPECT_EQ(hodu::ones({4}, hodu::kInt32).sum().item(), 4.0);
  EXPECT_EQ(hodu::full({2}, 2.5, hodu::kFloat64).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(hodu::arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(hodu::arange(1, 2, 0.25, hodu::kFloat32).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  auto ls = hodu::linspace(0, 1, 5).to_vector<float>();
  EXPECT_EQ(ls, (std::vector<float>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(hodu::eye(3).sum().item(), 3.0);
  EXPECT_EQ(hodu::tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2}).shape(), (hodu::Dims{2, 2}));
  EXPECT_NE(error_of([] { hodu::tensor(std::vector<float>{1, 2, 3}, {2, 2}); }).find("3 values for shape [2, 2]"),
            std::string::npos);
  EXPECT_NE(error_of([] { hodu::zeros({2, -1}); }).find("negative"), std::string::npos);
}

TEST(Tensor, SeededRandomness) {
  hodu::Generator a(42), b(42), c(43);
  auto x = hodu::randn({100}, &a).to_vector<float>();
  EXPECT_EQ(x, hodu::randn({100}, &b).to_vector<float>());
  EXPECT_NE(x, hodu::randn({100}, &c).to_vector<float>());
  hodu::manual_seed(5);
  auto u = hodu::rand({1000}).to_vector<float>();
  hodu::manual_seed(5);
  EXPECT_EQ(u, hodu::rand({1000}).to_vector<float>());
  double mean = 0;
  for (float v : u) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
    mean += v;
  }
  EXPECT_NEAR(mean / u.size(), 0.5, 0.05);
  hodu::Generator g(1);
  Tensor n = hodu::randn({20000}, &g, hodu::kFloat64);
  EXPECT_NEAR(n.mean().item(), 0.0, 0.03);
  EXPECT_NEAR(n.std({0}).item(), 1.0, 0.03);
  auto perm = hodu::randperm(50, &g).to_vector<int64_t>();
  std::sort(perm.begin(), perm.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(perm[i], i);
  Tensor ri = hodu::randint(3, 7, {1000}, &g);
  EXPECT_GE(ri.min().item(), 3);
  EXPECT_LE(ri.max().item(), 6);
  // A generator's state restores its stream.
  hodu::Generator s(9);
  hodu::rand({3}, &s);
  std::string state = s.state();
  auto next = hodu::rand({5}, &s).to_vector<float>();
  s.set_state(state);
  EXPECT_EQ(next, hodu::rand({5}, &s).to_vector<float>());
}

TEST(Tensor, BroadcastingAndPromotion) {
  Tensor a = hodu::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = hodu::tensor(std::vector<float>{10, 20, 30});
  EXPECT_EQ(F(a + b), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor col = hodu::tensor(std::vector<float>{1, 2}, {2, 1});
  EXPECT_EQ(F(a * col), (std::vector<float>{1, 2, 3, 8, 10, 12}));
  EXPECT_EQ(F(1.0 - a), (std::vector<float>{0, -1, -2, -3, -4, -5}));
  EXPECT_EQ(F(a / 2.0), (std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_NE(error_of([&] { a + hodu::zeros({2}); }).find("do not broadcast"), std::string::npos);
  // Promotion as PyTorch: int + float -> float; int / int -> float; f32 with an f64 0-dim stays f32.
  Tensor i = hodu::tensor(std::vector<int64_t>{1, 2, 3});
  EXPECT_EQ((i + 0.5).dtype(), hodu::kFloat32);
  EXPECT_EQ((i + 1.0).dtype(), hodu::kInt64);
  EXPECT_EQ((i / i).dtype(), hodu::kFloat32);
  EXPECT_EQ((b * hodu::scalar_tensor(2.0, hodu::kFloat64)).dtype(), hodu::kFloat32);
  EXPECT_EQ((b * hodu::ones({3}, hodu::kFloat64)).dtype(), hodu::kFloat64);
  EXPECT_EQ(hodu::result_type(hodu::ones({2}, hodu::kUInt8), hodu::ones({2}, hodu::kInt8)), hodu::kInt16);
  EXPECT_EQ((hodu::ones({2}, hodu::kFloat16) + hodu::ones({2}, hodu::kBFloat16)).dtype(), hodu::kFloat32);
  // f16 / bf16 compute in f32 and round back.
  Tensor h = hodu::tensor(std::vector<float>{1.5, -2.25}).to(hodu::kFloat16);
  EXPECT_EQ((h * h).dtype(), hodu::kFloat16);
  EXPECT_EQ(F(h * h), (std::vector<float>{2.25, 5.0625}));
  Tensor bf = hodu::tensor(std::vector<float>{3.0}).to(hodu::kBFloat16);
  EXPECT_EQ(F(bf.exp()), (std::vector<float>{20.125f}));  // e^3 = 20.09 rounds to 20.125 in bf16
  // Integer ops.
  EXPECT_EQ((i * 3.0).to_vector<int64_t>(), (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(i.pow(2.0).to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 9}));
  EXPECT_EQ(hodu::maximum(i, hodu::full({1}, 2, hodu::kInt64)).to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 3}));
}

TEST(Tensor, Comparisons) {
  Tensor a = hodu::tensor(std::vector<float>{1, 2, 3});
  EXPECT_EQ(a.gt(1.5).dtype(), hodu::kBool);
  EXPECT_EQ(a.gt(1.5).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(a.le(2.0).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(a.ne(2.0).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(a.eq(hodu::tensor(std::vector<float>{1, 0, 3})).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(F(hodu::where(a.lt(2.5), a, -a)), (std::vector<float>{1, 2, -3}));
  EXPECT_EQ(F(a.masked_fill(a.eq(2.0), 9.0)), (std::vector<float>{1, 9, 3}));
  EXPECT_EQ(hodu::logical_and(a.gt(1.0), a.lt(3.0)).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(a.gt(1.0).logical_not().to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_TRUE(a.gt(0.0).all().item());
  EXPECT_FALSE(a.gt(2.0).all().item());
  EXPECT_TRUE(hodu::allclose(a, a + 1e-7));
  EXPECT_FALSE(hodu::allclose(a, a + 1e-3));
  EXPECT_TRUE(hodu::equal(a, a.clone()));
  EXPECT_NE(error_of([&] { hodu::where(a, a, a); }).find("not bool"), std::string::npos);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor a = hodu::arange(0, 12, 1, hodu::kFloat32).reshape({3, 4});
  Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.shape(), (hodu::Dims{4, 3}));
  Tensor row = a.select(0, 1);
  Tensor col = a.slice(1, 1, 3);
  {
    hodu::NoGradGuard g;
    row.fill_(-1);
  }
  EXPECT_EQ(F(a.select(0, 1)), (std::vector<float>{-1, -1, -1, -1}));
  EXPECT_EQ(F(col), (std::vector<float>{1, 2, -1, -1, 9, 10}));
  EXPECT_EQ(F(t.select(0, 0)), (std::vector<float>{0, -1, 8}));
  // A view that cannot be a view is refused by view() and copied by reshape().
  EXPECT_NE(error_of([&] { t.view({12}); }).find("cannot be viewed"), std::string::npos);
  EXPECT_EQ(F(t.reshape({12}))[1], -1.0f);
  EXPECT_EQ(a.version(), row.version());
  // Indexing.
  EXPECT_EQ(F(a.index({hodu::Slice{1, hodu::kEnd}, -1})), (std::vector<float>{-1, 11}));
  EXPECT_EQ(a.index({hodu::Ellipsis, hodu::NewAxis}).shape(), (hodu::Dims{3, 4, 1}));
  EXPECT_EQ(F(a[2]), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_EQ(F(a.slice(0, -2)), F(a.narrow(0, 1, 2)));
  EXPECT_NE(error_of([&] { a.select(1, 4); }).find("out of range"), std::string::npos);
}

TEST(Tensor, ShapeOps) {
  Tensor a = hodu::arange(0, 6, 1, hodu::kFloat32).reshape({2, 3});
  EXPECT_EQ(a.reshape({-1}).shape(), (hodu::Dims{6}));
  EXPECT_NE(error_of([&] { a.reshape({4, -1}); }).find("invalid for an input of shape [2, 3]"), std::string::npos);
  EXPECT_EQ(a.unsqueeze(0).unsqueeze(-1).shape(), (hodu::Dims{1, 2, 3, 1}));
  EXPECT_EQ(a.unsqueeze(0).squeeze().shape(), (hodu::Dims{2, 3}));
  EXPECT_EQ(F(a.permute({1, 0})), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(F(a.flip({1})), (std::vector<float>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(F(a.repeat({1, 2})), (std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(F(hodu::cat({a, a}, 0)).size(), 12u);
  EXPECT_EQ(hodu::cat({a, a}, 1).shape(), (hodu::Dims{2, 6}));
  EXPECT_EQ(hodu::stack({a, a}, 1).shape(), (hodu::Dims{2, 2, 3}));
  EXPECT_EQ(F(hodu::stack({a, a}, 2).select(2, 1)), F(a));
  auto parts = a.split(2, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].shape(), (hodu::Dims{2, 1}));
  EXPECT_EQ(a.chunk(3, 1).size(), 3u);
  EXPECT_EQ(F(a.expand({2, 2, 3}).select(0, 1)), F(a));
  EXPECT_NE(error_of([&] { hodu::cat({a, hodu::zeros({3, 3})}, 1); }).find("may differ only in dim 1"),
            std::string::npos);
  EXPECT_EQ(a.flatten().shape(), (hodu::Dims{6}));
  EXPECT_EQ(a.unflatten(1, {3, 1}).shape(), (hodu::Dims{2, 3, 1}));
}

TEST(Tensor, Reductions) {
  Tensor a = hodu::tensor(std::vector<float>{1, 5, 3, 4, 2, 6}, {2, 3});
  EXPECT_EQ(a.sum().item(), 21);
  EXPECT_EQ(F(a.sum({0})), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(F(a.sum({1}, true)), (std::vector<float>{9, 12}));
  EXPECT_EQ(a.sum({1}, true).shape(), (hodu::Dims{2, 1}));
  EXPECT_EQ(F(a.mean({-1})), (std::vector<float>{3, 4}));
  EXPECT_EQ(F(a.amax({1})), (std::vector<float>{5, 6}));
  EXPECT_EQ(a.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.argmin(0).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  auto [v, i] = a.max(0);
  EXPECT_EQ(F(v), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(F(a.prod(1)), (std::vector<float>{15, 48}));
  EXPECT_NEAR(a.var({1}).to_vector<float>()[0], 4.0, 1e-6);
  EXPECT_NEAR(a.std({0, 1}, false).item(), std::sqrt(35.0 / 12.0), 1e-6);
  EXPECT_NEAR(a.logsumexp({1}).to_vector<float>()[1], std::log(std::exp(4.0) + std::exp(2.0) + std::exp(6.0)), 1e-5);
  EXPECT_NEAR(a.norm().item(), std::sqrt(91.0), 1e-5);
  EXPECT_EQ(hodu::tensor(std::vector<int32_t>{1, 2}).sum().dtype(), hodu::kInt64);
  // Large reductions over leading, trailing and middle dims agree with f64.
  hodu::Generator g(3);
  Tensor big = hodu::randn({64, 33, 50}, &g);
  Tensor big64 = big.to(hodu::kFloat64);
  for (const auto& dims : std::vector<hodu::Dims>{{0}, {2}, {1}, {0, 2}, {0, 1, 2}})
    expect_close(big.sum(dims), big64.sum(dims).to(hodu::kFloat32), 1e-4, "sum");
  EXPECT_NE(error_of([&] { a.sum({2}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { a.sum({1, -1}); }).find("appears twice"), std::string::npos);
}

TEST(Tensor, MatmulOnOneDnnMatchesLoops) {
  hodu::Generator g(4);
  for (auto [as, bs] : std::vector<std::pair<hodu::Dims, hodu::Dims>>{{{7, 5}, {5, 9}},
                                                                      {{3, 7, 5}, {5, 9}},
                                                                      {{2, 1, 4, 6}, {3, 6, 2}},
                                                                      {{5}, {5, 3}},
                                                                      {{4, 5}, {5}},
                                                                      {{64, 130}, {130, 70}}}) {
    Tensor a = hodu::randn(as, &g), b = hodu::randn(bs, &g);
    expect_close(hodu::matmul(a, b), hodu::matmul(a.to(hodu::kFloat64), b.to(hodu::kFloat64)).to(hodu::kFloat32), 1e-4,
                 "matmul " + a.type_string() + " x " + b.type_string());
  }
  // Transposed views are read in place.
  Tensor a = hodu::randn({6, 4}, &g), b = hodu::randn({5, 6}, &g);
  expect_close(a.t().matmul(b.t()), a.t().contiguous().matmul(b.t().contiguous()), 1e-5, "transposed");
  EXPECT_NE(error_of([&] { hodu::matmul(a, a); }).find("do not multiply"), std::string::npos);
  // Integers.
  Tensor ia = hodu::tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(hodu::matmul(ia, ia).to_vector<int64_t>(), (std::vector<int64_t>{7, 10, 15, 22}));
  // linear = x Wᵀ + b
  Tensor x = hodu::randn({3, 4}, &g), w = hodu::randn({5, 4}, &g), bias = hodu::randn({5}, &g);
  expect_close(hodu::linear(x, w, bias), x.matmul(w.t()) + bias, 1e-5, "linear");
}

TEST(Tensor, ConvolutionOnOneDnnMatchesLoops) {
  hodu::Generator g(5);
  struct Case {
    hodu::Dims x, w, stride, pad, dil;
    int64_t groups;
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                                         {{1, 4, 9, 7}, {6, 2, 3, 2}, {2, 1}, {0, 1}, {1, 2}, 2},
                                         {{3, 1, 8, 8}, {16, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}}) {
    Tensor x = hodu::randn(c.x, &g).requires_grad_(), w = hodu::randn(c.w, &g).requires_grad_(),
           b = hodu::randn({c.w[0]}, &g).requires_grad_();
    Tensor y = hodu::conv2d(x, w, b, c.stride, c.pad, c.dil, c.groups);
    Tensor x64 = x.detach().to(hodu::kFloat64).requires_grad_(), w64 = w.detach().to(hodu::kFloat64).requires_grad_(),
           b64 = b.detach().to(hodu::kFloat64).requires_grad_();
    Tensor y64 = hodu::conv2d(x64, w64, b64, c.stride, c.pad, c.dil, c.groups);
    expect_close(y, y64.to(hodu::kFloat32), 1e-4, "conv2d forward");
    Tensor gy = hodu::randn(y.shape(), &g);
    (y * gy).sum().backward();
    (y64 * gy.to(hodu::kFloat64)).sum().backward();
    expect_close(x.grad(), x64.grad().to(hodu::kFloat32), 1e-4, "conv2d dx");
    expect_close(w.grad(), w64.grad().to(hodu::kFloat32), 1e-4, "conv2d dw");
    expect_close(b.grad(), b64.grad().to(hodu::kFloat32), 1e-4, "conv2d db");
  }
  EXPECT_NE(error_of([] { hodu::conv2d(hodu::zeros({1, 3, 4, 4}), hodu::zeros({2, 2, 3, 3})); }).find("3 channels"),
            std::string::npos);
}

TEST(Tensor, PoolingOnOneDnnMatchesLoops) {
  hodu::Generator g(6);
  Tensor x = hodu::randn({2, 3, 7, 6}, &g).requires_grad_();
  Tensor x64 = x.detach().to(hodu::kFloat64).requires_grad_();
  for (bool ceil : {false, true}) {
    Tensor y = hodu::max_pool2d(x, {3, 2}, {2, 2}, {1, 0}, {1, 1}, ceil);
    Tensor y64 = hodu::max_pool2d(x64, {3, 2}, {2, 2}, {1, 0}, {1, 1}, ceil);
    expect_close(y, y64.to(hodu::kFloat32), 1e-6, "max_pool2d");
    Tensor a = hodu::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, ceil, !ceil);
    Tensor a64 = hodu::avg_pool2d(x64, {3, 3}, {2, 2}, {1, 1}, ceil, !ceil);
    expect_close(a, a64.to(hodu::kFloat32), 1e-5, "avg_pool2d");
    Tensor gy = hodu::randn(y.shape(), &g), ga = hodu::randn(a.shape(), &g);
    ((y * gy).sum() + (a * ga).sum()).backward();
    ((y64 * gy.to(hodu::kFloat64)).sum() + (a64 * ga.to(hodu::kFloat64)).sum()).backward();
    expect_close(x.grad(), x64.grad().to(hodu::kFloat32), 1e-5, "pool backward");
    x.set_grad({});
    x64.set_grad({});
  }
  // PyTorch's output sizes.
  EXPECT_EQ(hodu::max_pool2d(hodu::zeros({1, 1, 5, 5}), {2, 2}, {2, 2}, {0, 0}, {1, 1}, true).shape(),
            (hodu::Dims{1, 1, 3, 3}));
  EXPECT_EQ(hodu::max_pool2d(hodu::zeros({1, 1, 5, 5}), {2, 2}).shape(), (hodu::Dims{1, 1, 2, 2}));
  EXPECT_NE(error_of([] { hodu::max_pool2d(hodu::zeros({1, 1, 4, 4}), {2, 2}, {2, 2}, {2, 2}); }).find("half"),
            std::string::npos);
}

// f32 exp and the functions built on it reach the whole f32 range as PyTorch's (the engine's
// fast exp alone clamps its argument to [-87, 88]).
TEST(Tensor, ExpOverTheWholeRange) {
  const float inf = INFINITY;
  const std::vector<float> xs = {-inf, -200.0f, -100.0f, -88.0f, -87.5f, -20.0f, 0.0f, 20.0f, 88.5f, 89.0f, inf};
  const Tensor x = hodu::tensor(xs);
  const std::vector<float> e = F(x.exp()), s = F(x.sigmoid()), sp = F(hodu::softplus(x));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = std::exp(xs[i]);
    if (std::isinf(want) || want == 0.0f) EXPECT_EQ(e[i], want) << "exp(" << xs[i] << ")";
    else EXPECT_NEAR(e[i], want, 3e-7 * want + 3e-45) << "exp(" << xs[i] << ")";
    EXPECT_NEAR(s[i], 1 / (1 + std::exp(-static_cast<double>(xs[i]))), 1e-7) << "sigmoid(" << xs[i] << ")";
  }
  EXPECT_EQ(sp[0], 0.0f) << "softplus(-inf)";
  EXPECT_NEAR(e[2], 3.7835e-44f, 1e-46) << "a subnormal result";
  EXPECT_TRUE(std::isnan(F(hodu::tensor({NAN}).exp())[0]));
  const Tensor neg_inf = hodu::full({2, 2}, -inf);
  EXPECT_EQ(F(neg_inf.logsumexp({1}))[0], -inf) << "logsumexp of -inf";
}

TEST(Tensor, Softmax) {
  Tensor x = hodu::tensor(std::vector<float>{1, 2, 3, 1, 1, 1}, {2, 3});
  auto s = F(hodu::softmax(x, 1));
  const double e = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(s[2], std::exp(3.0) / e, 1e-6);
  EXPECT_NEAR(s[4], 1.0 / 3, 1e-6);
  auto ls = F(hodu::log_softmax(x, 1));
  EXPECT_NEAR(ls[0], 1.0 - std::log(e), 1e-5);
  expect_close(hodu::softmax(x, 0), hodu::softmax(x.t(), 1).t(), 1e-6, "softmax dim 0");
}

TEST(Tensor, ElementAccessAndIo) {
  Tensor a = hodu::tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(a.data<float>()[3], 4.0f);
  EXPECT_NE(error_of([&] { a.data<double>(); }).find("8-byte element type"), std::string::npos);
  EXPECT_NE(error_of([&] { a.t().data<float>(); }).find("not contiguous"), std::string::npos);
  EXPECT_NE(error_of([&] { a.item(); }).find("4 elements"), std::string::npos);
  // from_blob does not copy.
  float buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor b = hodu::from_blob(buf, {2, 3});
  buf[0] = 10;
  EXPECT_EQ(b.sum().item(), 30);
  Tensor bt = hodu::from_blob(buf, {3, 2}, hodu::kFloat32, {1, 3});
  EXPECT_EQ(F(bt), (std::vector<float>{10, 4, 2, 5, 3, 6}));
  // DLPack out and back.
  DLManagedTensor* m = hodu::to_dlpack(a);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  Tensor back = hodu::from_dlpack(m);
  EXPECT_EQ(F(back), F(a));
  // .npy
  const std::string path = testing::TempDir() + "/frontend_tensor.npy";
  hodu::save_npy(path, a.t());
  EXPECT_EQ(F(hodu::load_npy(path)), F(a.t()));
  std::remove(path.c_str());
  EXPECT_NE(a.to_string().find("[[1, 2], [3, 4]]"), std::string::npos);
}

TEST(Tensor, InPlace) {
  Tensor a = hodu::ones({3});
  const uint64_t v0 = a.version();
  a.add_(hodu::full({3}, 2.0)).mul_(2.0);
  EXPECT_EQ(F(a), (std::vector<float>{6, 6, 6}));
  EXPECT_GT(a.version(), v0);
  a += 1.0;
  a.clamp_(0, 6.5);
  EXPECT_EQ(F(a), (std::vector<float>{6.5, 6.5, 6.5}));
  Tensor i = hodu::ones({2}, hodu::kInt64);
  EXPECT_NE(error_of([&] { i.add_(0.5); }).find("cannot be written into a i64"), std::string::npos);
  Tensor f = hodu::zeros({2, 2});
  f.copy_(hodu::tensor(std::vector<float>{1, 2}));
  EXPECT_EQ(F(f), (std::vector<float>{1, 2, 1, 2}));
}

TEST(Tensor, Threads) {
  const int before = hodu::get_num_threads();
  hodu::set_num_threads(1);
  hodu::Generator g(1);
  Tensor x = hodu::randn({300, 300}, &g);
  Tensor one = (x * x + 1.0).sum({1});
  hodu::set_num_threads(2);
  Tensor two = (x * x + 1.0).sum({1});
  EXPECT_EQ(F(one), F(two));  // rows split among threads, each summed the same way
  hodu::set_num_threads(before);
  EXPECT_NE(error_of([] { hodu::set_num_threads(0); }).find("at least 1"), std::string::npos);
}

}  // namespace
