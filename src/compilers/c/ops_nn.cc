// Emitters for the compute ops: Conv, pooling, normalization, Softmax,
// MatMul and Gemm. Constant parameters are transformed at build time (BN
// scale/shift, transposed Gemm weights) so the kernels stay simple.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compilers/c/codegen_context.h"
#include "compilers/c/ops_generic.h"
#include "compilers/c/quant_lowering.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

void require_f32(Codegen& cg, const Node& n, size_t input) {
  DType t = cg.dtype_of(n.inputs[input]);
  HODU_CHECK(t == DType::F32, ErrorCode::Unsupported,
             "{}: input '{}' of dtype {} is not supported by compiled code (this op compiles for float32 only)",
             n.describe(), n.inputs[input], dtype_name(t));
}

struct Window {
  SymShape in, out;
  std::vector<int64_t> kernel, strides, dilations;
  SymShape begin, end;
};

// Spatial geometry of Conv/pooling (1-D or 2-D). The output size comes from
// shape inference; auto_pad SAME_* pads are derived from it.
Window window(Codegen& cg, const Node& n, const SymShape& in_shape, const SymShape& out_shape,
              const std::vector<int64_t>& kernel) {
  size_t nd = in_shape.size() - 2;
  HODU_CHECK(nd == 1 || nd == 2, ErrorCode::Unsupported,
             "{}: compiled code supports 1-D and 2-D windows, the input has {} spatial dims", n.describe(), nd);
  Window w;
  w.in.assign(in_shape.begin() + 2, in_shape.end());
  w.out.assign(out_shape.begin() + 2, out_shape.end());
  w.kernel = kernel;
  w.strides = n.get_ints("strides", std::vector<int64_t>(nd, 1));
  w.dilations = n.get_ints("dilations", std::vector<int64_t>(nd, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  HODU_CHECK(w.strides.size() == nd && w.dilations.size() == nd && pads.size() == 2 * nd && kernel.size() == nd,
             ErrorCode::InvalidModel, "{}: strides/dilations/pads/kernel do not match {} spatial dims", n.describe(), nd);
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  w.begin.assign(pads.begin(), pads.begin() + nd);
  w.end.assign(pads.begin() + nd, pads.end());
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < nd; ++d) {
      SymInt total = sym_max(0, (w.out[d] - 1) * w.strides[d] + (w.kernel[d] - 1) * w.dilations[d] + 1 - w.in[d]);
      w.begin[d] = auto_pad == "SAME_UPPER" ? floordiv(total, 2) : total - floordiv(total, 2);
      w.end[d] = total - w.begin[d];
    }
  } else if (auto_pad == "VALID") {
    std::fill(w.begin.begin(), w.begin.end(), 0);
    std::fill(w.end.begin(), w.end.end(), 0);
  }
  if (nd == 1) {  // as 2-D with H = 1
    for (auto* v : {&w.in, &w.out}) v->insert(v->begin(), 1);
    for (auto* v : {&w.kernel, &w.strides, &w.dilations}) v->insert(v->begin(), 1);
    w.begin.insert(w.begin.begin(), 0);
    w.end.insert(w.end.begin(), 0);
  }
  return w;
}

// Where the result goes: the node's output, or a fused activation's output.
struct Target {
  std::string name;
  float lo = -INFINITY, hi = INFINITY;
  int kind = HODU_ACTIVATION_CLIP;  // SIGMOID/SILU: lo, hi open
};

// The portable form of a SIGMOID/SILU target: a loop after the kernel.
// The C expression of a SIGMOID/SILU/GELU activation of float `v`.
const char* activation_expr(int kind) {
  if (kind == HODU_ACTIVATION_SIGMOID) return "1.f / (1.f + expf(-v))";
  if (kind == HODU_ACTIVATION_GELU) return "0.5f * v * (1.f + erff(v * 0.707106769f))";
  if (kind == HODU_ACTIVATION_HARDSWISH) return "v * hk_clamp01f(v / 6.f + 0.5f)";
  return "v / (1.f + expf(-v))";
}

std::string activation_loop(const Target& t, const std::string& y, const SymInt& count) {
  if (t.kind == HODU_ACTIVATION_CLIP) return "";
  return fmt::format("    for (int64_t i = 0; i < {}; ++i) {{ float v = {}[i]; {}[i] = {}; }}\n", count, y, y,
                     activation_expr(t.kind));
}

// hodu_kernels.h activation fields of a target: "kind, alpha, beta".
std::string activation_fields(const Target& t) {
  if (t.kind == HODU_ACTIVATION_SIGMOID) return "HODU_ACTIVATION_SIGMOID, 0.f, 0.f";
  if (t.kind == HODU_ACTIVATION_SILU) return "HODU_ACTIVATION_SILU, 0.f, 0.f";
  if (t.kind == HODU_ACTIVATION_GELU) return "HODU_ACTIVATION_GELU, 0.f, 0.f";
  if (t.kind == HODU_ACTIVATION_HARDSWISH) return "HODU_ACTIVATION_HARDSWISH, 0.f, 0.f";
  if (t.lo == -INFINITY && t.hi == INFINITY) return "HODU_ACTIVATION_NONE, 0.f, 0.f";
  return fmt::format("HODU_ACTIVATION_CLIP, {}, {}", c_float(t.lo), c_float(t.hi));
}

Target take_target(Codegen& cg, const Node& n) {
  Target t{n.outputs[0]};
  if (!cg.act_output.empty()) {
    t = {cg.act_output, cg.act_lo, cg.act_hi, cg.act_kind};
    cg.act_output.clear();
  }
  return t;
}

// The library op whose native dst `v` is ("NULL": plain).
std::string native_producer(Codegen& cg, const std::string& v) {
  auto p = cg.native_op.find(v);
  return p == cg.native_op.end() ? std::string("NULL") : p->second;
}

// The portable code cannot read a producer's layout: create fails when oneDNN
// could not prepare a reader of one.
void require_library_reader(Codegen& cg, const Node& n, const std::string& from, const std::string& op) {
  if (from != "NULL")
    cg.prepare += fmt::format("  if ({} && !{}) {{\n    hm_errbuf(errbuf, errbuf_size, {});\n    return 4;\n  }}\n", from,
                              op, c_string_literal(n.describe() + ": oneDNN cannot run this op on its input's layout"));
}

// Squeeze-excite's fully connected layers: one vector product per image, with the
// activation, in generated code (oneDNN's per-call overhead is larger than the op).
void emit_fc(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]);
  SymInt N = xs[0];
  int64_t K = xs[1].value(), M = ws[0].value();
  Target t = take_target(cg, n);
  HODU_CHECK(cg.residual.empty(), ErrorCode::Internal, "{}: a fused residual on a vector product", n.describe());
  Tensor wt = cg.constant(n.inputs[1]).reshape({M, K}).permute({1, 0}).contiguous();
  std::string w = fmt::format("((const float*)(W + {}))", cg.weight_offsets[cg.add_weight(wt)]);
  std::string x = cg.ptr(n.inputs[0]), b = n.has_input(2) ? cg.ptr(n.inputs[2]) : "NULL";
  cg.define(t.name, DType::F32, cg.shape_of(n.outputs[0]));
  int act = t.kind != HODU_ACTIVATION_CLIP                ? t.kind
            : t.lo == -INFINITY && t.hi == INFINITY ? HODU_ACTIVATION_NONE
                                                        : HODU_ACTIVATION_CLIP;
  cg.emit(fmt::format("hk_fc({}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, w, b, cg.ptr(t.name), N, K, M, act,
                      c_float(t.lo), c_float(t.hi)));
}

// The arena storage of a conv/pool result: its own buffer, or its part of an
// in-place Concat's buffer (defined by the first part emitted).
void define_result(Codegen& cg, const std::string& name, const SymShape& shape) {
  auto part = cg.concat_parts.find(name);
  if (part == cg.concat_parts.end()) {
    cg.define(name, DType::F32, shape);
    return;
  }
  const std::string& concat = part->second.concat;
  if (!cg.values.count(concat)) cg.define(concat, DType::F32, cg.shape_of(concat));
  ValueInfo v = cg.values.at(concat);
  v.shape = shape;
  v.offset = part->second.offset;
  cg.values[name] = v;
  cg.touch(name);
}

// The HODU_DST_* mode a result is prepared with.
int dst_mode(Codegen& cg, const std::string& name) {
  auto m = cg.native_mode.find(name);
  return cg.native_values.count(name) && m != cg.native_mode.end() ? m->second : HODU_DST_PLAIN;
}

// Room for 16-channel blocks in a native result's buffer.
void grow_for_blocks(Codegen& cg, const std::string& name, const SymShape& shape) {
  PlanBuffer& buf = cg.buffers[cg.buffer_of(name)];
  SymInt inner = 1;
  for (size_t d = 2; d < shape.size(); ++d) inner *= shape[d];
  buf.bytes = sym_max(buf.bytes, cg.values.at(name).offset + shape[0] * (ceildiv(shape[1], 16) * 16) * inner * 4);
}

// In-place residuals need buffer sharing (-O1+).
bool options_allow_in_place(const Codegen& cg) { return cg.options.opt_level >= 1; }

// Whether a first conv may read the image through an nhwc copy (hodu_conv2d_desc.nhwc_stem):
// not when convs write the parts of an in-place concat in oneDNN's layout (nhwc parts
// side by side are no concatenation, and the convs would fall back to slower kernels).
bool nhwc_stem(const Codegen& cg) {
  for (const auto& [v, mode] : cg.native_mode)
    if (mode == HODU_DST_CONCAT && cg.native_values.count(v)) return false;
  return true;
}

void emit_conv(Codegen& cg, const Node& n) {
  require_f32(cg, n, 0);
  if (conv_as_fc(cg, n)) {
    emit_fc(cg, n);
    return;
  }
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  auto kernel = to_static(SymShape(ws.begin() + 2, ws.end()));
  HODU_CHECK(kernel, ErrorCode::Unsupported, "{}: a kernel whose size is known only at run time", n.describe());
  Window w = window(cg, n, xs, ys, *kernel);
  int64_t group = n.get_int("group", 1);
  SymInt N = xs[0], C = xs[1], M = ws[0];
  HODU_CHECK(floormod(C, group).is(0) && floormod(M, group).is(0) && ws[1] * group == C, ErrorCode::InvalidModel,
             "{}: channels {} / weight {} do not match group {}", n.describe(), C, to_string(ws), group);
  Target t = take_target(cg, n);
  std::string residual = cg.residual;  // fused Add (default mode): y = act(conv + residual)
  cg.residual.clear();
  std::string x = cg.ptr(n.inputs[0]), wp = cg.ptr(n.inputs[1]);
  std::string z = residual.empty() ? "NULL" : cg.ptr(residual);
  std::string b = n.has_input(2) ? cg.ptr(n.inputs[2]) : "NULL";
  SymInt Cg = floordiv(C, group), Mg = floordiv(M, group);
  bool pointwise = w.kernel[0] == 1 && w.kernel[1] == 1 && w.strides[0] == 1 && w.strides[1] == 1 &&
                   w.begin[0].is(0) && w.begin[1].is(0) && w.out[0] == w.in[0] && w.out[1] == w.in[1];
  bool depthwise = Cg.is(1) && Mg.is(1);
  std::string col = pointwise || depthwise ? "NULL" : cg.scratch(Cg * w.kernel[0] * w.kernel[1] * w.out[0] * w.out[1] * 4);
  std::string pack = depthwise ? "NULL" : cg.scratch(kGemmPackBytes);
  // A residual that dies here is the result's buffer (default mode): the sum
  // post-op accumulates onto it, nothing is copied. The portable fallback then
  // keeps the residual in a scratch buffer while the conv overwrites it.
  SymInt y_bytes = numel(ys) * 4;
  bool in_place = !residual.empty() && cg.kernel_library && options_allow_in_place(cg) &&
                  !cg.concat_parts.count(t.name) && cg.reusable(residual, y_bytes) &&
                  (cg.info(n.inputs[0]).kind != ValueInfo::Kind::Arena ||
                   cg.buffer_of(n.inputs[0]) != cg.buffer_of(residual));
  std::string kept = in_place ? cg.scratch(y_bytes) : "";
  if (in_place) cg.define(t.name, DType::F32, ys, cg.buffer_of(residual));
  else define_result(cg, t.name, ys);
  std::string y = cg.ptr(t.name);
  // With a residual the clamp follows the sum, in its own loop.
  std::string portable = fmt::format(
      "hk_conv2d({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, wp,
      b, y, N, C, w.in[0], w.in[1], M, w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.strides[0], w.strides[1],
      w.dilations[0], w.dilations[1], w.begin[0], w.begin[1], group, c_float(residual.empty() ? t.lo : -INFINITY),
      c_float(residual.empty() ? t.hi : INFINITY), col, pack);
  // oneDNN reorders the weights once at create time: they must be constants.
  if (!cg.kernel_library || !cg.is_constant(n.inputs[1]) || (n.has_input(2) && !cg.is_constant(n.inputs[2]))) {
    HODU_CHECK(residual.empty(), ErrorCode::Internal, "{}: a fused residual needs the kernel library", n.describe());
    cg.emit(portable);
    return;
  }
  portable = "    " + portable + "\n";
  if (in_place) portable = fmt::format("    memcpy({}, {}, {});\n", kept, z, y_bytes) + portable;
  if (!residual.empty())
    portable += fmt::format(
        "    for (int64_t i = 0; i < {}; ++i) {{ float v = {}[i] + {}[i]; v = v < {} ? {} : v; {}[i] = v > {} ? {} : v; }}\n",
        numel(ys), y, in_place ? kept : z, c_float(t.lo), c_float(t.lo), y, c_float(t.hi), c_float(t.hi));
  portable += activation_loop(t, y, numel(ys));
  // Chained convs: the output may stay in oneDNN's layout (room for 16-channel
  // blocks), the input may be in the producing conv's layout.
  int mode = dst_mode(cg, t.name);
  if (mode != HODU_DST_PLAIN) grow_for_blocks(cg, t.name, ys);
  // A later part of an in-place Concat writes the layout of the first one.
  std::string like = "NULL";
  if (auto part = cg.concat_parts.find(t.name); part != cg.concat_parts.end() && mode != HODU_DST_PLAIN &&
                                                part->second.first != t.name)
    like = cg.native_op.at(part->second.first);
  auto producer_of = [&](const std::string& v) {
    auto p = cg.native_op.find(v);
    return p == cg.native_op.end() ? std::string("NULL") : p->second;
  };
  std::string from = producer_of(n.inputs[0]), residual_from = residual.empty() ? "NULL" : producer_of(residual);
  std::string op = cg.library_op(
      n, "hodu_conv2d_desc",
      fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", N, C, w.in[0],
                  w.in[1], M, w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.strides[0], w.strides[1],
                  w.dilations[0], w.dilations[1], w.begin[0], w.begin[1], w.end[0], w.end[1], group,
                  residual.empty() ? 0 : 1, activation_fields(t), mode, nhwc_stem(cg) ? 1 : 0,
                  n.get_int(kExactSumsAttr, 0) ? 1 : 0),
      fmt::format("hodu_conv2d_prepare(m->kernels, &d, {}, {}, {}, {}, {}, &OP)", wp, b, from, residual_from, like));
  // The portable code cannot read a producer's layout.
  for (const auto& p : {from, residual_from})
    if (p != "NULL")
      cg.prepare += fmt::format("  if ({} && !{}) {{\n    hm_errbuf(errbuf, errbuf_size, {});\n    return 4;\n  }}\n", p,
                                op, c_string_literal(n.describe() + ": oneDNN cannot run this conv"));
  if (mode != HODU_DST_PLAIN) cg.native_op[t.name] = op;
  cg.emit_library_call(n, op, fmt::format("hodu_conv2d_run(m->kernels, {}, {}, {}, {})", op, x, z, y), portable);
}

void emit_pool(Codegen& cg, const Node& n) {
  if (pool_needs_general(cg, n)) {
    emit_pool_general(cg, n);
    return;
  }
  require_f32(cg, n, 0);
  HODU_CHECK(!n.has_output(1), ErrorCode::Unsupported, "{}: the Indices output is not supported by compiled code",
             n.describe());
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  auto kernel = n.get_ints("kernel_shape");
  Window w = window(cg, n, xs, ys, kernel);
  HODU_CHECK(n.get_int("storage_order", 0) == 0, ErrorCode::Unsupported, "{}: storage_order 1", n.describe());
  int kind = n.op_type == "MaxPool" ? 0 : 1;
  int include_pad = static_cast<int>(n.get_int("count_include_pad", 0));
  std::string x = cg.ptr(n.inputs[0]);
  define_result(cg, n.outputs[0], ys);
  std::string y = cg.ptr(n.outputs[0]);
  std::string portable = fmt::format(
      "hk_pool2d({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, y, xs[0] * xs[1],
      w.in[0], w.in[1], w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.strides[0], w.strides[1], w.dilations[0],
      w.dilations[1], w.begin[0], w.begin[1], w.end[0], w.end[1], kind, include_pad);
  if (!cg.kernel_library) {
    cg.emit(portable);
    return;
  }
  int mode = dst_mode(cg, n.outputs[0]);
  if (mode != HODU_DST_PLAIN) grow_for_blocks(cg, n.outputs[0], ys);
  std::string from = native_producer(cg, n.inputs[0]);
  std::string op = cg.library_op(
      n, "hodu_pool2d_desc",
      fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", xs[0], xs[1], w.in[0], w.in[1],
                  w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.strides[0], w.strides[1], w.dilations[0],
                  w.dilations[1], w.begin[0], w.begin[1], w.end[0], w.end[1],
                  kind == 0 ? "HODU_POOL_MAX" : include_pad ? "HODU_POOL_AVERAGE_INCLUDE_PAD" : "HODU_POOL_AVERAGE",
                  mode),
      fmt::format("hodu_pool2d_prepare(m->kernels, &d, {}, &OP)", from));
  require_library_reader(cg, n, from, op);
  if (mode != HODU_DST_PLAIN) cg.native_op[n.outputs[0]] = op;
  cg.emit_library_call(n, op, fmt::format("hodu_pool2d_run(m->kernels, {}, {}, {})", op, x, y), portable);
}

void emit_global_pool(Codegen& cg, const Node& n) {
  require_f32(cg, n, 0);
  auto xs = cg.shape_of(n.inputs[0]);
  SymInt inner = 1;
  for (size_t d = 2; d < xs.size(); ++d) inner *= xs[d];
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], DType::F32, cg.shape_of(n.outputs[0]));
  std::string y = cg.ptr(n.outputs[0]);
  std::string portable = fmt::format("hk_global_pool({}, {}, {}, {}, {});", x, y, xs[0] * xs[1], inner,
                                     n.op_type == "GlobalMaxPool" ? 0 : 1);
  std::string from = native_producer(cg, n.inputs[0]);
  if (!cg.kernel_library || xs.size() < 3 || xs.size() > 4) {
    HODU_CHECK(from == "NULL", ErrorCode::Internal, "{}: a native input without the kernel library", n.describe());
    cg.emit(portable);
    return;
  }
  // One window over the whole image (1-D: height 1).
  SymInt h = xs.size() == 4 ? xs[2] : SymInt(1), w = xs.back();
  std::string op = cg.library_op(
      n, "hodu_pool2d_desc",
      fmt::format("{}, {}, {}, {}, 1, 1, {}, {}, 1, 1, 1, 1, 0, 0, 0, 0, {}, HODU_DST_PLAIN", xs[0], xs[1], h, w, h, w,
                  n.op_type == "GlobalMaxPool" ? "HODU_POOL_MAX" : "HODU_POOL_AVERAGE"),
      fmt::format("hodu_pool2d_prepare(m->kernels, &d, {}, &OP)", from));
  require_library_reader(cg, n, from, op);
  cg.emit_library_call(n, op, fmt::format("hodu_pool2d_run(m->kernels, {}, {}, {})", op, x, y), portable);
}

std::vector<double> const_doubles(Codegen& cg, const Node& n, size_t i) {
  HODU_CHECK(n.has_input(i) && cg.is_constant(n.inputs[i]), ErrorCode::Unsupported,
             "{}: compiled code needs input {} ('{}') to be a constant", n.describe(), i,
             n.has_input(i) ? n.inputs[i] : "");
  return cg.constant(n.inputs[i]).to_doubles();
}

void emit_batchnorm(Codegen& cg, const Node& n) {
  require_f32(cg, n, 0);
  HODU_CHECK(n.get_int("training_mode", 0) == 0 && !n.has_output(1), ErrorCode::Unsupported,
             "{}: training mode is not supported by compiled code", n.describe());
  auto gamma = const_doubles(cg, n, 1), beta = const_doubles(cg, n, 2), mean = const_doubles(cg, n, 3),
       var = const_doubles(cg, n, 4);
  double eps = n.get_float("epsilon", 1e-5f);
  auto xs = cg.shape_of(n.inputs[0]);
  HODU_CHECK(xs.size() < 2 || xs[1].known(), ErrorCode::Unsupported, "{}: channels known only at run time",
             n.describe());
  int64_t C = xs.size() > 1 ? xs[1].value() : 1;
  SymInt inner = 1;
  for (size_t d = 2; d < xs.size(); ++d) inner *= xs[d];
  std::vector<float> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    double s = gamma[c] / std::sqrt(var[c] + eps);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(beta[c] - mean[c] * s);
  }
  int ws = cg.add_weight(Tensor::from_vector(DType::F32, {C}, scale));
  int wb = cg.add_weight(Tensor::from_vector(DType::F32, {C}, shift));
  std::string x = cg.ptr(n.inputs[0]);
  SymInt bytes = numel(xs) * 4;
  cg.define(n.outputs[0], DType::F32, xs, cg.reusable(n.inputs[0], bytes) ? cg.buffer_of(n.inputs[0]) : -1);
  cg.emit(fmt::format("hk_channel_affine({}, (const float*)(W + {}), (const float*)(W + {}), {}, {}, {}, {});", x,
                      cg.weight_offsets[ws], cg.weight_offsets[wb], cg.ptr(n.outputs[0]), xs[0], C, inner));
}

void emit_layernorm(Codegen& cg, const Node& n) {
  require_f32(cg, n, 0);
  HODU_CHECK(!n.has_output(1) && !n.has_output(2), ErrorCode::Unsupported,
             "{}: the Mean/InvStdDev outputs are not supported by compiled code", n.describe());
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = n.get_int("axis", -1);
  if (axis < 0) axis += r;
  HODU_CHECK(axis >= 0 && axis < r, ErrorCode::InvalidModel, "{}: axis out of range", n.describe());
  SymInt rows = 1, cols = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? rows : cols) *= xs[d];
  // Scale and bias must cover the normalized elements; constants are expanded.
  auto full = [&](size_t i) -> std::string {
    if (!n.has_input(i)) return "NULL";
    if (numel(cg.shape_of(n.inputs[i])) == cols) return cg.ptr(n.inputs[i]);
    HODU_CHECK(cg.is_constant(n.inputs[i]) && numel(cg.shape_of(n.inputs[i])).is(1) && cols.known(),
               ErrorCode::Unsupported, "{}: compiled code needs input '{}' to have {} elements", n.describe(),
               n.inputs[i], cols);
    std::vector<float> v(cols.value(), static_cast<float>(cg.constant(n.inputs[i]).get_double(0)));
    return fmt::format("((const float*)(W + {}))",
                       cg.weight_offsets[cg.add_weight(Tensor::from_vector(DType::F32, {cols.value()}, v))]);
  };
  std::string x = cg.ptr(n.inputs[0]), s = full(1), b = full(2);
  cg.define(n.outputs[0], DType::F32, xs);
  std::string args = fmt::format("{}, {}, {}, {}, {}, {}, {}", x, s, b, cg.ptr(n.outputs[0]), rows, cols,
                                 c_float(n.get_float("epsilon", 1e-5f)));
  // Default mode: vectorized for the host and on the library's threads (the
  // portable kernel when the call refuses its arguments).
  if (cg.kernel_library)
    cg.emit(fmt::format("if (hodu_layer_norm(m->kernels, {})) hk_layer_norm({});", args, args));
  else
    cg.emit(fmt::format("hk_layer_norm({});", args));
}

void emit_softmax(Codegen& cg, const Node& n) {
  require_f32(cg, n, 0);
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = n.get_int("axis", -1);
  if (axis < 0) axis += r;
  HODU_CHECK(axis >= 0 && axis < std::max<int64_t>(r, 1), ErrorCode::InvalidModel, "{}: axis out of range",
             n.describe());
  SymInt outer = 1, inner = 1, mid = r ? xs[axis] : SymInt(1);
  for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= xs[d];
  auto fused = cg.softmax_inputs.find(n.outputs[0]);
  if (fused != cg.softmax_inputs.end() && n.op_type == "Softmax" && inner.is(1)) {
    // Default mode: softmax(x * scale + mask) over rows (generator.cc fused the
    // scale and the mask); the portable fallback applies them in a loop first.
    const Codegen::SoftmaxInput& in = fused->second;
    std::string x = cg.ptr(in.x), mask = in.mask.empty() ? "NULL" : cg.ptr(in.mask);
    SymInt bytes = numel(xs) * 4;
    cg.define(n.outputs[0], DType::F32, xs, cg.reusable(in.x, bytes) ? cg.buffer_of(in.x) : -1);
    std::string y = cg.ptr(n.outputs[0]);
    std::string prologue;
    if (!in.mask.empty())
      prologue = fmt::format(
          "for (int64_t r = 0; r < {}; ++r) for (int64_t j = 0; j < {}; ++j) {}[r * {} + j] = {}[r * {} + j] * {} + "
          "{}[r % {} * {} + j]; ",
          outer, mid, y, mid, x, mid, c_float(in.scale), mask, in.mask_rows, mid);
    else if (in.scale != 1.f)
      prologue = fmt::format("for (int64_t i = 0; i < {}; ++i) {}[i] = {}[i] * {}; ", outer * mid, y, x,
                             c_float(in.scale));
    cg.emit(fmt::format("if (hodu_softmax(m->kernels, {}, {}, {}, {}, {}, {}, {})) {{ {}hk_softmax({}, {}, {}, {}, 1, 0); }}",
                        x, c_float(in.scale), mask, in.mask_rows, y, outer, mid, prologue,
                        prologue.empty() ? x : y, y, outer, mid));
    return;
  }
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], DType::F32, xs);
  cg.emit(fmt::format("hk_softmax({}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), outer, mid, inner,
                      n.op_type == "LogSoftmax" ? 1 : 0));
}

// The statements `emit` adds to the run body, taken out of it (the portable
// fallback of a library op).
template <class F>
std::string captured(Codegen& cg, F&& emit) {
  std::string saved = std::move(cg.code);
  cg.code.clear();
  emit();
  std::string text = std::move(cg.code);
  cg.code = std::move(saved);
  return text;
}

// hodu_matmul_desc fields: rank, a_dims[6], b_dims[6], transposes, alpha, b_constant, has_bias,
// activation, accumulate, a_strides[6], b_strides[6], dst_strides[6] (empty: row-major).
std::string matmul_desc(SymShape a, SymShape b, bool ta, bool tb, float alpha, bool b_constant, bool bias,
                        const Target& t, bool accumulate = false, SymShape a_strides = {}, SymShape b_strides = {},
                        SymShape dst_strides = {}) {
  auto dims = [](SymShape v) {
    v.resize(6, 0);
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", v[i]);
    return "{" + s + "}";
  };
  return fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", a.size(), dims(a), dims(b), ta ? 1 : 0,
                     tb ? 1 : 0, c_float(alpha), b_constant ? 1 : 0, bias ? 1 : 0, activation_fields(t),
                     accumulate ? 1 : 0, dims(a_strides), dims(b_strides), dims(dst_strides));
}

// A MatMul operand: its pointer, and where it is a strided view (a head split read in
// place) its element offset and strides over `rank` dims (batch padded with 1s in front,
// which get the stride of a row-major outer dim: oneDNN accepts any for size-1 dims).
struct Operand {
  std::string ptr;
  const StridedView* view = nullptr;
  SymShape strides;  // empty: row-major
};

Operand operand(Codegen& cg, const std::string& v, size_t rank) {
  Operand o;
  o.ptr = cg.ptr(v);
  auto it = cg.strided_views.find(v);
  if (it == cg.strided_views.end()) return o;
  o.view = &it->second;
  SymShape st = it->second.strides, shape = it->second.dims;
  SymInt outer = 1;
  for (size_t d = 0; d < shape.size(); ++d) outer = sym_max(outer, st[d] * shape[d]);
  st.insert(st.begin(), rank - st.size(), outer);
  o.strides = st;
  return o;
}

void emit_matmul(Codegen& cg, const Node& n) {
  // Default mode: A may be read before a scalar scale, which becomes the product's alpha.
  const std::string a_name = cg.matmul_a.empty() ? n.inputs[0] : cg.matmul_a;
  const float alpha = cg.matmul_alpha;
  cg.matmul_a.clear();
  cg.matmul_alpha = 1.f;
  require_f32(cg, n, 0);
  require_f32(cg, n, 1);
  auto as = cg.shape_of(a_name), bs = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(!as.empty() && !bs.empty(), ErrorCode::InvalidModel, "{}: MatMul of a scalar", n.describe());
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  SymInt M = as[as.size() - 2], K = as.back(), N = bs.back();
  sym_require(sym_eq(bs[bs.size() - 2], K), n.describe() + ": inner dims %lld and %lld differ", {K, bs[bs.size() - 2]});
  SymShape abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  size_t rank = std::max(abatch.size(), bbatch.size());
  abatch.insert(abatch.begin(), rank - abatch.size(), 1);
  bbatch.insert(bbatch.begin(), rank - bbatch.size(), 1);
  SymShape batch(rank);
  for (size_t d = 0; d < rank; ++d) batch[d] = broadcast_dim(abatch[d], bbatch[d], n.describe());
  SymInt nb = numel(batch);
  // Operands read through strides: the library reads them in place, the portable code
  // from a row-major copy.
  Operand ao = operand(cg, a_name, rank + 2), bo = operand(cg, n.inputs[1], rank + 2);
  auto offset_ptr = [](const Operand& o) {
    return o.view && !o.view->offset.is(0) ? fmt::format("({} + {})", o.ptr, o.view->offset) : o.ptr;
  };
  const std::string a_stored = offset_ptr(ao), b_stored = offset_ptr(bo);
  std::string a = ao.ptr, b = bo.ptr;
  std::string pack = cg.scratch(kGemmPackBytes);
  auto row_major_copy = [&](const Operand& o, std::string& p) {
    if (!o.view) return std::string();
    std::string copy = cg.scratch(numel(o.view->dims) * 4);
    std::string dims = cg.table(o.view->dims), strides = cg.table(o.view->strides);
    std::string line = fmt::format("hk_strided_copy({}, {}, {}, {}, {}, {}, 4);", p, copy, o.view->dims.size(), dims,
                                   strides, o.view->offset);
    p = copy;
    return line;
  };
  std::string a_copy = row_major_copy(ao, a), b_copy = row_major_copy(bo, b);
  Target t = take_target(cg, n);
  std::string bias = cg.matmul_bias.empty() ? "" : cg.ptr(cg.matmul_bias);  // default mode: a fused bias over N
  cg.matmul_bias.clear();
  std::string residual = cg.residual;  // default mode: a fused Add of a same-shaped value, after the bias
  cg.residual.clear();
  std::string z = residual.empty() ? "" : cg.ptr(residual);
  // A head merge (default mode): the Transpose reading the result is written through strides.
  SymShape dst_strides;
  std::string out = t.name;
  if (!cg.dst_transpose.empty()) {
    HODU_CHECK(residual.empty() && ys.size() == rank + 2, ErrorCode::Internal, "{}: a strided result",
               n.describe());
    out = cg.dst_transpose;
    auto perm = cg.dst_transpose_perm;
    auto cs = row_major_strides(cg.shape_of(out));
    dst_strides.assign(perm.size(), 0);
    for (size_t k = 0; k < perm.size(); ++k) dst_strides[perm[k]] = cs[k];
    cg.dst_transpose.clear();
  }
  // A residual that dies here is the result's buffer: the sum post-op accumulates onto
  // it; the portable code then keeps the residual in a scratch buffer.
  SymInt y_bytes = numel(ys) * 4;
  auto apart = [&](const std::string& v) {
    return cg.info(v).kind != ValueInfo::Kind::Arena || cg.buffer_of(v) != cg.buffer_of(residual);
  };
  bool in_place = !residual.empty() && cg.kernel_library && options_allow_in_place(cg) &&
                  cg.reusable(residual, y_bytes) && apart(a_name) && apart(n.inputs[1]);
  std::string kept = in_place ? cg.scratch(y_bytes) : "";
  if (in_place) cg.define(out, DType::F32, cg.shape_of(out), cg.buffer_of(residual));
  else cg.define(out, DType::F32, out == t.name ? ys : cg.shape_of(out));
  std::string y_final = cg.ptr(out), y = dst_strides.empty() ? y_final : cg.scratch(y_bytes);
  std::string portable = captured(cg, [&] {
  if (in_place) cg.emit(fmt::format("memcpy({}, {}, {});", kept, z, y_bytes));
  if (!a_copy.empty()) cg.emit(a_copy);
  if (!b_copy.empty()) cg.emit(b_copy);
  if (numel(bbatch).is(1)) {
    // B shared by every batch: one GEMM with the batches stacked as rows.
    SymInt rows = nb * M;
    if (numel(abatch) != nb) {  // A broadcast over batches: one GEMM per batch
      cg.emit(fmt::format("for (int64_t bi = 0; bi < {}; ++bi) hk_gemm({}, {}, {}, {}, {}, {}, {}, {} + bi * {}, {}, 0, {});",
                          nb, M, N, K, a, K, b, N, y, M * N, N, pack));
    } else {
      cg.emit(fmt::format("hk_gemm({}, {}, {}, {}, {}, {}, {}, {}, {}, 0, {});", rows, N, K, a, K, b, N, y, N, pack));
    }
  } else if (!is_static(batch) || !is_static(abatch) || !is_static(bbatch)) {
    // Batch dims known at run time: the offsets are computed while running.
    SymShape astr = row_major_strides(abatch), bstr = row_major_strides(bbatch);
    for (size_t d = 0; d < rank; ++d) {
      astr[d] = broadcast_stride(abatch[d], batch[d], astr[d]);
      bstr[d] = broadcast_stride(bbatch[d], batch[d], bstr[d]);
    }
    std::string bt = cg.table(batch), at = cg.table(astr), btt = cg.table(bstr);
    cg.emit(fmt::format("hk_matmul_bcast({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", rank, bt, at, btt, M, N, K, a,
                        b, y, pack));
  } else {
    const auto abatch_ = *to_static(abatch), bbatch_ = *to_static(bbatch), batch_ = *to_static(batch);
    const int64_t nb_ = nb.value(), M_ = M.value(), K_ = K.value(), N_ = N.value();
    std::vector<int64_t> aoff(nb_), boff(nb_), idx(rank, 0);
    auto astr = contiguous_strides(abatch_), bstr = contiguous_strides(bbatch_);
    for (int64_t i = 0; i < nb_; ++i) {
      int64_t ao_ = 0, bo_ = 0;
      for (size_t d = 0; d < rank; ++d) {
        if (abatch_[d] != 1) ao_ += idx[d] * astr[d];
        if (bbatch_[d] != 1) bo_ += idx[d] * bstr[d];
      }
      aoff[i] = ao_ * M_ * K_;
      boff[i] = bo_ * K_ * N_;
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < batch_[d]) break;
        idx[d] = 0;
      }
    }
    cg.emit(fmt::format("hk_matmul_batched({}, {}, {}, {}, {}, {}, {}, {}, {}, {});", nb, M, N, K, a, cg.table(aoff), b,
                        cg.table(boff), y, pack));
  }
  if (alpha != 1.f || !bias.empty() || !residual.empty() || t.kind != HODU_ACTIVATION_CLIP || t.lo != -INFINITY ||
      t.hi != INFINITY) {
    std::string v = alpha != 1.f ? fmt::format("{} * {}[i]", c_float(alpha), y) : fmt::format("{}[i]", y);
    if (!bias.empty()) v += fmt::format(" + {}[i % {}]", bias, N);
    if (!residual.empty()) v += fmt::format(" + {}[i]", in_place ? kept : z);
    std::string act = t.kind != HODU_ACTIVATION_CLIP ? fmt::format(" v = {};", activation_expr(t.kind)) : "";
    if (t.kind == HODU_ACTIVATION_CLIP && t.lo != -INFINITY) act += fmt::format(" v = v < {} ? {} : v;", c_float(t.lo), c_float(t.lo));
    if (t.kind == HODU_ACTIVATION_CLIP && t.hi != INFINITY) act += fmt::format(" v = v > {} ? {} : v;", c_float(t.hi), c_float(t.hi));
    cg.emit(fmt::format("for (int64_t i = 0; i < {}; ++i) {{ float v = {};{} {}[i] = v; }}", numel(ys), v, act, y));
  }
  if (!dst_strides.empty()) {
    // Scatter the row-major result through the head merge's strides.
    auto out_shape = cg.shape_of(out);
    SymShape gather(out_shape.size());
    auto ycs = row_major_strides(ys);
    for (size_t k = 0; k < out_shape.size(); ++k) gather[k] = ycs[cg.dst_transpose_perm[k]];
    std::string ot = cg.table(out_shape), gt = cg.table(gather);
    cg.emit(fmt::format("hk_strided_copy({}, {}, {}, {}, {}, 0, 4);", y, y_final, out_shape.size(), ot, gt));
  }
  });
  // Sizes read while running: the portable code (it also handles views, scales and residuals:
  // it is the library call's fallback).
  const bool late = cg.sizes_read_while_running(n);
  if (!cg.kernel_library || rank + 2 > 6 || late) {
    HODU_CHECK(late || (residual.empty() && !ao.view && !bo.view && dst_strides.empty() && alpha == 1.f),
               ErrorCode::Internal, "{}: a fused residual, scale or strided operand needs the kernel library",
               n.describe());
    cg.code += portable;
    return;
  }
  SymShape a_dims = abatch, b_dims = bbatch;
  a_dims.insert(a_dims.end(), {M, K});
  b_dims.insert(b_dims.end(), {K, N});
  bool b_constant = cg.is_constant(n.inputs[1]);
  std::string op = cg.library_op(
      n, "hodu_matmul_desc",
      matmul_desc(a_dims, b_dims, false, false, alpha, b_constant, !bias.empty(), t, !residual.empty(), ao.strides,
                  bo.strides, dst_strides),
      fmt::format("hodu_matmul_prepare(m->kernels, &d, {}, {}, &OP)", b_constant ? b_stored : "NULL",
                  bias.empty() ? "NULL" : bias));
  cg.emit_library_call(n, op,
                       fmt::format("hodu_matmul_run(m->kernels, {}, {}, {}, {}, {})", op, a_stored,
                                   b_constant ? "NULL" : b_stored, residual.empty() ? "NULL" : z, y_final),
                       portable);
}

void emit_gemm(Codegen& cg, const Node& n) {
  for (size_t i = 0; i < 2; ++i) require_f32(cg, n, i);
  auto as = cg.shape_of(n.inputs[0]), bs = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(as.size() == 2 && bs.size() == 2, ErrorCode::InvalidModel, "{}: Gemm needs 2-D inputs", n.describe());
  bool ta = n.get_int("transA", 0) != 0, tb = n.get_int("transB", 0) != 0;
  SymInt M = ta ? as[1] : as[0], K = ta ? as[0] : as[1], N = tb ? bs[0] : bs[1];
  float alpha = n.get_float("alpha", 1.f), beta = n.get_float("beta", 1.f);
  std::string a = cg.ptr(n.inputs[0]), b;
  if (tb && cg.is_constant(n.inputs[1])) {
    // Transposed once at build time: the kernel reads B as [K, N].
    Tensor bt = cg.constant(n.inputs[1]).permute({1, 0}).contiguous();
    b = fmt::format("((const float*)(W + {}))", cg.weight_offsets[cg.add_weight(bt)]);
    tb = false;
  } else {
    b = cg.ptr(n.inputs[1]);
  }
  std::string c = n.has_input(2) ? cg.ptr(n.inputs[2]) : "";
  std::string pack = cg.scratch(kGemmPackBytes);
  const std::string a_stored = a, b_stored = b;
  const bool ta_stored = ta;
  std::string ta_scratch = ta ? cg.scratch(M * K * 4) : "", tb_scratch = tb ? cg.scratch(K * N * 4) : "";
  Target t = take_target(cg, n);
  cg.define(t.name, DType::F32, ys);
  std::string y = cg.ptr(t.name);
  std::string portable = captured(cg, [&] {
  if (ta) {
    cg.emit(fmt::format("hk_transpose2d({}, {}, {}, {});", a, ta_scratch, K, M));
    a = ta_scratch;
  }
  if (tb) {
    cg.emit(fmt::format("hk_transpose2d({}, {}, {}, {});", b, tb_scratch, N, K));
    b = tb_scratch;
  }
  cg.emit(fmt::format("hk_gemm({}, {}, {}, {}, {}, {}, {}, {}, {}, 0, {});", M, N, K, a, K, b, N, y, N, pack));
  if (!c.empty() || alpha != 1.f) {
    SymInt rs = 0, cs = 0;
    if (!c.empty()) {
      auto s = cg.shape_of(n.inputs[2]);
      SymInt cr = s.size() >= 2 ? s[s.size() - 2] : SymInt(1), cc = s.empty() ? SymInt(1) : s.back();
      cs = broadcast_stride(cc, N, 1);
      rs = broadcast_stride(cr, M, cc);
    }
    cg.emit(fmt::format("hk_gemm_epilogue({}, {}, {}, {}, {}, {}, {}, {});", y, M, N, c_float(alpha),
                        c.empty() ? "NULL" : c, rs, cs, c_float(beta)));
  }
  if (t.lo != -INFINITY || t.hi != INFINITY)
    cg.emit(fmt::format("for (int64_t i = 0; i < {}; ++i) {{ float v = {}[i]; v = v < {} ? {} : v; {}[i] = v > {} ? {} : v; }}",
                        M * N, y, c_float(t.lo), c_float(t.lo), y, c_float(t.hi), c_float(t.hi)));
  });
  // The library takes C as a bias vector of N (times beta, folded at build time) and
  // alpha folded into a constant B; anything else runs the portable code.
  bool b_constant = cg.is_constant(n.inputs[1]) && !tb;
  std::string bias = "NULL";
  bool library = cg.kernel_library && (alpha == 1.f || b_constant) && !cg.sizes_read_while_running(n);
  if (library && !c.empty()) {
    auto s = cg.shape_of(n.inputs[2]);
    bool vector = cg.is_constant(n.inputs[2]) && numel(s) == N && (s.empty() || s.back() == N) && N.known();
    if (!vector) {
      library = false;
    } else if (beta == 1.f) {
      bias = c;
    } else {
      std::vector<float> v(N.value());
      for (int64_t i = 0; i < N.value(); ++i) v[i] = static_cast<float>(cg.constant(n.inputs[2]).get_double(i) * beta);
      bias = fmt::format("((const float*)(W + {}))",
                         cg.weight_offsets[cg.add_weight(Tensor::from_vector(DType::F32, {N.value()}, v))]);
    }
  }
  if (!library) {
    cg.code += portable;
    return;
  }
  SymShape a_dims = ta_stored ? SymShape{K, M} : SymShape{M, K};
  SymShape b_dims = tb ? SymShape{N, K} : SymShape{K, N};
  std::string op = cg.library_op(
      n, "hodu_matmul_desc", matmul_desc(a_dims, b_dims, ta_stored, tb, alpha, b_constant, bias != "NULL", t),
      fmt::format("hodu_matmul_prepare(m->kernels, &d, {}, {}, &OP)", b_constant ? b_stored : "NULL", bias));
  cg.emit_library_call(n, op,
                       fmt::format("hodu_matmul_run(m->kernels, {}, {}, {}, NULL, {})", op, a_stored,
                                   b_constant ? "NULL" : b_stored, y),
                       portable);
}

// Mul(x [N,C,H,W], s [1 or N, C, 1, 1]) on x's layout (a library op's native dst
// or plain): the result has that layout too, for the convs that read it.
void emit_channel_scale(Codegen& cg, const Node& n) {
  const std::string& z = n.outputs[0];
  auto zs = cg.shape_of(z);
  bool x_first = cg.shape_of(n.inputs[0]) == zs && cg.shape_of(n.inputs[1]) != zs;
  const std::string& xv = x_first ? n.inputs[0] : n.inputs[1];
  const std::string& sv = x_first ? n.inputs[1] : n.inputs[0];
  auto ss = cg.shape_of(sv);
  SymInt N = zs[0], C = zs[1], hw = zs[2] * zs[3];
  SymInt s_batch = ss.size() == 4 ? broadcast_stride(ss[0], N, C) : SymInt(0);
  std::string from = native_producer(cg, xv);
  std::string x = cg.ptr(xv), sp = cg.ptr(sv);
  SymInt bytes = N * (ceildiv(C, 16) * 16) * hw * 4;
  cg.define(z, DType::F32, zs, cg.reusable(xv, bytes) ? cg.buffer_of(xv) : -1);
  grow_for_blocks(cg, z, zs);
  if (from != "NULL") cg.native_op[z] = from;
  cg.emit("/* Mul: per-channel scale */ {");
  cg.code += fmt::format("    hk_scale_args a = {{{}, {}, {}, {}, {}, {}, {}, hodu_kernel_layout({})}};\n", x, sp,
                         cg.ptr(z), N, C, hw, s_batch, from);
  if (!(N * C * hw).known() || (N * C * hw).value() >= 65536)
    cg.code += "    hodu_kernels_parallel_for(m->kernels, hk_scale_tasks(&a), 1, hk_scale_range, &a);\n  }\n";
  else
    cg.code += "    hk_scale_range(&a, 0, hk_scale_tasks(&a));\n  }\n";
}

// Concat on channels whose parts were written in place into its buffer: no code
// at run time; create checks that the parts' layouts agree (they were prepared
// to) and makes the op its readers name as their producer.
void emit_concat_inplace(Codegen& cg, const Node& n) {
  const std::string& y = n.outputs[0];
  auto ys = cg.shape_of(y);
  for (const auto& in : n.inputs) cg.touch(in);
  cg.touch(y);
  if (!cg.native_values.count(y)) return;  // plain parts side by side: plain NCHW
  std::string parts, channels;
  for (const auto& in : n.inputs) {
    parts += (parts.empty() ? "" : ", ") + native_producer(cg, in);
    channels += (channels.empty() ? "" : ", ") + cg.shape_of(in)[1].c();
  }
  std::string op = fmt::format("m->ops[{}]", cg.library_ops++);
  cg.prepare += fmt::format(
      "  {{\n    const hodu_kernel* parts[] = {{{}}};\n    static const int64_t channels[] = {{{}}};\n"
      "    if ((st = hm_prepared(m, hodu_concat_prepare(m->kernels, {}, parts, channels, {}, {}, &{}), {}, errbuf, "
      "errbuf_size))) return st;\n"
      "    if (!{}) {{\n      hm_errbuf(errbuf, errbuf_size, {});\n      return 4;\n    }}\n  }}\n",
      parts, channels, n.inputs.size(), ys[2], ys[3], op, c_string_literal(n.describe()), op,
      c_string_literal(n.describe() + ": the convolutions writing the parts of this in-place concat left them in "
                                      "different layouts"));
  cg.native_op[y] = op;
}

}  // namespace

bool conv_as_fc(const Codegen& cg, const Node& n) {
  if (!cg.kernel_library || n.op_type != "Conv" || !n.domain.empty() || !cg.is_constant(n.inputs[1]) ||
      (n.has_input(2) && !cg.is_constant(n.inputs[2])) || n.get_int("group", 1) != 1)
    return false;
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  auto pads = n.get_ints("pads", {});
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  return cg.dtype_of(n.inputs[0]) == DType::F32 && xs.size() == 4 && xs[1].known() && xs[2].is(1) && xs[3].is(1) &&
         ws.size() == 4 && ws[2].is(1) && ws[3].is(1) && ys.size() == 4 && ys[2].is(1) && ys[3].is(1) &&
         std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) &&
         (auto_pad == "NOTSET" || auto_pad == "VALID");
}

std::vector<std::string> nn_op_names() {
  return {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
          "LayerNormalization", "Softmax", "LogSoftmax", "MatMul", "Gemm"};
}

namespace {

// The fast emitters take float32 only; other dtypes go to the generic ones (ops_generic.cc).
bool f32_only(const Codegen& cg, const Node& n) {
  for (const auto& v : n.inputs)
    if (!v.empty() && dtype_is_float(cg.dtype_of(v)) && cg.dtype_of(v) != DType::F32) return false;
  return cg.dtype_of(n.inputs[0]) == DType::F32;
}

// Inference-mode BatchNormalization with constant parameters (folded into a scale and shift).
bool fast_batchnorm(const Codegen& cg, const Node& n) {
  if (!f32_only(cg, n) || n.get_int("training_mode", 0) != 0 || n.has_output(1)) return false;
  for (size_t i = 1; i < 5; ++i)
    if (!n.has_input(i) || !cg.is_constant(n.inputs[i])) return false;
  return cg.shape_of(n.inputs[0]).size() < 2 || cg.shape_of(n.inputs[0])[1].known();
}

}  // namespace

bool emit_nn_op(Codegen& cg, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return false;
  if (op == "Conv" && f32_only(cg, n)) emit_conv(cg, n);
  else if (op == "MaxPool" || op == "AveragePool") emit_pool(cg, n);
  else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") emit_global_pool(cg, n);
  else if (op == "BatchNormalization" && fast_batchnorm(cg, n)) emit_batchnorm(cg, n);
  else if (op == "LayerNormalization" && f32_only(cg, n) && !n.has_output(1) && !n.has_output(2) &&
           n.get_int("stash_type", 1) == 1)
    emit_layernorm(cg, n);
  else if ((op == "Softmax" || op == "LogSoftmax") && f32_only(cg, n)) emit_softmax(cg, n);
  else if (op == "MatMul" && f32_only(cg, n)) emit_matmul(cg, n);
  else if (op == "Gemm" && f32_only(cg, n)) emit_gemm(cg, n);
  else if (op == "Mul" && cg.channel_scales.count(n.outputs[0])) emit_channel_scale(cg, n);
  else if (op == "Concat" && cg.inplace_concats.count(n.outputs[0])) emit_concat_inplace(cg, n);
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
