// Comparison of an engine's outputs with expected outputs, as ONNX's backend
// test runner does: dtype and shape exact, values within rtol/atol
// (numpy.testing.assert_allclose semantics, NaN equal to NaN), exact for
// integers, bools and strings.
#pragma once
#include <string>

#include "core/runtime_value.h"

namespace hodu::conformance {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-7;
};

// Empty string when equal, otherwise a description of the first mismatch.
std::string compare_values(const RuntimeValue& actual, const RuntimeValue& expected, const Tolerance& tol);
std::string compare_tensors(const Tensor& actual, const Tensor& expected, const Tolerance& tol);

}  // namespace hodu::conformance
