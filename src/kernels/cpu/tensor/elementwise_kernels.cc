// Elementwise kernels: binary ops with broadcasting, unary ops and the
// gradients of the activations, where. f32 exp-based functions use the cpu
// engine's vectorizable exp (kernels/cpu/vector_math.h, about 2 ulp); f64 uses
// the C library.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/tensor/loops.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::tensor_kernels {
namespace {

// Always inlined, as vector_math's exp_full and erf_approx are: GCC otherwise keeps one
// out-of-line copy (built for the baseline) and calls it per element from the AVX2/AVX-512 row
// loops below, which then do not vectorize (GELU ran 13x slower than torch's).
#define HODU_EXP_INLINE inline __attribute__((always_inline))
using vector_math::exp_full;

template <typename T> HODU_EXP_INLINE T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_full(x);
  else return std::exp(x);
}

// erf: f64 from the C library; f32 by vector_math::erf_approx (within 4e-7 absolute).
template <typename T> HODU_EXP_INLINE T erf_of(T x) {
  if constexpr (std::is_same_v<T, float>) return vector_math::erf_approx(x);
  else return std::erf(x);
}

template <typename T> HODU_EXP_INLINE T sigmoid_of(T x) { return T(1) / (T(1) + exp_of(-x)); }

template <typename T> inline T tanh_of(T x) { return std::tanh(x); }

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)

template <typename T, typename O, typename F>
void binary_loop(const loops::Iter& it, F f) {
  // flatten: the op (and the exp it may call) inlined into the loop, which GCC then vectorizes.
  loops::for_each(it, [&f](char* const* p, const int64_t* s, int64_t n) __attribute__((flatten)) {
    O* o = reinterpret_cast<O*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    const T* b = reinterpret_cast<const T*>(p[2]);
    if (s[0] == sizeof(O) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
    } else if (s[0] == sizeof(O) && s[1] == sizeof(T) && s[2] == 0) {
      const T bv = *b;
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
    } else if (s[0] == sizeof(O) && s[1] == 0 && s[2] == sizeof(T)) {
      const T av = *a;
      for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2]));
    }
  });
}

template <typename T, typename F>
void unary_loop(const loops::Iter& it, F f) {
  loops::for_each(it, [&f](char* const* p, const int64_t* s, int64_t n) __attribute__((flatten)) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
    }
  });
}

template <typename T>
T int_pow(T base, T exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  T r = 1;
  while (exp) {
    if (exp & 1) r *= base;
    base *= base;
    exp >>= 1;
  }
  return r;
}

template <typename T>
void run_binary(BinaryOp op, const loops::Iter& it, const char* name) {
  using B = uint8_t;
  switch (op) {
    case BinaryOp::Add: return binary_loop<T, T>(it, [](T a, T b) { return a + b; });
    case BinaryOp::Sub: return binary_loop<T, T>(it, [](T a, T b) { return a - b; });
    case BinaryOp::Mul: return binary_loop<T, T>(it, [](T a, T b) { return a * b; });
    case BinaryOp::Div:
      if constexpr (std::is_integral_v<T>) {
        // Floor division (integer tensors' `//`); divide by zero is refused.
        // No exception may leave an OpenMP region: a zero divisor is flagged and reported after.
        std::atomic<bool> by_zero{false};
        binary_loop<T, T>(it, [&by_zero](T a, T b) {
          if (b == 0) {
            by_zero.store(true, std::memory_order_relaxed);
            return T(0);
          }
          T q = a / b;
          return (a % b != 0 && ((a < 0) != (b < 0))) ? T(q - 1) : q;
        });
        HODU_CHECK(!by_zero.load(), ErrorCode::InvalidArgument, "{}: integer division by zero", name);
        return;
      } else {
        return binary_loop<T, T>(it, [](T a, T b) { return a / b; });
      }
    case BinaryOp::Pow:
      if constexpr (std::is_integral_v<T>) return binary_loop<T, T>(it, [](T a, T b) { return int_pow(a, b); });
      else return binary_loop<T, T>(it, [](T a, T b) { return b == T(2) ? a * a : static_cast<T>(std::pow(a, b)); });
    case BinaryOp::Max:
      return binary_loop<T, T>(it, [](T a, T b) { return (a != a || a > b) ? a : b; });
    case BinaryOp::Min:
      return binary_loop<T, T>(it, [](T a, T b) { return (a != a || a < b) ? a : b; });
    case BinaryOp::Eq: return binary_loop<T, B>(it, [](T a, T b) { return B(a == b); });
    case BinaryOp::Ne: return binary_loop<T, B>(it, [](T a, T b) { return B(a != b); });
    case BinaryOp::Lt: return binary_loop<T, B>(it, [](T a, T b) { return B(a < b); });
    case BinaryOp::Le: return binary_loop<T, B>(it, [](T a, T b) { return B(a <= b); });
    case BinaryOp::Gt: return binary_loop<T, B>(it, [](T a, T b) { return B(a > b); });
    case BinaryOp::Ge: return binary_loop<T, B>(it, [](T a, T b) { return B(a >= b); });
    case BinaryOp::And: return binary_loop<T, B>(it, [](T a, T b) { return B(a != 0 && b != 0); });
    case BinaryOp::Or: return binary_loop<T, B>(it, [](T a, T b) { return B(a != 0 || b != 0); });
  }
}

template <typename T>
void run_unary(UnaryOp op, const loops::Iter& it, const UnaryParams& prm) {
  const T pa = static_cast<T>(prm.a), pb = static_cast<T>(prm.b);
  switch (op) {
    case UnaryOp::Neg: return unary_loop<T>(it, [](T x) { return T(-x); });
    case UnaryOp::Abs: return unary_loop<T>(it, [](T x) { return x < 0 ? T(-x) : x; });
    case UnaryOp::Sign: return unary_loop<T>(it, [](T x) { return T((x > 0) - (x < 0)); });
    case UnaryOp::Square: return unary_loop<T>(it, [](T x) { return T(x * x); });
    case UnaryOp::Relu: return unary_loop<T>(it, [](T x) { return x > 0 ? x : T(0); });
    case UnaryOp::Clamp:
      return unary_loop<T>(it, [pa, pb](T x) { return x != x ? x : (x < pa ? pa : (x > pb ? pb : x)); });
    case UnaryOp::Not: return unary_loop<T>(it, [](T x) { return T(x == 0); });
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::Exp: return unary_loop<T>(it, [](T x) { return exp_of(x); });
      case UnaryOp::Log: return unary_loop<T>(it, [](T x) { return std::log(x); });
      case UnaryOp::Log1p: return unary_loop<T>(it, [](T x) { return std::log1p(x); });
      case UnaryOp::Sqrt: return unary_loop<T>(it, [](T x) { return std::sqrt(x); });
      case UnaryOp::Rsqrt: return unary_loop<T>(it, [](T x) { return T(1) / std::sqrt(x); });
      case UnaryOp::Reciprocal: return unary_loop<T>(it, [](T x) { return T(1) / x; });
      case UnaryOp::Sin: return unary_loop<T>(it, [](T x) { return std::sin(x); });
      case UnaryOp::Cos: return unary_loop<T>(it, [](T x) { return std::cos(x); });
      case UnaryOp::Tanh: return unary_loop<T>(it, [](T x) { return tanh_of(x); });
      case UnaryOp::Sigmoid: return unary_loop<T>(it, [](T x) { return sigmoid_of(x); });
      case UnaryOp::Erf: return unary_loop<T>(it, [](T x) { return erf_of(x); });
      case UnaryOp::Floor: return unary_loop<T>(it, [](T x) { return std::floor(x); });
      case UnaryOp::Ceil: return unary_loop<T>(it, [](T x) { return std::ceil(x); });
      case UnaryOp::Round: return unary_loop<T>(it, [](T x) { return std::nearbyint(x); });
      case UnaryOp::Gelu:
        return unary_loop<T>(it, [](T x) { return T(0.5) * x * (T(1) + erf_of(T(x / T(kSqrt2)))); });
      case UnaryOp::GeluTanh:
        return unary_loop<T>(it, [](T x) {
          return T(0.5) * x * (T(1) + tanh_of(T(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x))));
        });
      case UnaryOp::Silu: return unary_loop<T>(it, [](T x) { return x / (T(1) + exp_of(-x)); });
      case UnaryOp::LeakyRelu: return unary_loop<T>(it, [pa](T x) { return x > 0 ? x : x * pa; });
      case UnaryOp::Elu: return unary_loop<T>(it, [pa](T x) { return x > 0 ? x : pa * (exp_of(x) - T(1)); });
      case UnaryOp::Softplus:
        return unary_loop<T>(it, [pa, pb](T x) { return x * pa > pb ? x : std::log1p(exp_of(x * pa)) / pa; });
      case UnaryOp::PowScalar:
        if (prm.a == 2.0) return unary_loop<T>(it, [](T x) { return x * x; });
        if (prm.a == 0.5) return unary_loop<T>(it, [](T x) { return std::sqrt(x); });
        if (prm.a == 1.0) return unary_loop<T>(it, [](T x) { return x; });
        return unary_loop<T>(it, [pa](T x) { return static_cast<T>(std::pow(x, pa)); });
      default: break;
    }
  } else if (op == UnaryOp::PowScalar) {
    return unary_loop<T>(it, [pa](T x) { return int_pow(x, pa); });
  }
  fail(ErrorCode::Unsupported, "unary op {} on an integer tensor", static_cast<int>(op));
}

template <typename T, typename F>
void grad_loop(const loops::Iter& it, F f) {
  binary_loop<T, T>(it, f);  // operands (g, x)
}

template <typename T>
void run_grad(GradOp op, const loops::Iter& it, const UnaryParams& prm) {
  const T pa = static_cast<T>(prm.a), pb = static_cast<T>(prm.b);
  switch (op) {
    case GradOp::Relu: return grad_loop<T>(it, [](T g, T x) { return x > 0 ? g : T(0); });
    case GradOp::LeakyRelu: return grad_loop<T>(it, [pa](T g, T x) { return x > 0 ? g : g * pa; });
    case GradOp::Clamp: return grad_loop<T>(it, [pa, pb](T g, T x) { return (x >= pa && x <= pb) ? g : T(0); });
    case GradOp::Sigmoid: return grad_loop<T>(it, [](T g, T y) { return g * y * (T(1) - y); });
    case GradOp::Tanh: return grad_loop<T>(it, [](T g, T y) { return g * (T(1) - y * y); });
    case GradOp::Gelu:
      return grad_loop<T>(it, [](T g, T x) {
        const T cdf = T(0.5) * (T(1) + erf_of(T(x / T(kSqrt2))));
        const T pdf = T(kInvSqrt2Pi) * exp_of(T(T(-0.5) * x * x));
        return g * (cdf + x * pdf);
      });
    case GradOp::GeluTanh:
      return grad_loop<T>(it, [](T g, T x) {
        const T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
        const T th = tanh_of(inner);
        const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
        return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * dinner);
      });
    case GradOp::Silu:
      return grad_loop<T>(it, [](T g, T x) {
        const T s = sigmoid_of(x);
        return g * s * (T(1) + x * (T(1) - s));
      });
    case GradOp::Elu: return grad_loop<T>(it, [pa](T g, T x) { return x > 0 ? g : g * pa * exp_of(x); });
    case GradOp::Softplus:
      return grad_loop<T>(it, [pa, pb](T g, T x) { return x * pa > pb ? g : g * sigmoid_of(T(x * pa)); });
    case GradOp::Erf:
      return grad_loop<T>(it, [](T g, T x) { return g * T(2 * kInvSqrt2Pi * kSqrt2) * exp_of(T(-x * x)); });
  }
}

// The exp-based activations and their gradients over contiguous f32 rows, compiled for AVX-512,
// AVX2 and the baseline and chosen at run time under HODU_MAX_ISA (isa_dispatch.h): the generic
// loops above are built for the baseline only (SSE), and GELU's forward and backward were a
// third of a small transformer's eager step.
HODU_ISA_BODY void f32_unary_rows_body(UnaryOp op, const float* x, float* y, int64_t n) {
  constexpr float c = static_cast<float>(kSqrt2OverPi), r2 = static_cast<float>(1 / kSqrt2);
  switch (op) {
    case UnaryOp::Exp:
      for (int64_t i = 0; i < n; ++i) y[i] = exp_full(x[i]);
      return;
    case UnaryOp::Sigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + exp_full(-x[i]));
      return;
    case UnaryOp::Silu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_full(-x[i]));
      return;
    case UnaryOp::Gelu:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + erf_of(x[i] * r2));
      return;
    case UnaryOp::GeluTanh:
      // tanh(u) = 1 - 2 / (exp(2u) + 1): the vectorizable exp.
      for (int64_t i = 0; i < n; ++i) {
        const float u = c * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        y[i] = 0.5f * x[i] * (2.0f - 2.0f / (exp_full(2.0f * u) + 1.0f));
      }
      return;
    default: return;
  }
}

HODU_ISA_VARIANTS(void, f32_unary_rows, (UnaryOp op, const float* x, float* y, int64_t n), (op, x, y, n))

HODU_ISA_BODY void f32_grad_rows_body(GradOp op, const float* g, const float* x, float* y, int64_t n) {
  constexpr float r2 = static_cast<float>(1 / kSqrt2), ip = static_cast<float>(kInvSqrt2Pi);
  switch (op) {
    case GradOp::Gelu:
      for (int64_t i = 0; i < n; ++i) {
        const float cdf = 0.5f * (1.0f + erf_of(x[i] * r2));
        y[i] = g[i] * (cdf + x[i] * ip * exp_full(-0.5f * x[i] * x[i]));
      }
      return;
    case GradOp::Silu:
      for (int64_t i = 0; i < n; ++i) {
        const float sg = 1.0f / (1.0f + exp_full(-x[i]));
        y[i] = g[i] * sg * (1.0f + x[i] * (1.0f - sg));
      }
      return;
    case GradOp::Sigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = g[i] * x[i] * (1.0f - x[i]);
      return;
    case GradOp::Tanh:
      for (int64_t i = 0; i < n; ++i) y[i] = g[i] * (1.0f - x[i] * x[i]);
      return;
    case GradOp::Relu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? g[i] : 0.0f;
      return;
    default: return;
  }
}
HODU_ISA_VARIANTS(void, f32_grad_rows, (GradOp op, const float* g, const float* x, float* y, int64_t n),
                  (op, g, x, y, n))

bool fast_unary(UnaryOp op) {
  return op == UnaryOp::Exp || op == UnaryOp::Sigmoid || op == UnaryOp::Silu || op == UnaryOp::Gelu ||
         op == UnaryOp::GeluTanh;
}
bool fast_grad(GradOp op) {
  return op == GradOp::Gelu || op == GradOp::Silu || op == GradOp::Sigmoid || op == GradOp::Tanh || op == GradOp::Relu;
}

}  // namespace

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

void binary_into(BinaryOp op, hodu::Tensor& out, const hodu::Tensor& a, const hodu::Tensor& b, const char* name) {
  HODU_CHECK(a.dtype() == b.dtype(), ErrorCode::Internal, "{}: operands of {} and {}", name, dtype_name(a.dtype()),
             dtype_name(b.dtype()));
  loops::Iter it = loops::make_iter(out, {&a, &b}, name);
  dispatch_compute(a.dtype(), name, [&](auto tag) { run_binary<typename decltype(tag)::type>(op, it, name); });
}

hodu::Tensor binary(BinaryOp op, const hodu::Tensor& a, const hodu::Tensor& b, const char* name) {
  hodu::Tensor out = empty(is_comparison(op) ? DType::Bool : a.dtype(), loops::broadcast_shapes(a.shape(), b.shape(), name));
  binary_into(op, out, a, b, name);
  return out;
}

hodu::Tensor add_scaled(const hodu::Tensor& a, const hodu::Tensor& b, double alpha) {
  hodu::Tensor out = empty(a.dtype(), loops::broadcast_shapes(a.shape(), b.shape(), "add"));
  loops::Iter it = loops::make_iter(out, {&a, &b}, "add");
  dispatch_compute(a.dtype(), "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = static_cast<T>(alpha);
    binary_loop<T, T>(it, [s](T x, T y) { return x + s * y; });
  });
  return out;
}

void unary_into(UnaryOp op, hodu::Tensor& out, const hodu::Tensor& x, const UnaryParams& p) {
  loops::Iter it = loops::make_iter(out, {&x}, "unary");
  dispatch_compute(x.dtype(), "unary", [&](auto tag) { run_unary<typename decltype(tag)::type>(op, it, p); });
}

hodu::Tensor unary(UnaryOp op, const hodu::Tensor& x, const UnaryParams& p) {
  hodu::Tensor out = empty(x.dtype(), x.shape());
  if (x.dtype() == DType::F32 && x.is_contiguous() && fast_unary(op)) {
    const float* xp = static_cast<const float*>(x.raw_data());
    float* yp = static_cast<float*>(out.raw_data());
    loops::parallel_range((x.numel() + loops::kBlock - 1) / loops::kBlock, x.numel() * 8, [&](int64_t b0, int64_t b1) {
      const int64_t i0 = b0 * loops::kBlock, i1 = std::min(x.numel(), b1 * loops::kBlock);
      f32_unary_rows(op, xp + i0, yp + i0, i1 - i0);
    });
    return out;
  }
  unary_into(op, out, x, p);
  return out;
}

hodu::Tensor unary_grad(GradOp op, const hodu::Tensor& g, const hodu::Tensor& x, const UnaryParams& p) {
  hodu::Tensor out = empty(x.dtype(), loops::broadcast_shapes(g.shape(), x.shape(), "gradient"));
  if (x.dtype() == DType::F32 && g.dtype() == DType::F32 && g.shape() == x.shape() && x.is_contiguous() &&
      g.is_contiguous() && fast_grad(op)) {
    const float* gp = static_cast<const float*>(g.raw_data());
    const float* xp = static_cast<const float*>(x.raw_data());
    float* yp = static_cast<float*>(out.raw_data());
    loops::parallel_range((x.numel() + loops::kBlock - 1) / loops::kBlock, x.numel() * 8, [&](int64_t b0, int64_t b1) {
      const int64_t i0 = b0 * loops::kBlock, i1 = std::min(x.numel(), b1 * loops::kBlock);
      f32_grad_rows(op, gp + i0, xp + i0, yp + i0, i1 - i0);
    });
    return out;
  }
  loops::Iter it = loops::make_iter(out, {&g, &x}, "gradient");
  dispatch_float(x.dtype(), "gradient", [&](auto tag) { run_grad<typename decltype(tag)::type>(op, it, p); });
  return out;
}

hodu::Tensor where(const hodu::Tensor& cond, const hodu::Tensor& a, const hodu::Tensor& b) {
  auto shape = loops::broadcast_shapes(loops::broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  hodu::Tensor out = empty(a.dtype(), shape);
  loops::Iter it = loops::make_iter(out, {&cond, &a, &b}, "where");
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    loops::for_each(it, [](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const uint8_t*>(p[1] + i * s[1])
                                                     ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                                     : *reinterpret_cast<const T*>(p[3] + i * s[3]);
    });
  };
  switch (dtype_bits(a.dtype())) {
    case 8: run(Tag<uint8_t>{}); break;
    case 16: run(Tag<uint16_t>{}); break;
    case 32: run(Tag<uint32_t>{}); break;
    case 64: run(Tag<uint64_t>{}); break;
    default: fail(ErrorCode::Unsupported, "where: dtype {}", dtype_name(a.dtype()));
  }
  return out;
}

}  // namespace hodu::tensor_kernels
