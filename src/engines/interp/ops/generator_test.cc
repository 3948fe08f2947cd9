// Random ops cannot be checked against ONNX's data (their outputs are random);
// these check Bernoulli's statistics and determinism instead.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "engines/interp/ops/kernel_test_util.h"

namespace hodu::interp {
namespace {

using testing::run_kernel;

Tensor filled(int64_t n, float p) {
  return Tensor::from_vector(DType::F32, {n}, std::vector<float>(static_cast<size_t>(n), p));
}

TEST(Bernoulli, MeanMatchesProbability) {
  const int64_t n = 200000;
  for (float p : {0.05f, 0.3f, 0.5f, 0.9f}) {
    Tensor y = run_kernel("Bernoulli", {filled(n, p)}, {Attribute::make_float("seed", 7.f)}).at(0).tensor;
    ASSERT_EQ(y.dtype(), DType::F32);
    double sum = 0;
    for (double v : y.to_doubles()) {
      ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
      sum += v;
    }
    // Binomial standard error sqrt(p(1-p)/n) <= 0.0012; 5 sigma.
    const double se = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
    EXPECT_NEAR(sum / static_cast<double>(n), p, 5 * se) << "p = " << p;
  }
}

TEST(Bernoulli, PerElementProbabilities) {
  // Alternating p = 0.2 / 0.8: each half has its own mean.
  const int64_t n = 100000;
  std::vector<float> probs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) probs[i] = i % 2 ? 0.8f : 0.2f;
  Tensor y = run_kernel("Bernoulli", {Tensor::from_vector(DType::F32, {n}, probs)}, {}, 1, "", 42).at(0).tensor;
  auto v = y.to_doubles();
  double even = 0, odd = 0;
  for (int64_t i = 0; i < n; ++i) (i % 2 ? odd : even) += v[i];
  EXPECT_NEAR(even / (n / 2), 0.2, 0.01);
  EXPECT_NEAR(odd / (n / 2), 0.8, 0.01);
}

TEST(Bernoulli, DeterministicPerSeed) {
  Tensor x = filled(1000, 0.5f);
  auto draw = [&](float seed) {
    return run_kernel("Bernoulli", {x}, {Attribute::make_float("seed", seed)}).at(0).tensor.to_doubles();
  };
  EXPECT_EQ(draw(1.f), draw(1.f));
  EXPECT_NE(draw(1.f), draw(2.f));
  // Without a seed attribute, the run's per-node seed decides.
  auto by_ctx = [&](uint64_t s) { return run_kernel("Bernoulli", {x}, {}, 1, "", s).at(0).tensor.to_doubles(); };
  EXPECT_EQ(by_ctx(5), by_ctx(5));
  EXPECT_NE(by_ctx(5), by_ctx(6));
}

TEST(Bernoulli, EdgeProbabilitiesAndDtype) {
  Tensor x = Tensor::from_vector(DType::F64, {4}, std::vector<double>{0, 1, 0, 1});
  Tensor y = run_kernel("Bernoulli", {x}, {Attribute::make_int("dtype", 7)}).at(0).tensor;  // INT64
  ASSERT_EQ(y.dtype(), DType::I64);
  EXPECT_EQ(y.to_int64s(), (std::vector<int64_t>{0, 1, 0, 1}));
}

TEST(Bernoulli, RejectsNonProbabilities) {
  for (float bad : {-0.1f, 1.5f, NAN}) {
    try {
      run_kernel("Bernoulli", {filled(3, bad)});
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("probability"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hodu::interp
