#include "compilers/c/quant_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"

namespace hodu::compilers::c {
namespace {

// Emits the nodes that replace one node: new values are named after its first output.
struct Lowering {
  Graph& g;
  const Node& of;
  std::vector<Node> nodes;
  int count = 0;

  std::string fresh() { return fmt::format("{}~q{}", of.outputs.empty() ? of.name : of.outputs[0], count++); }
  std::string op(const char* type, std::vector<std::string> inputs, std::vector<Attribute> attrs = {},
                 std::string out = {}) {
    Node n;
    n.name = of.name;
    n.op_type = type;
    n.inputs = std::move(inputs);
    n.outputs = {out.empty() ? fresh() : std::move(out)};
    n.attributes = std::move(attrs);
    nodes.push_back(std::move(n));
    return nodes.back().outputs[0];
  }
  std::string cast(const std::string& v, DType from, DType to, std::string out = {}) {
    if (from == to && out.empty()) return v;
    return op("Cast", {v}, {Attribute::make_int("to", dtype_to_onnx(to))}, std::move(out));
  }
  std::string constant(Tensor t) {
    std::string name = fresh();
    g.set_initializer(name, std::move(t));
    return name;
  }
  std::string scalar(DType t, double v) {
    return constant(t == DType::F64 ? Tensor::scalar(DType::F64, v) : Tensor::scalar(DType::F32, static_cast<float>(v)));
  }
  // min(max(v, lo), hi), and lo where v is NaN (numpy: NaN becomes INT32_MIN, then saturates).
  std::string saturate(const std::string& v, DType t, double lo, double hi, bool nan_low) {
    std::string lo_c = scalar(t, lo);
    std::string c = op("Min", {op("Max", {v, lo_c}), scalar(t, hi)});
    return nan_low ? op("Where", {op("IsNaN", {v}), lo_c, c}) : c;
  }
};

std::optional<ValueType> tensor_type(const Graph& g, const Node& n, size_t i) {
  if (!n.has_input(i)) return std::nullopt;
  auto t = g.type_of(n.inputs[i]);
  if (!t || !t->is_tensor() || !t->shape.rank_known()) return std::nullopt;
  return t;
}

bool is_int8(DType t) { return t == DType::I8 || t == DType::U8; }
bool quant_int(DType t) {
  return t == DType::I8 || t == DType::U8 || t == DType::I16 || t == DType::U16 || t == DType::I4 || t == DType::U4 ||
         t == DType::I2 || t == DType::U2;
}
bool is_f8(DType t) {
  return t == DType::F8E4M3FN || t == DType::F8E4M3FNUZ || t == DType::F8E5M2 || t == DType::F8E5M2FNUZ;
}
bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
std::pair<double, double> range_of(DType t) {
  switch (t) {
    case DType::I8: return {-128, 127};
    case DType::U8: return {0, 255};
    case DType::I16: return {-32768, 32767};
    case DType::I4: return {-8, 7};
    case DType::U4: return {0, 15};
    case DType::I2: return {-2, 1};
    case DType::U2: return {0, 3};
    default: return {0, 65535};
  }
}
bool is_scalar(const ValueType& t) {
  int64_t n = 1;
  for (const auto& d : t.shape.dims()) {
    if (!d.is_known()) return false;
    n *= d.value;
  }
  return n == 1;
}

// A scale or zero point of x (rank r) along `axis`: as it is when it has one value, else
// reshaped from [D] to [D, 1, ...] so it broadcasts along the axis. nullopt: not 1-D.
std::optional<std::string> along_axis(Lowering& L, const std::string& p, const ValueType& pt, int64_t r, int64_t axis) {
  if (is_scalar(pt)) return p;
  if (pt.shape.rank() != 1 || axis < 0 || axis >= r) return std::nullopt;
  if (axis == r - 1) return p;
  std::vector<int64_t> shape(static_cast<size_t>(r - axis), 1);
  shape[0] = -1;
  return L.op("Reshape", {p, L.constant(Tensor::from_vector(DType::I64, {static_cast<int64_t>(shape.size())}, shape))});
}

int64_t axis_of(const Node& n, int64_t r) {
  int64_t a = n.get_int("axis", 1);
  return a < 0 ? a + r : a;
}

// A scale or zero point of x (shape xt) per tensor, per axis or blocked (block_size > 0: its
// dim `axis` holds one value per block, gathered here to x's length along the axis).
std::optional<std::string> param_of(Lowering& L, const Node& n, size_t i, const ValueType& xt, const ValueType& pt) {
  const int64_t r = xt.shape.rank(), axis = axis_of(n, r), block = n.get_int("block_size", 0);
  if (block <= 0) return along_axis(L, n.inputs[i], pt, r, axis);
  if (axis < 0 || axis >= r || pt.shape.rank() != r) return std::nullopt;
  const Dim &len = xt.shape.dims()[axis], &blocks = pt.shape.dims()[axis];
  if (!len.is_known() || !blocks.is_known() || (len.value + block - 1) / block != blocks.value) return std::nullopt;
  std::vector<int64_t> idx;
  for (int64_t d = 0; d < len.value; ++d) idx.push_back(d / block);
  return L.op("Gather", {n.inputs[i], L.constant(Tensor::from_vector(DType::I64, {len.value}, idx))},
              {Attribute::make_int("axis", axis)});
}

bool lower_dequantize(Lowering& L, const Node& n) {
  auto xt = tensor_type(L.g, n, 0), st = tensor_type(L.g, n, 1);
  if (!xt || !st || n.get_int("block_size", 0) < 0 || !is_float(st->dtype)) return false;
  const DType x = xt->dtype;
  if (!quant_int(x) && x != DType::I32 && !is_f8(x) && x != DType::F4E2M1) return false;
  auto zt = tensor_type(L.g, n, 2);
  if (n.has_input(2) && (!zt || zt->dtype != x)) return false;
  DType out = n.has_attr("output_dtype") && n.get_int("output_dtype", 0) != 0
                  ? dtype_from_onnx(static_cast<int>(n.get_int("output_dtype", 0))).value_or(DType::Undefined)
                  : st->dtype;
  if (!is_float(out)) return false;
  // A float8/float4 zero point is zero (ONNX): not subtracted, as the interpreter does.
  if (is_f8(x) || x == DType::F4E2M1) zt.reset();
  auto s = param_of(L, n, 1, *xt, *st);
  std::optional<std::string> z;
  if (zt) z = param_of(L, n, 2, *xt, *zt);
  if (!s || (zt && !z)) return false;
  // numpy: x.astype(float32) - zero_point (float64 for int32 ones), times the scale.
  const DType work = (zt && x == DType::I32) || st->dtype == DType::F64 ? DType::F64 : DType::F32;
  std::string d = L.cast(L.cast(n.inputs[0], x, DType::F32), DType::F32, work);
  if (z) d = L.op("Sub", {d, L.cast(*z, x, work)});
  std::string y = L.op("Mul", {d, L.cast(*s, st->dtype, work)}, {}, out == work ? n.outputs[0] : "");
  if (out != work) L.cast(y, work, out, n.outputs[0]);
  return true;
}

bool lower_quantize(Lowering& L, const Node& n) {
  auto xt = tensor_type(L.g, n, 0), st = tensor_type(L.g, n, 1);
  if (!xt || !st || n.get_int("block_size", 0) < 0 || n.get_int("precision", 0) != 0 || !is_float(st->dtype))
    return false;
  const DType x = xt->dtype;
  if (!is_float(x) && x != DType::I32) return false;
  auto zt = tensor_type(L.g, n, 2);
  if (n.has_input(2) && !zt) return false;
  DType out = zt ? zt->dtype
                 : n.get_int("output_dtype", 0) != 0
                       ? dtype_from_onnx(static_cast<int>(n.get_int("output_dtype", 0))).value_or(DType::Undefined)
                       : DType::U8;
  if (!quant_int(out) && !is_f8(out) && out != DType::F4E2M1) return false;
  if (is_f8(out)) zt.reset();  // a float8 zero point is zero (ONNX), not added
  auto s = param_of(L, n, 1, *xt, *st);
  std::optional<std::string> z;
  if (zt) z = param_of(L, n, 2, *xt, *zt);
  if (!s || (zt && !z)) return false;
  // x / scale in numpy's promoted float type, rounded half to even; the zero point added
  // and the saturation in a type that holds every 16-bit integer.
  DType div = dtype_bits(x) >= dtype_bits(st->dtype) ? x : st->dtype;
  if (!is_float(div)) div = DType::F64;
  const DType wide = div == DType::F64 ? DType::F64 : DType::F32;
  std::string ratio = L.op("Div", {L.cast(n.inputs[0], x, div), L.cast(*s, st->dtype, div)});
  if (!quant_int(out)) {
    // float8: the float32 quotient converted (saturating unless saturate=0); float4: plus
    // the zero point, converted saturating.
    if (z) ratio = L.op("Add", {ratio, L.cast(*z, out, div)});
    L.op("Cast", {L.cast(ratio, div, DType::F32)},
         {Attribute::make_int("to", dtype_to_onnx(out)),
          Attribute::make_int("saturate", out == DType::F4E2M1 ? 1 : n.get_int("saturate", 1))},
         n.outputs[0]);
    return true;
  }
  std::string q = L.op("Round", {ratio});
  std::string v = L.cast(q, div, wide);
  if (z) v = L.op("Add", {v, L.cast(*z, out, wide)});
  auto [lo, hi] = range_of(out);
  L.cast(L.saturate(v, wide, lo, hi, true), wide, out, n.outputs[0]);
  return true;
}

bool lower_dynamic_quantize(Lowering& L, const Node& n) {
  auto xt = tensor_type(L.g, n, 0);
  if (!xt || (xt->dtype != DType::F32 && xt->dtype != DType::F16 && xt->dtype != DType::BF16)) return false;
  const DType F = DType::F32;
  std::string x = L.cast(n.inputs[0], xt->dtype, F);
  std::string zero = L.scalar(F, 0), top = L.scalar(F, 255);
  // The range always holds 0; an empty range gives scale 1/255.
  std::string mn = L.op("Min", {L.op("ReduceMin", {x}, {Attribute::make_int("keepdims", 0)}), zero});
  std::string mx = L.op("Max", {L.op("ReduceMax", {x}, {Attribute::make_int("keepdims", 0)}), zero});
  std::string range = L.op("Where", {L.op("Equal", {mx, mn}), L.scalar(F, 1), L.op("Sub", {mx, mn})});
  std::string scale = L.op("Div", {range, top}, {}, n.outputs.size() > 1 && !n.outputs[1].empty() ? n.outputs[1] : "");
  std::string zp = L.saturate(L.op("Round", {L.op("Sub", {zero, L.op("Div", {mn, scale})})}), F, 0, 255, false);
  if (n.outputs.size() > 2 && !n.outputs[2].empty()) L.cast(zp, F, DType::U8, n.outputs[2]);
  std::string v = L.op("Add", {L.op("Round", {L.op("Div", {x, scale})}), zp});
  L.cast(L.saturate(v, F, 0, 255, false), F, DType::U8, n.outputs[0]);
  return true;
}

// Where a zero point's values run: numpy broadcasting, per row of MatMulInteger's A (a 1-D
// zero point as long as A's rows), per output channel of a weight (axis 0).
enum class ZeroPointAxis { Broadcast, Rows, Channels };

// Cast(x) - Cast(zero point) in float32.
std::optional<std::string> shifted(Lowering& L, const Node& n, size_t x_in, size_t zp_in, ZeroPointAxis where) {
  auto xt = tensor_type(L.g, n, x_in);
  if (!xt || !is_int8(xt->dtype)) return std::nullopt;
  std::string x = L.cast(n.inputs[x_in], xt->dtype, DType::F32);
  if (!n.has_input(zp_in)) return x;
  auto zt = tensor_type(L.g, n, zp_in);
  if (!zt || zt->dtype != xt->dtype) return std::nullopt;
  const int64_t r = xt->shape.rank();
  std::optional<std::string> z = n.inputs[zp_in];
  if (where == ZeroPointAxis::Channels) z = along_axis(L, n.inputs[zp_in], *zt, r, 0);
  if (where == ZeroPointAxis::Rows && zt->shape.rank() == 1 && !is_scalar(*zt) && r >= 2) {
    const Dim &len = zt->shape.dims()[0], &rows = xt->shape.dims()[r - 2];
    if (!len.is_known() || !rows.is_known()) return std::nullopt;
    if (len.value == rows.value) z = along_axis(L, n.inputs[zp_in], *zt, r, r - 2);
  }
  if (!z) return std::nullopt;
  return L.op("Sub", {x, L.cast(*z, xt->dtype, DType::F32)});
}

// The float Conv of an integer product: its attributes, marked for exact sums.
std::vector<Attribute> conv_attrs(const Node& n) {
  std::vector<Attribute> a;
  for (const char* name : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    if (const Attribute* at = n.attr(name)) a.push_back(*at);
  a.push_back(Attribute::make_int(kExactSumsAttr, 1));
  return a;
}

// Quantizes a float32 product: double(acc) * factor + zero point, rounded, saturated to the
// zero point's type (QLinearConv / QLinearMatMul). factor: float32 or float16 values.
void requantize(Lowering& L, const Node& n, const std::string& acc, const std::string& factor, DType factor_type,
                size_t zp_in, DType out) {
  std::string v = L.op("Mul", {L.cast(acc, DType::F32, DType::F64), L.cast(factor, factor_type, DType::F64)});
  if (n.has_input(zp_in)) v = L.op("Add", {v, L.cast(n.inputs[zp_in], out, DType::F64)});
  auto [lo, hi] = range_of(out);
  L.cast(L.op("Round", {L.saturate(v, DType::F64, lo, hi, false)}), DType::F64, out, n.outputs[0]);
}

bool lower_qlinear_conv(Lowering& L, const Node& n) {
  auto xt = tensor_type(L.g, n, 0), wt = tensor_type(L.g, n, 3), xst = tensor_type(L.g, n, 1),
       wst = tensor_type(L.g, n, 4), yst = tensor_type(L.g, n, 6);
  if (!xt || !wt || !xst || !wst || !yst || !is_scalar(*xst) || !is_scalar(*yst) || !is_float(xst->dtype) ||
      !is_float(wst->dtype) || !is_float(yst->dtype))
    return false;
  if (n.has_input(2) && (!tensor_type(L.g, n, 2) || !is_scalar(*tensor_type(L.g, n, 2)))) return false;
  auto zt = tensor_type(L.g, n, 7);
  const DType out = zt ? zt->dtype : xt->dtype;
  if (!is_int8(out) || (zt && !is_scalar(*zt))) return false;
  // w_scale has one value or one per output channel (axis 1 of the result).
  auto ws = along_axis(L, L.cast(n.inputs[4], wst->dtype, DType::F32), *wst, wt->shape.rank(), 1);
  auto x = shifted(L, n, 0, 2, ZeroPointAxis::Broadcast), w = shifted(L, n, 3, 5, ZeroPointAxis::Channels);
  if (!x || !w || !ws) return false;
  std::vector<std::string> ins = {*x, *w};
  if (n.has_input(8)) ins.push_back(L.cast(n.inputs[8], DType::I32, DType::F32));
  std::string acc = L.op("Conv", ins, conv_attrs(n));
  // The interpreter's factor: x_scale * w_scale / y_scale in float32.
  std::string f = L.op("Div", {L.op("Mul", {L.cast(n.inputs[1], xst->dtype, DType::F32), *ws}),
                               L.cast(n.inputs[6], yst->dtype, DType::F32)});
  requantize(L, n, acc, f, DType::F32, 7, out);
  return true;
}

bool lower_qlinear_matmul(Lowering& L, const Node& n) {
  auto at = tensor_type(L.g, n, 0), bt = tensor_type(L.g, n, 3), ast = tensor_type(L.g, n, 1),
       bst = tensor_type(L.g, n, 4), yst = tensor_type(L.g, n, 6);
  if (!at || !bt || !ast || !bst || !yst || !is_float(ast->dtype) || bst->dtype != ast->dtype ||
      yst->dtype != ast->dtype)
    return false;
  auto zt = tensor_type(L.g, n, 7);
  const DType out = zt ? zt->dtype : at->dtype;
  if (!is_int8(out)) return false;
  auto a = shifted(L, n, 0, 2, ZeroPointAxis::Broadcast), b = shifted(L, n, 3, 5, ZeroPointAxis::Broadcast);
  if (!a || !b) return false;
  std::string acc = L.op("MatMul", {*a, *b});
  // factor = a_scale * b_scale / y_scale in the scales' dtype (numpy broadcasting).
  std::string f = L.op("Div", {L.op("Mul", {n.inputs[1], n.inputs[4]}), n.inputs[6]});
  requantize(L, n, acc, f, ast->dtype, 7, out);
  return true;
}

bool lower_integer_product(Lowering& L, const Node& n) {
  const bool conv = n.op_type == "ConvInteger";
  auto a = shifted(L, n, 0, 2, conv ? ZeroPointAxis::Broadcast : ZeroPointAxis::Rows),
       b = shifted(L, n, 1, 3, conv ? ZeroPointAxis::Channels : ZeroPointAxis::Broadcast);
  if (!a || !b) return false;
  std::string acc = L.op(conv ? "Conv" : "MatMul", {*a, *b}, conv ? conv_attrs(n) : std::vector<Attribute>{});
  L.cast(acc, DType::F32, DType::I32, n.outputs[0]);
  return true;
}

}  // namespace

bool lower_quantization(Graph& g) {
  bool changed = false;
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (const auto& n : g.nodes) {
    Lowering L{g, n, {}};
    bool done = false;
    if (n.domain.empty() && !n.outputs.empty() && !n.outputs[0].empty()) {
      if (n.op_type == "DequantizeLinear") done = lower_dequantize(L, n);
      else if (n.op_type == "QuantizeLinear") done = lower_quantize(L, n);
      else if (n.op_type == "DynamicQuantizeLinear") done = lower_dynamic_quantize(L, n);
      else if (n.op_type == "MatMulInteger" || n.op_type == "ConvInteger") done = lower_integer_product(L, n);
      else if (n.op_type == "QLinearConv") done = lower_qlinear_conv(L, n);
      else if (n.op_type == "QLinearMatMul") done = lower_qlinear_matmul(L, n);
    }
    if (!done) {
      out.push_back(n);  // (initializers a failed attempt added are unread: dropped as dead)
      continue;
    }
    out.insert(out.end(), L.nodes.begin(), L.nodes.end());
    changed = true;
  }
  g.nodes = std::move(out);
  return changed;
}

void require_quantization_lowered(const Graph& g) {
  static const char* ops[] = {"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                              "ConvInteger",      "QLinearConv",    "QLinearMatMul"};
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || std::find(std::begin(ops), std::end(ops), n.op_type) == std::end(ops)) continue;
    std::string types;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto t = n.has_input(i) ? g.type_of(n.inputs[i]) : std::nullopt;
      types += fmt::format("{}{}", i ? ", " : "", t ? t->to_string() : std::string(n.has_input(i) ? "?" : "-"));
    }
    fail(ErrorCode::Unsupported,
         "{}: not supported by compiled code (inputs: {}); it quantizes to and from 2-, 4-, 8- and 16-bit "
         "integers and float8/float4, per tensor, per axis or blocked (products of int8/uint8), not with the "
         "precision attribute",
         n.describe(), types);
  }
}

}  // namespace hodu::compilers::c
