#include "compilers/c/sym_shapes.h"

#include "compilers/c/c_codegen.h"
#include "compilers/c/ops_generic.h"
#include "compilers/c/sequence_lowering.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "passes/graph_utils.h"

namespace hodu::compilers::c {
namespace {

// Size values stay small: a shape, a few indices.
constexpr int64_t kMaxValueElements = 64;

struct Ctx {
  const Graph& g;
  SymInfo& info;
  // Data read as sizes becomes late dims in the final pass only (graph_prep's partial passes
  // run while the size glue is still being folded into values).
  bool allow_late = false;

  bool has_shape(const std::string& v) const {
    if (info.shapes.count(v) || g.initializer(v)) return true;
    auto t = g.type_of(v);
    return t && t->is_tensor() && t->shape.is_static();
  }
  SymShape shape(const std::string& v) const {
    if (auto it = info.shapes.find(v); it != info.shapes.end()) return it->second;
    if (const Tensor* t = g.initializer(v)) return to_sym(t->shape());
    auto t = g.type_of(v);
    if (t && t->is_tensor() && t->shape.is_static()) return to_sym(*t->shape.to_static());
    fail(ErrorCode::Unsupported, "value '{}' has shape {} and its sizes could not be derived from the model's inputs",
         v, t && t->is_tensor() ? t->shape.to_string() : "unknown");
  }
  DType dtype(const std::string& v) const {
    if (const Tensor* t = g.initializer(v)) return t->dtype();
    auto t = g.type_of(v);
    return t && t->is_tensor() ? t->dtype : DType::Undefined;
  }
  // Elements of an int tensor that is a constant or a size value; with `late`, of one
  // computed while running too (late dims read where the node that reads them runs).
  std::optional<SymShape> ints(const std::string& v, bool late = true) const {
    if (v.empty()) return std::nullopt;
    if (const Tensor* t = g.initializer(v)) {
      if (!dtype_is_integer(t->dtype()) && t->dtype() != DType::Bool) return std::nullopt;
      return to_sym(t->to_int64s());
    }
    if (auto it = info.values.find(v); it != info.values.end()) return it->second;
    if (!late || !allow_late) return std::nullopt;
    if (auto it = info.late_values.find(v); it != info.late_values.end()) return it->second;
    // Data read as sizes: late dims, one per element, read while running.
    DType dt = dtype(v);
    auto t = g.type_of(v);
    if (!(dt == DType::I64 || dt == DType::I32) || !t || !t->is_tensor()) return std::nullopt;
    std::optional<std::vector<int64_t>> s;
    if (auto it = info.shapes.find(v); it != info.shapes.end()) s = to_static(it->second);
    else s = t->shape.to_static();
    if (!s || shape_numel(*s) > kMaxValueElements) return std::nullopt;
    SymShape elems;
    for (int64_t k = 0; k < shape_numel(*s); ++k) elems.push_back(SymInt::dim(current_sym_table()->late_dim(std::nullopt)));
    return info.late_values[v] = elems;
  }
};

int64_t norm_axis(const Node& n, int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  HODU_CHECK(axis >= 0 && axis < std::max<int64_t>(rank, 1), ErrorCode::InvalidModel, "{}: axis {} out of range",
             n.describe(), axis);
  return axis;
}

SymShape broadcast(const Node& n, const std::vector<SymShape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  SymShape out(rank, 1);
  for (const auto& s : shapes)
    for (size_t k = 0; k < s.size(); ++k) {
      size_t d = rank - s.size() + k;
      out[d] = broadcast_dim(out[d], s[k], n.describe());
    }
  return out;
}

const std::set<std::string>& same_shape_ops() {
  static const std::set<std::string> ops = {
      "Abs", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sin",
      "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Sign", "Softplus",
      "Softsign", "Elu", "Selu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Mish", "Gelu", "Swish",
      "Celu", "Identity", "Not", "BitwiseNot", "Clip", "Shrink", "CumSum", "CumProd", "LRN", "LpNormalization",
      "Softmax", "LogSoftmax", "Hardmax", "InstanceNormalization", "MeanVarianceNormalization", "Trilu",
      "ReverseSequence", "GroupNormalization", "ScatterElements", "ScatterND", "Scatter", "TensorScatter",
      "RotaryEmbedding", "Binarizer", "Cast", "CastLike", "IsNaN", "IsInf", "BatchNormalization", "Bernoulli",
      "RandomUniformLike", "RandomNormalLike", "EyeLike", "RMSNormalization", "QuantizeLinear", "DequantizeLinear",
      "BitCast", "RegexFullMatch"};
  return ops;
}

const std::set<std::string>& broadcast_ops() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "BitwiseAnd",
                                            "BitwiseOr", "BitwiseXor", "PRelu", "Max", "Min", "Sum", "Mean",
                                            "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual",
                                            "GreaterOrEqual", "Where", "StringConcat"};
  return ops;
}

// Output size of a conv/pool window (hodu's shape inference, over SymInts).
SymInt window_out(const Node& n, const SymInt& in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                  const std::string& auto_pad, bool ceil_mode) {
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return ceildiv(in, s);
  int64_t eff = d * (k - 1) + 1;
  int64_t pad = auto_pad == "VALID" ? 0 : pb + pe;
  SymInt span = in + pad - eff;
  sym_require(sym_eq(sym_lt(span, 0), 0), n.describe() + ": the input (%lld) is smaller than the window", {in});
  SymInt out = ceil_mode ? ceildiv(span, s) + 1 : floordiv(span, s) + 1;
  if (ceil_mode) {
    // The last window must start inside the input or its left padding.
    out = out - sym_eq(sym_lt((out - 1) * s, in + (auto_pad == "VALID" ? 0 : pb)), 0);
  }
  return out;
}

std::vector<SymShape> conv_like(const Node& n, const Ctx& c, bool pool) {
  SymShape x = c.shape(n.inputs[0]);
  HODU_CHECK(x.size() >= 3, ErrorCode::InvalidModel, "{}: input of rank {}", n.describe(), x.size());
  size_t sp = x.size() - 2;
  std::vector<int64_t> kernel = n.get_ints("kernel_shape");
  SymShape out{x[0]};
  if (pool) {
    out.push_back(x[1]);
  } else {
    size_t wi = n.op_type == "QLinearConv" ? 3 : 1;
    SymShape w = c.shape(n.inputs[wi]);
    out.push_back(w[0]);
    if (kernel.empty())
      for (size_t k = 0; k < sp; ++k) {
        HODU_CHECK(w[k + 2].known(), ErrorCode::Unsupported, "{}: a kernel size known only at run time", n.describe());
        kernel.push_back(w[k + 2].value());
      }
  }
  HODU_CHECK(kernel.size() == sp, ErrorCode::InvalidModel, "{}: kernel_shape has {} dims for {} spatial dims",
             n.describe(), kernel.size(), sp);
  auto strides = n.get_ints("strides", std::vector<int64_t>(sp, 1));
  auto dil = n.get_ints("dilations", std::vector<int64_t>(sp, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
  std::string ap = n.get_string("auto_pad", "NOTSET");
  bool ceil_mode = pool && n.get_int("ceil_mode", 0) != 0;
  for (size_t k = 0; k < sp; ++k)
    out.push_back(window_out(n, x[k + 2], kernel[k], strides[k], dil[k], pads[k], pads[k + sp], ap, ceil_mode));
  return {out};
}

std::vector<SymShape> reduce_shape(const Node& n, const Ctx& c) {
  SymShape x = c.shape(n.inputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  bool arg = n.op_type == "ArgMax" || n.op_type == "ArgMin";
  bool keep = n.get_int("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (arg) axes = {n.get_int("axis", 0)};
  else if (n.has_attr("axes")) axes = n.get_ints("axes");
  else if (n.has_input(1)) {
    auto v = c.ints(n.inputs[1], false);
    if (!v || !is_static(*v)) {
      // Axes read while running (ops_generic.cc): each output dim a late dim the reduction sets.
      auto count = to_static(c.shape(n.inputs[1]));
      HODU_CHECK(!arg && count && count->size() <= 1, ErrorCode::Unsupported, "{}: axes computed while running",
                 n.describe());
      const int64_t k = shape_numel(*count);
      const bool noop = n.get_int("noop_with_empty_axes", 0) != 0;
      const int64_t rank = keep || (k == 0 && noop) ? r : k == 0 ? 0 : r - k;
      HODU_CHECK(rank >= 0, ErrorCode::InvalidModel, "{}: {} axes for rank {}", n.describe(), k, r);
      SymShape out;
      for (int64_t d = 0; d < rank; ++d) out.push_back(SymInt::dim(current_sym_table()->late_dim(0)));
      return {out};
    }
    axes = *to_static(*v);
  }
  std::vector<bool> red(r, false);
  if (axes.empty()) {
    if (arg || n.get_int("noop_with_empty_axes", 0) == 0) red.assign(r, true);
  } else {
    for (auto a : axes) red[norm_axis(n, a, r)] = true;
  }
  SymShape out;
  for (int64_t d = 0; d < r; ++d) {
    if (!red[d]) out.push_back(x[d]);
    else if (keep) out.push_back(1);
  }
  return {out};
}

std::vector<SymShape> reshape_shape(const Node& n, const Ctx& c) {
  SymShape x = c.shape(n.inputs[0]);
  auto target = c.ints(n.inputs[1]);
  HODU_CHECK(target, ErrorCode::Unsupported,
             "{}: the target shape '{}' is computed from data while running (compiled code needs it from constants "
             "or the inputs' shapes)",
             n.describe(), n.inputs[1]);
  bool allowzero = n.get_int("allowzero", 0) != 0;
  SymShape out = *target;
  int minus_one = -1;
  for (size_t k = 0; k < out.size(); ++k) {
    const SymInt& v = out[k];
    if (v.is(0) && !allowzero) {
      HODU_CHECK(k < x.size(), ErrorCode::InvalidModel, "{}: shape value 0 at {} has no input dim", n.describe(), k);
      out[k] = x[k];
    } else if (v.is(-1)) {
      HODU_CHECK(minus_one < 0, ErrorCode::InvalidModel, "{}: more than one -1", n.describe());
      minus_one = static_cast<int>(k);
    } else if (!v.known()) {
      // A size from the inputs' shapes: never 0 or -1 unless the model says so at run time.
      auto lb = v.lower_bound();
      if (!(lb && *lb >= 1)) {
        sym_require(sym_lt(0, v), n.describe() + ": target shape value %lld (0 and -1 need a constant)", {v});
      }
    }
  }
  SymInt total = numel(x);
  if (minus_one >= 0) {
    SymInt rest = 1;
    for (size_t k = 0; k < out.size(); ++k)
      if (static_cast<int>(k) != minus_one) rest *= out[k];
    SymInt q = floordiv(total, rest);
    sym_require(sym_eq(q * rest, total), n.describe() + ": cannot reshape %lld elements into a multiple of %lld",
                {total, rest});
    out[minus_one] = q;
  } else {
    sym_require(sym_eq(numel(out), total), n.describe() + ": cannot reshape %lld elements to %lld", {total, numel(out)});
  }
  return {out};
}

std::vector<SymShape> slice_shape(const Node& n, const Ctx& c) {
  SymShape x = c.shape(n.inputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  auto starts = c.ints(n.inputs[1]), ends = c.ints(n.inputs[2]);
  HODU_CHECK(starts && ends, ErrorCode::Unsupported, "{}: starts/ends computed from data while running",
             n.describe());
  std::vector<int64_t> axes, steps;
  if (n.has_input(3)) {
    auto a = c.ints(n.inputs[3]);
    HODU_CHECK(a && is_static(*a), ErrorCode::Unsupported, "{}: axes computed while running", n.describe());
    axes = *to_static(*a);
  } else {
    for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (n.has_input(4)) {
    auto s = c.ints(n.inputs[4]);
    HODU_CHECK(s && is_static(*s), ErrorCode::Unsupported, "{}: steps computed while running", n.describe());
    steps = *to_static(*s);
  } else {
    steps.assign(starts->size(), 1);
  }
  HODU_CHECK(ends->size() == starts->size() && axes.size() == starts->size() && steps.size() == starts->size(),
             ErrorCode::InvalidModel, "{}: starts, ends, axes and steps differ in length", n.describe());
  SymShape out = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = norm_axis(n, axes[i], r);
    HODU_CHECK(steps[i] != 0, ErrorCode::InvalidModel, "{}: step 0", n.describe());
    SymInt s = slice_index((*starts)[i], x[a], false, steps[i]), e = slice_index((*ends)[i], x[a], true, steps[i]);
    out[a] = slice_length(s, e, steps[i]);
  }
  return {out};
}

// ai.onnx.ml ops over an input of rank 0 to 2 ([N, C]; rank 1: N = 1), as the interpreter.
std::vector<SymShape> ml_shapes(const Node& n, const Ctx& c) {
  const std::string& op = n.op_type;
  SymShape x = c.shape(n.inputs.at(0));
  SymInt rows = x.size() == 2 ? x[0] : SymInt(1);
  if (op == "Binarizer" || op == "Imputer" || op == "Scaler" || op == "Normalizer" || op == "LabelEncoder") return {x};
  if (op == "TreeEnsemble") return {{rows, n.get_int("n_targets", 0)}};
  if (op == "LinearRegressor") return {{rows, n.get_int("targets", 1)}};
  if (op == "FeatureVectorizer") {
    int64_t total = 0;
    for (int64_t d : n.get_ints("inputdimensions")) total += d;
    return {{x.size() <= 1 ? SymInt(1) : numel(SymShape(x.begin(), x.end() - 1)), total}};
  }
  if (op == "OneHotEncoder") {
    x.push_back(static_cast<int64_t>(n.get_ints("cats_int64s").size()));
    return {x};
  }
  // ArrayFeatureExtractor
  HODU_CHECK(!x.empty(), ErrorCode::InvalidModel, "{}: X must have rank >= 1", n.describe());
  SymShape y = x.size() == 1 ? SymShape{1} : SymShape(x.begin(), x.end() - 1);
  y.push_back(numel(c.shape(n.inputs.at(1))));
  return {y};
}

std::vector<SymShape> infer(const Node& n, const Ctx& c) {
  const std::string& op = n.op_type;
  auto in = [&](size_t i) { return c.shape(n.inputs.at(i)); };
  // Strings first: no shape rule would make them compile (the C API carries none).
  for (size_t k = 0; k < n.inputs.size() + n.outputs.size(); ++k) {
    bool is_in = k < n.inputs.size();
    const std::string& v = is_in ? n.inputs[k] : n.outputs[k - n.inputs.size()];
    auto t = v.empty() ? std::nullopt : c.g.type_of(v);
    HODU_CHECK(!t || !t->is_tensor() || t->dtype != DType::String, ErrorCode::Unsupported,
               "{}: {} '{}' is a string tensor, not supported by compiled code: it has no strings (the C API carries numbers and bools "
               "only)", n.describe(), is_in ? "input" : "output", v);
  }
  if (is_sequence_op(n)) refuse_sequence_op(n);
  if (is_compiled_ml_op(n)) return ml_shapes(n, c);
  if (is_compiled_training_op(n)) return training_op_shapes(n, [&](const std::string& v) { return c.shape(v); });
  if (!n.domain.empty()) {
    std::string list;
    for (const auto& s : supported_ops()) list += (list.empty() ? "" : ", ") + s;
    fail(ErrorCode::Unsupported, "{} in domain '{}': op not supported by the C compiler (hodu build); supported ops: {}",
         n.describe(), n.domain, list);
  }
  if (same_shape_ops().count(op)) {
    std::vector<SymShape> out(n.outputs.size(), in(0));
    return out;
  }
  if (broadcast_ops().count(op)) {
    std::vector<SymShape> shapes;
    for (const auto& i : n.inputs)
      if (!i.empty()) shapes.push_back(c.shape(i));
    return {broadcast(n, shapes)};
  }
  if (op == "Dropout" || op == "RandomNormalLike" || op == "RandomUniformLike" || op == "Bernoulli")
    return {in(0), in(0)};
  if (op == "Multinomial") return {{in(0).at(0), n.get_int("sample_size", 1)}};
  if (op == "Conv" || op == "ConvInteger" || op == "QLinearConv" || op == "DeformConv") return conv_like(n, c, false);
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") {
    auto s = conv_like(n, c, true);
    return {s[0], s[0]};
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "GlobalLpPool") {
    SymShape s = in(0);
    for (size_t d = 2; d < s.size(); ++d) s[d] = 1;
    return {s};
  }
  if (op == "ConvTranspose") {
    SymShape x = in(0), w = in(1);
    size_t sp = x.size() - 2;
    int64_t group = n.get_int("group", 1);
    SymShape out{x[0], w[1] * group};
    auto kernel = n.get_ints("kernel_shape");
    if (kernel.empty())
      for (size_t k = 0; k < sp; ++k) kernel.push_back(w[k + 2].value());
    auto output_shape = n.get_ints("output_shape");
    if (output_shape.size() == sp + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
    auto strides = n.get_ints("strides", std::vector<int64_t>(sp, 1));
    auto dil = n.get_ints("dilations", std::vector<int64_t>(sp, 1));
    auto pads = n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
    auto opad = n.get_ints("output_padding", std::vector<int64_t>(sp, 0));
    std::string ap = n.get_string("auto_pad", "NOTSET");
    for (size_t k = 0; k < sp; ++k) {
      if (output_shape.size() == sp) out.push_back(output_shape[k]);
      else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") out.push_back(x[k + 2] * strides[k]);
      else
        out.push_back((x[k + 2] - 1) * strides[k] + opad[k] + ((kernel[k] - 1) * dil[k] + 1) -
                      (ap == "VALID" ? 0 : pads[k] + pads[k + sp]));
    }
    return {out};
  }
  if (op == "MatMul" || op == "MatMulInteger" || op == "QLinearMatMul") {
    SymShape a = in(0), b = in(op == "QLinearMatMul" ? 3 : 1);
    HODU_CHECK(!a.empty() && !b.empty(), ErrorCode::InvalidModel, "{}: MatMul of a scalar", n.describe());
    bool a1 = a.size() == 1, b1 = b.size() == 1;
    if (a1) a.insert(a.begin(), 1);
    if (b1) b.push_back(1);
    SymShape batch = broadcast(n, {SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2)});
    if (!a1) batch.push_back(a[a.size() - 2]);
    if (!b1) batch.push_back(b.back());
    return {batch};
  }
  if (op == "Gemm") {
    SymShape a = in(0), b = in(1);
    bool ta = n.get_int("transA", 0) != 0, tb = n.get_int("transB", 0) != 0;
    return {{ta ? a[1] : a[0], tb ? b[0] : b[1]}};
  }
  if (op == "Resize" && n.get_ints("axes").empty()) {
    // Sizes (constant or size values) as given; scales: floor(size * scale). A float scale is
    // m / 2^k exactly, so over a free dim the floor is floordiv(size * m, 2^k), the product
    // the interpreter takes in double (exact for any size below 2^29).
    SymShape x = in(0);
    if (auto sizes = n.has_input(3) ? c.ints(n.inputs[3]) : std::nullopt; sizes && sizes->size() == x.size())
      return {*sizes};
    const Tensor* scales = n.has_input(2) ? c.g.initializer(n.inputs[2]) : nullptr;
    HODU_CHECK(scales && scales->numel() == static_cast<int64_t>(x.size()), ErrorCode::Unsupported,
               "{}: compiled code needs Resize's scales or sizes known at build time (or sizes from shapes)",
               n.describe());
    auto sc = scales->to_doubles();
    SymShape out;
    for (size_t d = 0; d < x.size(); ++d) {
      const double s = static_cast<float>(sc[d]);
      if (x[d].known()) {
        out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(x[d].value()) * s)));
        continue;
      }
      HODU_CHECK(s > 0 && std::isfinite(s), ErrorCode::InvalidModel, "{}: scale {} of dim {} is not positive",
                 n.describe(), s, d);
      int exp = 0;
      double mant = std::frexp(s, &exp);  // s = mant * 2^exp, mant in [0.5, 1): 24 significant bits
      int64_t m = static_cast<int64_t>(std::ldexp(mant, 24));
      int64_t k = 24 - exp;
      while (k > 0 && m % 2 == 0) m /= 2, --k;
      HODU_CHECK(k <= 40 && k >= -30, ErrorCode::Unsupported,
                 "{}: a Resize by {} of a dim known only at run time (scale out of range for compiled code); bind "
                 "the inputs' dims with --dim NAME=V or --shape NAME=AxBxC", n.describe(), s);
      if (k <= 0) out.push_back(x[d] * (m << -k));
      else out.push_back(floordiv(x[d] * m, int64_t{1} << k));
    }
    return {out};
  }
  if (op == "LSTM" || op == "GRU" || op == "RNN") {
    SymShape x = in(0), w = in(1);
    HODU_CHECK(x.size() == 3 && w.size() == 3, ErrorCode::InvalidModel, "{}: X and W must be 3-D", n.describe());
    const bool batch_first = n.get_int("layout", 0) == 1;
    const int64_t dirs = n.get_string("direction", "forward") == "bidirectional" ? 2 : 1;
    const int64_t gates = op == "RNN" ? 1 : op == "GRU" ? 3 : 4;
    SymInt H = n.has_attr("hidden_size") ? SymInt(n.get_int("hidden_size", 0)) : floordiv(w[1], gates);
    SymInt S = batch_first ? x[1] : x[0], B = batch_first ? x[0] : x[1];
    SymShape state = batch_first ? SymShape{B, dirs, H} : SymShape{dirs, B, H};
    return {batch_first ? SymShape{B, S, dirs, H} : SymShape{S, dirs, B, H}, state, state};
  }
  if (op == "Attention") {
    SymShape q = in(0), k = in(1), v = in(2);
    HODU_CHECK((q.size() == 3 || q.size() == 4) && k.size() == q.size() && v.size() == q.size(),
               ErrorCode::InvalidModel, "{}: Q, K, V must all be 3-D or all 4-D", n.describe());
    const bool r4 = q.size() == 4;
    int64_t hq = n.get_int("q_num_heads", 0), hkv = n.get_int("kv_num_heads", 0);
    HODU_CHECK(r4 || (hq > 0 && hkv > 0), ErrorCode::InvalidModel, "{}: 3-D inputs need q_num_heads and kv_num_heads",
               n.describe());
    SymInt Hkv = r4 ? k[1] : SymInt(hkv), S = r4 ? k[2] : k[1];
    SymInt D = r4 ? q[3] : floordiv(q[2], hq), Dv = r4 ? v[3] : floordiv(v[2], hkv);
    SymInt P = n.has_input(4) ? in(4)[2] : SymInt(0);
    SymShape y = r4 ? SymShape{q[0], q[1], q[2], Dv} : SymShape{q[0], q[1], Dv * hq};
    SymInt Hq = r4 ? q[1] : SymInt(hq), Sq = r4 ? q[2] : q[1];
    return {y, {q[0], Hkv, P + S, D}, {q[0], Hkv, P + S, Dv}, {q[0], Hq, Sq, P + S}};
  }
  if (op == "CausalConvWithState") {
    SymShape x = in(0), w = in(1);
    HODU_CHECK(x.size() == 3 && w.size() == 3, ErrorCode::InvalidModel, "{}: input and weight must be 3-D",
               n.describe());
    return {x, {x[0], x[1], w[2] - 1}};
  }
  if (op == "LinearAttention") {
    SymShape q = in(0), v = in(2);
    int64_t hq = n.get_int("q_num_heads", 0), hkv = n.get_int("kv_num_heads", 0);
    HODU_CHECK(q.size() == 3 && v.size() == 3 && hq > 0 && hkv > 0, ErrorCode::InvalidModel,
               "{}: 3-D query, key and value and head counts are needed", n.describe());
    SymInt dk = floordiv(q[2], hq), dv = floordiv(v[2], hkv);
    return {{q[0], q[1], dv * hq}, {q[0], hkv, dk, dv}};
  }
  if (op == "LayerNormalization") {
    SymShape x = in(0), stat = x;
    int64_t r = static_cast<int64_t>(x.size()), axis = norm_axis(n, n.get_int("axis", -1), r);
    for (int64_t d = axis; d < r; ++d) stat[d] = 1;
    return {x, stat, stat};
  }
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" ||
      op == "ReduceL1" || op == "ReduceL2" || op == "ReduceLogSum" || op == "ReduceLogSumExp" ||
      op == "ReduceSumSquare" || op == "ArgMax" || op == "ArgMin")
    return reduce_shape(n, c);
  if (op == "Reshape") return reshape_shape(n, c);
  if (op == "Flatten") {
    SymShape x = in(0);
    int64_t r = static_cast<int64_t>(x.size()), axis = n.get_int("axis", 1);
    if (axis < 0) axis += r;
    SymInt a = 1, b = 1;
    for (int64_t d = 0; d < r; ++d) (d < axis ? a : b) *= x[d];
    return {{a, b}};
  }
  if (op == "Squeeze") {
    SymShape x = in(0), out;
    std::vector<int64_t> axes = n.get_ints("axes");
    if (n.has_input(1)) {
      auto v = c.ints(n.inputs[1]);
      HODU_CHECK(v && is_static(*v), ErrorCode::Unsupported, "{}: axes computed while running", n.describe());
      axes = *to_static(*v);
    }
    int64_t r = static_cast<int64_t>(x.size());
    std::vector<bool> drop(r, false);
    if (axes.empty()) {
      for (int64_t d = 0; d < r; ++d) {
        HODU_CHECK(x[d].known(), ErrorCode::Unsupported,
                   "{}: Squeeze without axes of a dim known only at run time (dim {})", n.describe(), d);
        drop[d] = x[d].is(1);
      }
    } else {
      for (auto a : axes) {
        int64_t d = norm_axis(n, a, r);
        sym_require(sym_eq(x[d], 1), n.describe() + ": squeezed dim is %lld, not 1", {x[d]});
        drop[d] = true;
      }
    }
    for (int64_t d = 0; d < r; ++d)
      if (!drop[d]) out.push_back(x[d]);
    return {out};
  }
  if (op == "Unsqueeze") {
    SymShape x = in(0);
    std::vector<int64_t> axes = n.get_ints("axes");
    if (n.has_input(1)) {
      auto v = c.ints(n.inputs[1]);
      HODU_CHECK(v && is_static(*v), ErrorCode::Unsupported, "{}: axes computed while running", n.describe());
      axes = *to_static(*v);
    }
    int64_t r = static_cast<int64_t>(x.size() + axes.size());
    std::vector<bool> ins(r, false);
    for (auto a : axes) ins[norm_axis(n, a, r)] = true;
    SymShape out;
    size_t k = 0;
    for (int64_t d = 0; d < r; ++d) out.push_back(ins[d] ? SymInt(1) : x[k++]);
    return {out};
  }
  if (op == "Transpose") {
    SymShape x = in(0), out;
    for (auto p : passes::transpose_perm(n, x.size())) out.push_back(x.at(static_cast<size_t>(p)));
    return {out};
  }
  if (op == "Slice") return slice_shape(n, c);
  if (op == "Expand") {
    auto t = c.ints(n.inputs[1]);
    HODU_CHECK(t, ErrorCode::Unsupported, "{}: the shape is computed from data while running", n.describe());
    return {broadcast(n, {in(0), *t})};
  }
  if (op == "Tile") {
    SymShape x = in(0);
    auto reps = c.ints(n.inputs[1]);
    HODU_CHECK(reps && reps->size() == x.size(), ErrorCode::Unsupported,
               "{}: repeats computed from data while running", n.describe());
    for (size_t d = 0; d < x.size(); ++d) x[d] = x[d] * (*reps)[d];
    return {x};
  }
  if (op == "Concat") {
    SymShape out;
    int64_t axis = 0;
    bool first = true;
    for (const auto& i : n.inputs) {
      if (i.empty()) continue;
      SymShape s = c.shape(i);
      if (first) {
        axis = norm_axis(n, n.get_int("axis", 0), static_cast<int64_t>(s.size()));
        out = s;
        first = false;
        continue;
      }
      out[axis] = out[axis] + s[axis];
      for (size_t d = 0; d < s.size(); ++d)
        if (static_cast<int64_t>(d) != axis)
          sym_require(sym_eq(out[d], s[d]), n.describe() + ": inputs differ in a dim (%lld vs %lld)", {out[d], s[d]});
    }
    return {out};
  }
  if (op == "Split") {
    SymShape x = in(0);
    int64_t axis = norm_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.size()));
    std::vector<SymShape> out;
    SymShape sizes;
    if (n.has_input(1)) {
      auto v = c.ints(n.inputs[1]);
      HODU_CHECK(v, ErrorCode::Unsupported, "{}: split sizes computed from data while running", n.describe());
      sizes = *v;
    } else if (n.has_attr("split")) {
      sizes = to_sym(n.get_ints("split"));
    } else {
      int64_t parts = n.has_attr("num_outputs") ? n.get_int("num_outputs", 1) : static_cast<int64_t>(n.outputs.size());
      SymInt each = ceildiv(x[axis], parts);
      SymInt at = 0;
      for (int64_t k = 0; k < parts; ++k) {
        sizes.push_back(k + 1 < parts ? each : x[axis] - at);
        at += each;
      }
    }
    for (const auto& sz : sizes) {
      SymShape s = x;
      s[axis] = sz;
      out.push_back(s);
    }
    return out;
  }
  if (op == "Gather") {
    SymShape x = in(0), idx = in(1);
    int64_t axis = norm_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.size()));
    SymShape out(x.begin(), x.begin() + axis);
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), x.begin() + axis + 1, x.end());
    return {out};
  }
  if (op == "GatherElements") return {in(1)};
  if (op == "GatherND") {
    SymShape x = in(0), idx = in(1);
    int64_t b = n.get_int("batch_dims", 0);
    HODU_CHECK(!idx.empty() && idx.back().known(), ErrorCode::Unsupported, "{}: index depth known only at run time",
               n.describe());
    int64_t last = idx.back().value();
    SymShape out(idx.begin(), idx.end() - 1);
    out.insert(out.end(), x.begin() + b + last, x.end());
    return {out};
  }
  if (op == "Pad") {
    SymShape x = in(0);
    int64_t r = static_cast<int64_t>(x.size());
    auto pads = c.ints(n.inputs[1]);
    HODU_CHECK(pads, ErrorCode::Unsupported, "{}: pads computed from data while running", n.describe());
    std::vector<int64_t> axes;
    if (n.has_input(3)) {
      auto a = c.ints(n.inputs[3]);
      HODU_CHECK(a && is_static(*a), ErrorCode::Unsupported, "{}: axes computed while running", n.describe());
      axes = *to_static(*a);
    } else {
      for (int64_t d = 0; d < r; ++d) axes.push_back(d);
    }
    HODU_CHECK(pads->size() == 2 * axes.size(), ErrorCode::InvalidModel, "{}: pads/axes lengths", n.describe());
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t d = norm_axis(n, axes[i], r);
      x[d] = x[d] + (*pads)[i] + (*pads)[i + axes.size()];
    }
    return {x};
  }
  if (op == "DepthToSpace" || op == "SpaceToDepth") {
    SymShape x = in(0);
    int64_t b = n.get_int("blocksize", 1);
    if (op == "DepthToSpace") return {{x[0], floordiv(x[1], b * b), x[2] * b, x[3] * b}};
    return {{x[0], x[1] * (b * b), floordiv(x[2], b), floordiv(x[3], b)}};
  }
  if (op == "Shape") {
    // Its value is a size value (fold_sym_values); its own shape is the input's rank, which
    // must be known (a Shape of an If's output of unknown rank is not [0]: its Size is not 0).
    std::optional<int64_t> r;
    if (c.has_shape(n.inputs[0])) r = static_cast<int64_t>(in(0).size());
    else if (auto t = c.g.type_of(n.inputs[0]); t && t->is_tensor() && t->shape.rank_known()) r = t->shape.rank();
    HODU_CHECK(r, ErrorCode::Unsupported, "{}: the shape of '{}', whose rank is known only while running",
               n.describe(), n.inputs[0]);
    int64_t b = n.get_int("start", 0), e = n.get_int("end", *r);
    if (b < 0) b += *r;
    if (e < 0) e += *r;
    b = std::clamp<int64_t>(b, 0, *r);
    e = std::clamp<int64_t>(e, b, *r);
    return {{e - b}};
  }
  if (op == "Size") return {SymShape{}};
  if (op == "ConstantOfShape") {
    auto t = c.ints(n.inputs[0]);
    HODU_CHECK(t, ErrorCode::Unsupported, "{}: the shape is computed from data while running", n.describe());
    return {*t};
  }
  if (op == "Range") {
    auto s = c.ints(n.inputs[0]), l = c.ints(n.inputs[1]), d = c.ints(n.inputs[2]);
    HODU_CHECK(s && l && d && d->size() == 1 && (*d)[0].known() && (*d)[0].value() != 0, ErrorCode::Unsupported,
               "{}: Range bounds computed from data while running (or a float or run-time step)", n.describe());
    int64_t step = (*d)[0].value();
    SymInt span = step > 0 ? (*l)[0] - (*s)[0] : (*s)[0] - (*l)[0];
    return {{sym_max(0, ceildiv(span, step > 0 ? step : -step))}};
  }
  if (op == "OneHot") {
    SymShape x = in(0);
    auto depth = c.ints(n.inputs[1]);
    HODU_CHECK(depth && depth->size() == 1, ErrorCode::Unsupported, "{}: depth computed from data", n.describe());
    int64_t r = static_cast<int64_t>(x.size()) + 1, axis = norm_axis(n, n.get_int("axis", -1), r);
    x.insert(x.begin() + axis, (*depth)[0]);
    return {x};
  }
  if (op == "TopK") {
    SymShape x = in(0);
    auto k = c.ints(n.inputs[1]);
    HODU_CHECK(k && k->size() == 1, ErrorCode::Unsupported, "{}: K computed from data while running", n.describe());
    int64_t axis = norm_axis(n, n.get_int("axis", -1), static_cast<int64_t>(x.size()));
    x[axis] = (*k)[0];
    return {x, x};
  }
  // Counts known only while running: one late dim the op's code sets.
  auto late_count = [] { return SymInt::dim(current_sym_table()->late_dim(0)); };
  // Control flow: the outputs' shapes as type inference has them; a dim it does not know
  // (branches that differ, a loop's count, a carried value that changes) is a late dim the
  // node's code sets after running its body (control_flow.cc).
  if (op == "If" || op == "Loop" || op == "Scan") {
    std::vector<SymShape> outs;
    SymTable& table = *current_sym_table();
    for (const auto& o : n.outputs) {
      std::optional<ValueType> t;
      if (!o.empty()) t = c.g.type_of(o);
      HODU_CHECK(o.empty() || (t && t->is_tensor() && t->shape.rank_known()), ErrorCode::Unsupported,
                 "{}: output '{}' has no known rank: its branches or iterations give tensors of different ranks "
                 "(torch's squeeze of a dim that may be 1), or a sequence or optional; compiled code needs a fixed "
                 "rank. When the condition depends on sizes, bind the inputs' dims with --dim NAME=V or --shape "
                 "NAME=AxBxC so that it is decided at build time",
                 n.describe(), o);
      SymShape s;
      for (int64_t d = 0; t && d < t->shape.rank(); ++d) {
        const Dim& dim = t->shape[d];
        if (dim.is_known()) {
          s.push_back(dim.value);
          continue;
        }
        int atom = -1;
        for (int k = 0; dim.is_symbolic() && k < table.num_input_dims(); ++k)
          if (table.atom(k).name == dim.symbol) atom = k;
        s.push_back(atom >= 0 ? SymInt::dim(atom) : late_count());
      }
      outs.push_back(s);
    }
    return outs;
  }
  if (op == "NonMaxSuppression") return {{late_count(), 3}};
  if (op == "MelWeightMatrix") return {{late_count(), late_count()}};
  if (op == "MaxRoiPool") {
    auto p = n.get_ints("pooled_shape", {1, 1});
    HODU_CHECK(p.size() == 2, ErrorCode::InvalidModel, "{}: pooled_shape must have 2 values", n.describe());
    return {{in(1).at(0), in(0).at(1), p[0], p[1]}};
  }
  if (op == "TfIdfVectorizer") {
    int64_t out = 0;
    for (int64_t o : n.get_ints("ngram_indexes")) out = std::max(out, o + 1);
    SymShape x = in(0);
    return {x.size() == 2 ? SymShape{x[0], out} : SymShape{out}};
  }
  if (op == "RoiAlign")
    return {{in(1).at(0), in(0).at(1), n.get_int("output_height", 1), n.get_int("output_width", 1)}};
  if (op == "NonZero") {
    int64_t r = static_cast<int64_t>(in(0).size());
    return {{std::max<int64_t>(r, 1), late_count()}};
  }
  if (op == "Compress") {
    SymShape x = in(0);
    if (!n.has_attr("axis")) return {{late_count()}};
    x[norm_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.size()))] = late_count();
    return {x};
  }
  if (op == "Unique") {
    SymShape x = in(0);
    SymInt u = late_count(), all = numel(x);
    SymShape y{u};
    if (n.has_attr("axis")) {
      int64_t a = norm_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.size()));
      all = x[a];
      y = x;
      y[a] = u;
    }
    return {y, {u}, {all}, {u}};
  }
  // An op the compiler lacks altogether: say that, not that its shape is the problem (binding
  // the dims would only lead to that error).
  if (auto ops = supported_ops(); std::find(ops.begin(), ops.end(), op) == ops.end()) {
    std::string list;
    for (const auto& s : ops) list += (list.empty() ? "" : ", ") + s;
    fail(ErrorCode::Unsupported, "{}: op not supported by the C compiler (hodu build); supported ops: {}",
         n.describe(), list);
  }
  fail(ErrorCode::Unsupported,
       "{}: compiled code cannot derive this op's output shape from sizes known only at run time; bind the inputs' "
       "dims with --dim NAME=V or --shape NAME=AxBxC",
       n.describe());
}

// ---- size values -----------------------------------------------------------

std::optional<SymShape> eval_value(const Node& n, const Ctx& c, std::vector<int64_t>& out_shape) {
  const std::string& op = n.op_type;
  if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0].empty()) return std::nullopt;
  auto t = c.g.type_of(n.outputs[0]);
  if (op == "Shape") {
    if (!c.has_shape(n.inputs[0])) return std::nullopt;
    SymShape s = c.shape(n.inputs[0]);
    int64_t r = static_cast<int64_t>(s.size());
    int64_t b = n.get_int("start", 0), e = n.get_int("end", r);
    if (b < 0) b += r;
    if (e < 0) e += r;
    b = std::clamp<int64_t>(b, 0, r);
    e = std::clamp<int64_t>(e, b, r);
    out_shape = {e - b};
    return SymShape(s.begin() + b, s.begin() + e);
  }
  if (op == "Size") {
    if (!c.has_shape(n.inputs[0])) return std::nullopt;
    out_shape = {};
    return SymShape{numel(c.shape(n.inputs[0]))};
  }
  // Every input a constant or a size value (at least one size value), of static small shape.
  std::vector<SymShape> v;
  std::vector<std::vector<int64_t>> shapes;
  bool any_value = false;
  for (const auto& i : n.inputs) {
    if (i.empty()) {
      v.emplace_back();
      shapes.emplace_back();
      continue;
    }
    auto e = c.ints(i, /*late=*/false);
    if (!e) return std::nullopt;
    any_value = any_value || c.info.values.count(i);
    v.push_back(*e);
    auto s = to_static(c.shape(i));
    if (!s) return std::nullopt;
    shapes.push_back(*s);
  }
  if (!any_value || v.empty()) return std::nullopt;
  auto is_int = [&](DType d) { return d == DType::I64 || d == DType::I32 || d == DType::Bool; };
  if (op == "Identity" || op == "Cast" || op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    if (op == "Cast" && !(t && t->is_tensor() && is_int(t->dtype))) return std::nullopt;
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      if (!c.info.values.count(n.inputs[0])) return std::nullopt;
      auto s = infer(n, c)[0];
      auto st = to_static(s);
      if (!st) return std::nullopt;
      out_shape = *st;
    } else {
      out_shape = shapes[0];
    }
    if (op == "Cast" && t->dtype == DType::Bool) {
      SymShape r;
      for (const auto& x : v[0]) r.push_back(sym_eq(sym_eq(x, 0), 0));
      return r;
    }
    return v[0];
  }
  if (op == "Gather") {
    if (shapes[0].size() != 1 || n.get_int("axis", 0) != 0) return std::nullopt;
    SymShape r;
    int64_t len = shapes[0][0];
    for (const auto& k : v[1]) {
      if (!k.known()) return std::nullopt;
      int64_t i = k.value() < 0 ? k.value() + len : k.value();
      HODU_CHECK(i >= 0 && i < len, ErrorCode::InvalidModel, "{}: index {} out of range", n.describe(), k.value());
      r.push_back(v[0][i]);
    }
    out_shape = shapes[1];
    return r;
  }
  if (op == "Concat") {
    SymShape r;
    int64_t len = 0;
    for (size_t k = 0; k < v.size(); ++k) {
      if (shapes[k].size() != 1) return std::nullopt;
      r.insert(r.end(), v[k].begin(), v[k].end());
      len += shapes[k][0];
    }
    out_shape = {len};
    return r;
  }
  if (op == "Slice") {
    if (shapes[0].size() != 1) return std::nullopt;
    for (size_t k = 1; k < v.size(); ++k)
      if (!v[k].empty() && !is_static(v[k])) return std::nullopt;
    if (v.size() > 3 && !v[3].empty() && !(v[3].size() == 1 && (v[3][0].is(0) || v[3][0].is(-1)))) return std::nullopt;
    int64_t step = v.size() > 4 && !v[4].empty() ? v[4][0].value() : 1;
    int64_t len = shapes[0][0];
    int64_t s = slice_index(v[1][0], len, false, step).value(), e = slice_index(v[2][0], len, true, step).value();
    SymShape r;
    for (int64_t i = s; step > 0 ? i < e : i > e; i += step) r.push_back(v[0][i]);
    out_shape = {static_cast<int64_t>(r.size())};
    return r;
  }
  static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less",
                                               "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Where"};
  if (binary.count(op) || op == "Neg" || op == "Abs" || op == "Not") {
    std::vector<std::vector<int64_t>> ss(shapes.begin(), shapes.end());
    std::vector<SymShape> sv;
    for (size_t k = 0; k < ss.size(); ++k) sv.push_back(to_sym(ss[k]));
    SymShape bs = broadcast(n, sv);
    auto st = to_static(bs);
    if (!st) return std::nullopt;
    int64_t count = 1;
    for (auto d : *st) count *= d;
    if (count > kMaxValueElements) return std::nullopt;
    auto at = [&](size_t k, int64_t i) -> SymInt {
      // Element i of the broadcast result read from input k.
      const auto& s = ss[k];
      int64_t idx = 0, stride = 1, rem = i;
      std::vector<int64_t> pos(st->size());
      for (size_t d = st->size(); d-- > 0;) {
        pos[d] = rem % (*st)[d];
        rem /= (*st)[d];
      }
      for (size_t d = s.size(); d-- > 0;) {
        size_t od = st->size() - s.size() + d;
        if (s[d] != 1) idx += pos[od] * stride;
        stride *= s[d];
      }
      return v[k][idx];
    };
    bool int_div = op == "Div" && t && t->is_tensor() && dtype_is_integer(t->dtype);
    if (op == "Div" && !int_div) return std::nullopt;
    SymShape r;
    for (int64_t i = 0; i < count; ++i) {
      SymInt a = at(0, i);
      if (op == "Neg") r.push_back(-a);
      else if (op == "Abs") r.push_back(sym_select(sym_lt(a, 0), -a, a));
      else if (op == "Not") r.push_back(sym_eq(a, 0));
      else if (op == "Where") r.push_back(sym_select(a, at(1, i), at(2, i)));
      else {
        SymInt b = at(1, i);
        if (op == "Add") r.push_back(a + b);
        else if (op == "Sub") r.push_back(a - b);
        else if (op == "Mul") r.push_back(a * b);
        else if (op == "Div") r.push_back(truncdiv(a, b));
        else if (op == "Mod") {
          if (n.get_int("fmod", 0) != 0) return std::nullopt;
          r.push_back(floormod(a, b));
        } else if (op == "Max") r.push_back(sym_max(a, b));
        else if (op == "Min") r.push_back(sym_min(a, b));
        else if (op == "Equal") r.push_back(sym_eq(a, b));
        else if (op == "Less") r.push_back(sym_lt(a, b));
        else if (op == "Greater") r.push_back(sym_lt(b, a));
        else if (op == "LessOrEqual") r.push_back(sym_eq(sym_lt(b, a), 0));
        else if (op == "GreaterOrEqual") r.push_back(sym_eq(sym_lt(a, b), 0));
        else if (op == "And") r.push_back(sym_select(a, sym_eq(sym_eq(b, 0), 0), 0));
        else if (op == "Or") r.push_back(sym_select(a, 1, sym_eq(sym_eq(b, 0), 0)));
      }
    }
    out_shape = *st;
    return r;
  }
  if (op == "ReduceProd" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") {
    if (shapes[0].size() != 1 || v[0].empty()) return std::nullopt;
    SymInt r = v[0][0];
    for (size_t k = 1; k < v[0].size(); ++k) {
      if (op == "ReduceProd") r = r * v[0][k];
      else if (op == "ReduceSum") r = r + v[0][k];
      else if (op == "ReduceMax") r = sym_max(r, v[0][k]);
      else r = sym_min(r, v[0][k]);
    }
    bool keep = n.get_int("keepdims", 1) != 0;
    out_shape = keep ? std::vector<int64_t>{1} : std::vector<int64_t>{};
    return SymShape{r};
  }
  if (op == "Expand" || op == "ConstantOfShape" || op == "Tile" || op == "Range") return std::nullopt;
  return std::nullopt;
}

}  // namespace

bool is_size_input(const std::string& op, size_t i) {
  if (op == "Reshape" || op == "Expand" || op == "Tile" || op == "Squeeze" || op == "Unsqueeze" || op == "Split" ||
      op == "OneHot" || op == "TopK")
    return i == 1;
  if (op == "Slice") return i >= 1;
  if (op == "Pad") return i == 1 || i == 3;
  if (op == "ConstantOfShape") return i == 0;
  if (op == "Resize" || op == "Upsample") return i >= 1;
  if (op.rfind("Reduce", 0) == 0) return i == 1;
  return false;
}

bool fold_sym_values(Graph& g, SymInfo& info) {
  bool changed = false;
  Ctx c{g, info};
  std::vector<Node> kept;
  for (const auto& n : g.nodes) {
    std::vector<int64_t> shape;
    std::optional<SymShape> v;
    if (!passes::has_subgraph(n) && !passes::is_random_op(n)) v = eval_value(n, c, shape);
    if (!v) {
      kept.push_back(n);
      continue;
    }
    changed = true;
    DType dt = c.dtype(n.outputs[0]);
    if (dt == DType::Undefined) dt = DType::I64;
    if (is_static(*v)) {
      // Every element known: an ordinary constant again (the interpreter folds what reads it).
      auto vals = *to_static(*v);
      g.set_initializer(n.outputs[0], Tensor::from_vector(DType::I64, shape, vals).cast(dt));
      continue;
    }
    info.values[n.outputs[0]] = *v;
    info.value_shapes[n.outputs[0]] = shape;
    info.shapes[n.outputs[0]] = to_sym(shape);
    g.value_types[n.outputs[0]] = ValueType::tensor(dt, Shape::from(shape));
  }
  g.nodes = std::move(kept);
  return changed;
}

void infer_sym_shapes(const Graph& g, SymInfo& info, bool partial) {
  Ctx c{g, info, !partial};
  for (const auto& n : g.nodes) {
    bool all_static = true;
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      auto t = g.type_of(o);
      all_static = all_static && t && t->is_tensor() && t->shape.is_static();
    }
    bool inputs_static = true;
    for (const auto& i : n.inputs)
      if (!i.empty() && info.shapes.count(i)) inputs_static = false;
    if (all_static && inputs_static) continue;
    std::vector<SymShape> out;
    SymTable& table = *current_sym_table();
    auto previous = table.on_late_check;
    std::string first = n.outputs.empty() ? "" : n.outputs[0];
    info.late_checks.erase(first);
    table.on_late_check = [&](const SymTable::Statement& st) { info.late_checks[first].push_back(st); };
    struct Restore {
      SymTable& t;
      std::function<void(const SymTable::Statement&)> f;
      ~Restore() { t.on_late_check = f; }
    } restore{table, previous};
    try {
      out = infer(n, c);
    } catch (const Error& e) {
      if (partial) continue;
      std::string msg = e.what();
      if (msg.find(n.describe()) != std::string::npos) throw;
      throw e.with_context(n.describe() + ": ");
    }
    for (size_t k = 0; k < n.outputs.size() && k < out.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      // A dim hodu's inference knows for certain stays that constant (checked at run time).
      auto t = g.type_of(n.outputs[k]);
      SymShape s = out[k];
      if (t && t->is_tensor() && t->shape.rank_known() && static_cast<size_t>(t->shape.rank()) == s.size())
        for (size_t d = 0; d < s.size(); ++d)
          if (t->shape[d].is_known() && !s[d].known()) {
            sym_require(sym_eq(s[d], t->shape[d].value), n.describe() + ": dim %lld where the model says %lld",
                        {s[d], t->shape[d].value});
            s[d] = t->shape[d].value;
          }
      info.shapes[n.outputs[k]] = s;
    }
  }
}

}  // namespace hodu::compilers::c
