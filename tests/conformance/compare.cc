#include "compare.h"

#include <cmath>

#include <fmt/format.h>

namespace hodu::conformance {

std::string compare_tensors(const Tensor& a, const Tensor& e, const Tolerance& tol) {
  if (a.dtype() != e.dtype())
    return fmt::format("dtype {} != expected {}", dtype_name(a.dtype()), dtype_name(e.dtype()));
  if (a.shape() != e.shape())
    return fmt::format("shape {} != expected {}", a.shape_string(), e.shape_string());
  int64_t n = a.numel();
  if (a.dtype() == DType::String) {
    Tensor ca = a.contiguous(), ce = e.contiguous();
    for (int64_t i = 0; i < n; ++i)
      if (ca.string_data()[i] != ce.string_data()[i])
        return fmt::format("element {}: \"{}\" != expected \"{}\"", i, ca.string_data()[i], ce.string_data()[i]);
    return {};
  }
  bool exact = !dtype_is_float(a.dtype()) && !dtype_is_complex(a.dtype());
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (exact) {
      bool eq = a.dtype() == DType::U64 ? a.get_int64(i) == e.get_int64(i) : a.get_int64(i) == e.get_int64(i);
      if (!eq) { if (first < 0) first = i; ++bad; }
      continue;
    }
    double x = a.get_double(i), y = e.get_double(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) { if (first < 0) first = i; ++bad; }
      continue;
    }
    double diff = std::fabs(x - y);
    if (!(diff <= tol.atol + tol.rtol * std::fabs(y))) {
      if (first < 0) first = i;
      ++bad;
      worst = std::max(worst, diff);
    }
  }
  if (bad == 0) return {};
  if (exact)
    return fmt::format("{} of {} elements differ; first at {}: {} != expected {}", bad, n, first,
                       a.get_int64(first), e.get_int64(first));
  return fmt::format("{} of {} elements differ (rtol {}, atol {}); first at {}: {} != expected {}; max abs diff {}",
                     bad, n, tol.rtol, tol.atol, first, a.get_double(first), e.get_double(first), worst);
}

std::string compare_values(const RuntimeValue& a, const RuntimeValue& e, const Tolerance& tol) {
  using K = RuntimeValue::Kind;
  if (e.kind == K::OptionalEmpty)
    return a.kind == K::OptionalEmpty ? "" : "expected an empty optional";
  if (a.kind != e.kind) return fmt::format("value kind {} != expected {}", int(a.kind), int(e.kind));
  if (e.kind == K::Tensor) return compare_tensors(a.tensor, e.tensor, tol);
  if (e.kind == K::Sequence) {
    if (a.sequence.size() != e.sequence.size())
      return fmt::format("sequence of {} tensors != expected {}", a.sequence.size(), e.sequence.size());
    for (size_t i = 0; i < e.sequence.size(); ++i) {
      auto msg = compare_tensors(a.sequence[i], e.sequence[i], tol);
      if (!msg.empty()) return fmt::format("sequence element {}: {}", i, msg);
    }
    return {};
  }
  return "unsupported value kind in comparison";
}

}  // namespace hodu::conformance
