// Gradient rules of shape, layout and indexing ops, reductions and Cast. Shapes
// the rules need come from Shape nodes of forward values (so symbolic dims
// work); they fold to constants when an engine binds the input shapes.
#include <algorithm>

#include "passes/autodiff_rules.h"
#include "passes/graph_utils.h"

namespace hodu::passes::autodiff {
namespace {

const std::string& in(RuleContext& c, size_t i) { return c.node().inputs[i]; }
const std::string& out(RuleContext& c, size_t i = 0) { return c.node().outputs[i]; }

int64_t axis_attr(RuleContext& c, const std::string& value, int64_t def) {
  int64_t r = c.rank_or_fail(value);
  int64_t a = c.node().get_int("axis", def);
  if (a < -r || a >= std::max<int64_t>(r, 1)) c.unsupported(fmt::format("axis {} is out of range for rank {}", a, r));
  return a < 0 ? a + r : a;
}

void reshape_rule(RuleContext& c) { c.give(0, c.reshape_like(c.dy(), in(c, 0))); }

void transpose_rule(RuleContext& c) {
  std::vector<int64_t> perm = transpose_perm(c.node(), static_cast<size_t>(c.rank_or_fail(in(c, 0))));
  std::vector<int64_t> inv(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inv[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
  c.give(0, c.emit("Transpose", {c.dy()}, {Attribute::make_ints("perm", inv)}));
}

void cast_rule(RuleContext& c) {
  c.give(0, c.emit("Cast", {c.dy()}, {Attribute::make_int("to", dtype_to_onnx(c.dtype(in(c, 0))))}));
}

void expand_rule(RuleContext& c) { c.give_broadcast(0, c.dy(), out(c)); }

// ---- reductions -------------------------------------------------------------------

// What a Reduce* node did: its axes input (or none: all), keepdims, noop.
struct Reduction {
  std::string axes;  // "" = every axis
  bool keepdims = true;
  bool noop = false;  // empty axes with noop_with_empty_axes: the identity
};

Reduction reduction_of(RuleContext& c) {
  Reduction r;
  const Node& n = c.node();
  r.keepdims = n.get_int("keepdims", 1) != 0;
  if (n.has_input(1)) {
    r.axes = n.inputs[1];
    if (const Tensor* t = c.constant(r.axes)) {
      if (t->numel() == 0) r.axes.clear();
    } else if (n.get_int("noop_with_empty_axes", 0) != 0) {
      c.unsupported("axes computed at run time with noop_with_empty_axes=1");
    }
  }
  r.noop = r.axes.empty() && n.get_int("noop_with_empty_axes", 0) != 0;
  return r;
}

// A reduced value (the shape of the output) with its reduced dims back as 1s.
std::string kept(RuleContext& c, const Reduction& r, const std::string& v) {
  if (r.keepdims || r.noop) return v;
  if (r.axes.empty()) {
    std::vector<int64_t> ones(static_cast<size_t>(c.rank_or_fail(in(c, 0))), 1);
    return c.emit("Reshape", {v, c.ints(ones)});
  }
  return c.emit("Unsqueeze", {v, r.axes});
}

std::string expand_to_input(RuleContext& c, const std::string& v) {
  return c.emit("Expand", {v, c.shape_of(in(c, 0))});
}

// Elements per output element: Size(x) / Size(y), a constant when both shapes are static.
std::string reduced_count(RuleContext& c) {
  auto tx = c.type(in(c, 0)), ty = c.type(out(c));
  auto nx = tx ? tx->shape.numel() : std::nullopt;
  auto ny = ty ? ty->shape.numel() : std::nullopt;
  const std::string& x = in(c, 0);
  if (nx && ny && *ny > 0) return c.scalar_like(static_cast<double>(*nx / *ny), x);
  auto to_float = [&](const std::string& v) {
    return c.emit("Cast", {v}, {Attribute::make_int("to", dtype_to_onnx(c.dtype(x)))});
  };
  return c.div(to_float(c.emit("Size", {x})), to_float(c.emit("Size", {out(c)})));
}

void reduce_sum_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  if (r.noop) return c.give(0, c.dy());
  c.give(0, expand_to_input(c, kept(c, r, c.dy())));
}

void reduce_mean_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  if (r.noop) return c.give(0, c.dy());
  c.give(0, expand_to_input(c, c.div(kept(c, r, c.dy()), reduced_count(c))));
}

// ReduceMax/ReduceMin: the gradient is shared evenly by the elements equal to the extremum.
void reduce_extremum_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  if (r.noop) return c.give(0, c.dy());
  const std::string& x = in(c, 0);
  std::string mask = c.emit("Cast", {c.emit("Equal", {x, kept(c, r, out(c))})},
                            {Attribute::make_int("to", dtype_to_onnx(c.dtype(x)))});
  std::vector<std::string> count_in = {mask};
  if (!r.axes.empty()) count_in.push_back(r.axes);
  std::string count = c.emit("ReduceSum", count_in, {Attribute::make_int("keepdims", 1)});
  c.give(0, c.mul(kept(c, r, c.dy()), c.div(mask, count)));
}

// ReduceProd: dx = dy · y / x (x without zeros).
void reduce_prod_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  if (r.noop) return c.give(0, c.dy());
  const std::string& x = in(c, 0);
  c.give(0, c.mul(kept(c, r, c.dy()), c.div(kept(c, r, out(c)), x)));
}

void reduce_sum_square_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  const std::string& x = in(c, 0);
  std::string g = r.noop ? c.dy() : kept(c, r, c.dy());
  c.give(0, c.mul(g, c.mul(x, c.scalar_like(2, x))));
}

void reduce_l2_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  const std::string& x = in(c, 0);
  c.give(0, c.mul(r.noop ? c.dy() : kept(c, r, c.dy()), c.div(x, r.noop ? out(c) : kept(c, r, out(c)))));
}

void reduce_log_sum_exp_rule(RuleContext& c) {
  Reduction r = reduction_of(c);
  const std::string& x = in(c, 0);
  std::string y = r.noop ? out(c) : kept(c, r, out(c));
  c.give(0, c.mul(r.noop ? c.dy() : kept(c, r, c.dy()), c.emit("Exp", {c.sub(x, y)})));
}

// ---- joining and splitting --------------------------------------------------------

// The size of `value` along `axis` as a 1-element int64 tensor.
std::string dim_of(RuleContext& c, const std::string& value, int64_t axis) {
  if (auto d = c.static_dim(value, axis)) return c.ints({*d});
  return c.emit("Slice", {c.shape_of(value), c.ints({axis}), c.ints({axis + 1})});
}

void concat_rule(RuleContext& c) {
  const Node& n = c.node();
  const int64_t axis = axis_attr(c, out(c), 0);
  std::vector<std::string> sizes;
  std::vector<int64_t> static_sizes;
  std::vector<bool> wanted;
  bool all_static = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto d = c.static_dim(n.inputs[i], axis);
    all_static = all_static && d.has_value();
    if (d) static_sizes.push_back(*d);
    wanted.push_back(c.wants(i));
  }
  std::string split;
  if (all_static) {
    split = c.ints(static_sizes);
  } else {
    for (const auto& v : n.inputs) sizes.push_back(dim_of(c, v, axis));
    split = sizes.size() == 1 ? sizes[0] : c.emit("Concat", sizes, {Attribute::make_int("axis", 0)});
  }
  auto parts = c.emit_n("Split", {c.dy(), split}, n.inputs.size(), {Attribute::make_int("axis", axis)}, "", wanted);
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (wanted[i]) c.give(i, parts[i]);
}

void split_rule(RuleContext& c) {
  const Node& n = c.node();
  const int64_t axis = axis_attr(c, in(c, 0), 0);
  std::vector<std::string> parts;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty()) c.unsupported("a Split with an omitted output");
    std::string g = c.dy(i);
    parts.push_back(g.empty() ? c.zeros_like(n.outputs[i]) : g);
  }
  c.give(0, parts.size() == 1 ? parts[0] : c.emit("Concat", parts, {Attribute::make_int("axis", axis)}));
}

// Slice, the general case (steps other than 1, bounds computed at run time): the flat positions
// the slice took, found by slicing an iota of x's shape the same way, receive dy.
void slice_by_positions(RuleContext& c) {
  const Node& n = c.node();
  const std::string& x = in(c, 0);
  std::string count = c.emit("ReduceProd", {c.shape_of(x)}, {Attribute::make_int("keepdims", 0)});
  std::string iota = c.emit("Range", {c.scalar(0, DType::I64), count, c.scalar(1, DType::I64)});
  std::vector<std::string> ins = {c.emit("Reshape", {iota, c.shape_of(x)})};
  for (size_t i = 1; i < n.inputs.size(); ++i) ins.push_back(n.inputs[i]);
  std::string positions = c.emit("Reshape", {c.emit("Slice", ins), c.ints({-1})});
  std::string flat = c.emit("Reshape", {c.zeros_like(x), c.ints({-1})});
  std::string scattered = c.emit("ScatterElements", {flat, positions, c.emit("Reshape", {c.dy(), c.ints({-1})})},
                                 {Attribute::make_int("axis", 0)});
  c.give(0, c.emit("Reshape", {scattered, c.shape_of(x)}));
}

// Slice with constant starts and steps of 1: the gradient padded with zeros back to the input's
// shape (pads from Shape(x), clamped as Slice clamps, so symbolic dims work); else by positions.
void slice_rule(RuleContext& c) {
  const Node& n = c.node();
  const std::string& x = in(c, 0);
  const int64_t r = c.rank_or_fail(x);
  const Tensor* starts = c.constant(in(c, 1));
  const Tensor* axes_t = n.has_input(3) ? c.constant(in(c, 3)) : nullptr;
  const Tensor* steps_t = n.has_input(4) ? c.constant(in(c, 4)) : nullptr;
  bool unit = starts && (!n.has_input(3) || axes_t) && (!n.has_input(4) || steps_t);
  if (unit && steps_t)
    for (int64_t s : steps_t->to_int64s()) unit = unit && s == 1;
  if (!unit) return slice_by_positions(c);
  std::vector<int64_t> st = starts->to_int64s();
  std::vector<int64_t> axes = axes_t ? axes_t->to_int64s() : std::vector<int64_t>();
  if (!axes_t)
    for (size_t k = 0; k < st.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  std::vector<int64_t> neg(static_cast<size_t>(r), 0), offs(static_cast<size_t>(r), 0);
  for (size_t k = 0; k < axes.size() && k < st.size(); ++k) {
    int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
    if (a < 0 || a >= r) c.unsupported(fmt::format("axis {} is out of range", axes[k]));
    int64_t s = std::max<int64_t>(st[k], -(int64_t{1} << 62));
    neg[static_cast<size_t>(a)] = s < 0 ? 1 : 0;
    offs[static_cast<size_t>(a)] = s;
  }
  // begin = clamp(start (+ dim when negative), 0, dim); end pad = dim - begin - Shape(dy).
  std::string shape = c.shape_of(x);
  std::string begin = c.add(c.mul(shape, c.ints(neg)), c.ints(offs));
  begin = c.emit("Min", {c.emit("Max", {begin, c.ints(std::vector<int64_t>(static_cast<size_t>(r), 0))}), shape});
  std::string end = c.sub(c.sub(shape, begin), c.shape_of(out(c)));
  std::string pads = c.emit("Concat", {begin, end}, {Attribute::make_int("axis", 0)});
  c.give(0, c.emit("Pad", {c.dy(), pads}));
}

// Pad (constant mode, pads >= 0): the gradient is dy without the padding, a Slice.
void pad_rule(RuleContext& c) {
  const Node& n = c.node();
  const std::string mode = n.get_string("mode", "constant");
  if (mode != "constant") c.unsupported("Pad in mode '" + mode + "'");
  if (c.wants(2)) c.unsupported("the gradient of Pad's constant value");
  const std::string& x = in(c, 0);
  const int64_t r = c.rank_or_fail(x);
  const Tensor* pads_t = n.has_input(1) ? c.constant(in(c, 1)) : nullptr;
  const Tensor* axes_t = n.has_input(3) ? c.constant(in(c, 3)) : nullptr;
  if (!pads_t || (n.has_input(3) && !axes_t)) c.unsupported("Pad with pads or axes computed at run time");
  std::vector<int64_t> pads = pads_t->to_int64s(), axes;
  if (axes_t) {
    for (int64_t a : axes_t->to_int64s()) axes.push_back(a < 0 ? a + r : a);
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  }
  if (pads.size() != 2 * axes.size()) c.unsupported("pads do not match the axes");
  for (int64_t p : pads)
    if (p < 0) c.unsupported("Pad with negative pads (a crop)");
  const int64_t k = static_cast<int64_t>(axes.size());
  std::vector<int64_t> begin(pads.begin(), pads.begin() + k), end(pads.begin() + k, pads.end());
  // ends = Shape(dy)[axes] - end pads
  std::string dims = c.emit("Gather", {c.shape_of(out(c)), c.ints(axes)});
  std::string ends = c.sub(dims, c.ints(end));
  c.give(0, c.emit("Slice", {c.dy(), c.ints(begin), ends, c.ints(axes)}));
}

// GatherElements: dy added back at the gathered positions.
void gather_elements_rule(RuleContext& c) {
  c.give(0, c.emit("ScatterElements", {c.zeros_like(in(c, 0)), in(c, 1), c.dy()},
                   {Attribute::make_int("axis", c.node().get_int("axis", 0)), Attribute::make_string("reduction", "add")}));
}

// ScatterElements: data keeps dy where nothing was written (all of it with reduction "add"); the
// updates get dy gathered from where they went. ("mul"/"max"/"min" reductions: unsupported.)
void scatter_elements_rule(RuleContext& c) {
  const Node& n = c.node();
  const std::string reduction = n.get_string("reduction", "none");
  if (reduction != "none" && reduction != "add") c.unsupported("ScatterElements with reduction '" + reduction + "'");
  const std::vector<Attribute> axis = {Attribute::make_int("axis", n.get_int("axis", 0))};
  std::string g = c.dy();
  if (c.wants(0))
    c.give(0, reduction == "add" ? g : c.emit("ScatterElements", {g, in(c, 1), c.zeros_like(in(c, 2))}, axis));
  if (c.wants(2)) c.give(2, c.emit("GatherElements", {g, in(c, 1)}, axis));
}

// Tile: dy seen as [repeats0, d0, repeats1, d1, ...] summed over the repeats.
void tile_rule(RuleContext& c) {
  const std::string& x = in(c, 0);
  const int64_t r = c.rank_or_fail(x);
  std::vector<std::string> parts;
  std::vector<int64_t> axes;
  for (int64_t k = 0; k < r; ++k) {
    parts.push_back(c.emit("Slice", {in(c, 1), c.ints({k}), c.ints({k + 1})}));
    parts.push_back(dim_of(c, x, k));
    axes.push_back(2 * k);
  }
  std::string shape = c.emit("Concat", parts, {Attribute::make_int("axis", 0)});
  std::string s = c.emit("ReduceSum", {c.emit("Reshape", {c.dy(), shape}), c.ints(axes)}, {Attribute::make_int("keepdims", 0)});
  c.give(0, s);
}

// Gather: the gradient rows scattered back, adding where an index repeats (an embedding).
void gather_rule(RuleContext& c) {
  const std::string &data = in(c, 0), &idx = in(c, 1);
  const int64_t r = c.rank_or_fail(data);
  const int64_t q = c.rank_or_fail(idx);
  const int64_t axis = axis_attr(c, data, 0);
  std::string g = c.dy();
  std::string indices = c.emit("Unsqueeze", {idx, c.ints({-1})});
  const std::vector<Attribute> add = {Attribute::make_string("reduction", "add")};
  if (axis == 0) {
    c.give(0, c.emit("ScatterND", {c.zeros_like(data), indices, g}, add));
    return;
  }
  // Move the gathered axis first: data [a, d0.., ...], dy [I..., d0.., ...].
  std::vector<int64_t> pd = {axis}, pg;
  for (int64_t k = 0; k < r; ++k)
    if (k != axis) pd.push_back(k);
  for (int64_t k = 0; k < q; ++k) pg.push_back(axis + k);
  for (int64_t k = 0; k < axis; ++k) pg.push_back(k);
  for (int64_t k = axis + q; k < r + q - 1; ++k) pg.push_back(k);
  std::string zeros = c.zeros_like(c.emit("Transpose", {data}, {Attribute::make_ints("perm", pd)}));
  std::string gt = c.emit("Transpose", {g}, {Attribute::make_ints("perm", pg)});
  std::string s = c.emit("ScatterND", {zeros, indices, gt}, add);
  std::vector<int64_t> inv(pd.size());
  for (size_t k = 0; k < pd.size(); ++k) inv[static_cast<size_t>(pd[k])] = static_cast<int64_t>(k);
  c.give(0, c.emit("Transpose", {s}, {Attribute::make_ints("perm", inv)}));
}

}  // namespace

void add_tensor_rules(RuleTable& t) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) t[{"", op}] = reshape_rule;
  t[{"", "Transpose"}] = transpose_rule;
  t[{"", "Cast"}] = cast_rule;
  t[{"", "Expand"}] = expand_rule;
  t[{"", "ReduceSum"}] = reduce_sum_rule;
  t[{"", "ReduceMean"}] = reduce_mean_rule;
  t[{"", "ReduceMax"}] = reduce_extremum_rule;
  t[{"", "ReduceMin"}] = reduce_extremum_rule;
  t[{"", "ReduceSumSquare"}] = reduce_sum_square_rule;
  t[{"", "ReduceL2"}] = reduce_l2_rule;
  t[{"", "ReduceLogSumExp"}] = reduce_log_sum_exp_rule;
  t[{"", "Concat"}] = concat_rule;
  t[{"", "Split"}] = split_rule;
  t[{"", "Slice"}] = slice_rule;
  t[{"", "Gather"}] = gather_rule;
  t[{"", "GatherElements"}] = gather_elements_rule;
  t[{"", "ScatterElements"}] = scatter_elements_rule;
  t[{"", "Tile"}] = tile_rule;
  t[{"", "Pad"}] = pad_rule;
  t[{"", "ReduceProd"}] = reduce_prod_rule;
}

}  // namespace hodu::passes::autodiff
