// The packed AVX2 GEMM that runs the Winograd convs' products (kernels/cpu/packed_gemm.h) against
// a double-precision product: sizes off its 6x16 tile and 256-deep blocks, row-major and
// channel-blocked (nChw8c) operands, bias, accumulation and every activation, 1 and 2 threads.
// The suite's name puts it in ctest's AVX2 run too (cpu_engine_test_avx2 filters *Winograd*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/packed_gemm.h"

namespace hodu::packed_gemm {
namespace {

struct Aligned {
  explicit Aligned(int64_t n) : buf(static_cast<size_t>(n + 8)) {
    off = ((32 - (reinterpret_cast<uintptr_t>(buf.data()) & 31)) & 31) / 4;
  }
  float* data() { return buf.data() + off; }
  std::vector<float> buf;
  size_t off = 0;
};

double act_ref(double v, Act a, double p0, double p1) {
  switch (a) {
    case Act::None: return v;
    case Act::Relu: return v > 0 ? v : 0;
    case Act::LeakyRelu: return v > 0 ? v : p0 * v;
    case Act::Clip: return std::fmin(std::fmax(v, p0), p1);
    case Act::HardSigmoid: return std::fmin(std::fmax(p0 * v + p1, 0.0), 1.0);
    case Act::Sigmoid: return 1 / (1 + std::exp(-v));
    case Act::Tanh: return std::tanh(v);
    case Act::Silu: return v / (1 + std::exp(-v));
    case Act::Gelu: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case Act::GeluTanh: return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  }
  return v;
}

// C = act(A·B + bias [+ C]) with A and C row-major (blocked == false) or in 8-wide blocks.
void check(int64_t m, int64_t n, int64_t k, bool blocked, bool bias, bool accumulate, Act act, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 17 + k));
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t kp = (k + 7) / 8 * 8, np = (n + 7) / 8 * 8;
  std::vector<float> a(static_cast<size_t>(m * kp)), b(static_cast<size_t>(k * n)), bv(static_cast<size_t>(n)),
      c0(static_cast<size_t>(m * np));
  for (auto* v : {&a, &b, &bv, &c0})
    for (auto& x : *v) x = d(rng);
  // Element (r, i) of A and (r, j) of C in either layout.
  auto at_a = [&](int64_t r, int64_t i) { return blocked ? (i / 8) * m * 8 + r * 8 + i % 8 : r * kp + i; };
  auto at_c = [&](int64_t r, int64_t j) { return blocked ? (j / 8) * m * 8 + r * 8 + j % 8 : r * np + j; };
  Aligned pb(packed_size(k, n));
  pack_b(b.data(), n, 1, k, n, pb.data());
  std::vector<float> c = c0;
  Epilogue ep;
  ep.bias = bias ? bv.data() : nullptr;
  ep.accumulate = accumulate;
  ep.act = act;
  ep.p0 = act == Act::Clip ? -0.5f : act == Act::HardSigmoid ? 0.2f : 0.1f;
  ep.p1 = act == Act::Clip ? 0.75f : 0.5f;
  const MatrixA ma = blocked ? MatrixA{a.data(), 8, m * 8} : MatrixA{a.data(), kp, 8};
  const MatrixC mc = blocked ? MatrixC{c.data(), 8, m * 8} : MatrixC{c.data(), np, 8};
  gemm(m, n, k, ma, pb.data(), mc, ep, threads);
  double worst = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? bv[j] : 0.0;
      if (accumulate) s += c0[at_c(r, j)];
      double mag = std::fabs(s);
      for (int64_t i = 0; i < k; ++i) {
        s += static_cast<double>(a[at_a(r, i)]) * b[i * n + j];
        mag += std::fabs(static_cast<double>(a[at_a(r, i)]) * b[i * n + j]);
      }
      const double want = act_ref(s, act, ep.p0, ep.p1);
      worst = std::max(worst, std::fabs(c[at_c(r, j)] - want) / (1e-6 + 1e-6 * mag + 1e-6 * std::fabs(want)));
    }
  EXPECT_LE(worst, 1.0) << "m " << m << " n " << n << " k " << k << (blocked ? " blocked" : " row-major")
                        << (bias ? " bias" : "") << (accumulate ? " accumulate" : "") << " act "
                        << static_cast<int>(act) << " threads " << threads;
  // Columns past n (the padding of the last block of C) are never written.
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = n; j < np; ++j) EXPECT_EQ(c[at_c(r, j)], c0[at_c(r, j)]) << "column " << j << " written";
}

TEST(WinogradPackedGemm, MatchesDoubleProduct) {
  if (!available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2)";
  for (int threads : {1, 2})
    for (bool blocked : {false, true}) {
      check(1, 1, 1, blocked, false, false, Act::None, threads);
      check(7, 13, 5, blocked, true, false, Act::Relu, threads);
      check(49, 64, 256, blocked, false, false, Act::None, threads);    // exactly one block of k
      check(50, 33, 300, blocked, true, true, Act::None, threads);      // a second, partial block of k
      check(200, 40, 19, blocked, true, true, Act::Relu, threads);      // two row blocks
      check(6, 600, 70, blocked, false, true, Act::Clip, threads);      // more panels than one chunk
    }
  for (Act act : {Act::LeakyRelu, Act::HardSigmoid, Act::Sigmoid, Act::Tanh, Act::Silu, Act::Gelu, Act::GeluTanh})
    check(13, 21, 37, false, true, true, act, 1);
}

// Rows in groups (Rows::group): A a strided window of an nChw8c image (a conv tap's inputs:
// every 2nd pixel of 5 rows of 7, rows 2 apart), C a rectangle of another image (the outputs
// that tap reaches); C outside the rectangle is untouched. Tiles of 6 rows span groups of 7.
TEST(WinogradPackedGemm, GroupedRowsReadAndWriteImageWindows) {
  if (!available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2)";
  const int64_t hi = 13, wi = 17, ho = 8, wo = 9, k = 20, n = 24, kp = 24;
  const int64_t rows = 5, cols = 7, iy0 = 1, ix0 = 2, sy = 2, sx = 2, oy0 = 2, ox0 = 1;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kp * hi * wi)), b(static_cast<size_t>(k * n)), y0(static_cast<size_t>(n * ho * wo));
  for (auto* v : {&x, &b, &y0})
    for (auto& e : *v) e = d(rng);
  Aligned pb(packed_size(k, n));
  pack_b(b.data(), n, 1, k, n, pb.data());
  for (int threads : {1, 2}) {
    std::vector<float> y = y0;
    MatrixA a{x.data() + (iy0 * wi + ix0) * 8, 8 * sx, hi * wi * 8};
    a.group = cols;
    a.group_row = wi * 8 * sy;
    MatrixC c{y.data() + (oy0 * wo + ox0) * 8, 8, ho * wo * 8};
    c.group = cols;
    c.group_row = wo * 8;
    Epilogue ep;
    ep.accumulate = true;
    gemm(rows * cols, n, k, a, pb.data(), c, ep, threads);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const size_t at = static_cast<size_t>((j / 8) * ho * wo * 8 + (oy * wo + ox) * 8 + j % 8);
          const int64_t r = oy - oy0, q = ox - ox0;
          double want = y0[at];
          if (r >= 0 && r < rows && q >= 0 && q < cols)
            for (int64_t i = 0; i < k; ++i)
              want += static_cast<double>(x[static_cast<size_t>((i / 8) * hi * wi * 8 +
                                                                 ((iy0 + r * sy) * wi + ix0 + q * sx) * 8 + i % 8)]) *
                      b[static_cast<size_t>(i * n + j)];
          EXPECT_NEAR(y[at], want, 1e-4) << "channel " << j << " at " << oy << "," << ox << " threads " << threads;
        }
  }
}

// gemm_few_rows (an RNN's recurrent product: a few rows, A's rows `a_row` apart, C's `c_row`
// apart) against a double-precision product: 1 to 7 rows (tiles of 3), column counts off its
// 32-column tile (a single 16-column panel at the end, a partial panel), columns past n unwritten.
TEST(WinogradPackedGemm, FewRowsMatchDoubleProduct) {
  if (!available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2)";
  for (int64_t m : {1, 2, 3, 4, 7})
    for (int64_t n : {1, 12, 16, 32, 48, 80, 100})
      for (int64_t k : {1, 4, 33}) {
        std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 17 + k));
        std::normal_distribution<float> d(0.0f, 1.0f);
        const int64_t a_row = k + 3, c_row = n + 5;
        std::vector<float> a(static_cast<size_t>(m * a_row)), b(static_cast<size_t>(k * n)),
            c(static_cast<size_t>(m * c_row), 7.0f);
        for (auto* v : {&a, &b})
          for (auto& x : *v) x = d(rng);
        Aligned pb(packed_size(k, n));
        pack_b(b.data(), n, 1, k, n, pb.data());
        gemm_few_rows(m, n, k, a.data(), a_row, pb.data(), c.data(), c_row);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              s += static_cast<double>(a[r * a_row + i]) * b[i * n + j];
              mag += std::fabs(static_cast<double>(a[r * a_row + i]) * b[i * n + j]);
            }
            ASSERT_NEAR(c[r * c_row + j], s, 1e-6 * (1 + mag)) << "m " << m << " n " << n << " k " << k << " at " << r
                                                               << ", " << j;
          }
          for (int64_t j = n; j < c_row; ++j) ASSERT_EQ(c[r * c_row + j], 7.0f) << "column " << j << " written";
        }
      }
}

TEST(WinogradPackedGemm, ActivationNames) {
  Act act;
  float p0, p1;
  const float params[] = {0.3f};
  ASSERT_TRUE(activation_of("LeakyRelu", params, 1, &act, &p0, &p1));
  EXPECT_EQ(act, Act::LeakyRelu);
  EXPECT_EQ(p0, 0.3f);
  ASSERT_TRUE(activation_of("HardSigmoid", nullptr, 0, &act, &p0, &p1));
  EXPECT_EQ(p0, 0.2f);
  EXPECT_EQ(p1, 0.5f);
  ASSERT_TRUE(activation_of("", nullptr, 0, &act, &p0, &p1));
  EXPECT_EQ(act, Act::None);
  EXPECT_FALSE(activation_of("Softplus", nullptr, 0, &act, &p0, &p1));
}

}  // namespace
}  // namespace hodu::packed_gemm
