// Broadcasting ops in every pattern and dtype the models use: arithmetic (Add Sub Mul Div Pow
// Mod Max Min Sum Mean PRelu), comparisons (Equal Less Greater ...), logic (And Or Xor), Where,
// Expand and Clip with tensor bounds. What oneDNN's binary primitive runs (f32, one input of the
// output's shape) stays in elementwise.cc; this is the rest: integer and bool tensors (index
// math, masks), both inputs broadcasting, non-commutative ops with a broadcast first input.
// Rows of the merged broadcast (Broadcast::for_rows) run a loop specialized on which inputs
// advance along the row, so GCC vectorizes the common cases.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engines/cpu/tensor_step.h"
#include "engines/interp/ops/scalar_math.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

enum class Bin { Add, Sub, Mul, Div, Pow, Mod, FMod, Max, Min, PRelu, Eq, Lt, Le, Gt, Ge, And, Or, Xor };

std::optional<Bin> bin_of(const std::string& op, const Node& n) {
  static const std::map<std::string, Bin> ops = {
      {"Add", Bin::Add},     {"Sub", Bin::Sub},   {"Mul", Bin::Mul},  {"Div", Bin::Div},
      {"Pow", Bin::Pow},     {"Max", Bin::Max},   {"Min", Bin::Min},  {"PRelu", Bin::PRelu},
      {"Equal", Bin::Eq},    {"Less", Bin::Lt},   {"LessOrEqual", Bin::Le}, {"Greater", Bin::Gt},
      {"GreaterOrEqual", Bin::Ge}, {"And", Bin::And}, {"Or", Bin::Or}, {"Xor", Bin::Xor},
      {"Sum", Bin::Add}};
  if (op == "Mod") return n.get_int("fmod", 0) == 1 ? Bin::FMod : Bin::Mod;
  auto it = ops.find(op);
  if (it == ops.end()) return std::nullopt;
  return it->second;
}

bool is_compare(Bin op) { return op == Bin::Eq || op == Bin::Lt || op == Bin::Le || op == Bin::Gt || op == Bin::Ge; }
bool is_logic(Bin op) { return op == Bin::And || op == Bin::Or || op == Bin::Xor; }

template <typename T>
using wrap_t = interp::wrap_uint_t<T>;

// The interpreter's semantics (elementwise_binary.cc): integers wrap, integer x / 0 = 0, Mod has
// the divisor's sign (numpy.mod) or the dividend's (fmod = 1), Max/Min propagate NaN.
template <Bin op, typename T>
inline auto apply(T x, T y) {
  if constexpr (op == Bin::Add || op == Bin::Sub || op == Bin::Mul) {
    if constexpr (std::is_floating_point_v<T>) {
      return op == Bin::Add ? x + y : op == Bin::Sub ? x - y : x * y;
    } else {
      using U = wrap_t<T>;
      const U a = static_cast<U>(x), b = static_cast<U>(y);
      return static_cast<T>(op == Bin::Add ? a + b : op == Bin::Sub ? a - b : a * b);
    }
  } else if constexpr (op == Bin::Div) {
    return interp::div_value(x, y);
  } else if constexpr (op == Bin::Pow) {
    return static_cast<T>(std::pow(x, y));  // floats only (make_binary_op)
  } else if constexpr (op == Bin::FMod) {
    return interp::fmod_value(x, y);
  } else if constexpr (op == Bin::Mod) {
    return interp::mod_value(x, y);
  } else if constexpr (op == Bin::Max || op == Bin::Min) {
    if constexpr (std::is_floating_point_v<T>) {
      if (x != x) return x;
      if (y != y) return y;
    }
    return op == Bin::Max ? (x >= y ? x : y) : (x <= y ? x : y);
  } else if constexpr (op == Bin::PRelu) {
    return x < T(0) ? static_cast<T>(x * y) : x;
  } else if constexpr (op == Bin::Eq) {
    return static_cast<uint8_t>(x == y);
  } else if constexpr (op == Bin::Lt) {
    return static_cast<uint8_t>(x < y);
  } else if constexpr (op == Bin::Le) {
    return static_cast<uint8_t>(x <= y);
  } else if constexpr (op == Bin::Gt) {
    return static_cast<uint8_t>(x > y);
  } else if constexpr (op == Bin::Ge) {
    return static_cast<uint8_t>(x >= y);
  } else if constexpr (op == Bin::And) {
    return static_cast<uint8_t>((x != 0) & (y != 0));
  } else if constexpr (op == Bin::Or) {
    return static_cast<uint8_t>((x != 0) | (y != 0));
  } else {
    return static_cast<uint8_t>((x != 0) != (y != 0));
  }
}

// y = a op b over the broadcast, one loop per pattern of the row: both advance, one is a
// scalar along it, or both.
template <Bin op, typename T>
void binary_rows(const Broadcast& bc, int threads, const T* a, const T* b, void* out) {
  using R = decltype(apply<op, T>(T(), T()));
  R* y = static_cast<R*>(out);
  bc.for_rows(threads, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t len,
                           const std::array<int64_t, 3>& inner) {
    const T* pa = a + off[0];
    const T* pb = b + off[1];
    R* py = y + o;
    if (inner[0] && inner[1]) {
      for (int64_t j = 0; j < len; ++j) py[j] = apply<op, T>(pa[j], pb[j]);
    } else if (inner[0]) {
      const T v = pb[0];
      if constexpr (op == Bin::Pow) {
        // x^2 and x^3 (variances, tanh GELU's cube) as products: the C library's pow ran one
        // element at a time, 20 ns each. x·x is pow's correctly rounded square; x·x·x is within
        // an ulp of the cube.
        if (v == T(2)) {
          for (int64_t j = 0; j < len; ++j) py[j] = pa[j] * pa[j];
          return;
        }
        if (v == T(3)) {
          for (int64_t j = 0; j < len; ++j) py[j] = pa[j] * pa[j] * pa[j];
          return;
        }
      }
      for (int64_t j = 0; j < len; ++j) py[j] = apply<op, T>(pa[j], v);
    } else if (inner[1]) {
      const T v = pa[0];
      for (int64_t j = 0; j < len; ++j) py[j] = apply<op, T>(v, pb[j]);
    } else {
      const R v = apply<op, T>(pa[0], pb[0]);
      for (int64_t j = 0; j < len; ++j) py[j] = v;
    }
  });
}

template <typename T>
void binary_typed(Bin op, const Broadcast& bc, int threads, const T* a, const T* b, void* y) {
  switch (op) {
    case Bin::Add: return binary_rows<Bin::Add, T>(bc, threads, a, b, y);
    case Bin::Sub: return binary_rows<Bin::Sub, T>(bc, threads, a, b, y);
    case Bin::Mul: return binary_rows<Bin::Mul, T>(bc, threads, a, b, y);
    case Bin::Div: return binary_rows<Bin::Div, T>(bc, threads, a, b, y);
    case Bin::Mod: return binary_rows<Bin::Mod, T>(bc, threads, a, b, y);
    case Bin::FMod: return binary_rows<Bin::FMod, T>(bc, threads, a, b, y);
    case Bin::Max: return binary_rows<Bin::Max, T>(bc, threads, a, b, y);
    case Bin::Min: return binary_rows<Bin::Min, T>(bc, threads, a, b, y);
    case Bin::PRelu: return binary_rows<Bin::PRelu, T>(bc, threads, a, b, y);
    case Bin::Eq: return binary_rows<Bin::Eq, T>(bc, threads, a, b, y);
    case Bin::Lt: return binary_rows<Bin::Lt, T>(bc, threads, a, b, y);
    case Bin::Le: return binary_rows<Bin::Le, T>(bc, threads, a, b, y);
    case Bin::Gt: return binary_rows<Bin::Gt, T>(bc, threads, a, b, y);
    case Bin::Ge: return binary_rows<Bin::Ge, T>(bc, threads, a, b, y);
    case Bin::Pow:
      if constexpr (std::is_floating_point_v<T>) return binary_rows<Bin::Pow, T>(bc, threads, a, b, y);
      return;
    case Bin::And:
    case Bin::Or:
    case Bin::Xor:
      if constexpr (std::is_same_v<T, uint8_t>) {
        if (op == Bin::And) return binary_rows<Bin::And, T>(bc, threads, a, b, y);
        if (op == Bin::Or) return binary_rows<Bin::Or, T>(bc, threads, a, b, y);
        return binary_rows<Bin::Xor, T>(bc, threads, a, b, y);
      }
      return;
  }
}

// A binary op, or a variadic Max/Min/Sum/Mean folded input by input into the output.
class BinaryOpStep : public TensorStep {
 public:
  BinaryOpStep(Bin op, DType in, DType out, bool mean) : op_(op), in_dt_(in), out_dt_(out), mean_(mean) {}
  void configure(const std::vector<const Tensor*>& in) override {
    std::vector<std::vector<int64_t>> shapes;
    for (const Tensor* t : in) shapes.push_back(t->shape());
    auto s = Broadcast::shape_of(shapes);
    if (!s)
      fail(ErrorCode::InvalidArgument, "{}: input shapes {} do not broadcast", label,
           fmt::format("{}", fmt::join(shapes_strings(shapes), ", ")));
    shape_ = *s;
    steps_.clear();
    if (in.size() == 1) steps_.push_back(*Broadcast::make(shape_, {shapes[0], shapes[0]}));
    else steps_.push_back(*Broadcast::make(shape_, {shapes[0], shapes[1]}));
    for (size_t k = 2; k < in.size(); ++k) steps_.push_back(*Broadcast::make(shape_, {shape_, shapes[k]}));
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, out_dt_, shape_);
    if (y.numel() == 0) return;
    dispatch_compute(in_dt_, [&]<typename T>() {
      const T* a = in[0]->data<T>();
      const T* b = in.size() > 1 ? in[1]->data<T>() : a;
      binary_typed<T>(in.size() == 1 && op_ == Bin::Add ? Bin::Max : op_, steps_[0], rs.threads, a, b, y.raw_data());
      T* yp = static_cast<T*>(y.raw_data());
      for (size_t k = 2; k < in.size(); ++k) binary_typed<T>(op_, steps_[k - 1], rs.threads, yp, in[k]->data<T>(), yp);
      if (mean_) {
        if constexpr (std::is_floating_point_v<T>) {
          const T inv = T(1) / static_cast<T>(in.size());
          const int64_t n = y.numel();
          for (int64_t i = 0; i < n; ++i) yp[i] *= inv;
        }
      }
    });
  }

 private:
  static std::vector<std::string> shapes_strings(const std::vector<std::vector<int64_t>>& s) {
    std::vector<std::string> r;
    for (const auto& v : s) r.push_back(shape_to_string(v));
    return r;
  }
  Bin op_;
  DType in_dt_, out_dt_;
  bool mean_;
  std::vector<int64_t> shape_;
  std::vector<Broadcast> steps_;
};

bool make_binary_op(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty()) return false;
  const bool mean = n.op_type == "Mean";
  auto op = mean ? std::optional<Bin>(Bin::Add) : bin_of(n.op_type, n);
  if (!op) return false;
  const bool variadic = n.op_type == "Max" || n.op_type == "Min" || n.op_type == "Sum" || mean;
  if (!variadic && n.inputs.size() != 2) return false;
  if (n.inputs.size() > 8) return false;
  const DType dt = dtype_of(b, n.inputs[0]);
  for (const auto& in : n.inputs)
    if (in.empty() || dtype_of(b, in) != dt) return false;
  DType in_dt = dt == DType::Bool ? DType::U8 : dt;
  if (!is_compute_dtype(in_dt)) return false;
  if (is_logic(*op) && dt != DType::Bool) return false;
  if (dt == DType::Bool && !is_logic(*op) && *op != Bin::Eq) return false;
  if ((*op == Bin::Pow || mean || *op == Bin::PRelu) && !dtype_is_float(dt)) return false;
  if (*op == Bin::PRelu) {  // the slope broadcasts into x, never the other way
    auto xs = b.static_type(n.inputs[0]), ys = b.static_type(n.outputs[0]);
    if (!xs || !ys || xs->second != ys->second) return false;
  }
  const DType out_dt = is_compare(*op) || is_logic(*op) ? DType::Bool : dt;
  add_tensor_step(b, n, std::make_unique<BinaryOpStep>(*op, in_dt, out_dt, mean), {out_dt}, "broadcast loop");
  return true;
}

// Where(cond, x, y): one loop over the three-way broadcast, elements moved by their size.
class WhereStep : public TensorStep {
 public:
  explicit WhereStep(DType dt) : dt_(dt) {}
  void configure(const std::vector<const Tensor*>& in) override {
    std::vector<std::vector<int64_t>> shapes{in[0]->shape(), in[1]->shape(), in[2]->shape()};
    auto s = Broadcast::shape_of(shapes);
    if (!s) fail(ErrorCode::InvalidArgument, "{}: condition, X and Y do not broadcast", label);
    shape_ = *s;
    bc_ = *Broadcast::make(shape_, shapes);
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, dt_, shape_);
    const uint8_t* c = static_cast<const uint8_t*>(in[0]->raw_data());
    dispatch_bytes(dt_, [&]<typename T>() {
      const T* xp = static_cast<const T*>(in[1]->raw_data());
      const T* yp = static_cast<const T*>(in[2]->raw_data());
      T* o = static_cast<T*>(y.raw_data());
      bc_.for_rows(rs.threads, [&](int64_t q, const std::array<int64_t, 3>& off, int64_t len,
                                   const std::array<int64_t, 3>& inner) {
        const uint8_t* pc = c + off[0];
        const T* px = xp + off[1];
        const T* py = yp + off[2];
        T* po = o + q;
        if (inner[0] && inner[1] && inner[2]) {
          for (int64_t j = 0; j < len; ++j) po[j] = pc[j] ? px[j] : py[j];
        } else if (inner[0] && !inner[1] && !inner[2]) {  // a mask choosing between two scalars
          const T a = px[0], v = py[0];
          for (int64_t j = 0; j < len; ++j) po[j] = pc[j] ? a : v;
        } else if (inner[0] && inner[1]) {
          const T v = py[0];
          for (int64_t j = 0; j < len; ++j) po[j] = pc[j] ? px[j] : v;
        } else if (inner[0] && inner[2]) {
          const T a = px[0];
          for (int64_t j = 0; j < len; ++j) po[j] = pc[j] ? a : py[j];
        } else if (!inner[0]) {  // one condition for the row: a copy
          const T* src = pc[0] ? px : py;
          if (pc[0] ? inner[1] : inner[2]) std::memcpy(po, src, static_cast<size_t>(len) * sizeof(T));
          else
            for (int64_t j = 0; j < len; ++j) po[j] = src[0];
        }
      });
    });
  }

 private:
  DType dt_;
  std::vector<int64_t> shape_;
  Broadcast bc_;
};

bool make_where(PlanBuilder& b, const Node& n) {
  if (n.op_type != "Where" || n.inputs.size() != 3) return false;
  const DType dt = dtype_of(b, n.inputs[1]);
  if (dtype_of(b, n.inputs[0]) != DType::Bool || dtype_of(b, n.inputs[2]) != dt || !movable_dtype(dt)) return false;
  add_tensor_step(b, n, std::make_unique<WhereStep>(dt), {dt}, "where loop");
  return true;
}

// Expand(x, shape): x broadcast into max(x's shape, shape), read at run time.
class ExpandStep : public TensorStep {
 public:
  explicit ExpandStep(DType dt) : dt_(dt) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    auto want = in[1]->to_int64s();
    auto s = Broadcast::shape_of({in[0]->shape(), want});
    if (!s)
      fail(ErrorCode::InvalidArgument, "{}: input {} does not broadcast to shape {}", label, in[0]->shape_string(),
           shape_to_string(want));
    if (*s != shape_ || in[0]->shape() != x_shape_) {
      shape_ = *s;
      x_shape_ = in[0]->shape();
      bc_ = *Broadcast::make(shape_, {x_shape_});
    }
    Tensor& y = out(rs, 0, dt_, shape_);
    dispatch_bytes(dt_, [&]<typename T>() {
      const T* x = static_cast<const T*>(in[0]->raw_data());
      T* o = static_cast<T*>(y.raw_data());
      bc_.for_rows(rs.threads, [&](int64_t q, const std::array<int64_t, 3>& off, int64_t len,
                                   const std::array<int64_t, 3>& inner) {
        if (inner[0]) {
          std::memcpy(o + q, x + off[0], static_cast<size_t>(len) * sizeof(T));
        } else {
          const T v = x[off[0]];
          for (int64_t j = 0; j < len; ++j) o[q + j] = v;
        }
      });
    });
  }

 private:
  DType dt_;
  std::vector<int64_t> shape_, x_shape_;
  Broadcast bc_;
};

bool make_expand(PlanBuilder& b, const Node& n) {
  if (n.op_type != "Expand" || n.inputs.size() != 2) return false;
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!movable_dtype(dt) || dtype_of(b, n.inputs[1]) != DType::I64) return false;
  add_tensor_step(b, n, std::make_unique<ExpandStep>(dt), {dt}, "expand copy");
  return true;
}

// Clip with bounds oneDNN's eltwise cannot take: tensors computed at run time (paddle2onnx's
// CastLike → Clip), integer inputs.
class ClipStep : public TensorStep {
 public:
  explicit ClipStep(DType dt) : dt_(dt) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    for (size_t i : {1, 2})
      if (in.size() > i && in[i] && in[i]->numel() != 1)
        fail(ErrorCode::InvalidArgument, "{}: {} must be a scalar, got shape {}", label, i == 1 ? "min" : "max",
             in[i]->shape_string());
    Tensor& y = out(rs, 0, dt_, in[0]->shape());
    dispatch_compute(dt_, [&]<typename T>() {
      const bool has_lo = in.size() > 1 && in[1], has_hi = in.size() > 2 && in[2];
      const T lo = has_lo ? in[1]->data<T>()[0] : std::numeric_limits<T>::lowest();
      const T hi = has_hi ? in[2]->data<T>()[0] : std::numeric_limits<T>::max();
      const T* x = in[0]->data<T>();
      T* o = static_cast<T*>(y.raw_data());
      const int64_t n = y.numel();
      constexpr int64_t kChunk = 1 << 14;
      parallel_for((n + kChunk - 1) / kChunk, n >= (1 << 15) ? rs.threads : 1, [&](int64_t c) {
        const int64_t e = std::min(n, (c + 1) * kChunk);
        for (int64_t i = c * kChunk; i < e; ++i) {
          T v = x[i];
          v = v < lo ? lo : v;  // NaN stays NaN, as in the interpreter
          o[i] = v > hi ? hi : v;
        }
      });
    });
  }

 private:
  DType dt_;
};

bool make_clip(PlanBuilder& b, const Node& n) {
  if (n.op_type != "Clip") return false;
  const DType dt = dtype_of(b, n.inputs[0]);
  if (!is_compute_dtype(dt)) return false;
  for (size_t i = 1; i < n.inputs.size() && i < 3; ++i)
    if (n.has_input(i) && dtype_of(b, n.inputs[i]) != dt) return false;
  add_tensor_step(b, n, std::make_unique<ClipStep>(dt), {dt}, "clip loop");
  return true;
}

}  // namespace

bool make_broadcast_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  return make_where(b, n) || make_expand(b, n) || make_clip(b, n) || make_binary_op(b, n);
}

}  // namespace hodu::cpu
