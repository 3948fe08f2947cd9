// Binary and n-ary elementwise kernels with numpy broadcasting: arithmetic
// (Add Sub Mul Div Mod Pow), comparison, logic, bitwise, BitShift, variadic
// Max/Min/Sum/Mean, Where, Clip, PRelu. Integer arithmetic wraps (no UB);
// integer Div truncates toward zero and x / 0 is 0 (ONNX reference).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engines/interp/ops/elementwise_common.h"

namespace hodu::interp {
namespace {

void check_same_dtype(const KernelContext& ctx, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "inputs must have the same dtype, got {} and {}", dtype_name(a.dtype()),
             dtype_name(b.dtype()));
}

// Same-dtype binary op on numeric inputs (no bool); result has the input dtype.
// f(a, b) is a generic lambda called with float, double or an integer type.
template <typename F>
void binary_arith(KernelContext& ctx, F&& f) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  check_same_dtype(ctx, a0, b0);
  const DType dt = a0.dtype();
  if (dt == DType::String || dtype_is_packed4(dt) || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(dt));
  Tensor a = widen(a0).contiguous(), b = widen(b0).contiguous();
  Tensor out = Tensor::empty(a.dtype(), broadcast_shapes(ctx, a.shape(), b.shape()));
  dispatch_arith(ctx, a.dtype(), [&]<typename T>() {
    map_binary<T, T, T>(ctx.threads, a, b, out, [&](T x, T y) { return static_cast<T>(f(x, y)); });
  });
  ctx.set_output(0, narrow_to(out, dt));
}

// Same-dtype comparison → bool. Numeric types (narrow floats widened), bool, and
// strings when allow_string.
template <typename F>
void binary_compare(KernelContext& ctx, F&& f, bool allow_string) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  check_same_dtype(ctx, a0, b0);
  auto shape = broadcast_shapes(ctx, a0.shape(), b0.shape());
  Tensor out = Tensor::empty(DType::Bool, shape);
  if (a0.dtype() == DType::String) {
    if (!allow_string) ctx.fail(ErrorCode::Unsupported, "dtype string is not supported by this op");
    Tensor a = a0.contiguous(), b = b0.contiguous();
    const std::string* pa = strs(a);
    const std::string* pb = strs(b);
    bool* po = elems<bool>(out);
    broadcast_for<2>(ctx.threads, shape, {a.shape(), b.shape()},
                     [&](int64_t i, const std::array<int64_t, 2>& o) { po[i] = f(pa[o[0]], pb[o[1]]); });
    ctx.set_output(0, out);
    return;
  }
  if (dtype_is_packed4(a0.dtype()) || dtype_is_complex(a0.dtype()))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(a0.dtype()));
  Tensor a = widen(a0).contiguous(), b = widen(b0).contiguous();
  dispatch_numeric(ctx, a.dtype(), [&]<typename T>() {
    map_binary<T, T, bool>(ctx.threads, a, b, out, [&](T x, T y) { return static_cast<bool>(f(x, y)); });
  });
  ctx.set_output(0, out);
}

template <typename F>
void binary_bool(KernelContext& ctx, F&& f) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  if (a0.dtype() != DType::Bool || b0.dtype() != DType::Bool)
    ctx.fail(ErrorCode::Unsupported, "inputs must be bool, got {} and {}", dtype_name(a0.dtype()),
             dtype_name(b0.dtype()));
  Tensor a = a0.contiguous(), b = b0.contiguous();
  Tensor out = Tensor::empty(DType::Bool, broadcast_shapes(ctx, a.shape(), b.shape()));
  map_binary<uint8_t, uint8_t, uint8_t>(ctx.threads, a, b, out,
                                        [&](uint8_t x, uint8_t y) { return static_cast<uint8_t>(f(x != 0, y != 0)); });
  ctx.set_output(0, out);
}

template <typename F>
void binary_integer(KernelContext& ctx, F&& f) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  check_same_dtype(ctx, a0, b0);
  Tensor a = a0.contiguous(), b = b0.contiguous();
  Tensor out = Tensor::empty(a.dtype(), broadcast_shapes(ctx, a.shape(), b.shape()));
  dispatch_integer(ctx, a.dtype(), [&]<typename T>() {
    map_binary<T, T, T>(ctx.threads, a, b, out, [&](T x, T y) { return static_cast<T>(f(x, y)); });
  });
  ctx.set_output(0, out);
}

// ---- arithmetic ----------------------------------------------------------------

void k_add(KernelContext& ctx) {
  binary_arith(ctx, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) return x + y;
    else return static_cast<T>(static_cast<wrap_uint_t<T>>(x) + static_cast<wrap_uint_t<T>>(y));
  });
}
void k_sub(KernelContext& ctx) {
  binary_arith(ctx, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) return x - y;
    else return static_cast<T>(static_cast<wrap_uint_t<T>>(x) - static_cast<wrap_uint_t<T>>(y));
  });
}
void k_mul(KernelContext& ctx) {
  binary_arith(ctx, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) return x * y;
    else return static_cast<T>(static_cast<wrap_uint_t<T>>(x) * static_cast<wrap_uint_t<T>>(y));
  });
}
void k_div(KernelContext& ctx) {
  binary_arith(ctx, [](auto x, auto y) { return div_value(x, y); });
}
// numpy.mod (fmod = 0: result has the divisor's sign) or numpy.fmod (fmod = 1).
void k_mod(KernelContext& ctx) {
  const int64_t fmod = ctx.node.get_int("fmod", 0);
  if (fmod != 0 && fmod != 1) ctx.fail(ErrorCode::InvalidArgument, "fmod must be 0 or 1, got {}", fmod);
  if (fmod == 1) {
    binary_arith(ctx, [](auto x, auto y) { return fmod_value(x, y); });
  } else {
    binary_arith(ctx, [](auto x, auto y) { return mod_value(x, y); });
  }
}

// Integer power with wrap-around; negative exponents give the truncated real result.
template <typename T>
T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>) {
      if (base == T(-1)) return (e % 2 == 0) ? T(1) : T(-1);
    }
    return T(0);
  }
  using U = wrap_uint_t<T>;
  U r = 1, b = static_cast<U>(base);
  uint64_t ue = static_cast<uint64_t>(e);
  while (ue) {
    if (ue & 1) r = static_cast<U>(r * b);
    b = static_cast<U>(b * b);
    ue >>= 1;
  }
  return static_cast<T>(r);
}

template <typename T>
T float_to_int_wrapping(double v) {
  if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) return std::numeric_limits<T>::min();
  return static_cast<T>(static_cast<int64_t>(v));
}

// Pow: result has the base's dtype; base and exponent may differ in type. The
// exponent is brought to f32 (f32 base and f32/narrow exponent), f64 (other
// floats) or i64 (integers); integer bases other than i32/i64 go through i64.
void k_pow(KernelContext& ctx) {
  const Tensor& a0 = ctx.input(0);
  const Tensor& b0 = ctx.input(1);
  const DType dt = a0.dtype();
  for (DType d : {a0.dtype(), b0.dtype()})
    if (d == DType::String || d == DType::Bool || dtype_is_packed4(d) || dtype_is_complex(d))
      ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Pow", dtype_name(d));
  Tensor a = widen(a0).contiguous();
  if (dtype_is_integer(a.dtype()) && a.dtype() != DType::I32 && a.dtype() != DType::I64) a = a.cast(DType::I64);
  Tensor b = widen(b0).contiguous();
  if (dtype_is_integer(b.dtype())) {
    if (b.dtype() != DType::I64) b = b.cast(DType::I64);
  } else if (!(a.dtype() == DType::F32 && b.dtype() == DType::F32)) {
    if (b.dtype() != DType::F64) b = b.cast(DType::F64);
  }
  Tensor out = Tensor::empty(a.dtype(), broadcast_shapes(ctx, a.shape(), b.shape()));
  auto run = [&]<typename TA>() {
    auto body = [&]<typename TB>() {
      map_binary<TA, TB, TA>(ctx.threads, a, b, out, [](TA x, TB y) {
        if constexpr (std::is_same_v<TA, float> && std::is_same_v<TB, float>) {
          return std::pow(x, y);
        } else if constexpr (std::is_floating_point_v<TA>) {
          return static_cast<TA>(std::pow(static_cast<double>(x), static_cast<double>(y)));
        } else if constexpr (std::is_floating_point_v<TB>) {
          return float_to_int_wrapping<TA>(std::pow(static_cast<double>(x), static_cast<double>(y)));
        } else {
          return int_pow<TA>(x, static_cast<int64_t>(y));
        }
      });
    };
    if (b.dtype() == DType::F32) body.template operator()<float>();
    else if (b.dtype() == DType::F64) body.template operator()<double>();
    else body.template operator()<int64_t>();
  };
  switch (a.dtype()) {
    case DType::F32: run.template operator()<float>(); break;
    case DType::F64: run.template operator()<double>(); break;
    case DType::I32: run.template operator()<int32_t>(); break;
    default: run.template operator()<int64_t>(); break;
  }
  ctx.set_output(0, narrow_to(out.dtype() == dt ? out : out.cast(dt), dt));
}

// ---- comparison, logic, bitwise ------------------------------------------------

void k_equal(KernelContext& ctx) { binary_compare(ctx, [](const auto& x, const auto& y) { return x == y; }, true); }
void k_greater(KernelContext& ctx) { binary_compare(ctx, [](auto x, auto y) { return x > y; }, false); }
void k_greater_equal(KernelContext& ctx) { binary_compare(ctx, [](auto x, auto y) { return x >= y; }, false); }
void k_less(KernelContext& ctx) { binary_compare(ctx, [](auto x, auto y) { return x < y; }, false); }
void k_less_equal(KernelContext& ctx) { binary_compare(ctx, [](auto x, auto y) { return x <= y; }, false); }

void k_and(KernelContext& ctx) { binary_bool(ctx, [](bool x, bool y) { return x && y; }); }
void k_or(KernelContext& ctx) { binary_bool(ctx, [](bool x, bool y) { return x || y; }); }
void k_xor(KernelContext& ctx) { binary_bool(ctx, [](bool x, bool y) { return x != y; }); }

void k_bitwise_and(KernelContext& ctx) { binary_integer(ctx, [](auto x, auto y) { return x & y; }); }
void k_bitwise_or(KernelContext& ctx) { binary_integer(ctx, [](auto x, auto y) { return x | y; }); }
void k_bitwise_xor(KernelContext& ctx) { binary_integer(ctx, [](auto x, auto y) { return x ^ y; }); }

void k_bitshift(KernelContext& ctx) {
  const std::string dir = ctx.node.get_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    ctx.fail(ErrorCode::InvalidArgument, "direction must be 'LEFT' or 'RIGHT', got '{}'", dir);
  const DType dt = ctx.input(0).dtype();
  if (dtype_is_signed(dt) || dt == DType::Bool)
    ctx.fail(ErrorCode::Unsupported, "BitShift needs an unsigned integer type, got {}", dtype_name(dt));
  const bool left = dir == "LEFT";
  binary_integer(ctx, [left](auto x, auto y) {
    using T = decltype(x);
    using U = std::make_unsigned_t<T>;
    const U ux = static_cast<U>(x), uy = static_cast<U>(y);
    if (uy >= sizeof(T) * 8) return T(0);
    return static_cast<T>(left ? static_cast<U>(static_cast<wrap_uint_t<T>>(ux) << uy) : static_cast<U>(ux >> uy));
  });
}

// ---- variadic ------------------------------------------------------------------

// Folds all inputs with f (broadcasting), in input order. `float_only` for Sum/Mean.
template <typename F>
Tensor fold_variadic(KernelContext& ctx, bool float_only, F&& f) {
  if (ctx.num_inputs() == 0) ctx.fail(ErrorCode::InvalidModel, "needs at least one input");
  const DType dt = ctx.input(0).dtype();
  if (dt == DType::String || dt == DType::Bool || dtype_is_packed4(dt) || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(dt));
  if (float_only && !dtype_is_float(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op (needs a float type)", dtype_name(dt));
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    if (t.dtype() != dt)
      ctx.fail(ErrorCode::InvalidArgument, "all inputs must have the same dtype, input {} is {} (input 0: {})", i,
               dtype_name(t.dtype()), dtype_name(dt));
    shapes.push_back(t.shape());
  }
  auto shape = broadcast_all(ctx, shapes);
  Tensor acc = widen(ctx.input(0)).contiguous();
  if (acc.shape() != shape) {
    // Broadcast the first input to the output shape.
    Tensor full = Tensor::empty(acc.dtype(), shape);
    size_t es = dtype_bits(acc.dtype()) / 8;
    const auto* src = static_cast<const uint8_t*>(acc.raw_data());
    auto* dst = static_cast<uint8_t*>(full.raw_data());
    broadcast_for<1>(ctx.threads, shape, {acc.shape()}, [&](int64_t i, const std::array<int64_t, 1>& o) {
      std::memcpy(dst + i * es, src + o[0] * es, es);
    });
    acc = full;
  } else if (ctx.num_inputs() == 1 && acc.storage() == ctx.input(0).storage()) {
    acc = acc.clone();
  }
  for (size_t k = 1; k < ctx.num_inputs(); ++k) {
    Tensor b = widen(ctx.input(k)).contiguous();
    Tensor next = Tensor::empty(acc.dtype(), shape);
    dispatch_arith(ctx, acc.dtype(), [&]<typename T>() {
      map_binary<T, T, T>(ctx.threads, acc, b, next, [&](T x, T y) { return static_cast<T>(f(x, y)); });
    });
    acc = next;
  }
  return acc;
}

void k_max(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  Tensor r = fold_variadic(ctx, false, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
    }
    return x >= y ? x : y;
  });
  ctx.set_output(0, narrow_to(r, dt));
}
void k_min(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  Tensor r = fold_variadic(ctx, false, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
    }
    return x <= y ? x : y;
  });
  ctx.set_output(0, narrow_to(r, dt));
}
void k_sum(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  Tensor r = fold_variadic(ctx, true, [](auto x, auto y) { return x + y; });
  ctx.set_output(0, narrow_to(r, dt));
}
void k_mean(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  Tensor r = fold_variadic(ctx, true, [](auto x, auto y) { return x + y; });
  const double n = static_cast<double>(ctx.num_inputs());
  dispatch_float(ctx, r.dtype(), [&]<typename T>() {
    T* p = elems<T>(r);
    map_unary(ctx.threads, p, p, r.numel(), [&](T v) { return static_cast<T>(v / static_cast<T>(n)); });
  });
  ctx.set_output(0, narrow_to(r, dt));
}

// ---- Where, Clip, PRelu --------------------------------------------------------

template <typename E>
void where_copy(int threads, const std::vector<int64_t>& shape, const Tensor& c, const Tensor& x, const Tensor& y,
                Tensor& out) {
  const uint8_t* pc = elems<uint8_t>(c);
  const E* px = static_cast<const E*>(x.raw_data());
  const E* py = static_cast<const E*>(y.raw_data());
  E* po = static_cast<E*>(out.raw_data());
  broadcast_for<3>(threads, shape, {c.shape(), x.shape(), y.shape()},
                   [&](int64_t i, const std::array<int64_t, 3>& o) { po[i] = pc[o[0]] ? px[o[1]] : py[o[2]]; });
}

void k_where(KernelContext& ctx) {
  const Tensor& c0 = ctx.input(0);
  const Tensor& x0 = ctx.input(1);
  const Tensor& y0 = ctx.input(2);
  if (c0.dtype() != DType::Bool) ctx.fail(ErrorCode::InvalidArgument, "condition must be bool, got {}", dtype_name(c0.dtype()));
  check_same_dtype(ctx, x0, y0);
  const DType dt = x0.dtype();
  auto shape = broadcast_all(ctx, {c0.shape(), x0.shape(), y0.shape()});
  Tensor c = c0.contiguous(), x = x0.contiguous(), y = y0.contiguous();
  Tensor out = Tensor::empty(dt, shape);
  if (dt == DType::String) {
    where_copy<std::string>(ctx.threads, shape, c, x, y, out);
  } else if (dtype_is_packed4(dt)) {
    // Packed 4-bit: go through one byte per element.
    Tensor xw = x.cast(DType::I8), yw = y.cast(DType::I8);
    if (dt == DType::F4E2M1) { xw = x.cast(DType::F32); yw = y.cast(DType::F32); }
    Tensor tmp = Tensor::empty(xw.dtype(), shape);
    if (xw.dtype() == DType::F32) where_copy<uint32_t>(ctx.threads, shape, c, xw, yw, tmp);
    else where_copy<uint8_t>(ctx.threads, shape, c, xw, yw, tmp);
    out = tmp.cast(dt);
  } else {
    switch (dtype_bits(dt)) {
      case 8: where_copy<uint8_t>(ctx.threads, shape, c, x, y, out); break;
      case 16: where_copy<uint16_t>(ctx.threads, shape, c, x, y, out); break;
      case 32: where_copy<uint32_t>(ctx.threads, shape, c, x, y, out); break;
      case 64: where_copy<uint64_t>(ctx.threads, shape, c, x, y, out); break;
      case 128: {
        struct C128 { uint64_t lo, hi; };
        where_copy<C128>(ctx.threads, shape, c, x, y, out);
        break;
      }
      default: ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Where", dtype_name(dt));
    }
  }
  ctx.set_output(0, out);
}

void k_clip(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const DType dt = x0.dtype();
  if (dt == DType::String || dt == DType::Bool || dtype_is_packed4(dt) || dtype_is_complex(dt))
    ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by Clip", dtype_name(dt));
  Tensor x = widen(x0).contiguous();
  Tensor lo, hi;
  for (size_t i : {1, 2}) {
    if (!ctx.has_input(i)) continue;
    const Tensor& b = ctx.input(i);
    if (b.dtype() != dt)
      ctx.fail(ErrorCode::InvalidArgument, "{} must have the input's dtype {}, got {}", i == 1 ? "min" : "max",
               dtype_name(dt), dtype_name(b.dtype()));
    if (b.numel() != 1)
      ctx.fail(ErrorCode::InvalidArgument, "{} must be a scalar, got shape {}", i == 1 ? "min" : "max",
               b.shape_string());
    (i == 1 ? lo : hi) = widen(b).contiguous();
  }
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  dispatch_arith(ctx, x.dtype(), [&]<typename T>() {
    const bool has_lo = lo.defined(), has_hi = hi.defined();
    const T l = has_lo ? elems<T>(lo)[0] : T(0), h = has_hi ? elems<T>(hi)[0] : T(0);
    map_unary(ctx.threads, elems<T>(x), elems<T>(y), x.numel(), [&](T v) {
      if (has_lo && v < l) v = l;
      if (has_hi && v > h) v = h;
      return v;
    });
  });
  ctx.set_output(0, narrow_to(y, dt));
}

void k_prelu(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const Tensor& s0 = ctx.input(1);
  check_same_dtype(ctx, x0, s0);
  auto shape = broadcast_shapes(ctx, x0.shape(), s0.shape());
  if (shape != x0.shape())
    ctx.fail(ErrorCode::InvalidArgument, "slope of shape {} cannot be broadcast to X of shape {}", s0.shape_string(),
             x0.shape_string());
  binary_arith(ctx, [](auto x, auto s) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) return x < T(0) ? x * s : x;
    else return x < T(0) ? static_cast<T>(static_cast<wrap_uint_t<T>>(x) * static_cast<wrap_uint_t<T>>(s)) : x;
  });
}

}  // namespace

void register_elementwise_binary_ops(OpTable& t) {
  t.add("", "Add", k_add);
  t.add("", "Sub", k_sub);
  t.add("", "Mul", k_mul);
  t.add("", "Div", k_div);
  t.add("", "Mod", k_mod);
  t.add("", "Pow", k_pow);
  t.add("", "Equal", k_equal);
  t.add("", "Greater", k_greater);
  t.add("", "GreaterOrEqual", k_greater_equal);
  t.add("", "Less", k_less);
  t.add("", "LessOrEqual", k_less_equal);
  t.add("", "And", k_and);
  t.add("", "Or", k_or);
  t.add("", "Xor", k_xor);
  t.add("", "BitwiseAnd", k_bitwise_and);
  t.add("", "BitwiseOr", k_bitwise_or);
  t.add("", "BitwiseXor", k_bitwise_xor);
  t.add("", "BitShift", k_bitshift);
  t.add("", "Max", k_max);
  t.add("", "Min", k_min);
  t.add("", "Sum", k_sum);
  t.add("", "Mean", k_mean);
  t.add("", "Where", k_where);
  t.add("", "Clip", k_clip);
  t.add("", "PRelu", k_prelu);
}

}  // namespace hodu::interp
