// Emitters for the indexing ops and the ops whose sizes come from data: GatherElements,
// ScatterElements (Scatter), GatherND, ScatterND, TensorScatter, Trilu, OneHot, EyeLike,
// ReverseSequence, Slice with axes or steps read while running, Compress, NonZero, Unique.
// Data moves by element size (any dtype); a count known only while running is a late dim
// the emitter assigns before the values sized by it are allocated.
#include <fmt/format.h>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {

void assign_late(Codegen& cg, const Node& n, const SymInt& d, const std::string& expr) {
  const auto& t = d.terms();
  if (d.known() || !d.late()) {
    cg.emit(fmt::format("if ({} != {}) return hm_fail(m, 4, \"%s: %lld elements where the model declares %lld\", {}, "
                        "(long long)({}), (long long)({}));",
                        expr, d, c_string_literal(n.describe()), expr, d));
    return;
  }
  HODU_CHECK(t.size() == 1 && t[0].coef == 1 && t[0].atoms.size() == 1, ErrorCode::Internal,
             "{}: the count is no late dim ({})", n.describe(), d.c());
  cg.emit(fmt::format("S[{}] = {};", t[0].atoms[0], expr));
}

namespace {

bool idx32(const Codegen& cg, const std::string& v) { return cg.dtype_of(v) == DType::I32; }

// A copy of `from` as the new value `to` (the data a scatter starts from).
void copy_value(Codegen& cg, const std::string& from, const std::string& to) {
  auto s = cg.shape_of(from);
  std::string x = cg.ptr(from);
  cg.define(to, cg.dtype_of(from), s);
  cg.emit(fmt::format("memcpy({}, {}, {});", cg.ptr(to), x, storage_bytes(cg.dtype_of(from), numel(s))));
}

int reduction_code(const Node& n) {
  std::string red = n.get_string("reduction", "none");
  int r = red == "none" ? 0 : red == "add" ? 1 : red == "mul" ? 2 : red == "max" ? 3 : red == "min" ? 4 : -1;
  HODU_CHECK(r >= 0, ErrorCode::InvalidModel, "{}: reduction '{}'", n.describe(), red);
  return r;
}

void emit_gather_elements(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), is = cg.shape_of(n.inputs[1]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = normalized_axis(n, n.get_int("axis", 0), r);
  std::string x = cg.ptr(n.inputs[0]), idx = cg.ptr(n.inputs[1]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), is);
  std::string xd = cg.table(xs), id = cg.table(is);
  cg.emit_checked(fmt::format("hk_gather_elements({}, {}, {}, {}, {}, {}, {}, {}, {})", x, idx,
                              idx32(cg, n.inputs[1]) ? 1 : 0, cg.ptr(n.outputs[0]), r, xd, id, axis,
                              element_bytes(cg, n.inputs[0])),
                  n, "index out of range");
}

void emit_scatter_elements(Codegen& cg, const Node& n) {
  auto ds = cg.shape_of(n.inputs[0]), is = cg.shape_of(n.inputs[1]);
  int64_t r = static_cast<int64_t>(ds.size()), axis = normalized_axis(n, n.get_int("axis", 0), r);
  std::string idx = cg.ptr(n.inputs[1]), upd = cg.ptr(n.inputs[2]);
  copy_value(cg, n.inputs[0], n.outputs[0]);
  std::string dd = cg.table(ds), id = cg.table(is);
  cg.emit_checked(fmt::format("hk_scatter_elements({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", cg.ptr(n.outputs[0]),
                              idx, idx32(cg, n.inputs[1]) ? 1 : 0, upd, r, dd, id, axis, reduction_code(n),
                              static_cast<int>(cg.dtype_of(n.inputs[0])), element_bytes(cg, n.inputs[0])),
                  n, "index out of range");
}

void emit_gather_nd(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), is = cg.shape_of(n.inputs[1]);
  int64_t r = static_cast<int64_t>(xs.size()), q = static_cast<int64_t>(is.size()), b = n.get_int("batch_dims", 0);
  HODU_CHECK(is.back().known(), ErrorCode::Unsupported, "{}: index depth known only at run time", n.describe());
  int64_t m = is.back().value();
  HODU_CHECK(m >= 1 && b + m <= r, ErrorCode::InvalidModel, "{}: indices of depth {}", n.describe(), m);
  SymInt batches = 1, per_batch = 1, inner = 1, batch_stride = 1;
  for (int64_t d = 0; d < b; ++d) batches *= xs[d];
  for (int64_t d = b; d < q - 1; ++d) per_batch *= is[d];
  for (int64_t d = b + m; d < r; ++d) inner *= xs[d];
  for (int64_t d = b; d < r; ++d) batch_stride *= xs[d];
  auto st = row_major_strides(xs);
  std::string x = cg.ptr(n.inputs[0]), idx = i64_in(cg, n.inputs[1]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), cg.shape_of(n.outputs[0]));
  std::string dims = cg.table(SymShape(xs.begin() + b, xs.begin() + b + m)),
              strides = cg.table(SymShape(st.begin() + b, st.begin() + b + m));
  cg.emit_checked(fmt::format("hk_gather_nd({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, idx, cg.ptr(n.outputs[0]),
                              batches, per_batch, m, inner, batch_stride, dims, strides, element_bytes(cg, n.inputs[0])),
                  n, "index out of range");
}

void emit_scatter_nd(Codegen& cg, const Node& n) {
  auto ds = cg.shape_of(n.inputs[0]), is = cg.shape_of(n.inputs[1]);
  int64_t r = static_cast<int64_t>(ds.size()), q = static_cast<int64_t>(is.size());
  HODU_CHECK(is.back().known(), ErrorCode::Unsupported, "{}: index depth known only at run time", n.describe());
  int64_t k = is.back().value();
  HODU_CHECK(k <= r, ErrorCode::InvalidModel, "{}: indices of depth {} for data of rank {}", n.describe(), k, r);
  SymInt count = 1, block = 1;
  for (int64_t d = 0; d < q - 1; ++d) count *= is[d];
  for (int64_t d = k; d < r; ++d) block *= ds[d];
  auto st = row_major_strides(ds);
  std::string idx = i64_in(cg, n.inputs[1]), upd = cg.ptr(n.inputs[2]);
  copy_value(cg, n.inputs[0], n.outputs[0]);
  std::string dims = cg.table(SymShape(ds.begin(), ds.begin() + k)), strides = cg.table(SymShape(st.begin(), st.begin() + k));
  cg.emit_checked(fmt::format("hk_scatter_nd({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", cg.ptr(n.outputs[0]), idx,
                              upd, count, k, dims, strides, block, reduction_code(n),
                              static_cast<int>(cg.dtype_of(n.inputs[0])), element_bytes(cg, n.inputs[0])),
                  n, "index out of range");
}

void emit_tensor_scatter(Codegen& cg, const Node& n) {
  auto cs = cg.shape_of(n.inputs[0]), us = cg.shape_of(n.inputs[1]);
  int64_t r = static_cast<int64_t>(cs.size()), axis = normalized_axis(n, n.get_int("axis", -2), r);
  std::string mode = n.get_string("mode", "linear");
  SymInt outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= cs[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= cs[d];
  std::string upd = cg.ptr(n.inputs[1]), wi = n.has_input(2) ? i64_in(cg, n.inputs[2]) : "NULL";
  copy_value(cg, n.inputs[0], n.outputs[0]);
  cg.emit_checked(fmt::format("hk_tensor_scatter({}, {}, {}, {}, {}, {}, {}, {}, {}, {})", cg.ptr(n.outputs[0]), upd, wi,
                              cs[0], outer, cs[axis], us[axis], inner, mode == "circular" ? 1 : 0,
                              element_bytes(cg, n.inputs[0])),
                  n, "a write index overflows the cache");
}

void emit_trilu(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  HODU_CHECK(xs.size() >= 2, ErrorCode::InvalidModel, "{}: rank {}", n.describe(), xs.size());
  SymInt rows = xs[xs.size() - 2], cols = xs.back(), batch = 1;
  for (size_t d = 0; d + 2 < xs.size(); ++d) batch *= xs[d];
  SymInt k = n.has_input(1) ? sym_ints(cg, n, 1).at(0) : SymInt(0);
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), xs);
  cg.emit(fmt::format("hk_trilu({}, {}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), batch, rows, cols, k,
                      n.get_int("upper", 1) ? 1 : 0, element_bytes(cg, n.inputs[0])));
}

void emit_onehot(Codegen& cg, const Node& n) {
  auto is = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  int64_t r = static_cast<int64_t>(is.size()), axis = n.get_int("axis", -1);
  if (axis < 0) axis += r + 1;
  HODU_CHECK(axis >= 0 && axis <= r, ErrorCode::InvalidModel, "{}: axis out of range", n.describe());
  SymInt outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= is[d];
  for (int64_t d = axis; d < r; ++d) inner *= is[d];
  need_generic_kernels(cg);
  SymInt cnt = numel(is);
  std::string raw = cg.ptr(n.inputs[0]);
  std::string idx = fmt::format("((double*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", raw, static_cast<int>(cg.dtype_of(n.inputs[0])), idx,
                      static_cast<int>(DType::F64), cnt));
  std::string values = cg.ptr(n.inputs[2]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[2]), ys);
  cg.emit(fmt::format("hk_onehot({}, {}, {}, {}, {}, {}, {});", idx, values, cg.ptr(n.outputs[0]), outer, ys[axis],
                      inner, element_bytes(cg, n.inputs[2])));
}

void emit_eye_like(Codegen& cg, const Node& n) {
  auto ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(ys.size() == 2, ErrorCode::InvalidModel, "{}: EyeLike needs a 2-D input", n.describe());
  DType dt = cg.dtype_of(n.outputs[0]);
  Tensor one = Tensor::empty(dt, {});
  one.set_double(0, 1.0);
  int w = cg.add_weight(one);
  cg.define(n.outputs[0], dt, ys);
  cg.emit(fmt::format("hk_eye({}, {}, {}, {}, W + {}, {});", cg.ptr(n.outputs[0]), ys[0], ys[1], n.get_int("k", 0),
                      cg.weight_offsets[w], element_bytes(cg, n.outputs[0])));
}

void emit_reverse_sequence(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  int64_t b = normalized_axis(n, n.get_int("batch_axis", 1), r), t = normalized_axis(n, n.get_int("time_axis", 0), r);
  std::string x = cg.ptr(n.inputs[0]), lens = i64_in(cg, n.inputs[1]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), xs);
  std::string dims = cg.table(xs);
  cg.emit_checked(fmt::format("hk_reverse_sequence({}, {}, {}, {}, {}, {}, {}, {})", x, cg.ptr(n.outputs[0]), lens, r,
                              dims, b, t, element_bytes(cg, n.inputs[0])),
                  n, "a sequence length is out of range");
}

// Slice whose axes or steps are read while running (the output's shape known).
void emit_slice_rt(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  auto arg = [&](size_t i) -> std::pair<std::string, int> {
    if (!n.has_input(i)) return {"NULL", 0};
    return {cg.ptr(n.inputs[i]), idx32(cg, n.inputs[i]) ? 1 : 0};
  };
  auto [s, s32] = arg(1);
  auto [e, e32] = arg(2);
  auto [a, a32] = arg(3);
  auto [t, t32] = arg(4);
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), ys);
  std::string xd = cg.table(xs), yd = cg.table(ys);
  cg.emit_checked(fmt::format("hk_slice_rt({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x,
                              cg.ptr(n.outputs[0]), xs.size(), xd, yd, s, s32, e, e32, a, a32, t, t32,
                              numel(cg.shape_of(n.inputs[1])), element_bytes(cg, n.inputs[0])),
                  n, "an axis is out of range or a step is 0");
}

void emit_compress(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  bool has_axis = n.has_attr("axis");
  int64_t r = static_cast<int64_t>(xs.size()), axis = has_axis ? normalized_axis(n, n.get_int("axis", 0), r) : 0;
  SymInt outer = 1, inner = 1, len = has_axis ? xs[axis] : numel(xs);
  if (has_axis) {
    for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
    for (int64_t d = axis + 1; d < r; ++d) inner *= xs[d];
  }
  HODU_CHECK(cg.dtype_of(n.inputs[1]) == DType::Bool, ErrorCode::Unsupported, "{}: condition of dtype {}",
             n.describe(), dtype_name(cg.dtype_of(n.inputs[1])));
  std::string x = cg.ptr(n.inputs[0]), cond = cg.ptr(n.inputs[1]);
  SymInt k = ys[has_axis ? axis : 0];
  std::string count = fmt::format("cc{}", cg.table_count++);
  cg.emit(fmt::format("const int64_t {} = hk_compress_count({}, {}, {});", count, cond,
                      numel(cg.shape_of(n.inputs[1])), len));
  cg.emit(fmt::format("if ({} < 0) return hm_fail(m, 4, \"%s\", {});", count,
                      c_string_literal(n.describe() + ": the condition selects past the axis")));
  assign_late(cg, n, k, count);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), ys);
  cg.emit(fmt::format("hk_compress({}, {}, {}, {}, {}, {}, {}, {}, {});", x, cond, numel(cg.shape_of(n.inputs[1])),
                      cg.ptr(n.outputs[0]), outer, len, inner, k, element_bytes(cg, n.inputs[0])));
}

void emit_nonzero(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  need_generic_kernels(cg);
  SymInt cnt = numel(xs);
  std::string raw = cg.ptr(n.inputs[0]);
  std::string x = fmt::format("((double*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", raw, static_cast<int>(cg.dtype_of(n.inputs[0])), x,
                      static_cast<int>(DType::F64), cnt));
  std::string count = fmt::format("nz{}", cg.table_count++);
  cg.emit(fmt::format("const int64_t {} = hk_count_nonzero({}, {});", count, x, cnt));
  assign_late(cg, n, ys[1], count);
  cg.define(n.outputs[0], DType::I64, ys);
  SymShape dims = xs.empty() ? SymShape{1} : xs;
  std::string d = cg.table(dims);
  cg.emit(fmt::format("hk_nonzero({}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), dims.size(), d, ys[1]));
}

void emit_unique(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  bool has_axis = n.has_attr("axis");
  int64_t r = static_cast<int64_t>(xs.size()), axis = has_axis ? normalized_axis(n, n.get_int("axis", 0), r) : 0;
  SymInt N = has_axis ? xs[axis] : numel(xs), outer = 1, inner = 1;
  if (has_axis) {
    for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
    for (int64_t d = axis + 1; d < r; ++d) inner *= xs[d];
  }
  SymInt M = outer * inner;  // elements of one row (the axis first)
  need_generic_kernels(cg);
  std::string raw = cg.ptr(n.inputs[0]);
  SymInt cnt = numel(xs);
  std::string vals = fmt::format("((double*){})", cg.scratch(cnt * 8));
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, 1, 0);", raw, static_cast<int>(cg.dtype_of(n.inputs[0])), vals,
                      static_cast<int>(DType::F64), cnt));
  std::string keys = vals;
  if (has_axis && !outer.is(1)) {  // rows along the axis: [N, outer, inner]
    keys = fmt::format("((double*){})", cg.scratch(cnt * 8));
    std::string dims = cg.table(SymShape{N, outer, inner}), st = cg.table(SymShape{inner, N * inner, 1});
    cg.emit(fmt::format("hk_strided_copy({}, {}, 3, {}, {}, 0, 8);", vals, keys, dims, st));
  }
  std::string first = fmt::format("((int64_t*){})", cg.scratch(N * 8)),
              inverse = fmt::format("((int64_t*){})", cg.scratch(N * 8)),
              counts = fmt::format("((int64_t*){})", cg.scratch(N * 8)),
              work = fmt::format("((int64_t*){})", cg.scratch(N * 24));
  // The group count, from an output sized by it (a late dim, or declared by the model).
  SymInt u;
  bool found = false;
  for (size_t k : {size_t{1}, size_t{3}, size_t{0}})
    if (n.has_output(k) && !found) {
      auto s = cg.shape_of(n.outputs[k]);
      u = k == 0 ? s[has_axis ? axis : 0] : s[0];
      found = true;
    }
  HODU_CHECK(found, ErrorCode::InvalidModel, "{}: no outputs", n.describe());
  std::string groups = fmt::format("ug{}", cg.table_count++);
  cg.emit(fmt::format("const int64_t {} = hk_unique_rows({}, {}, {}, {}, {}, {}, {}, {});", groups, keys, N, M,
                      n.get_int("sorted", 1) ? 1 : 0, first, inverse, counts, work));
  assign_late(cg, n, u, groups);
  if (n.has_output(0)) {
    cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), cg.shape_of(n.outputs[0]));
    cg.emit(fmt::format("hk_take_rows({}, {}, {}, {}, {}, {}, {}, {});", raw, first, u, cg.ptr(n.outputs[0]), outer, N,
                        inner, element_bytes(cg, n.inputs[0])));
  }
  const std::pair<size_t, std::string> rest[] = {{1, first}, {2, inverse}, {3, counts}};
  for (const auto& [k, from] : rest) {
    if (!n.has_output(k)) continue;
    cg.define(n.outputs[k], DType::I64, cg.shape_of(n.outputs[k]));
    cg.emit(fmt::format("memcpy({}, {}, {} * 8);", cg.ptr(n.outputs[k]), from, numel(cg.shape_of(n.outputs[k]))));
  }
}

bool slice_needs_runtime(const Codegen& cg, const Node& n) {
  for (size_t i : {size_t{3}, size_t{4}})
    if (n.has_input(i) && !cg.is_constant(n.inputs[i]) && !cg.sym_values.count(n.inputs[i])) return true;
  return false;
}

}  // namespace

std::vector<std::string> index_op_names() {
  return {"GatherElements", "ScatterElements", "Scatter", "GatherND", "ScatterND", "TensorScatter", "Trilu",
          "OneHot", "EyeLike", "ReverseSequence", "Compress", "NonZero", "Unique"};
}

bool emit_index_op(Codegen& cg, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return false;
  if (op == "GatherElements") emit_gather_elements(cg, n);
  else if (op == "ScatterElements" || op == "Scatter") emit_scatter_elements(cg, n);
  else if (op == "GatherND") emit_gather_nd(cg, n);
  else if (op == "ScatterND") emit_scatter_nd(cg, n);
  else if (op == "TensorScatter") emit_tensor_scatter(cg, n);
  else if (op == "Trilu") emit_trilu(cg, n);
  else if (op == "OneHot") emit_onehot(cg, n);
  else if (op == "EyeLike") emit_eye_like(cg, n);
  else if (op == "ReverseSequence") emit_reverse_sequence(cg, n);
  else if (op == "Slice" && slice_needs_runtime(cg, n)) emit_slice_rt(cg, n);
  else if (op == "Compress") emit_compress(cg, n);
  else if (op == "NonZero") emit_nonzero(cg, n);
  else if (op == "Unique") emit_unique(cg, n);
  else return false;
  need_generic_kernels(cg);
  return true;
}

}  // namespace hodu::compilers::c
