// Elementwise unary ops oneDNN's eltwise does not run (elementwise.cc has Relu, Sigmoid, Tanh,
// Exp, Sqrt, ... on f32): Cast and CastLike between the dtypes models use (f32, f64, f16, bf16,
// i64, i32, i8, u8, bool), the remaining activations and math (Softplus, Erf, HardSigmoid,
// Sign, Floor, Ceil, Round, Log, Reciprocal, Sin, Cos, Softsign, Mish, Selu, Celu, ...), the
// integer forms of Neg/Abs/Relu/Sign, Not, IsNaN and IsInf. One loop per op and dtype over
// chunks split across the threads; results equal the interpreter's (same formulas, same
// rounding: elementwise_unary.cc, core's Tensor::cast).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/float_convert.h"
#include "engines/cpu/tensor_step.h"
#include "engines/interp/ops/scalar_math.h"

namespace hodu::cpu {
namespace {

constexpr int64_t kChunk = 1 << 14;

// f(begin, end) over [0, n) in chunks, threaded when n is large.
template <typename F>
void chunks(int64_t n, int threads, F&& f) {
  parallel_for((n + kChunk - 1) / kChunk, n >= 2 * kChunk ? threads : 1,
               [&](int64_t c) { f(c * kChunk, std::min(n, (c + 1) * kChunk)); });
}

// ---- Cast ----------------------------------------------------------------------

// The storage types the cast loops convert between; f16 and bf16 as their bits.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
struct Bool8 {
  uint8_t v;
};

int64_t double_to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

template <typename T>
constexpr bool is_int = std::is_integral_v<T>;

template <typename From>
inline double as_double(From v) {
  if constexpr (std::is_same_v<From, F16>) return f16_to_f32(v.bits);
  else if constexpr (std::is_same_v<From, BF16>) return bf16_to_f32(v.bits);
  else if constexpr (std::is_same_v<From, Bool8>) return v.v ? 1.0 : 0.0;
  else return static_cast<double>(v);
}

template <typename From>
inline int64_t as_int64(From v) {
  if constexpr (std::is_same_v<From, Bool8>) return v.v ? 1 : 0;
  else if constexpr (is_int<From>) return static_cast<int64_t>(v);
  else return double_to_int64(as_double(v));
}

// Core's Tensor::cast, element by element, for these types.
template <typename From, typename To>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, Bool8>) {
    if constexpr (is_int<From>) return Bool8{static_cast<uint8_t>(v != 0)};
    else if constexpr (std::is_same_v<From, Bool8>) return v;
    else return Bool8{static_cast<uint8_t>(as_double(v) != 0.0)};
  } else if constexpr (is_int<To>) {
    return static_cast<To>(as_int64(v));
  } else if constexpr (std::is_same_v<To, double>) {
    return as_double(v);
  } else {
    float f;
    if constexpr (std::is_same_v<From, int64_t>) f = static_cast<float>(v);  // rounded once from the integer
    else if constexpr (std::is_same_v<From, float>) f = v;
    else f = static_cast<float>(as_double(v));
    if constexpr (std::is_same_v<To, float>) return f;
    else if constexpr (std::is_same_v<To, F16>) return F16{f32_to_f16(f)};  // not from f64 (make_cast)
    else {
      return BF16{f32_to_bf16(f)};
    }
  }
}

template <typename F>
bool dispatch_cast_type(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: f.template operator()<float>(); return true;
    case DType::F64: f.template operator()<double>(); return true;
    case DType::F16: f.template operator()<F16>(); return true;
    case DType::BF16: f.template operator()<BF16>(); return true;
    case DType::I64: f.template operator()<int64_t>(); return true;
    case DType::I32: f.template operator()<int32_t>(); return true;
    case DType::I8: f.template operator()<int8_t>(); return true;
    case DType::U8: f.template operator()<uint8_t>(); return true;
    case DType::Bool: f.template operator()<Bool8>(); return true;
    default: return false;
  }
}

bool castable(DType dt) {
  return dt == DType::F32 || dt == DType::F64 || dt == DType::F16 || dt == DType::BF16 || dt == DType::I64 ||
         dt == DType::I32 || dt == DType::I8 || dt == DType::U8 || dt == DType::Bool;
}

class CastStep : public TensorStep {
 public:
  CastStep(DType from, DType to) : from_(from), to_(to) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, to_, in[0]->shape());
    const int64_t n = y.numel();
    const void* src = in[0]->raw_data();
    void* dst = y.raw_data();
    if (from_ == to_) {
      if (src != dst) std::memcpy(dst, src, y.nbytes());
      return;
    }
    dispatch_cast_type(from_, [&]<typename From>() {
      dispatch_cast_type(to_, [&]<typename To>() {
        const From* s = static_cast<const From*>(src);
        To* d = static_cast<To*>(dst);
        chunks(n, rs.threads, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) d[i] = convert<From, To>(s[i]);
        });
      });
    });
  }

 private:
  DType from_, to_;
};

bool make_cast(PlanBuilder& b, const Node& n) {
  DType to;
  if (n.op_type == "Cast") {
    if (!n.attr("to")) return false;
    auto t = dtype_from_onnx(static_cast<int>(n.get_int("to", 0)));
    if (!t) return false;
    to = *t;
  } else if (n.op_type == "CastLike") {
    if (n.inputs.size() != 2) return false;
    to = dtype_of(b, n.inputs[1]);
  } else {
    return false;
  }
  const DType from = dtype_of(b, n.inputs[0]);
  if (!castable(from) || !castable(to)) return false;
  // f64 → f16 rounds once from the double in the interpreter (round to odd): not done here.
  if (from == DType::F64 && (to == DType::F16 || to == DType::BF16)) return false;
  if (n.get_int("saturate", 1) == 0) return false;  // only matters for float8, which is not here
  auto step = std::make_unique<CastStep>(from, to);
  add_tensor_step(b, n, std::move(step), {to}, "cast loop", {1});  // CastLike: input 1 only gives the dtype
  return true;
}

// ---- unary math ----------------------------------------------------------------

enum class Un {
  Neg, Abs, Sign, Relu, Reciprocal, Floor, Ceil, Round, Log, Sin, Cos, Tan, Erf, Softplus, Softsign, HardSigmoid,
  HardSwish, Mish, Selu, Celu, Elu, LeakyRelu, ThresholdedRelu, Exp, Sqrt, Sigmoid, Tanh, Not, IsNaN, IsInf, Swish,
  Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh
};

struct UnParams {
  float alpha = 0, beta = 0, gamma = 0;
  bool detect_pos = true, detect_neg = true;
};

using interp::sigmoid;
using interp::softplus;
template <typename T>
using wrap_t = interp::wrap_uint_t<T>;

// The interpreter's formulas (elementwise_unary.cc) in the input's type.
template <Un op, typename T>
inline T unary(T v, const UnParams& p) {
  if constexpr (!std::is_floating_point_v<T>) {
    if constexpr (op == Un::Neg) return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(v));
    else if constexpr (op == Un::Abs) {
      if constexpr (std::is_unsigned_v<T>) return v;
      else return v < 0 ? static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(v)) : v;
    } else if constexpr (op == Un::Sign) return static_cast<T>(v > 0 ? 1 : (v < 0 ? -1 : 0));
    else return v > T(0) ? v : T(0);  // Relu
  } else {
    if constexpr (op == Un::Neg) return -v;
    else if constexpr (op == Un::Abs) return std::fabs(v);
    else if constexpr (op == Un::Sign) return std::isnan(v) ? v : static_cast<T>(v > 0 ? 1 : (v < 0 ? -1 : 0));
    else if constexpr (op == Un::Relu) return std::isnan(v) ? v : (v > T(0) ? v : T(0));
    else if constexpr (op == Un::Reciprocal) return T(1) / v;
    else if constexpr (op == Un::Floor) return std::floor(v);
    else if constexpr (op == Un::Ceil) return std::ceil(v);
    else if constexpr (op == Un::Round) {
      T r = std::round(v);
      if (std::fabs(v - std::trunc(v)) == T(0.5)) r = T(2) * std::round(v / T(2));
      return r;
    } else if constexpr (op == Un::Log) return std::log(v);
    else if constexpr (op == Un::Exp) return std::exp(v);
    else if constexpr (op == Un::Sqrt) return std::sqrt(v);
    else if constexpr (op == Un::Sin) return std::sin(v);
    else if constexpr (op == Un::Cos) return std::cos(v);
    else if constexpr (op == Un::Tan) return std::tan(v);
    else if constexpr (op == Un::Asin) return std::asin(v);
    else if constexpr (op == Un::Acos) return std::acos(v);
    else if constexpr (op == Un::Atan) return std::atan(v);
    else if constexpr (op == Un::Sinh) return std::sinh(v);
    else if constexpr (op == Un::Cosh) return std::cosh(v);
    else if constexpr (op == Un::Asinh) return std::asinh(v);
    else if constexpr (op == Un::Acosh) return std::acosh(v);
    else if constexpr (op == Un::Atanh) return std::atanh(v);
    else if constexpr (op == Un::Erf) return std::erf(v);
    else if constexpr (op == Un::Sigmoid) return sigmoid(v);
    else if constexpr (op == Un::Tanh) return std::tanh(v);
    else if constexpr (op == Un::Softplus) return softplus(v);
    else if constexpr (op == Un::Softsign) return v / (T(1) + std::fabs(v));
    else if constexpr (op == Un::HardSigmoid) {
      T y = T(p.alpha) * v + T(p.beta);
      return std::max(T(0), std::min(T(1), y));
    } else if constexpr (op == Un::HardSwish) {
      T y = v * T(1.0 / 6.0) + T(0.5);
      return v * std::max(T(0), std::min(T(1), y));
    } else if constexpr (op == Un::Mish) return v * std::tanh(softplus(v));
    else if constexpr (op == Un::Selu) return v > T(0) ? T(p.gamma) * v : T(p.gamma) * (std::exp(v) * T(p.alpha) - T(p.alpha));
    else if constexpr (op == Un::Celu)
      return std::max(T(0), v) + std::min(T(0), T(p.alpha) * (std::exp(v / T(p.alpha)) - T(1)));
    else if constexpr (op == Un::Elu) return v > T(0) ? v : (std::exp(v) - T(1)) * T(p.alpha);
    else if constexpr (op == Un::LeakyRelu) return v >= 0 ? v : v * T(p.alpha);
    else if constexpr (op == Un::ThresholdedRelu) return v > T(p.alpha) ? v : T(0);
    else if constexpr (op == Un::Swish) return v * sigmoid(T(p.alpha) * v);
    else return v;
  }
}

template <Un op, typename T>
void unary_loop(const T* x, T* y, int64_t n, int threads, const UnParams& p) {
  chunks(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = unary<op, T>(x[i], p);
  });
}

template <typename T>
void unary_typed(Un op, const T* x, T* y, int64_t n, int threads, const UnParams& p) {
#define HODU_UN(name) \
  case Un::name: return unary_loop<Un::name, T>(x, y, n, threads, p);
  switch (op) {
    HODU_UN(Neg) HODU_UN(Abs) HODU_UN(Sign) HODU_UN(Relu)
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      HODU_UN(Reciprocal) HODU_UN(Floor) HODU_UN(Ceil) HODU_UN(Round) HODU_UN(Log) HODU_UN(Sin) HODU_UN(Cos)
      HODU_UN(Tan) HODU_UN(Erf) HODU_UN(Softplus) HODU_UN(Softsign) HODU_UN(HardSigmoid) HODU_UN(HardSwish)
      HODU_UN(Mish) HODU_UN(Selu) HODU_UN(Celu) HODU_UN(Elu) HODU_UN(LeakyRelu) HODU_UN(ThresholdedRelu)
      HODU_UN(Exp) HODU_UN(Sqrt) HODU_UN(Sigmoid) HODU_UN(Tanh) HODU_UN(Swish) HODU_UN(Asin) HODU_UN(Acos)
      HODU_UN(Atan) HODU_UN(Sinh) HODU_UN(Cosh) HODU_UN(Asinh) HODU_UN(Acosh) HODU_UN(Atanh)
      default: break;
    }
  }
#undef HODU_UN
}

class UnaryStep : public TensorStep {
 public:
  UnaryStep(Un op, DType dt, UnParams p) : op_(op), dt_(dt), p_(p) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const int64_t n = in[0]->numel();
    if (op_ == Un::Not || op_ == Un::IsNaN || op_ == Un::IsInf) {
      Tensor& y = out(rs, 0, DType::Bool, in[0]->shape());
      uint8_t* o = static_cast<uint8_t*>(y.raw_data());
      if (op_ == Un::Not) {
        const uint8_t* x = static_cast<const uint8_t*>(in[0]->raw_data());
        chunks(n, rs.threads, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) o[i] = x[i] ? 0 : 1;
        });
        return;
      }
      dispatch_compute(dt_, [&]<typename T>() {
        if constexpr (std::is_floating_point_v<T>) {
          const T* x = in[0]->data<T>();
          const bool nan = op_ == Un::IsNaN, pos = p_.detect_pos, neg = p_.detect_neg;
          chunks(n, rs.threads, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
              const T v = x[i];
              o[i] = nan ? v != v : ((pos && v == std::numeric_limits<T>::infinity()) ||
                                     (neg && v == -std::numeric_limits<T>::infinity()));
            }
          });
        }
      });
      return;
    }
    Tensor& y = out(rs, 0, dt_, in[0]->shape());
    dispatch_compute(dt_, [&]<typename T>() {
      unary_typed<T>(op_, in[0]->data<T>(), static_cast<T*>(y.raw_data()), n, rs.threads, p_);
    });
  }

 private:
  Un op_;
  DType dt_;
  UnParams p_;
};

bool make_unary_op(PlanBuilder& b, const Node& n) {
  static const std::map<std::string, Un> ops = {
      {"Neg", Un::Neg}, {"Abs", Un::Abs}, {"Sign", Un::Sign}, {"Relu", Un::Relu}, {"Reciprocal", Un::Reciprocal},
      {"Floor", Un::Floor}, {"Ceil", Un::Ceil}, {"Round", Un::Round}, {"Log", Un::Log}, {"Sin", Un::Sin},
      {"Cos", Un::Cos}, {"Tan", Un::Tan}, {"Erf", Un::Erf}, {"Softplus", Un::Softplus}, {"Softsign", Un::Softsign},
      {"HardSigmoid", Un::HardSigmoid}, {"HardSwish", Un::HardSwish}, {"Mish", Un::Mish}, {"Selu", Un::Selu},
      {"Celu", Un::Celu}, {"Elu", Un::Elu}, {"LeakyRelu", Un::LeakyRelu}, {"ThresholdedRelu", Un::ThresholdedRelu},
      {"Exp", Un::Exp}, {"Sqrt", Un::Sqrt}, {"Sigmoid", Un::Sigmoid}, {"Tanh", Un::Tanh}, {"Not", Un::Not},
      {"IsNaN", Un::IsNaN}, {"IsInf", Un::IsInf}, {"Swish", Un::Swish}, {"Asin", Un::Asin}, {"Acos", Un::Acos},
      {"Atan", Un::Atan}, {"Sinh", Un::Sinh}, {"Cosh", Un::Cosh}, {"Asinh", Un::Asinh}, {"Acosh", Un::Acosh},
      {"Atanh", Un::Atanh}};
  auto it = ops.find(n.op_type);
  if (it == ops.end() || n.inputs.size() != 1) return false;
  const Un op = it->second;
  const DType dt = dtype_of(b, n.inputs[0]);
  if (op == Un::Not) {
    if (dt != DType::Bool) return false;
  } else if (!is_compute_dtype(dt)) {
    return false;
  }
  const bool int_ok = op == Un::Neg || op == Un::Abs || op == Un::Sign || op == Un::Relu || op == Un::Not;
  if (!int_ok && dt != DType::F32 && dt != DType::F64) return false;
  UnParams p;
  switch (op) {
    case Un::HardSigmoid:
      p.alpha = n.get_float("alpha", 0.2f);
      p.beta = n.get_float("beta", 0.5f);
      break;
    case Un::Selu:
      p.alpha = n.get_float("alpha", 1.67326319217681884765625f);
      p.gamma = n.get_float("gamma", 1.05070102214813232421875f);
      break;
    case Un::Celu:
      p.alpha = n.get_float("alpha", 1.0f);
      if (p.alpha == 0.0f) return false;  // the interpreter's error
      break;
    case Un::Elu: p.alpha = n.get_float("alpha", 1.0f); break;
    case Un::LeakyRelu: p.alpha = n.get_float("alpha", 0.01f); break;
    case Un::ThresholdedRelu: p.alpha = n.get_float("alpha", 1.0f); break;
    case Un::Swish: p.alpha = n.get_float("alpha", 1.0f); break;
    case Un::IsInf:
      p.detect_pos = n.get_int("detect_positive", 1) != 0;
      p.detect_neg = n.get_int("detect_negative", 1) != 0;
      break;
    default: break;
  }
  const DType out_dt = op == Un::Not || op == Un::IsNaN || op == Un::IsInf ? DType::Bool : dt;
  add_tensor_step(b, n, std::make_unique<UnaryStep>(op, dt == DType::Bool ? DType::U8 : dt, p), {out_dt}, "unary loop");
  return true;
}

}  // namespace

bool make_unary_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  return make_cast(b, n) || make_unary_op(b, n);
}

}  // namespace hodu::cpu
