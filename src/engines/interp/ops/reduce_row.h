// One output element of a Reduce* op from the n contiguous elements it reduces: the
// interpreter's semantics (double accumulation for floats, integer sums and products wrapping
// in the type, NaN propagating through Max/Min, empty Max/Min/LogSumExp giving the identity),
// shared by the interpreter (reduction.cc) and the cpu engine (engines/cpu/reduce_ops.cc).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace hodu::interp {

enum class RKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

template <typename T>
inline T reduce_row(RKind kind, const T* v, int64_t n) {
  if constexpr (std::is_same_v<T, bool>) {
    bool acc = kind == RKind::Min || kind == RKind::Prod;  // empty: Max → false, Min → true
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case RKind::Max: acc = acc || v[i]; break;
        case RKind::Min: case RKind::Prod: acc = acc && v[i]; break;
        default: acc = acc || v[i]; break;
      }
    }
    return acc;
  } else if constexpr (std::is_floating_point_v<T>) {
    using A = double;
    switch (kind) {
      case RKind::Max: {
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(v[i])) return v[i];
          if (v[i] > m) m = v[i];
        }
        return m;
      }
      case RKind::Min: {
        T m = std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(v[i])) return v[i];
          if (v[i] < m) m = v[i];
        }
        return m;
      }
      case RKind::Prod: {
        A acc = 1;
        for (int64_t i = 0; i < n; ++i) acc *= v[i];
        return static_cast<T>(acc);
      }
      case RKind::LogSumExp: {
        if (n == 0) return -std::numeric_limits<T>::infinity();
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t i = 0; i < n; ++i) m = std::max<A>(m, v[i]);
        if (std::isinf(m)) {
          A acc = 0;
          for (int64_t i = 0; i < n; ++i) acc += std::exp(static_cast<A>(v[i]));
          return static_cast<T>(std::log(acc));
        }
        A acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += std::exp(static_cast<A>(v[i]) - m);
        return static_cast<T>(std::log(acc) + m);
      }
      default: break;
    }
    A acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      A x = v[i];
      switch (kind) {
        case RKind::L1: acc += std::fabs(x); break;
        case RKind::L2: case RKind::SumSquare: acc += x * x; break;
        default: acc += x; break;
      }
    }
    switch (kind) {
      case RKind::Mean: return static_cast<T>(acc / static_cast<A>(n));
      case RKind::L2: return static_cast<T>(std::sqrt(acc));
      case RKind::LogSum: return static_cast<T>(std::log(acc));
      default: return static_cast<T>(acc);
    }
  } else {
    // Integers: sums and products wrap around in the type (numpy with dtype=data.dtype);
    // computed modulo 2^64 in unsigned arithmetic, then truncated.
    using U = uint64_t;
    switch (kind) {
      case RKind::Max: {
        T m = std::numeric_limits<T>::lowest();
        for (int64_t i = 0; i < n; ++i) m = std::max(m, v[i]);
        return m;
      }
      case RKind::Min: {
        T m = std::numeric_limits<T>::max();
        for (int64_t i = 0; i < n; ++i) m = std::min(m, v[i]);
        return m;
      }
      case RKind::Prod: {
        U acc = 1;
        for (int64_t i = 0; i < n; ++i) acc *= static_cast<U>(static_cast<int64_t>(v[i]));
        return static_cast<T>(acc);
      }
      case RKind::L2: case RKind::LogSum: case RKind::LogSumExp: {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          double x = static_cast<double>(v[i]);
          acc += kind == RKind::LogSumExp ? std::exp(x) : kind == RKind::L2 ? x * x : x;
        }
        double res = kind == RKind::L2 ? std::sqrt(acc) : std::log(acc);
        if (!std::isfinite(res)) return T(0);
        return static_cast<T>(res);
      }
      default: break;
    }
    U acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      U x = static_cast<U>(static_cast<int64_t>(v[i]));
      if constexpr (std::is_same_v<T, uint64_t>) x = static_cast<U>(v[i]);
      switch (kind) {
        case RKind::L1:
          if constexpr (std::is_signed_v<T>) x = v[i] < 0 ? U(0) - x : x;
          acc += x;
          break;
        case RKind::SumSquare: acc += x * x; break;
        default: acc += x; break;
      }
    }
    if (kind == RKind::Mean) {
      if (n == 0) return T(0);
      T s = static_cast<T>(acc);
      if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<int64_t>(s) / n);  // truncates
      else return static_cast<T>(static_cast<uint64_t>(s) / static_cast<uint64_t>(n));
    }
    return static_cast<T>(acc);
  }
}

}  // namespace hodu::interp
