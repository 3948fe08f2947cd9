// Scalar formulas whose exact semantics the interpreter defines and the cpu engine must match
// bit for bit: wrapping integer division, numpy.mod / numpy.fmod, sigmoid and softplus without
// overflow. Shared by the interpreter (elementwise_binary.cc, elementwise_unary.cc) and the cpu
// engine (engines/cpu/broadcast_ops.cc, unary_ops.cc).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace hodu::interp {

// Wrapping integer arithmetic goes through this unsigned type (no signed-overflow UB).
template <typename T>
using wrap_uint_t = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

// x / y; integers truncate toward zero, x / 0 = 0, MIN / -1 wraps.
template <typename T>
inline T div_value(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return x / y;
  } else {
    if (y == 0) return T(0);
    if constexpr (std::is_signed_v<T>) {
      if (y == T(-1)) return static_cast<T>(wrap_uint_t<T>(0) - static_cast<wrap_uint_t<T>>(x));
    }
    return static_cast<T>(x / y);
  }
}

// numpy.fmod: the result has the dividend's sign; integer x % 0 = 0.
template <typename T>
inline T fmod_value(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmod(x, y);
  } else {
    if (y == 0) return T(0);
    if constexpr (std::is_signed_v<T>) {
      if (y == T(-1)) return T(0);
    }
    return static_cast<T>(x % y);
  }
}

// numpy.mod: the result has the divisor's sign; integer x % 0 = 0, float x % 0 = NaN.
template <typename T>
inline T mod_value(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    T m = std::fmod(x, y);
    if (y == T(0)) return m;  // NaN
    if (m != T(0)) {
      if ((y < T(0)) != (m < T(0))) m += y;
    } else {
      m = std::copysign(T(0), y);
    }
    return m;
  } else {
    if (y == 0) return T(0);
    if constexpr (std::is_signed_v<T>) {
      if (y == T(-1)) return T(0);
      T m = static_cast<T>(x % y);
      if (m != 0 && ((m < 0) != (y < 0))) m = static_cast<T>(m + y);
      return m;
    } else {
      return static_cast<T>(x % y);
    }
  }
}

template <typename T>
inline T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

// log(1 + exp(x)), without overflow for large x.
template <typename T>
inline T softplus(T x) {
  if (x > T(0)) return x + std::log1p(std::exp(-x));
  return std::log1p(std::exp(x));
}

}  // namespace hodu::interp
