// Emitters for the ops outside the hot path: reductions of any dtype or with axes read
// while running, Softmax family and ArgMax of other dtypes, the normalizations, the
// losses. Each converts its operands for the generic kernels (kernels/hk_ops.c: double and
// int64), calls one, and converts the result back.
#include "compilers/c/ops_generic.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace hodu::compilers::c {

void need_generic_kernels(Codegen& cg) {
  cg.kernel_sections.insert("convert");
  cg.kernel_sections.insert("ops");
}

int64_t normalized_axis(const Node& n, int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  HODU_CHECK(axis >= 0 && axis < std::max<int64_t>(rank, 1), ErrorCode::InvalidModel, "{}: axis out of range",
             n.describe());
  return axis;
}

int64_t element_bytes(Codegen& cg, const std::string& v) {
  DType t = cg.dtype_of(v);
  HODU_CHECK(c_type(t) && !dtype_is_subbyte(t), ErrorCode::Unsupported,
             "value '{}' has dtype {}, which this op does not move in compiled code", v, dtype_name(t));
  return dtype_bits(t) / 8;
}

namespace {

std::string converted(Codegen& cg, const std::string& v, DType to, const char* type) {
  DType dt = cg.dtype_of(v);
  if (dt == to) return fmt::format("((const {}*){})", type, cg.ptr(v));
  // A constant is widened once at build time (exact: float to double, integer to int64), not
  // on every run (an LSTM's weights inside a Silero VAD branch were a third of its run).
  if (cg.is_constant(v)) {
    const std::string wide = v + "\x01as_" + std::string(dtype_name(to));
    if (!cg.is_constant(wide)) cg.constants[wide] = cg.constant(v).cast(to);
    return fmt::format("((const {}*){})", type, cg.ptr(wide));
  }
  need_generic_kernels(cg);
  SymInt n = numel(cg.shape_of(v));
  std::string p = cg.ptr(v);
  std::string s = fmt::format("(({}*){})", type, cg.scratch(n * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", p, static_cast<int>(dt), s, static_cast<int>(to), n));
  return fmt::format("((const {}*){})", type, s);
}

}  // namespace

std::string f64_in(Codegen& cg, const std::string& v) {
  HODU_CHECK(dtype_is_float(cg.dtype_of(v)), ErrorCode::Unsupported, "value '{}' has dtype {}, a float type is needed",
             v, dtype_name(cg.dtype_of(v)));
  return converted(cg, v, DType::F64, "double");
}

// Any numeric value as `const double*` (integers converted exactly below 2^53).
std::string doubles_in(Codegen& cg, const std::string& v) {
  DType dt = cg.dtype_of(v);
  if (dtype_is_float(dt)) return f64_in(cg, v);
  HODU_CHECK(dtype_is_integer(dt), ErrorCode::Unsupported, "value '{}' has dtype {}, a number type is needed", v,
             dtype_name(dt));
  return converted(cg, v, DType::F64, "double");
}

std::string i64_in(Codegen& cg, const std::string& v) {
  DType dt = cg.dtype_of(v);
  HODU_CHECK(dtype_is_integer(dt) || dt == DType::Bool, ErrorCode::Unsupported,
             "value '{}' has dtype {}, an integer type is needed", v, dtype_name(dt));
  return converted(cg, v, DType::I64, "int64_t");
}

WideOut wide_out(Codegen& cg, const std::string& name, const SymShape& shape, bool integer) {
  WideOut o;
  o.name = name;
  o.dtype = cg.dtype_of(name);
  o.count = numel(shape);
  o.integer = integer;
  const DType wide = integer ? DType::I64 : DType::F64;
  const char* type = integer ? "int64_t" : "double";
  if (o.dtype == wide) {
    cg.define(name, o.dtype, shape);
    o.buffer = fmt::format("(({}*){})", type, cg.ptr(name));
    return o;
  }
  need_generic_kernels(cg);
  o.converted = true;
  o.buffer = fmt::format("(({}*){})", type, cg.scratch(o.count * 8));
  cg.define(name, o.dtype, shape);
  return o;
}

void WideOut::finish(Codegen& cg) const {
  if (!converted) return;
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", buffer, static_cast<int>(integer ? DType::I64 : DType::F64),
                      cg.ptr(name), static_cast<int>(dtype), count));
}

std::string expanded(Codegen& cg, const std::string& v, const SymShape& shape) {
  SymShape s = cg.shape_of(v);
  if (s == shape) return cg.ptr(v);
  HODU_CHECK(s.size() <= shape.size(), ErrorCode::InvalidModel, "'{}' of rank {} cannot be broadcast to rank {}", v,
             s.size(), shape.size());
  auto st = row_major_strides(s);
  SymShape strides(shape.size(), 0);
  size_t off = shape.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) strides[d + off] = broadcast_stride(s[d], shape[d + off], st[d]);
  int64_t es = element_bytes(cg, v);
  std::string x = cg.ptr(v);
  std::string out = fmt::format("((void*){})", cg.scratch(numel(shape) * es));
  std::string dt = cg.table(shape), stt = cg.table(strides);
  cg.emit(fmt::format("hk_strided_copy({}, {}, {}, {}, {}, 0, {});", x, out, shape.size(), dt, stt, es));
  return fmt::format("((const {}*){})", c_type(cg.dtype_of(v)), out);
}

namespace {

const char* reduce_name(const std::string& op) {
  static const std::map<std::string, const char*> codes = {
      {"ReduceSum", "HK_R_SUM"},   {"ReduceMean", "HK_R_MEAN"},     {"ReduceMax", "HK_R_MAX"},
      {"ReduceMin", "HK_R_MIN"},   {"ReduceProd", "HK_R_PROD"},     {"ReduceL1", "HK_R_L1"},
      {"ReduceL2", "HK_R_L2"},     {"ReduceLogSum", "HK_R_LOGSUM"}, {"ReduceLogSumExp", "HK_R_LOGSUMEXP"},
      {"ReduceSumSquare", "HK_R_SUMSQ"}};
  auto it = codes.find(op);
  return it == codes.end() ? nullptr : it->second;
}

// Reduce* of any numeric dtype, axes constant, an attribute or read while running.
void emit_reduce_generic(Codegen& cg, const Node& n) {
  const std::string& x = n.inputs[0];
  DType dt = cg.dtype_of(x);
  auto xs = cg.shape_of(x), ys = cg.shape_of(n.outputs[0]);
  const int64_t r = static_cast<int64_t>(xs.size());
  bool noop = n.get_int("noop_with_empty_axes", 0) != 0;
  HODU_CHECK(dt != DType::Bool || n.op_type == "ReduceMax" || n.op_type == "ReduceMin", ErrorCode::Unsupported,
             "{}: bool is reduced by ReduceMax and ReduceMin only", n.describe());
  need_generic_kernels(cg);
  std::string flags;
  if (n.has_input(1) && !cg.is_constant(n.inputs[1]) && !cg.sym_values.count(n.inputs[1])) {
    // Axes read while running: the flags computed then.
    DType at = cg.dtype_of(n.inputs[1]);
    flags = fmt::format("F{}", cg.table_count++);
    std::string axes = cg.ptr(n.inputs[1]);
    cg.emit(fmt::format("int64_t {}[{}];", flags, std::max<int64_t>(r, 1)));
    cg.emit_checked(fmt::format("hk_axes_flags({}, {}, {}, {}, {}, {})", r, axes, at == DType::I32 ? 1 : 0,
                                numel(cg.shape_of(n.inputs[1])), noop ? 1 : 0, flags),
                    n, "an axis is out of range or repeated");
    // The output dims follow from the flags (late dims of shape inference, or checked).
    std::string od = fmt::format("OD{}", cg.table_count++);
    cg.emit(fmt::format("int64_t {}[{}];", od, std::max<int64_t>(r, 1)));
    cg.emit(fmt::format("hk_reduce_dims({}, {}, {}, {}, {});", r, cg.table(xs.empty() ? SymShape{1} : xs), flags,
                        n.get_int("keepdims", 1) != 0 ? 1 : 0, od));
    for (size_t d = 0; d < ys.size(); ++d) assign_late(cg, n, ys[d], fmt::format("{}[{}]", od, d));
  } else {
    std::vector<int64_t> axes;
    if (n.has_input(1)) {
      auto v = sym_ints(cg, n, 1);
      HODU_CHECK(is_static(v), ErrorCode::Unsupported, "{}: axes computed from sizes known only at run time",
                 n.describe());
      axes = *to_static(v);
    } else if (n.has_attr("axes")) {
      axes = n.get_ints("axes");
    }
    std::vector<int64_t> f(static_cast<size_t>(r), axes.empty() && !noop ? 1 : 0);
    for (int64_t a : axes) f[normalized_axis(n, a, r)] = 1;
    flags = cg.table(f.empty() ? std::vector<int64_t>{0} : f);
  }
  SymInt total = numel(xs);
  std::string offs = fmt::format("((int64_t*){})", cg.scratch((total + total + 2) * 8));
  std::string dims = cg.table(xs.empty() ? SymShape{1} : xs);
  bool integer = !dtype_is_float(dt);
  std::string in = integer ? i64_in(cg, x) : f64_in(cg, x);
  WideOut out = wide_out(cg, n.outputs[0], ys, integer);
  std::string nred = fmt::format("nr{}", cg.table_count++);
  cg.emit(fmt::format("const int64_t {} = hk_reduce_offsets({}, {}, {}, {}, {} + {});", nred, r, dims, flags, offs,
                      offs, total + 1));
  if (integer)
    cg.emit(fmt::format("hk_reduce_i64({}, {}, {}, {}, {}, {} + {}, {}, {});", in, out.buffer, numel(ys), nred, offs,
                        offs, total + 1, reduce_name(n.op_type), dtype_is_signed(dt) || dt == DType::Bool ? 0 : 1));
  else
    cg.emit(fmt::format("hk_reduce_f64({}, {}, {}, {}, {}, {} + {}, {});", in, out.buffer, numel(ys), nred, offs, offs,
                        total + 1, reduce_name(n.op_type)));
  out.finish(cg);
}

// outer, n, inner around `axis` of the input's dims (a run-time split when the axis is read
// while running): C expressions.
struct Split {
  std::string outer, n, inner;
};
Split split_at(Codegen& cg, const SymShape& xs, int64_t axis) {
  SymInt outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  return {outer.c(), xs[axis].c(), inner.c()};
}

void emit_argreduce_generic(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = normalized_axis(n, n.get_int("axis", 0), r);
  Split s = split_at(cg, xs, axis);
  DType dt = cg.dtype_of(n.inputs[0]);
  std::string x;
  if (dtype_is_float(dt)) {
    x = f64_in(cg, n.inputs[0]);
  } else {  // integers compared as doubles (exact below 2^53)
    need_generic_kernels(cg);
    SymInt cnt = numel(xs);
    std::string p = cg.ptr(n.inputs[0]);
    x = fmt::format("((double*){})", cg.scratch(cnt * 8));
    cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", p, static_cast<int>(dt), x,
                        static_cast<int>(DType::F64), cnt));
  }
  cg.define(n.outputs[0], DType::I64, cg.shape_of(n.outputs[0]));
  cg.emit(fmt::format("hk_argreduce_f64({}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), s.outer, s.n, s.inner,
                      n.op_type == "ArgMin" ? 1 : 0, n.get_int("select_last_index", 0) ? 1 : 0));
}

// Softmax, LogSoftmax, Hardmax of any float dtype along one axis.
void emit_softmax_generic(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  SymShape s = xs.empty() ? SymShape{1} : xs;
  int64_t axis = normalized_axis(n, n.get_int("axis", -1), std::max<int64_t>(r, 1));
  Split sp = split_at(cg, s, axis);
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut out = wide_out(cg, n.outputs[0], xs);
  int kind = n.op_type == "Softmax" ? 0 : n.op_type == "LogSoftmax" ? 1 : 2;
  cg.emit(fmt::format("hk_softmax_f64({}, {}, {}, {}, {}, {});", x, out.buffer, sp.outer, sp.n, sp.inner, kind));
  out.finish(cg);
}

// CumSum / CumProd: axis constant, from sizes, or read while running.
void emit_cumulate(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  DType dt = cg.dtype_of(n.inputs[0]);
  HODU_CHECK(dt != DType::Bool, ErrorCode::Unsupported, "{}: bool", n.describe());
  auto axis = sym_ints(cg, n, 1);
  HODU_CHECK(axis.size() == 1, ErrorCode::InvalidModel, "{}: axis must have one element", n.describe());
  bool integer = !dtype_is_float(dt);
  std::string x = integer ? i64_in(cg, n.inputs[0]) : f64_in(cg, n.inputs[0]);
  WideOut out = wide_out(cg, n.outputs[0], xs, integer);
  std::string dims = cg.table(xs);
  std::string v = fmt::format("ax{}", cg.table_count++);
  cg.emit(fmt::format("int64_t {0}_o, {0}_n, {0}_i;", v));
  cg.emit_checked(fmt::format("hk_split_axis({}, {}, {}, &{}_o, &{}_n, &{}_i)", r, dims, axis[0], v, v, v), n,
                  "axis out of range");
  cg.emit(fmt::format("hk_cumulate({}, {}, {}_o, {}_n, {}_i, {}, {}, {}, {});", x, out.buffer, v, v, v,
                      n.get_int("exclusive", 0) ? 1 : 0, n.get_int("reverse", 0) ? 1 : 0,
                      n.op_type == "CumProd" ? 1 : 0, integer ? 1 : 0));
  out.finish(cg);
}

void emit_topk(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = normalized_axis(n, n.get_int("axis", -1), r);
  Split s = split_at(cg, xs, axis);
  DType dt = cg.dtype_of(n.inputs[0]);
  need_generic_kernels(cg);
  SymInt cnt = numel(xs);
  std::string raw = cg.ptr(n.inputs[0]);
  std::string keys = fmt::format("((double*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", raw, static_cast<int>(dt), keys,
                      static_cast<int>(DType::F64), cnt));
  std::string work = fmt::format("((int64_t*){})", cg.scratch(xs[axis] * 8));
  cg.define(n.outputs[0], dt, ys);
  std::string idx = "NULL";
  std::string idx_buf;
  if (n.has_output(1)) {
    cg.define(n.outputs[1], DType::I64, cg.shape_of(n.outputs[1]));
    idx = cg.ptr(n.outputs[1]);
  } else {
    idx = fmt::format("((int64_t*){})", cg.scratch(numel(ys) * 8));
  }
  sym_require(sym_eq(sym_lt(xs[axis], ys[axis]), 0), n.describe() + ": K = %lld exceeds the axis size %lld",
              {ys[axis], xs[axis]});
  cg.emit(fmt::format("hk_topk({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", keys, raw, cg.ptr(n.outputs[0]), idx,
                      s.outer, s.n, s.inner, ys[axis], n.get_int("largest", 1) ? 1 : 0, element_bytes(cg, n.inputs[0]),
                      work));
}

// ---- normalizations ----------------------------------------------------------------

double eps_of(const Node& n) { return n.get_float("epsilon", 1e-5f); }

std::string f64_param(Codegen& cg, const Node& n, size_t i, const SymShape& shape) {
  if (!n.has_input(i)) return "NULL";
  std::string v = n.inputs[i];
  if (cg.shape_of(v) == shape) return f64_in(cg, v);
  // Broadcast to the normalized shape first.
  std::string e = expanded(cg, v, shape);
  need_generic_kernels(cg);
  SymInt cnt = numel(shape);
  std::string d = fmt::format("((double*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", e, static_cast<int>(cg.dtype_of(v)), d,
                      static_cast<int>(DType::F64), cnt));
  return fmt::format("((const double*){})", d);
}

void emit_rows_norm(Codegen& cg, const Node& n, bool rms) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = normalized_axis(n, n.get_int("axis", -1), r);
  SymShape norm(xs.begin() + axis, xs.end());
  SymInt rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= xs[d];
  int64_t stash = n.get_int("stash_type", 1);
  std::string x = f64_in(cg, n.inputs[0]);
  std::string scale = f64_param(cg, n, 1, norm), bias = rms ? "NULL" : f64_param(cg, n, 2, norm);
  WideOut y = wide_out(cg, n.outputs[0], xs);
  std::string mean = "NULL", inv = "NULL";
  WideOut m, s;
  if (!rms && n.has_output(1)) {
    m = wide_out(cg, n.outputs[1], cg.shape_of(n.outputs[1]));
    mean = m.buffer;
  }
  if (!rms && n.has_output(2)) {
    s = wide_out(cg, n.outputs[2], cg.shape_of(n.outputs[2]));
    inv = s.buffer;
  }
  cg.emit(fmt::format("hk_rows_norm({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, scale, bias, y.buffer, mean, inv,
                      rows, numel(norm), c_float(eps_of(n)), rms ? 1 : 0, stash == 11 ? 1 : 0));
  y.finish(cg);
  if (mean != "NULL") m.finish(cg);
  if (inv != "NULL") s.finish(cg);
}

// N, C, S of [N, C, ...].
struct Ncs {
  SymInt N, C, S;
};
Ncs ncs(const SymShape& xs) {
  Ncs r{xs.empty() ? SymInt(1) : xs[0], xs.size() > 1 ? xs[1] : SymInt(1), 1};
  for (size_t d = 2; d < xs.size(); ++d) r.S *= xs[d];
  return r;
}

void emit_batch_norm(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  Ncs d = ncs(xs);
  bool training = n.get_int("training_mode", 0) != 0;
  std::string x = f64_in(cg, n.inputs[0]);
  std::string p[4];
  for (size_t i = 0; i < 4; ++i) p[i] = f64_in(cg, n.inputs[i + 1]);
  WideOut y = wide_out(cg, n.outputs[0], xs);
  std::string rm = "NULL", rv = "NULL";
  WideOut om, ov;
  if (training && n.has_output(1)) {
    om = wide_out(cg, n.outputs[1], cg.shape_of(n.outputs[1]));
    rm = om.buffer;
  }
  if (training && n.has_output(2)) {
    ov = wide_out(cg, n.outputs[2], cg.shape_of(n.outputs[2]));
    rv = ov.buffer;
  }
  cg.emit(fmt::format("hk_batch_norm({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, p[0], p[1], p[2], p[3],
                      y.buffer, rm, rv, d.N, d.C, d.S, c_float(eps_of(n)), c_float(n.get_float("momentum", 0.9f)),
                      training ? 1 : 0));
  y.finish(cg);
  if (rm != "NULL") om.finish(cg);
  if (rv != "NULL") ov.finish(cg);
}

void emit_group_norm(Codegen& cg, const Node& n, bool instance) {
  auto xs = cg.shape_of(n.inputs[0]);
  Ncs d = ncs(xs);
  std::string x = f64_in(cg, n.inputs[0]), scale = f64_in(cg, n.inputs[1]), bias = f64_in(cg, n.inputs[2]);
  WideOut y = wide_out(cg, n.outputs[0], xs);
  SymInt groups = instance ? d.C : SymInt(n.get_int("num_groups", 1));
  // Opset 18's GroupNormalization has a scale per group; 21's one per channel.
  bool per_group = !instance && numel(cg.shape_of(n.inputs[1])) == groups && !(groups == d.C);
  cg.emit(fmt::format("hk_group_norm({}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, scale, bias, y.buffer, d.N, d.C, d.S,
                      groups, c_float(eps_of(n)), per_group ? 1 : 0));
  y.finish(cg);
}

void emit_lrn(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  Ncs d = ncs(xs);
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], xs);
  cg.emit(fmt::format("hk_lrn({}, {}, {}, {}, {}, {}, {}, {}, {});", x, y.buffer, d.N, d.C, d.S, n.get_int("size", 1),
                      c_float(n.get_float("alpha", 1e-4f)), c_float(n.get_float("beta", 0.75f)),
                      c_float(n.get_float("bias", 1.f))));
  y.finish(cg);
}

// MeanVarianceNormalization (axes) and LpNormalization (one axis) over groups of elements.
void emit_group_normalize(Codegen& cg, const Node& n, bool lp) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  std::vector<int64_t> f(static_cast<size_t>(r), 0);
  if (lp) f[normalized_axis(n, n.get_int("axis", -1), r)] = 1;
  else
    for (int64_t a : n.get_ints("axes", {0, 2, 3})) f[normalized_axis(n, a, r)] = 1;
  int64_t p = n.get_int("p", 2);
  HODU_CHECK(!lp || p == 1 || p == 2, ErrorCode::InvalidModel, "{}: p must be 1 or 2", n.describe());
  SymInt total = numel(xs);
  std::string x = f64_in(cg, n.inputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], xs);
  std::string offs = fmt::format("((int64_t*){})", cg.scratch((total + total + 2) * 8));
  std::string flags = cg.table(f), dims = cg.table(xs);
  std::string nred = fmt::format("nr{}", cg.table_count++);
  SymInt n_red = 1;
  for (int64_t d = 0; d < r; ++d)
    if (f[d]) n_red *= xs[d];
  cg.emit(fmt::format("const int64_t {} = hk_reduce_offsets({}, {}, {}, {}, {} + {});", nred, r, dims, flags, offs,
                      offs, total + 1));
  cg.emit(fmt::format("hk_group_normalize({}, {}, {} / ({} ? {} : 1), {}, {}, {} + {}, {}, {});", x, y.buffer, total,
                      nred, nred, nred, offs, offs, total + 1, lp ? 1 : 0, p));
  y.finish(cg);
}

void emit_loss(Codegen& cg, const Node& n, bool softmax) {
  auto xs = cg.shape_of(n.inputs[0]);
  HODU_CHECK(xs.size() >= 2, ErrorCode::InvalidModel, "{}: input of rank {}", n.describe(), xs.size());
  SymInt N = xs[0], C = xs[1], D = 1;
  for (size_t d = 2; d < xs.size(); ++d) D *= xs[d];
  std::string reduction = n.get_string("reduction", "mean");
  int red = reduction == "none" ? 0 : reduction == "sum" ? 1 : reduction == "mean" ? 2 : -1;
  HODU_CHECK(red >= 0, ErrorCode::InvalidModel, "{}: reduction '{}'", n.describe(), reduction);
  std::string x = f64_in(cg, n.inputs[0]), target = i64_in(cg, n.inputs[1]);
  std::string weight = n.has_input(2) ? f64_in(cg, n.inputs[2]) : "NULL";
  std::string work = fmt::format("((double*){})", cg.scratch(numel(xs) * 8));
  WideOut loss = wide_out(cg, n.outputs[0], cg.shape_of(n.outputs[0]));
  std::string logp = "NULL";
  WideOut lp;
  if (softmax && n.has_output(1)) {
    lp = wide_out(cg, n.outputs[1], xs);
    logp = lp.buffer;
  }
  cg.emit_checked(fmt::format("hk_loss({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}LL, {})", x, target, weight,
                              loss.buffer, logp, work, N, C, D, red, n.has_attr("ignore_index") ? 1 : 0,
                              n.get_int("ignore_index", 0), softmax ? 1 : 0),
                  n, "a target value is out of range");
  loss.finish(cg);
  if (logp != "NULL") lp.finish(cg);
}

// ConvTranspose of any rank and float dtype (f16 models' upsampling decoders too): pads as the
// interpreter derives them (auto_pad, output_shape, output_padding), the output shape from sym_shapes.
void emit_conv_transpose(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() >= 3 && ws.size() == xs.size() && xs.size() <= 10, ErrorCode::InvalidModel,
             "{}: X and W must have the same rank, 3 to 10", n.describe());
  const size_t nd = xs.size() - 2;
  const int64_t G = n.get_int("group", 1);
  HODU_CHECK(G > 0 && (!xs[1].known() || xs[1].value() % G == 0) && (!ws[0].known() || !xs[1].known() ||
                                                                    ws[0].value() == xs[1].value()),
             ErrorCode::InvalidModel, "{}: X {} / W {} are inconsistent with group {}", n.describe(), to_string(xs),
             to_string(ws), G);
  auto ints = [&](const char* name, int64_t def) {
    auto v = n.get_ints(name, std::vector<int64_t>(nd, def));
    HODU_CHECK(v.size() == nd, ErrorCode::InvalidModel, "{}: '{}' has {} values, expected {}", n.describe(), name,
               v.size(), nd);
    return v;
  };
  auto strides = ints("strides", 1), dil = ints("dilations", 1), opad = ints("output_padding", 0);
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < nd; ++i) {
    HODU_CHECK(ws[i + 2].known(), ErrorCode::Unsupported, "{}: the kernel size must be known at build time",
               n.describe());
    kernel.push_back(ws[i + 2].value());
  }
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  auto pads = n.get_ints("pads");
  HODU_CHECK(pads.empty() || pads.size() == 2 * nd, ErrorCode::InvalidModel, "{}: 'pads' has {} values, expected {}",
             n.describe(), pads.size(), 2 * nd);
  SymShape begin;
  for (size_t i = 0; i < nd; ++i) {
    if (pads.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
      SymInt full = (xs[i + 2] - 1) * strides[i] + opad[i] + (kernel[i] - 1) * dil[i] + 1;
      SymInt total = full - ys[i + 2];
      HODU_CHECK(total.known(), ErrorCode::Unsupported,
                 "{}: SAME padding to an output_shape over sizes known only at run time; bind the inputs' dims "
                 "with --dim NAME=V or --shape NAME=AxBxC",
                 n.describe());
      const int64_t t = total.value(), half = t >= 0 ? t / 2 : -((-t + 1) / 2);
      begin.push_back(auto_pad == "SAME_UPPER" ? half : t - half);
    } else {
      begin.push_back(pads.empty() ? 0 : pads[i]);
    }
  }
  SymShape in(xs.begin() + 2, xs.end()), out(ys.begin() + 2, ys.end());
  std::vector<int64_t> dims_k(kernel);
  std::string x = f64_in(cg, n.inputs[0]), w = f64_in(cg, n.inputs[1]);
  std::string b = n.has_input(2) ? f64_in(cg, n.inputs[2]) : "NULL";
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit(fmt::format("hk_conv_transpose({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, w, b,
                      y.buffer, xs[0], xs[1], ys[1], G, nd, cg.table(in), cg.table(out), cg.table(dims_k),
                      cg.table(strides), cg.table(dil), cg.table(begin)));
  y.finish(cg);
}

void emit_det(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() >= 2 && xs[xs.size() - 1] == xs[xs.size() - 2], ErrorCode::InvalidModel,
             "{}: input must be [*, M, M]", n.describe());
  const SymInt m = xs.back();
  std::string x = f64_in(cg, n.inputs[0]);
  std::string work = fmt::format("((double*){})", cg.scratch(m * m * 8));
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit(fmt::format("hk_det({}, {}, {}, {}, {});", x, y.buffer, numel(ys), m, work));
  y.finish(cg);
}

// DeformConv (2-D): bilinear samples at the offsets into scratch columns, then the product with
// W per group (hk_deform_conv, doubles).
void emit_deform_conv(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 4 && ws.size() == 4 && ys.size() == 4, ErrorCode::Unsupported,
             "{}: DeformConv of 2-D inputs (rank 4) only, as the interpreter", n.describe());
  const int64_t G = n.get_int("group", 1), OG = n.get_int("offset_group", 1);
  HODU_CHECK(ws[2].known() && ws[3].known() && xs[1].known() && ws[0].known(), ErrorCode::Unsupported,
             "{}: the channels and the kernel size must be known at build time", n.describe());
  const int64_t C = xs[1].value(), M = ws[0].value(), kh = ws[2].value(), kw = ws[3].value();
  HODU_CHECK(G > 0 && OG > 0 && C % G == 0 && M % G == 0 && ws[1].is(C / G) && C % OG == 0, ErrorCode::InvalidModel,
             "{}: X {} / W {} are inconsistent with group {} and offset_group {}", n.describe(), to_string(xs),
             to_string(ws), G, OG);
  auto strides = n.get_ints("strides", {1, 1}), dil = n.get_ints("dilations", {1, 1});
  auto pads = n.get_ints("pads", {0, 0, 0, 0});
  HODU_CHECK(strides.size() == 2 && dil.size() == 2 && pads.size() == 4, ErrorCode::InvalidModel,
             "{}: strides/dilations/pads do not match 2 spatial dims", n.describe());
  HODU_CHECK(n.get_string("auto_pad", "NOTSET") == "NOTSET", ErrorCode::Unsupported, "{}: auto_pad is not supported",
             n.describe());
  const bool mask = n.has_input(4);
  // The offsets (and mask) must match the output's grid: the kernel reads them by it.
  auto need = [&](size_t i, int64_t channels, const char* what) {
    auto s = cg.shape_of(n.inputs[i]);
    HODU_CHECK(s.size() == 4, ErrorCode::InvalidModel, "{}: {} must be 4-D", n.describe(), what);
    SymShape want{xs[0], channels, ys[2], ys[3]};
    for (size_t d = 0; d < 4; ++d)
      sym_require(sym_eq(s[d], want[d]), n.describe() + ": " + what + " dim " + std::to_string(d) +
                                             " is %lld where the output grid needs %lld", {s[d], want[d]});
  };
  need(2, OG * 2 * kh * kw, "offset");
  if (mask) need(4, OG * kh * kw, "mask");
  if (n.has_input(3)) sym_require(sym_eq(numel(cg.shape_of(n.inputs[3])), M), n.describe() + ": B has %lld values for %lld output channels", {numel(cg.shape_of(n.inputs[3])), M});
  std::string x = f64_in(cg, n.inputs[0]), w = f64_in(cg, n.inputs[1]), off = f64_in(cg, n.inputs[2]);
  std::string b = n.has_input(3) ? f64_in(cg, n.inputs[3]) : "NULL", k = mask ? f64_in(cg, n.inputs[4]) : "NULL";
  std::string col = fmt::format("((double*){})", cg.scratch((C / G) * kh * kw * ys[2] * ys[3] * 8));
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit(fmt::format("hk_deform_conv({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x,
                      w, off, k, b, y.buffer, xs[0], C, xs[2], xs[3], M, G, OG, kh, kw, ys[2], ys[3],
                      cg.table(std::vector<int64_t>{strides[0], pads[0], dil[0], strides[1], pads[1], dil[1]}), col));
  y.finish(cg);
}

// Conv of float64 (float32 runs in ops_nn.cc; half floats are widened to it), 1-D or 2-D: the
// DeformConv kernel without offsets (samples at whole positions: the plain convolution).
void emit_conv_wide(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK((xs.size() == 3 || xs.size() == 4) && ws.size() == xs.size() && ys.size() == xs.size(),
             ErrorCode::Unsupported,
             "{}: Conv of {} over {} spatial dims is not supported by compiled code (1-D and 2-D outside float32)",
             n.describe(), dtype_name(cg.dtype_of(n.inputs[0])), xs.size() - 2);
  HODU_CHECK(dtype_is_float(cg.dtype_of(n.inputs[0])), ErrorCode::Unsupported, "{}: Conv of {}", n.describe(),
             dtype_name(cg.dtype_of(n.inputs[0])));
  const size_t nd = xs.size() - 2;
  for (size_t d = 1; d < ws.size(); ++d)
    HODU_CHECK(ws[d].known() && xs[1].known() && ws[0].known(), ErrorCode::Unsupported,
               "{}: the channels and the kernel size must be known at build time", n.describe());
  const int64_t C = xs[1].value(), M = ws[0].value(), G = n.get_int("group", 1);
  HODU_CHECK(G > 0 && C % G == 0 && M % G == 0 && ws[1].is(C / G), ErrorCode::InvalidModel,
             "{}: X {} / W {} are inconsistent with group {}", n.describe(), to_string(xs), to_string(ws), G);
  auto strides = n.get_ints("strides", std::vector<int64_t>(nd, 1)), dil = n.get_ints("dilations", std::vector<int64_t>(nd, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  HODU_CHECK(strides.size() == nd && dil.size() == nd && pads.size() == 2 * nd, ErrorCode::InvalidModel,
             "{}: strides/dilations/pads do not match {} spatial dims", n.describe(), nd);
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  SymShape geo;  // stride, pad begin, dilation of h then w (1-D: h is a unit axis)
  if (nd == 1) geo = {1, 0, 1};
  for (size_t d = 0; d < nd; ++d) {
    SymInt begin = pads[d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      SymInt total = sym_max(0, (ys[d + 2] - 1) * strides[d] + (ws[d + 2] - 1) * dil[d] + 1 - xs[d + 2]);
      begin = auto_pad == "SAME_UPPER" ? floordiv(total, 2) : total - floordiv(total, 2);
    } else if (auto_pad == "VALID") {
      begin = 0;
    }
    geo.push_back(strides[d]), geo.push_back(begin), geo.push_back(dil[d]);
  }
  SymInt H = nd == 1 ? SymInt(1) : xs[2], W = xs.back(), OH = nd == 1 ? SymInt(1) : ys[2], OW = ys.back();
  const int64_t kh = nd == 1 ? 1 : ws[2].value(), kw = ws.back().value();
  std::string x = f64_in(cg, n.inputs[0]), w = f64_in(cg, n.inputs[1]);
  std::string b = n.has_input(2) ? f64_in(cg, n.inputs[2]) : "NULL";
  std::string col = fmt::format("((double*){})", cg.scratch((C / G) * kh * kw * OH * OW * 8));
  WideOut y = wide_out(cg, n.outputs[0], ys);
  cg.emit(fmt::format("hk_deform_conv({}, {}, NULL, NULL, {}, {}, {}, {}, {}, {}, {}, {}, 1, {}, {}, {}, {}, {}, {});", x,
                      w, b, y.buffer, xs[0], C, H, W, M, G, kh, kw, OH, OW, cg.table(geo), col));
  y.finish(cg);
}

// MatMul and Gemm of float64 and integer types (float32 runs in ops_nn.cc, half floats are
// widened to it by graph_prep): double or wrapping int64 products (hk_matmul_wide).
void emit_matmul_generic(Codegen& cg, const Node& n) {
  const bool gemm = n.op_type == "Gemm";
  DType dt = cg.dtype_of(n.inputs[0]);
  HODU_CHECK((dtype_is_float(dt) || dtype_is_integer(dt)) && cg.dtype_of(n.inputs[1]) == dt, ErrorCode::Unsupported,
             "{}: {} of {} and {} is not supported (numbers of one dtype are needed)", n.describe(), n.op_type,
             dtype_name(dt), dtype_name(cg.dtype_of(n.inputs[1])));
  const bool integer = dtype_is_integer(dt);
  auto as = cg.shape_of(n.inputs[0]), bs = cg.shape_of(n.inputs[1]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(!as.empty() && !bs.empty(), ErrorCode::InvalidModel, "{}: {} of a scalar", n.describe(), n.op_type);
  bool ta = gemm && n.get_int("transA", 0) != 0, tb = gemm && n.get_int("transB", 0) != 0;
  double alpha = gemm ? n.get_float("alpha", 1.f) : 1.0, beta = gemm ? n.get_float("beta", 1.f) : 1.0;
  HODU_CHECK(!integer || (std::nearbyint(alpha) == alpha && std::nearbyint(beta) == beta), ErrorCode::Unsupported,
             "{}: integer Gemm with a fractional alpha or beta is not supported by compiled code", n.describe());
  if (gemm)
    HODU_CHECK(as.size() == 2 && bs.size() == 2, ErrorCode::InvalidModel, "{}: Gemm needs 2-D A and B", n.describe());
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  SymInt M = ta ? as[as.size() - 1] : as[as.size() - 2], K = ta ? as[as.size() - 2] : as.back();
  SymInt N = tb ? bs[bs.size() - 2] : bs.back(), Kb = tb ? bs.back() : bs[bs.size() - 2];
  sym_require(sym_eq(K, Kb), n.describe() + ": inner dims %lld and %lld differ", {K, Kb});
  SymShape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t rank = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), rank - ab.size(), 1);
  bb.insert(bb.begin(), rank - bb.size(), 1);
  SymShape batch(rank);
  for (size_t d = 0; d < rank; ++d) batch[d] = broadcast_dim(ab[d], bb[d], n.describe());
  auto wide = [&](const std::string& v) { return integer ? i64_in(cg, v) : f64_in(cg, v); };
  std::string a = wide(n.inputs[0]), b = wide(n.inputs[1]), c = "NULL";
  SymInt cr = 1, cc = 1;
  if (gemm && n.has_input(2)) {
    auto cs = cg.shape_of(n.inputs[2]);
    HODU_CHECK(cs.size() <= 2 && cg.dtype_of(n.inputs[2]) == dt, ErrorCode::InvalidModel,
               "{}: C must be of A's dtype and of rank at most 2", n.describe());
    if (cs.size() == 2) cr = cs[0];
    if (!cs.empty()) cc = cs.back();
    c = wide(n.inputs[2]);
  }
  WideOut y = wide_out(cg, n.outputs[0], ys, integer);
  std::string tables =
      rank ? fmt::format("{}, {}, {}", cg.table(ab), cg.table(bb), cg.table(batch)) : "NULL, NULL, NULL";
  cg.emit(fmt::format("hk_matmul_wide({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", a, b, y.buffer, integer ? 1 : 0,
                      rank, tables, M, K, N, ta ? 1 : 0, tb ? 1 : 0));
  if (gemm && (alpha != 1.0 || c != "NULL"))
    cg.emit(fmt::format("hk_gemm_wide_epilogue({}, {}, {}, {}, {}, {}, {}, {:.17g}, {:.17g});", y.buffer, c,
                        integer ? 1 : 0, M, N, cr, cc, alpha, beta));
  y.finish(cg);
}

}  // namespace

std::vector<std::string> generic_op_names() {
  return {"ReduceLogSum", "ReduceLogSumExp", "Hardmax",     "CumSum",     "CumProd",   "TopK",
          "RMSNormalization", "GroupNormalization", "InstanceNormalization", "LRN", "MeanVarianceNormalization",
          "LpNormalization", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "ConvTranspose", "Det", "Einsum", "MatMul", "Gemm",
          "DeformConv"};
}

bool emit_generic_op(Codegen& cg, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return false;
  need_generic_kernels(cg);
  if (reduce_name(op)) emit_reduce_generic(cg, n);
  else if (op == "ArgMax" || op == "ArgMin") emit_argreduce_generic(cg, n);
  else if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") emit_softmax_generic(cg, n);
  else if (op == "CumSum" || op == "CumProd") emit_cumulate(cg, n);
  else if (op == "TopK") emit_topk(cg, n);
  else if (op == "LayerNormalization") emit_rows_norm(cg, n, false);
  else if (op == "RMSNormalization") emit_rows_norm(cg, n, true);
  else if (op == "BatchNormalization") emit_batch_norm(cg, n);
  else if (op == "GroupNormalization") emit_group_norm(cg, n, false);
  else if (op == "InstanceNormalization") emit_group_norm(cg, n, true);
  else if (op == "LRN") emit_lrn(cg, n);
  else if (op == "MeanVarianceNormalization") emit_group_normalize(cg, n, false);
  else if (op == "LpNormalization") emit_group_normalize(cg, n, true);
  else if (op == "NegativeLogLikelihoodLoss") emit_loss(cg, n, false);
  else if (op == "SoftmaxCrossEntropyLoss") emit_loss(cg, n, true);
  else if (op == "ConvTranspose") emit_conv_transpose(cg, n);
  else if (op == "Det") emit_det(cg, n);
  else if (op == "Einsum") emit_einsum(cg, n);
  else if (op == "MatMul" || op == "Gemm") emit_matmul_generic(cg, n);
  else if (op == "DeformConv") emit_deform_conv(cg, n);
  else if (op == "Conv") emit_conv_wide(cg, n);
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
