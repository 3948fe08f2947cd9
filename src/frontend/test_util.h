// Helpers of the frontend's tests (public API only).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "hodu/hodu.h"

namespace hodu::test {

// The message of the hodu::Error that f throws, "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hodu::Error& e) {
    return e.what();
  }
  return "";
}

// Same shape, and every element within tol · (1 + |b|).
inline void expect_close(const hodu::Tensor& a, const hodu::Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto x = a.contiguous().to_vector<double>(), y = b.contiguous().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << what << " element " << i;
}

}  // namespace hodu::test
