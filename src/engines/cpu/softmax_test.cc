// The softmax of the row kernels (kernels/cpu/vector_math.h) on a peaked row: probabilities
// below the smallest normal float come out as exact zeros, never subnormals (the product with V
// that reads them took a microcode assist per subnormal operand: GPT-2's attention 80x slower),
// on every loop this CPU has (AVX-512, AVX2, plain), and the row still sums to 1. The suite's
// name puts it in ctest's AVX2 run too.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vector_math.h"

namespace hodu::vector_math {
namespace {

TEST(RowKernels, SoftmaxGivesNoSubnormalProbabilities) {
  // Logits 0, -1, ..., -199: exp(-88) and below are subnormal (or 0) in float.
  std::vector<float> row(200);
  for (size_t j = 0; j < row.size(); ++j) row[j] = -static_cast<float>(j);
  auto check = [&](const char* loop, std::vector<float> y) {
    double sum = 0;
    for (size_t j = 0; j < y.size(); ++j) {
      EXPECT_NE(std::fpclassify(y[j]), FP_SUBNORMAL) << loop << ": entry " << j << " is " << y[j];
      sum += y[j];
      // What survives is the true value.
      if (y[j] != 0) {
        EXPECT_NEAR(y[j], std::exp(-static_cast<double>(j)) * (1 - std::exp(-1.0)), 1e-6 * y[j] + 1e-30) << loop;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << loop;
    EXPECT_GT(y[80], 0.0f) << loop << ": exp(-80) is a normal float and stays";
    EXPECT_EQ(y[100], 0.0f) << loop;
  };
  std::vector<float> y = row;
  ASSERT_TRUE(softmax_in_place(y.data(), static_cast<int64_t>(y.size())));
  check("plain", y);
  if (cpu_isa() == Isa::Avx2 || cpu_isa() == Isa::Avx512) {
    y = row;
    ASSERT_TRUE(softmax_in_place_avx2(y.data(), static_cast<int64_t>(y.size())));
    check("avx2", y);
  }
  if (cpu_isa() == Isa::Avx512) {
    y = row;
    ASSERT_TRUE(softmax_in_place_avx512(y.data(), static_cast<int64_t>(y.size())));
    check("avx512", y);
  }
}

}  // namespace
}  // namespace hodu::vector_math
