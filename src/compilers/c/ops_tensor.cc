// Emitters for data movement and reductions. Most movement ops are one strided
// copy whose strides and offset are computed at build time (Transpose, Slice,
// Expand, Split, Tile); views (Reshape, Flatten, ...) emit no code at all.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compilers/c/codegen_context.h"
#include "compilers/c/ops_generic.h"
#include "core/error.h"
#include "passes/graph_utils.h"

namespace hodu::compilers::c {
namespace {

std::vector<int64_t> const_ints(Codegen& cg, const Node& n, size_t i) {
  HODU_CHECK(n.has_input(i) && cg.is_constant(n.inputs[i]), ErrorCode::Unsupported,
             "{}: compiled code needs input {} ('{}') to be a constant", n.describe(), i,
             n.has_input(i) ? n.inputs[i] : "");
  return cg.constant(n.inputs[i]).to_int64s();
}

int64_t esize(Codegen& cg, const std::string& v) {
  DType t = cg.dtype_of(v);
  HODU_CHECK(c_type(t), ErrorCode::Unsupported, "value '{}' has dtype {}, which compiled code does not support", v,
             dtype_name(t));
  HODU_CHECK(!dtype_is_subbyte(t), ErrorCode::Unsupported,
             "value '{}' has dtype {}: compiled code moves 4- and 2-bit elements only through Cast, Reshape and "
             "the quantization ops", v, dtype_name(t));
  return dtype_bits(t) / 8;
}

void strided_copy(Codegen& cg, const std::string& in, const std::string& out, const SymShape& dims,
                  const SymShape& strides, const SymInt& offset, const SymShape& out_shape) {
  HODU_CHECK(dims.size() <= 8, ErrorCode::Unsupported, "value '{}': rank {} is above the compiled code's limit of 8",
             out, dims.size());
  std::string x = cg.ptr(in);
  cg.define(out, cg.dtype_of(in), out_shape);
  std::string d = cg.table(dims), st = cg.table(strides);
  cg.emit(fmt::format("hk_strided_copy({}, {}, {}, {}, {}, {}, {});", x, cg.ptr(out), dims.size(), d, st, offset,
                      esize(cg, in)));
}

void emit_transpose(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  const auto perm = passes::transpose_perm(n, static_cast<size_t>(r));
  auto st = row_major_strides(xs);
  SymShape dims, strides;
  for (auto p : perm) {
    dims.push_back(xs[p]);
    strides.push_back(st[p]);
  }
  strided_copy(cg, n.inputs[0], n.outputs[0], dims, strides, 0, dims);
}

void emit_slice(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  auto starts = sym_ints(cg, n, 1);
  std::vector<int64_t> axes, steps;
  if (n.has_input(3)) axes = const_ints(cg, n, 3);
  else
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  steps = n.has_input(4) ? const_ints(cg, n, 4) : std::vector<int64_t>(starts.size(), 1);
  auto st = row_major_strides(xs);
  SymShape strides = st;
  SymInt offset = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalized_axis(n, axes[i], r), step = steps[i];
    HODU_CHECK(step != 0, ErrorCode::InvalidModel, "{}: step 0", n.describe());
    SymInt s = slice_start(starts[i], xs[a], step);
    if (!ys[a].is(0)) offset += s * st[a];
    strides[a] = st[a] * step;
  }
  strided_copy(cg, n.inputs[0], n.outputs[0], ys, strides, offset, ys);
}

void emit_expand(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  auto st = row_major_strides(xs);
  size_t off = ys.size() - xs.size();
  SymShape strides(ys.size(), 0);
  for (size_t d = 0; d < xs.size(); ++d) strides[d + off] = broadcast_stride(xs[d], ys[d + off], st[d]);
  strided_copy(cg, n.inputs[0], n.outputs[0], ys, strides, 0, ys);
}

void emit_tile(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  auto reps = sym_ints(cg, n, 1);
  auto st = row_major_strides(xs);
  SymShape dims, strides;
  for (size_t d = 0; d < xs.size(); ++d) {
    dims.push_back(reps[d]);
    strides.push_back(0);
    dims.push_back(xs[d]);
    strides.push_back(st[d]);
  }
  strided_copy(cg, n.inputs[0], n.outputs[0], dims, strides, 0, ys);
}

void emit_split(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t axis = normalized_axis(n, n.get_int("axis", 0), static_cast<int64_t>(xs.size()));
  auto st = row_major_strides(xs);
  SymInt start = 0;
  for (const auto& out : n.outputs) {
    HODU_CHECK(!out.empty(), ErrorCode::Unsupported, "{}: omitted outputs", n.describe());
    auto ys = cg.shape_of(out);
    strided_copy(cg, n.inputs[0], out, ys, st, start * st[axis], ys);
    start += ys[axis];
  }
}

void emit_concat(Codegen& cg, const Node& n) {
  auto ys = cg.shape_of(n.outputs[0]);
  int64_t axis = normalized_axis(n, n.get_int("axis", 0), static_cast<int64_t>(ys.size()));
  SymInt outer = 1, inner = 1;
  int64_t es = esize(cg, n.outputs[0]);
  for (int64_t d = 0; d < axis; ++d) outer *= ys[d];
  for (size_t d = axis + 1; d < ys.size(); ++d) inner *= ys[d];
  std::vector<std::string> ins;
  for (const auto& in : n.inputs)
    if (!in.empty()) ins.push_back(cg.ptr(in));
  cg.define(n.outputs[0], cg.dtype_of(n.outputs[0]), ys);
  std::string y = cg.ptr(n.outputs[0]);
  SymInt at = 0;
  int64_t k = 0;
  for (const auto& in : n.inputs) {
    if (in.empty()) continue;
    SymInt a = cg.shape_of(in)[axis];
    if (!a.is(0))
      cg.emit(fmt::format("hk_copy_rows((char*){} + {}, {}, {}, {}, {}, {});", y, at * inner * es, ys[axis] * inner * es,
                          ins[k], a * inner * es, outer, a * inner * es));
    at += a;
    ++k;
  }
}

void emit_gather(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), is = cg.shape_of(n.inputs[1]);
  int64_t axis = normalized_axis(n, n.get_int("axis", 0), static_cast<int64_t>(xs.size()));
  DType it = cg.dtype_of(n.inputs[1]);
  HODU_CHECK(it == DType::I64 || it == DType::I32, ErrorCode::Unsupported, "{}: indices of dtype {}", n.describe(),
             dtype_name(it));
  SymInt outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  std::string x = cg.ptr(n.inputs[0]), idx = cg.ptr(n.inputs[1]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), cg.shape_of(n.outputs[0]));
  cg.emit_checked(fmt::format("hk_gather({}, {}, {}, {}, {}, {}, {}, {})", x, idx, it == DType::I32 ? 1 : 0,
                              cg.ptr(n.outputs[0]), outer, xs[axis], numel(is), inner * esize(cg, n.inputs[0])),
                  n, "index out of range");
}

void emit_pad(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  auto pads = sym_ints(cg, n, 1);
  std::vector<int64_t> axes;
  const bool runtime_axes = n.has_input(3) && !cg.is_constant(n.inputs[3]) && !cg.sym_values.count(n.inputs[3]);
  if (runtime_axes) {
    SymInt count = numel(cg.shape_of(n.inputs[3]));
    HODU_CHECK(count.known(), ErrorCode::Unsupported, "{}: axes of a size known only at run time", n.describe());
    axes.assign(static_cast<size_t>(count.value()), 0);
  } else if (n.has_input(3)) {
    axes = const_ints(cg, n, 3);
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  HODU_CHECK(pads.size() == 2 * axes.size(), ErrorCode::InvalidModel, "{}: pads has {} values for {} axes",
             n.describe(), pads.size(), axes.size());
  SymShape begin(r, 0);
  std::string runtime_begin;
  if (runtime_axes) {
    // Axes read while running: the padding per dim placed then, and the output's dims checked.
    std::string ax = i64_in(cg, n.inputs[3]), pt = cg.table(pads), xt = cg.table(xs), yt = cg.table(ys);
    runtime_begin = fmt::format("PB{}", cg.table_count++);
    const std::string pe = runtime_begin + "e";
    cg.emit(fmt::format("int64_t {}[{}] = {{0}}, {}[{}] = {{0}};", runtime_begin, std::max<int64_t>(r, 1), pe,
                        std::max<int64_t>(r, 1)));
    cg.emit(fmt::format("for (int64_t i = 0; i < {}; ++i) {{ int64_t a = {}[i] < 0 ? {}[i] + {} : {}[i]; if (a < 0 || "
                        "a >= {} || {}[a] || {}[a]) return hm_fail(m, 4, \"%s\", {}); {}[a] = {}[i]; {}[a] = {}[{} + i]; }}",
                        axes.size(), ax, ax, r, ax, r, runtime_begin, pe,
                        c_string_literal(n.describe() + ": an axis is out of range or repeated"), runtime_begin, pt, pe,
                        pt, axes.size()));
    cg.emit(fmt::format("for (int64_t d = 0; d < {}; ++d) if ({}[d] + {}[d] + {}[d] != {}[d]) return hm_fail(m, 4, "
                        "\"%s\", {});",
                        r, xt, runtime_begin, pe, yt,
                        c_string_literal(n.describe() + ": the padded dims differ from the output's declared shape")));
  } else {
    for (size_t i = 0; i < axes.size(); ++i) begin[normalized_axis(n, axes[i], r)] = pads[i];
  }
  std::string mode = n.get_string("mode", "constant");
  int m = mode == "constant" ? 0 : mode == "reflect" ? 1 : mode == "edge" ? 2 : mode == "wrap" ? 3 : -1;
  HODU_CHECK(m >= 0, ErrorCode::Unsupported, "{}: mode '{}'", n.describe(), mode);
  DType dt = cg.dtype_of(n.inputs[0]);
  // The pad value: a constant, or the input's element read while running.
  std::string value_ptr;
  if (n.has_input(2) && !cg.is_constant(n.inputs[2])) {
    HODU_CHECK(cg.dtype_of(n.inputs[2]) == dt && numel(cg.shape_of(n.inputs[2])).is(1), ErrorCode::InvalidModel,
               "{}: the pad value must be one {} element", n.describe(), dtype_name(dt));
    value_ptr = fmt::format("((const void*){})", cg.ptr(n.inputs[2]));
  } else {
    Tensor value = n.has_input(2) ? cg.constant(n.inputs[2]).contiguous() : Tensor::empty(dt, {});
    int wv = cg.add_weight(value.reshape({}));
    value_ptr = fmt::format("W + {}", cg.weight_offsets[wv]);
  }
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], dt, ys);
  std::string xt = cg.table(xs), yt = cg.table(ys), bt = runtime_begin.empty() ? cg.table(begin) : runtime_begin;
  cg.emit(fmt::format("hk_pad({}, {}, {}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), r, xt, yt, bt, m,
                      value_ptr, esize(cg, n.inputs[0])));
}

// Resize over sizes known only while running: the index (and weight) tables the static path
// computes at build time are computed by the generated code (hk_resize_table), then the same
// kernels run. Scales are constants; sizes may be size values.
void emit_resize_dynamic(Codegen& cg, const Node& n, const std::string& mode, const std::string& ctm,
                         const std::string& nearest) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  const int64_t r = static_cast<int64_t>(xs.size());
  std::vector<double> scale(r, 0.0);  // 0: out / in, computed while running
  if (n.has_input(2) && cg.is_constant(n.inputs[2]) && cg.constant(n.inputs[2]).numel() > 0) {
    auto sc = cg.constant(n.inputs[2]).to_doubles();
    for (int64_t d = 0; d < r; ++d) scale[d] = static_cast<double>(static_cast<float>(sc[d]));
  }
  static const std::map<std::string, int> ctms = {{"half_pixel", 0},         {"align_corners", 1},
                                                  {"asymmetric", 2},         {"pytorch_half_pixel", 3},
                                                  {"half_pixel_symmetric", 4}};
  static const std::map<std::string, int> nearests = {
      {"round_prefer_floor", 0}, {"round_prefer_ceil", 1}, {"floor", 2}, {"ceil", 3}};
  HODU_CHECK(ctms.count(ctm) && nearests.count(nearest), ErrorCode::InvalidModel,
             "{}: coordinate_transformation_mode '{}', nearest_mode '{}'", n.describe(), ctm, nearest);
  need_generic_kernels(cg);
  const bool linear = mode == "linear";
  HODU_CHECK(!linear || (cg.dtype_of(n.inputs[0]) == DType::F32 && r >= 2), ErrorCode::Unsupported,
             "{}: linear resize of float32 tensors of rank >= 2 only", n.describe());
  if (linear)
    for (int64_t d = 0; d + 2 < r; ++d)
      HODU_CHECK(xs[d] == ys[d], ErrorCode::Unsupported, "{}: linear resize of dim {} (only the last two dims)",
                 n.describe(), d);
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), ys);
  auto table = [&](int64_t d, std::string* i0, std::string* i1, std::string* w) {
    *i0 = fmt::format("((int64_t*){})", cg.scratch(ys[d] * 8));
    *i1 = linear ? fmt::format("((int64_t*){})", cg.scratch(ys[d] * 8)) : "NULL";
    *w = linear ? fmt::format("((float*){})", cg.scratch(ys[d] * 4)) : "NULL";
    cg.emit(fmt::format("hk_resize_table({}, {}, {:.17g}, {}, {}, {}, {}, {}, {});", xs[d], ys[d], scale[d],
                        ctms.at(ctm), nearests.at(nearest), linear ? 1 : 0, *i0, *i1, *w));
  };
  if (!linear) {
    // hk_resize_nearest reads the dims' tables one after the other.
    SymInt total = 0;
    for (const auto& d : ys) total += d;
    std::string all = fmt::format("((int64_t*){})", cg.scratch(total * 8));
    SymInt at = 0;
    for (int64_t d = 0; d < r; ++d) {
      std::string i0, i1, w;
      table(d, &i0, &i1, &w);
      cg.emit(fmt::format("memcpy({} + {}, {}, {} * 8);", all, at, i0, ys[d]));
      at += ys[d];
    }
    cg.emit(fmt::format("hk_resize_nearest({}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), r, cg.table(xs),
                        cg.table(ys), all, esize(cg, n.inputs[0])));
    return;
  }
  std::string t[2][3];
  for (int k = 0; k < 2; ++k) table(r - 2 + k, &t[k][0], &t[k][1], &t[k][2]);
  SymInt nc = 1;
  for (int64_t d = 0; d + 2 < r; ++d) nc = nc * xs[d];
  cg.emit(fmt::format("hk_resize_linear2d({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x,
                      cg.ptr(n.outputs[0]), nc, xs[r - 2], xs[r - 1], ys[r - 2], ys[r - 1], t[0][0], t[0][1], t[0][2],
                      t[1][0], t[1][1], t[1][2]));
}

void emit_resize(Codegen& cg, const Node& n) {
  if (resize_needs_general(cg, n)) {
    emit_resize_general(cg, n);
    return;
  }
  auto xs_sym = cg.shape_of(n.inputs[0]), ys_sym = cg.shape_of(n.outputs[0]);
  auto xs_static = to_static(xs_sym), ys_static = to_static(ys_sym);
  std::string mode = n.get_string("mode", "nearest");
  std::string ctm = n.get_string("coordinate_transformation_mode", "half_pixel");
  std::string nearest = n.get_string("nearest_mode", "round_prefer_floor");
  HODU_CHECK(mode == "nearest" || mode == "linear", ErrorCode::Unsupported,
             "{}: mode '{}' (compiled code supports nearest and linear)", n.describe(), mode);
  HODU_CHECK(ctm != "tf_crop_and_resize" && n.get_int("antialias", 0) == 0 && n.get_ints("axes").empty() &&
                 n.get_string("keep_aspect_ratio_policy", "stretch") == "stretch",
             ErrorCode::Unsupported, "{}: tf_crop_and_resize, antialias, axes and keep_aspect_ratio_policy", n.describe());
  const bool sizes_given = n.has_input(3) && (!cg.is_constant(n.inputs[3]) || cg.constant(n.inputs[3]).numel() > 0);
  if (!xs_static || !ys_static || (sizes_given && !cg.is_constant(n.inputs[3]))) {
    HODU_CHECK(!n.has_input(2) || cg.is_constant(n.inputs[2]), ErrorCode::Unsupported,
               "{}: compiled code needs the scales ('{}') to be a constant", n.describe(), n.inputs[2]);
    emit_resize_dynamic(cg, n, mode, ctm, nearest);
    return;
  }
  const std::vector<int64_t> xs = *xs_static, ys = *ys_static;
  int64_t r = static_cast<int64_t>(xs.size());
  for (size_t i = 1; i < 4; ++i)
    HODU_CHECK(!n.has_input(i) || cg.is_constant(n.inputs[i]), ErrorCode::Unsupported,
               "{}: compiled code needs input {} ('{}') to be a constant", n.describe(), i, n.inputs[i]);
  std::vector<double> scale(r, 1.0);
  if (n.has_input(2) && cg.is_constant(n.inputs[2]) && cg.constant(n.inputs[2]).numel() > 0) {
    auto sc = cg.constant(n.inputs[2]).to_doubles();
    for (int64_t d = 0; d < r; ++d) scale[d] = static_cast<double>(static_cast<float>(sc[d]));
  } else {
    for (int64_t d = 0; d < r; ++d) scale[d] = static_cast<double>(ys[d]) / static_cast<double>(xs[d]);
  }
  // Source coordinate of each output index (ONNX coordinate_transformation_mode).
  auto source = [&](int64_t d, int64_t o) {
    double s = scale[d], in = static_cast<double>(xs[d]), ow = s * in, x = static_cast<double>(o);
    // align_corners, pytorch_half_pixel: the integer output length (interp nn_resize.cc).
    const double on = static_cast<double>(ys[d]);
    if (ctm == "align_corners") return on == 1 ? 0.0 : x * (in - 1) / (on - 1);
    if (ctm == "asymmetric") return x / s;
    if (ctm == "pytorch_half_pixel") return on == 1 ? 0.0 : (x + 0.5) / s - 0.5;
    if (ctm == "half_pixel_symmetric") {
      double adj = static_cast<double>(ys[d]) / ow, center = in / 2;
      return center * (1 - adj) + (x + 0.5) / s - 0.5;
    }
    return (x + 0.5) / s - 0.5;  // half_pixel
  };
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], cg.dtype_of(n.inputs[0]), ys_sym);
  if (mode == "nearest") {
    std::vector<int64_t> table;
    for (int64_t d = 0; d < r; ++d)
      for (int64_t o = 0; o < ys[d]; ++o) {
        double xo = source(d, o), fl = std::floor(xo);
        bool integral = xo == fl;
        int64_t base = integral ? static_cast<int64_t>(fl) - 1 : static_cast<int64_t>(fl);
        double ratio = integral ? 1.0 : xo - fl;
        bool up = integral || (nearest == "round_prefer_floor" ? ratio > 0.5
                               : nearest == "round_prefer_ceil" ? ratio >= 0.5
                               : nearest != "floor");
        table.push_back(std::clamp<int64_t>(up ? base + 1 : base, 0, xs[d] - 1));
      }
    cg.emit(fmt::format("hk_resize_nearest({}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), r, cg.table(xs),
                        cg.table(ys), cg.table(table), esize(cg, n.inputs[0])));
    return;
  }
  HODU_CHECK(cg.dtype_of(n.inputs[0]) == DType::F32 && r >= 2, ErrorCode::Unsupported,
             "{}: linear resize of float32 tensors of rank >= 2 only", n.describe());
  for (int64_t d = 0; d + 2 < r; ++d)
    HODU_CHECK(xs[d] == ys[d], ErrorCode::Unsupported, "{}: linear resize of dim {} (only the last two dims)",
               n.describe(), d);
  std::vector<int64_t> i0[2], i1[2];
  std::vector<float> w[2];
  for (int k = 0; k < 2; ++k) {
    int64_t d = r - 2 + k;
    for (int64_t o = 0; o < ys[d]; ++o) {
      double xo = std::clamp(source(d, o), 0.0, static_cast<double>(xs[d] - 1));
      int64_t lo = static_cast<int64_t>(std::floor(xo));
      int64_t hi = std::min(lo + 1, xs[d] - 1);
      i0[k].push_back(lo);
      i1[k].push_back(hi);
      w[k].push_back(static_cast<float>(xo - static_cast<double>(lo)));
    }
  }
  int64_t nc = 1;
  for (int64_t d = 0; d + 2 < r; ++d) nc *= xs[d];
  cg.emit(fmt::format("hk_resize_linear2d({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x,
                      cg.ptr(n.outputs[0]), nc, xs[r - 2], xs[r - 1], ys[r - 2], ys[r - 1], cg.table(i0[0]),
                      cg.table(i1[0]), cg.float_table(w[0]), cg.table(i0[1]), cg.table(i1[1]), cg.float_table(w[1])));
}

// Float32 with axes known at build time: the float kernel (other dtypes and axes read
// while running: ops_generic.cc).
bool fast_reduce(const Codegen& cg, const Node& n) {
  if (cg.dtype_of(n.inputs[0]) != DType::F32) return false;
  if (n.has_input(1) && !cg.is_constant(n.inputs[1])) return false;
  if (n.get_int("noop_with_empty_axes", 0) != 0 && (!n.has_input(1) || cg.constant(n.inputs[1]).numel() == 0) &&
      n.get_ints("axes").empty())
    return false;  // no axes, no-op: a copy (the generic kernel's empty flags)
  return true;
}

int reduce_code(const std::string& op) {
  static const std::map<std::string, int> codes = {{"ReduceSum", 0}, {"ReduceMean", 1}, {"ReduceMax", 2},
                                                   {"ReduceMin", 3}, {"ReduceProd", 4}, {"ReduceSumSquare", 5},
                                                   {"ReduceL1", 6},  {"ReduceL2", 7}};
  auto it = codes.find(op);
  return it == codes.end() ? -1 : it->second;
}

void emit_reduce(Codegen& cg, const Node& n) {
  HODU_CHECK(cg.dtype_of(n.inputs[0]) == DType::F32, ErrorCode::Unsupported, "{}: this dtype is not supported by compiled code (float32 only)", n.describe());
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  int64_t r = static_cast<int64_t>(xs.size());
  std::vector<int64_t> axes;
  if (n.has_input(1)) axes = const_ints(cg, n, 1);
  else if (n.has_attr("axes")) axes = n.get_ints("axes");
  std::vector<bool> reduced(r, false);
  if (axes.empty()) {
    if (n.get_int("noop_with_empty_axes", 0) == 0) reduced.assign(r, true);
  } else {
    for (auto a : axes) reduced[normalized_axis(n, a, r)] = true;
  }
  SymShape kept;
  SymInt reduced_count = 1;
  for (int64_t d = 0; d < r; ++d)
    if (!reduced[d]) kept.push_back(xs[d]);
    else reduced_count *= xs[d];
  auto kst = row_major_strides(kept);
  SymShape out_strides(r, 0);
  for (int64_t d = 0, k = 0; d < r; ++d)
    if (!reduced[d]) out_strides[d] = kst[k++];
  SymInt n_out = numel(ys), per = reduced_count;
  if (n_out.known() && numel(xs).known()) per = n_out.value() ? numel(xs).value() / n_out.value() : 0;
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], DType::F32, ys);
  std::string xt = cg.table(xs), ot = cg.table(out_strides);
  cg.emit(fmt::format("hk_reduce({}, {}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), r, xt, ot, n_out, per,
                      reduce_code(n.op_type)));
}

void emit_argreduce(Codegen& cg, const Node& n) {
  HODU_CHECK(cg.dtype_of(n.inputs[0]) == DType::F32, ErrorCode::Unsupported, "{}: this dtype is not supported by compiled code (float32 only)", n.describe());
  auto xs = cg.shape_of(n.inputs[0]);
  int64_t r = static_cast<int64_t>(xs.size()), axis = normalized_axis(n, n.get_int("axis", 0), r);
  SymInt outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= xs[d];
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], DType::I64, cg.shape_of(n.outputs[0]));
  cg.emit(fmt::format("hk_argreduce({}, {}, {}, {}, {}, {}, {});", x, cg.ptr(n.outputs[0]), outer, xs[axis], inner,
                      n.op_type == "ArgMin" ? 1 : 0, n.get_int("select_last_index", 0) ? 1 : 0));
}

// DepthToSpace / SpaceToDepth: a reshape-transpose-reshape, i.e. one strided copy of rank 6.
void emit_depth_space(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ys = cg.shape_of(n.outputs[0]);
  HODU_CHECK(xs.size() == 4, ErrorCode::Unsupported, "{}: 4-D input only", n.describe());
  int64_t b = n.get_int("blocksize", 1);
  SymInt N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  SymShape dims, strides;
  if (n.op_type == "DepthToSpace") {
    bool crd = n.get_string("mode", "DCR") == "CRD";
    SymInt c = floordiv(C, b * b);
    // output index order: n, c, h, b1, w, b2
    SymInt sHW = H * W;
    SymInt s_c = crd ? b * b * sHW : sHW, s_b1 = crd ? b * sHW : b * c * sHW, s_b2 = crd ? sHW : c * sHW;
    dims = {N, c, H, b, W, b};
    strides = {C * sHW, s_c, W, s_b1, 1, s_b2};
  } else {
    // output [N, C*b*b, H/b, W/b] with channel index (b1, b2, c): source x[n, c, h*b+b1, w*b+b2]
    SymInt oh = floordiv(H, b), ow = floordiv(W, b);
    dims = {N, b, b, C, oh, ow};
    strides = {C * H * W, W, 1, H * W, b * W, b};
  }
  strided_copy(cg, n.inputs[0], n.outputs[0], dims, strides, 0, ys);
}

// Cast (CastLike) where a side has no C arithmetic type (float8, float4, 4- and 2-bit
// integers): hk_cast, the interpreter's element rules (saturation, e8m0's round_mode).
void emit_cast(Codegen& cg, const Node& n) {
  DType from = cg.dtype_of(n.inputs[0]), to = cg.dtype_of(n.outputs[0]);
  HODU_CHECK(c_type(from) && c_type(to), ErrorCode::Unsupported,
             "{}: Cast from {} to {} (compiled code has no strings or complex numbers)", n.describe(),
             dtype_name(from), dtype_name(to));
  std::string rm = n.get_string("round_mode", "up");
  HODU_CHECK(rm == "up" || rm == "down" || rm == "nearest", ErrorCode::InvalidModel,
             "{}: round_mode must be up, down or nearest, got '{}'", n.describe(), rm);
  auto ys = cg.shape_of(n.outputs[0]);
  std::string x = cg.ptr(n.inputs[0]);
  cg.define(n.outputs[0], to, ys);
  cg.kernel_sections.insert("convert");
  cg.emit(fmt::format("hk_cast({}, {}, {}, {}, {}, {}, {});", x, static_cast<int>(from), cg.ptr(n.outputs[0]),
                      static_cast<int>(to), numel(ys), n.get_int("saturate", 1) ? 1 : 0,
                      rm == "up" ? 0 : rm == "down" ? 1 : 2));
}

// Range with a size from the inputs' shapes: y[i] = start + i * delta.
void emit_range(Codegen& cg, const Node& n) {
  DType dt = cg.dtype_of(n.outputs[0]);
  const char* t = c_type(dt);
  HODU_CHECK(t, ErrorCode::Unsupported, "{}: dtype {}", n.describe(), dtype_name(dt));
  auto ys = cg.shape_of(n.outputs[0]);
  for (size_t i : {0, 2})
    if (cg.sym_values.count(n.inputs[i])) cg.materialize(n.inputs[i]);
  std::string start = cg.ptr(n.inputs[0]), delta = cg.ptr(n.inputs[2]);
  cg.define(n.outputs[0], dt, ys);
  if (dt == DType::F16 || dt == DType::BF16) {  // in float, each value rounded once
    const char* name = dt == DType::F16 ? "f16" : "bf16";
    cg.kernel_sections.insert("convert");
    cg.emit(fmt::format("{{ uint16_t* y = {0}; const float s = hk_{1}_to_f32({2}[0]), d = hk_{1}_to_f32({3}[0]); "
                        "for (int64_t i = 0; i < {4}; ++i) y[i] = hk_f32_to_{1}(s + (float)i * d); }}",
                        cg.ptr(n.outputs[0]), name, start, delta, ys[0]));
    return;
  }
  cg.emit(fmt::format("{{ {0}* y = {1}; const {0} s = {2}[0], d = {3}[0]; for (int64_t i = 0; i < {4}; ++i) y[i] = "
                      "({0})(s + ({0})i * d); }}",
                      t, cg.ptr(n.outputs[0]), start, delta, ys[0]));
}

// ConstantOfShape of a shape from the inputs' shapes: the value repeated.
void emit_constant_of_shape(Codegen& cg, const Node& n) {
  DType dt = cg.dtype_of(n.outputs[0]);
  const char* t = c_type(dt);
  HODU_CHECK(t, ErrorCode::Unsupported, "{}: dtype {}", n.describe(), dtype_name(dt));
  const Tensor* v = n.get_tensor("value");
  Tensor value = v ? v->contiguous() : Tensor::scalar(DType::F32, 0.f);
  auto ys = cg.shape_of(n.outputs[0]);
  int w = cg.add_weight(value.reshape({}));
  cg.define(n.outputs[0], dt, ys);
  cg.emit(fmt::format("{{ {0}* y = {1}; const {0} v = *(const {0}*)(W + {2}); for (int64_t i = 0; i < {3}; ++i) y[i] = v; }}",
                      t, cg.ptr(n.outputs[0]), cg.weight_offsets[w], numel(ys)));
}

}  // namespace

void emit_view_copy(Codegen& cg, const std::string& out, const StridedView& v) {
  strided_copy(cg, v.root, out, v.dims, v.strides, v.offset, cg.shape_of(out));
}

// BitCast: the same bytes as another dtype of the same width.
void emit_bitcast(Codegen& cg, const Node& n) {
  const std::string& x = n.inputs[0];
  DType from = cg.dtype_of(x), to = cg.dtype_of(n.outputs[0]);
  HODU_CHECK(dtype_bits(from) == dtype_bits(to) && from != DType::String, ErrorCode::InvalidModel,
             "{}: BitCast from {} to {} (the same bit width is needed)", n.describe(), dtype_name(from), dtype_name(to));
  auto s = cg.shape_of(x);
  std::string p = cg.ptr(x);
  cg.define(n.outputs[0], to, s);
  cg.emit(fmt::format("memcpy({}, {}, {});", cg.ptr(n.outputs[0]), p, storage_bytes(from, numel(s))));
}

bool is_view_op(const Node& n) {
  static const std::set<std::string> ops = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"};
  // A Dropout with a training_mode input (one that passes its input through is gone by now,
  // passes::eliminate_identities) draws a mask: ops_random.cc.
  return n.domain.empty() && ops.count(n.op_type) > 0 && !n.inputs.empty() && !n.outputs.empty() &&
         !is_training_dropout(n);
}

std::vector<std::string> tensor_op_names() {
  return {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "Slice", "Expand", "Tile",
          "Split", "Concat", "Gather", "Pad", "Resize", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
          "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ArgMax", "ArgMin", "DepthToSpace", "SpaceToDepth",
          "Range", "ConstantOfShape", "BitCast"};
}

bool emit_tensor_op(Codegen& cg, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return false;
  if (is_view_op(n)) {
    // Dropout here is the identity (inference: no training_mode input).
    cg.define_alias(n.outputs[0], n.inputs[0], cg.shape_of(n.outputs[0]));
    if (n.op_type == "Dropout" && n.has_output(1)) {
      // Its mask at inference is all true; written only where something reads it (torch's
      // exports name it and leave it unread: Swin-T's 24 attention Dropouts).
      const std::string& mask = n.outputs[1];
      bool read = false;
      for (const auto& o : cg.graph.outputs) read = read || o.name == mask;
      for (const auto& m : cg.graph.nodes) read = read || std::count(m.inputs.begin(), m.inputs.end(), mask) > 0;
      if (read) {
        HODU_CHECK(cg.dtype_of(mask) == DType::Bool, ErrorCode::InvalidModel, "{}: the mask is {}, not bool",
                   n.describe(), dtype_name(cg.dtype_of(mask)));
        auto shape = cg.shape_of(mask);
        cg.define(mask, DType::Bool, shape);
        cg.emit(fmt::format("memset({}, 1, {});", cg.ptr(mask), numel(shape)));
      }
    }
  } else if (op == "Transpose") emit_transpose(cg, n);
  else if (op == "Slice") emit_slice(cg, n);
  else if (op == "Expand") emit_expand(cg, n);
  else if (op == "Tile") emit_tile(cg, n);
  else if (op == "Split") emit_split(cg, n);
  else if (op == "Concat") emit_concat(cg, n);
  else if (op == "Gather") emit_gather(cg, n);
  else if (op == "Pad") emit_pad(cg, n);
  else if (op == "Resize") emit_resize(cg, n);
  else if (reduce_code(op) >= 0 && fast_reduce(cg, n)) emit_reduce(cg, n);
  else if ((op == "ArgMax" || op == "ArgMin") && cg.dtype_of(n.inputs[0]) == DType::F32) emit_argreduce(cg, n);
  else if (op == "DepthToSpace" || op == "SpaceToDepth") emit_depth_space(cg, n);
  else if (op == "Range") emit_range(cg, n);
  else if (op == "Cast" || op == "CastLike") emit_cast(cg, n);
  else if (op == "ConstantOfShape") emit_constant_of_shape(cg, n);
  else if (op == "BitCast") emit_bitcast(cg, n);
  else if (op == "Shape" || op == "Size") {
    // Left to run (not folded into sizes): the shape of a value sized while running, as data.
    SymShape s = cg.shape_of(n.inputs[0]), vals;
    if (op == "Size") {
      vals = {numel(s)};
    } else {
      const int64_t r = static_cast<int64_t>(s.size());
      int64_t b = n.get_int("start", 0), e = n.get_int("end", r);
      b = std::clamp<int64_t>(b < 0 ? b + r : b, 0, r);
      e = std::clamp<int64_t>(e < 0 ? e + r : e, b, r);
      vals.assign(s.begin() + b, s.begin() + e);
    }
    DType dt = cg.dtype_of(n.outputs[0]);
    HODU_CHECK(dt == DType::I64, ErrorCode::InvalidModel, "{}: the output must be int64", n.describe());
    cg.define(n.outputs[0], DType::I64, op == "Size" ? SymShape{} : SymShape{static_cast<int64_t>(vals.size())});
    std::string y = cg.ptr(n.outputs[0]);
    for (size_t k = 0; k < vals.size(); ++k) cg.emit(fmt::format("((int64_t*){})[{}] = (int64_t)({});", y, k, vals[k]));
  }
  else return false;
  return true;
}

}  // namespace hodu::compilers::c
