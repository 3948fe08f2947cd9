// Older ONNX opsets → canonical form (the newest version of each op).
//
// One table, `kRules`, keyed by (op, range of the model's ai.onnx opset). Each
// entry rewrites one node in place and may add nodes before/after it and
// constant initializers. Ops not in the table only changed their type lists
// (or added attributes whose defaults keep the old meaning) between versions.
#include "formats/onnx_canonicalize.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "core/error.h"

namespace hodu {
namespace {

struct Canon;

// What a rule produces besides the rewritten node.
struct Emit {
  std::vector<Node> before, after;
  bool drop = false;  // the node itself is removed (its work is done by before/after)
};

using RuleFn = std::function<void(Canon&, Graph&, Node&, Emit&)>;

struct Rule {
  const char* op;
  int lo, hi;  // applies when lo <= declared opset < hi
  const char* why;
  RuleFn fn;
};

struct Canon {
  std::string what;
  int opset = kMaxOnnxOpset;
  std::set<std::string> names;           // every value and node name in the model
  std::vector<Graph*> scope;             // enclosing graphs, innermost last
  std::vector<std::pair<std::string, Tensor>> deferred;  // appended after the graph's nodes are done

  std::string fresh(const std::string& base) { return fresh_name(names, base.empty() ? std::string("hodu") : base); }
  std::optional<ValueType> type_of(const std::string& v) const {
    for (auto it = scope.rbegin(); it != scope.rend(); ++it)
      if (auto t = (*it)->type_of(v)) return t;
    return std::nullopt;
  }
  const Tensor* constant(const std::string& v) const {
    for (auto it = scope.rbegin(); it != scope.rend(); ++it)
      if (auto* t = (*it)->initializer(v)) return t;
    return nullptr;
  }
  DType dtype_of(const std::string& v) const {
    if (auto* c = constant(v)) return c->dtype();
    auto t = type_of(v);
    return t && t->is_tensor() ? t->dtype : DType::Undefined;
  }
  std::optional<int64_t> rank_of(const std::string& v) const {
    if (auto* c = constant(v)) return c->rank();
    auto t = type_of(v);
    if (t && t->is_tensor() && t->shape.rank_known()) return t->shape.rank();
    return std::nullopt;
  }
  // Adds a constant initializer to `g`; `late` ones go after every other
  // initializer of the graph (they are the ones the exporter may turn back into
  // attributes, and re-import must put them back in the same place).
  std::string add_const(Graph& g, const std::string& base, Tensor t, bool late = false) {
    std::string n = fresh(base);
    if (late) deferred.emplace_back(n, std::move(t));
    else g.initializers.emplace_back(n, std::move(t));
    return n;
  }
  std::string ints_const(Graph& g, const std::string& base, const std::vector<int64_t>& v, bool late = false) {
    return add_const(g, base, Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v), late);
  }
  // A constant with the element type of `like` (a CastLike node when that type is unknown).
  std::string const_like(Graph& g, Emit& e, const std::string& like, const std::string& base, std::vector<int64_t> shape,
                         const std::vector<double>& values) {
    DType dt = dtype_of(like);
    bool cast = dt == DType::Undefined;
    Tensor t = Tensor::empty(cast ? DType::F32 : dt, std::move(shape));
    for (size_t i = 0; i < values.size(); ++i) t.set_double(static_cast<int64_t>(i), values[i]);
    std::string c = add_const(g, base, std::move(t));
    if (!cast) return c;
    Node n;
    n.op_type = "CastLike";
    n.name = fresh(base + "_cast");
    n.inputs = {c, like};
    n.outputs = {fresh(base + "_like")};
    e.before.push_back(n);
    return n.outputs[0];
  }
  Node make(const std::string& op, const std::string& base, std::vector<std::string> ins, std::vector<std::string> outs) {
    Node n;
    n.op_type = op;
    n.name = fresh(base);
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    return n;
  }
};

std::string out0(const Node& n) { return n.outputs.empty() ? n.name : n.outputs[0]; }
std::string base_name(const Node& n) { return n.name.empty() ? out0(n) : n.name; }

void set_input(Node& n, size_t i, const std::string& v) {
  if (n.inputs.size() <= i) n.inputs.resize(i + 1);
  n.inputs[i] = v;
}

// Moves an ints attribute to input `idx` as an i64 initializer (the attribute absent: input omitted).
void attr_to_input(Canon& c, Graph& g, Node& n, const std::string& attr, size_t idx, bool late = false) {
  const Attribute* a = n.attr(attr);
  if (!a) return;
  std::vector<int64_t> v = a->kind == Attribute::Kind::Int ? std::vector<int64_t>{a->i} : a->ints;
  std::string name = c.ints_const(g, out0(n) + "_" + attr, v, late);
  n.remove_attr(attr);
  set_input(n, idx, name);
}

bool value_used(const Graph& g, const std::string& v) {
  for (const auto& o : g.outputs)
    if (o.name == v) return true;
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs)
      if (i == v) return true;
    for (const auto& a : n.attributes) {
      if (a.g && value_used(*a.g, v)) return true;
      for (const auto& sg : a.graphs)
        if (value_used(*sg, v)) return true;
    }
  }
  return false;
}

// ---- rules -----------------------------------------------------------------

void reduce_axes(Canon& c, Graph& g, Node& n, Emit&) {
  // ReduceSum moved axes to an input at 13, the other reductions at 18; at 17
  // the exporter puts them back, so these constants go last (see add_const).
  attr_to_input(c, g, n, "axes", 1, n.op_type != "ReduceSum");
}

void squeeze_axes(Canon& c, Graph& g, Node& n, Emit&) { attr_to_input(c, g, n, "axes", 1); }

void split_attr(Canon& c, Graph& g, Node& n, Emit&) {
  // Split-1 took `split` as an optional second input or an attribute.
  if (n.has_attr("split")) attr_to_input(c, g, n, "split", 1);
}

void split_num_outputs(Canon& c, Graph& g, Node& n, Emit&) {
  if (!n.has_input(1) && !n.has_attr("num_outputs"))
    n.set_attr(Attribute::make_int("num_outputs", static_cast<int64_t>(n.outputs.size())));
}

void slice_attrs(Canon& c, Graph& g, Node& n, Emit&) {
  attr_to_input(c, g, n, "starts", 1);
  attr_to_input(c, g, n, "ends", 2);
  attr_to_input(c, g, n, "axes", 3);
}

void pad_attrs(Canon& c, Graph& g, Node& n, Emit& e) {
  if (n.has_attr("paddings")) {  // Pad-1 name
    Attribute a = *n.attr("paddings");
    n.remove_attr("paddings");
    a.name = "pads";
    n.set_attr(a);
  }
  attr_to_input(c, g, n, "pads", 1);
  float value = n.get_float("value", 0.0f);
  n.remove_attr("value");
  if (value != 0.0f) set_input(n, 2, c.const_like(g, e, n.inputs[0], out0(n) + "_value", {}, {value}));
}

void clip_attrs(Canon& c, Graph& g, Node& n, Emit& e) {
  const Attribute* mn = n.attr("min");
  const Attribute* mx = n.attr("max");
  std::string x = n.inputs.empty() ? "" : n.inputs[0];
  if (mn) set_input(n, 1, c.const_like(g, e, x, out0(n) + "_min", {}, {mn->f}));
  if (mx) set_input(n, 2, c.const_like(g, e, x, out0(n) + "_max", {}, {mx->f}));
  n.remove_attr("min");
  n.remove_attr("max");
}

void topk_k(Canon& c, Graph& g, Node& n, Emit&) {
  int64_t k = n.get_int("k", -1);
  n.remove_attr("k");
  set_input(n, 1, c.ints_const(g, out0(n) + "_k", {k}));
}

void dropout_attrs(Canon& c, Graph& g, Node& n, Emit&) {
  // is_test (< 7) and the ratio attribute (< 12) are gone: Dropout-12+ is an
  // identity at inference unless training_mode is given, and ratio is an input.
  n.remove_attr("is_test");
  if (const Attribute* r = n.attr("ratio")) {
    float v = r->f;
    n.remove_attr("ratio");
    set_input(n, 1, c.add_const(g, out0(n) + "_ratio", Tensor::scalar(DType::F32, v)));
  }
}

void batchnorm_attrs(Canon& c, Graph& g, Node& n, Emit&) {
  // spatial (< 9) is 1 in practice (per-channel statistics, today's meaning);
  // is_test (< 7) selected inference, which is training_mode = 0 now.
  if (n.get_int("spatial", 1) != 1)
    fail(ErrorCode::Unsupported, "{}: {}: BatchNormalization with spatial=0 is not supported", c.what,
         n.describe());
  n.remove_attr("spatial");
  n.remove_attr("is_test");
  n.remove_attr("momentum_old");
  // Older versions always listed the running statistics outputs; in inference
  // mode only Y exists now. Drop the extra outputs when nothing reads them.
  if (n.get_int("training_mode", 0) == 0) {
    while (n.outputs.size() > 1 && (n.outputs.back().empty() || !value_used(g, n.outputs.back())))
      n.outputs.pop_back();
  }
}

void drop_consumed_inputs(Canon&, Graph&, Node& n, Emit&) { n.remove_attr("consumed_inputs"); }

void legacy_broadcast(Canon& c, Graph& g, Node& n, Emit& e) {
  // Before opset 7, broadcasting was opt-in (broadcast=1) and `axis` aligned B
  // with A starting at that axis instead of at the trailing end.
  int64_t bc = n.get_int("broadcast", 0);
  const Attribute* ax = n.attr("axis");
  if (bc == 1 && ax && n.inputs.size() >= 2) {
    auto ra = c.rank_of(n.inputs[0]);
    auto rb = c.rank_of(n.inputs[1]);
    HODU_CHECK(ra && rb, ErrorCode::Unsupported,
               "{}: {}: legacy broadcast with axis={} needs the ranks of both inputs to be known", c.what,
               n.describe(), ax->i);
    int64_t axis = ax->i < 0 ? ax->i + *ra : ax->i;
    int64_t trailing = *ra - axis - *rb;
    if (trailing > 0) {
      std::vector<int64_t> axes;
      for (int64_t k = 0; k < trailing; ++k) axes.push_back(-1 - k);
      std::string axes_name = c.ints_const(g, out0(n) + "_bcast_axes", axes);
      std::string b = c.fresh(n.inputs[1] + "_bcast");
      e.before.push_back(c.make("Unsqueeze", base_name(n) + "_bcast", {n.inputs[1], axes_name}, {b}));
      n.inputs[1] = b;
    }
  }
  n.remove_attr("broadcast");
  n.remove_attr("axis");
  n.remove_attr("consumed_inputs");
}

void prelu_per_channel(Canon& c, Graph& g, Node& n, Emit& e) {
  // Before opset 7 a 1-D slope [C] applied per channel (axis 1); since 7 the
  // slope broadcasts from the trailing end, so it must become [C, 1, ..., 1].
  if (n.inputs.size() < 2) return;
  auto rs = c.rank_of(n.inputs[1]);
  if (rs && *rs != 1) return;  // scalar slope, or a full-shape one: the same under both rules
  if (const Tensor* s = c.constant(n.inputs[1]); s && s->numel() == 1) return;
  auto rx = c.rank_of(n.inputs[0]);
  HODU_CHECK(rx && rs, ErrorCode::Unsupported,
             "{}: {}: PRelu before opset 7 with a per-channel slope needs the ranks of X and slope to be known",
             c.what, n.describe());
  if (*rx < 3) return;  // [N, C]: a trailing [C] already lines up with the channels
  std::vector<int64_t> axes;
  for (int64_t k = 1; k <= *rx - 2; ++k) axes.push_back(k);
  std::string axes_name = c.ints_const(g, out0(n) + "_slope_axes", axes);
  std::string s = c.fresh(n.inputs[1] + "_per_channel");
  e.before.push_back(c.make("Unsqueeze", base_name(n) + "_slope", {n.inputs[1], axes_name}, {s}));
  n.inputs[1] = s;
}

void scan8_batch(Canon& c, Graph& g, Node& n, Emit& e) {
  // Scan-8 had a leading sequence_lens input and a batch axis 0 on every state
  // and scan tensor; Scan-9 has neither. With no sequence_lens and a static
  // batch B it is B Scan-9s over the batch entries, their outputs stacked back.
  // (Otherwise the node stays in its opset-8 form, which the interpreter also
  // runs and the exporter refuses with a clear message.)
  const Attribute* body = n.attr("body");
  if (!body || !body->g || n.inputs.size() != body->g->inputs.size() + 1) return;
  if (const Attribute* d = n.attr("directions")) {  // today's name, kept if the node stays in its 8 form
    Attribute renamed = *d;
    renamed.name = "scan_input_directions";
    n.remove_attr("directions");
    n.set_attr(std::move(renamed));
  }
  if (n.has_input(0)) return;
  std::optional<int64_t> batch;
  for (size_t i = 1; i < n.inputs.size() && !batch; ++i)
    if (auto t = c.type_of(n.inputs[i]); t && t->is_tensor() && t->shape.rank_known() && t->shape.rank() > 0 &&
                                           t->shape[0].is_known())
      batch = t->shape[0].value;
    else if (const Tensor* k = c.constant(n.inputs[i]); k && k->rank() > 0)
      batch = k->shape()[0];
  if (!batch || *batch < 1) return;
  std::vector<int64_t> directions = n.get_ints("scan_input_directions", {});
  std::string base = base_name(n);
  std::string axis0 = c.ints_const(g, base + "_batch_axis", {0});
  std::vector<std::vector<std::string>> per_batch_outputs(n.outputs.size());
  for (int64_t b = 0; b < *batch; ++b) {
    Node scan = c.make("Scan", base + "_b" + std::to_string(b), {}, {});
    scan.attributes = n.attributes;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      std::string x = n.inputs[i];
      if (*batch > 1) {
        std::string sliced = c.fresh(x + "_b" + std::to_string(b) + "_slice");
        e.before.push_back(c.make("Slice", base + "_slice", {x, c.ints_const(g, base + "_start", {b}),
                                                             c.ints_const(g, base + "_end", {b + 1}), axis0},
                                  {sliced}));
        x = sliced;
      }
      std::string squeezed = c.fresh(n.inputs[i] + "_b" + std::to_string(b));
      e.before.push_back(c.make("Squeeze", base + "_squeeze", {x, axis0}, {squeezed}));
      scan.inputs.push_back(squeezed);
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      std::string y = n.outputs[o].empty() ? c.fresh(base + "_unused") : c.fresh(n.outputs[o] + "_b" + std::to_string(b));
      scan.outputs.push_back(y);
      if (n.outputs[o].empty()) continue;
      std::string stacked = *batch == 1 ? n.outputs[o] : c.fresh(y + "_unsqueezed");
      e.after.push_back(c.make("Unsqueeze", base + "_unsqueeze", {y, axis0}, {stacked}));
      per_batch_outputs[o].push_back(stacked);
    }
    e.before.push_back(std::move(scan));
  }
  if (*batch > 1)
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o].empty()) continue;
      Node cat = c.make("Concat", base + "_stack", per_batch_outputs[o], {n.outputs[o]});
      cat.set_attr(Attribute::make_int("axis", 0));
      e.after.push_back(std::move(cat));
    }
  e.drop = true;
}

void gemm_attrs(Canon&, Graph&, Node& n, Emit&) {
  // Gemm < 7 had `broadcast` for C; C broadcasts unidirectionally since.
  n.remove_attr("broadcast");
  n.remove_attr("consumed_inputs");
}

std::optional<int> onnx_type_from_string(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::toupper);
  static const std::pair<const char*, int> kTypes[] = {
      {"FLOAT", 1},  {"UINT8", 2},  {"INT8", 3},     {"UINT16", 4},  {"INT16", 5},      {"INT32", 6},
      {"INT64", 7},  {"STRING", 8}, {"BOOL", 9},     {"FLOAT16", 10}, {"DOUBLE", 11},   {"UINT32", 12},
      {"UINT64", 13}, {"COMPLEX64", 14}, {"COMPLEX128", 15}, {"BFLOAT16", 16}};
  for (auto& [name, code] : kTypes)
    if (s == name) return code;
  return std::nullopt;
}

void cast_to_string(Canon& c, Graph& g, Node& n, Emit&) {
  const Attribute* to = n.attr("to");
  if (!to || to->kind != Attribute::Kind::String) return;
  auto code = onnx_type_from_string(to->s);
  HODU_CHECK(code.has_value(), ErrorCode::InvalidModel, "{}: {}: unknown type '{}' in attribute 'to'", c.what,
             n.describe(), to->s);
  n.set_attr(Attribute::make_int("to", *code));
}

void scatter_to_elements(Canon&, Graph&, Node& n, Emit&) { n.op_type = "ScatterElements"; }

void upsample_to_resize(Canon& c, Graph& g, Node& n, Emit&) {
  // Upsample (deprecated at 10) is Resize with asymmetric coordinates and
  // floor rounding for nearest.
  std::string mode = n.get_string("mode", "nearest");
  if (mode == "bilinear") mode = "linear";
  std::string scales;
  if (n.has_attr("scales")) {
    std::vector<float> s = n.get_floats("scales");
    scales = c.add_const(g, out0(n) + "_scales", Tensor::from_vector(DType::F32, {int64_t(s.size())}, s));
  } else if (n.has_attr("height_scale") || n.has_attr("width_scale")) {
    std::vector<float> s = {1.f, 1.f, n.get_float("height_scale", 1.f), n.get_float("width_scale", 1.f)};
    scales = c.add_const(g, out0(n) + "_scales", Tensor::from_vector(DType::F32, {4}, s));
  } else {
    HODU_CHECK(n.has_input(1), ErrorCode::InvalidModel, "{}: {}: no scales", c.what, n.describe());
    scales = n.inputs[1];
  }
  n.op_type = "Resize";
  n.attributes.clear();
  n.inputs = {n.inputs.empty() ? "" : n.inputs[0], "", scales};
  n.set_attr(Attribute::make_string("mode", mode));
  n.set_attr(Attribute::make_string("coordinate_transformation_mode", "asymmetric"));
  if (mode == "nearest") n.set_attr(Attribute::make_string("nearest_mode", "floor"));
}

void resize10(Canon& c, Graph& g, Node& n, Emit&) {
  // Resize-10: (X, scales), Upsample's asymmetric coordinate mapping.
  std::string mode = n.get_string("mode", "nearest");
  n.inputs = {n.inputs.empty() ? "" : n.inputs[0], "", n.inputs.size() > 1 ? n.inputs[1] : ""};
  n.set_attr(Attribute::make_string("coordinate_transformation_mode", "asymmetric"));
  if (mode == "nearest") n.set_attr(Attribute::make_string("nearest_mode", "floor"));
}

void softmax_2d(Canon& c, Graph& g, Node& n, Emit& e) {
  // Before 13, Softmax/LogSoftmax/Hardmax flattened the input to 2-D at `axis`
  // (default 1) and normalized over the second dim; now they normalize along
  // one axis (default -1).
  int64_t axis = n.get_int("axis", 1);
  auto rank = n.inputs.empty() ? std::nullopt : c.rank_of(n.inputs[0]);
  if (rank && (axis == *rank - 1 || axis == -1)) {
    n.set_attr(Attribute::make_int("axis", axis));
    return;
  }
  if (rank && *rank == 0) {
    n.set_attr(Attribute::make_int("axis", -1));
    return;
  }
  std::string x = n.inputs[0], y = out0(n), base = base_name(n);
  std::string shape = c.fresh(y + "_shape");
  std::string flat = c.fresh(y + "_flat");
  std::string y2d = c.fresh(y + "_2d");
  e.before.push_back(c.make("Shape", base + "_shape", {x}, {shape}));
  Node f = c.make("Flatten", base + "_flatten", {x}, {flat});
  f.set_attr(Attribute::make_int("axis", axis));
  e.before.push_back(f);
  n.inputs[0] = flat;
  n.outputs[0] = y2d;
  n.set_attr(Attribute::make_int("axis", -1));
  e.after.push_back(c.make("Reshape", base + "_reshape", {y2d, shape}, {y}));
}

void reshape_attr(Canon& c, Graph& g, Node& n, Emit&) {
  attr_to_input(c, g, n, "shape", 1);
  n.remove_attr("consumed_inputs");
}

void concat_axis(Canon&, Graph&, Node& n, Emit&) {
  if (!n.has_attr("axis")) n.set_attr(Attribute::make_int("axis", 1));
}

void constant_fill(Canon& c, Graph& g, Node& n, Emit& e) {
  // Experimental ConstantFill (removed in opset 10) → ConstantOfShape.
  auto dt = dtype_from_onnx(static_cast<int>(n.get_int("dtype", 1)));
  HODU_CHECK(dt.has_value(), ErrorCode::InvalidModel, "{}: {}: unknown dtype", c.what, n.describe());
  Tensor value = Tensor::empty(*dt, {1});
  value.set_double(0, n.get_float("value", 0.f));
  std::vector<int64_t> extra = n.get_ints("extra_shape");
  std::string shape;
  if (n.has_input(0)) {
    if (n.get_int("input_as_shape", 0)) {
      shape = n.inputs[0];
    } else {
      shape = c.fresh(out0(n) + "_shape");
      e.before.push_back(c.make("Shape", base_name(n) + "_shape", {n.inputs[0]}, {shape}));
    }
    if (!extra.empty()) {
      std::string ex = c.ints_const(g, out0(n) + "_extra_shape", extra);
      std::string cat = c.fresh(out0(n) + "_full_shape");
      Node cn = c.make("Concat", base_name(n) + "_concat", {shape, ex}, {cat});
      cn.set_attr(Attribute::make_int("axis", 0));
      e.before.push_back(cn);
      shape = cat;
    }
  } else {
    std::vector<int64_t> s = n.get_ints("shape");
    s.insert(s.end(), extra.begin(), extra.end());
    shape = c.ints_const(g, out0(n) + "_shape", s);
  }
  n.op_type = "ConstantOfShape";
  n.attributes.clear();
  n.inputs = {shape};
  n.set_attr(Attribute::make_tensor("value", value));
}

void image_scaler(Canon& c, Graph& g, Node& n, Emit& e) {
  // Experimental ImageScaler (removed in opset 10): y = x * scale + bias[c].
  float scale = n.get_float("scale", 1.f);
  std::vector<float> bias = n.get_floats("bias");
  std::string x = n.inputs[0], y = out0(n);
  std::string s = c.const_like(g, e, x, y + "_scale", {}, {scale});
  std::vector<double> b(bias.begin(), bias.end());
  std::string bn = c.const_like(g, e, x, y + "_bias", {int64_t(b.size()), 1, 1}, b);
  std::string scaled = c.fresh(y + "_scaled");
  e.before.push_back(c.make("Mul", base_name(n) + "_mul", {x, s}, {scaled}));
  n.op_type = "Add";
  n.attributes.clear();
  n.inputs = {scaled, bn};
}

void dft_axis(Canon& c, Graph& g, Node& n, Emit&) {
  // DFT-17 took `axis` (default 1) as an attribute; DFT-20 an input (default -2).
  int64_t axis = n.get_int("axis", 1);
  n.remove_attr("axis");
  Tensor t = Tensor::scalar(DType::I64, axis);
  set_input(n, 2, c.add_const(g, out0(n) + "_axis", t, true));
}

void grid_sample_modes(Canon&, Graph&, Node& n, Emit&) {
  if (!n.has_attr("mode")) return;  // the defaults (bilinear, linear) agree
  std::string m = n.get_string("mode", "bilinear");
  if (m == "bilinear") m = "linear";
  else if (m == "bicubic") m = "cubic";
  n.set_attr(Attribute::make_string("mode", m));
}

void roi_align10(Canon&, Graph&, Node& n, Emit&) {
  // RoiAlign-10 had no coordinate_transformation_mode and did not shift by half a pixel
  // (ONNX Runtime: output_half_pixel before 16); 16's default is half_pixel. torchvision
  // exports below 16 (Faster/Mask R-CNN at opset 11) write the old form.
  n.set_attr(Attribute::make_string("coordinate_transformation_mode", "output_half_pixel"));
}

void group_norm_scale(Canon& c, Graph& g, Node& n, Emit& e) {
  // GroupNormalization-18 had scale/bias per group; 21 per channel: repeat each
  // group's value C/G times.
  auto xt = c.type_of(n.inputs[0]);
  int64_t groups = n.get_int("num_groups", 0);
  HODU_CHECK(xt && xt->is_tensor() && xt->shape.rank() >= 2 && xt->shape[1].is_known() && groups > 0,
             ErrorCode::Unsupported, "{}: {}: GroupNormalization-18 needs the channel count to be known", c.what,
             n.describe());
  int64_t ch = xt->shape[1].value, rep = ch / groups;
  for (size_t i : {size_t(1), size_t(2)}) {
    if (!n.has_input(i)) continue;
    std::string r = c.fresh(n.inputs[i] + "_per_channel");
    std::string u = c.fresh(n.inputs[i] + "_expanded");
    std::string shp = c.ints_const(g, r + "_shape", {groups, rep});
    std::string flat = c.ints_const(g, r + "_flat", {ch});
    std::string ax = c.ints_const(g, r + "_axes", {1});
    e.before.push_back(c.make("Unsqueeze", base_name(n) + "_unsq", {n.inputs[i], ax}, {u}));
    std::string ex = c.fresh(r + "_rep");
    e.before.push_back(c.make("Expand", base_name(n) + "_expand", {u, shp}, {ex}));
    e.before.push_back(c.make("Reshape", base_name(n) + "_reshape", {ex, flat}, {r}));
    n.inputs[i] = r;
  }
}

const std::vector<Rule>& rules() {
  static const std::vector<Rule> kRules = {
      {"ReduceSum", 1, 13, "axes became an input in 13", reduce_axes},
      {"ReduceMean", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceMax", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceMin", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceProd", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceL1", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceL2", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceLogSum", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceLogSumExp", 1, 18, "axes became an input in 18", reduce_axes},
      {"ReduceSumSquare", 1, 18, "axes became an input in 18", reduce_axes},
      {"Squeeze", 1, 13, "axes became an input in 13", squeeze_axes},
      {"Unsqueeze", 1, 13, "axes became an input in 13", squeeze_axes},
      {"Split", 1, 13, "split became an input in 13", split_attr},
      {"Split", 1, 18, "18 needs num_outputs when split is not given", split_num_outputs},
      {"Slice", 1, 10, "starts/ends/axes became inputs (and steps was added) in 10", slice_attrs},
      {"Pad", 1, 11, "pads and the constant value became inputs in 11", pad_attrs},
      {"Clip", 1, 11, "min/max became optional inputs in 11", clip_attrs},
      {"TopK", 1, 10, "k became an input in 10", topk_k},
      {"Dropout", 1, 12, "ratio became an input in 12; is_test went away in 7", dropout_attrs},
      {"BatchNormalization", 1, 9, "spatial/is_test/consumed_inputs went away (7, 9)", batchnorm_attrs},
      {"BatchNormalization", 9, 14, "inference mode has one output since 14", batchnorm_attrs},
      {"Gemm", 1, 7, "broadcast/consumed_inputs went away in 7", gemm_attrs},
      {"PRelu", 1, 7, "a 1-D slope was per channel (axis 1) before 7; numpy broadcasting since", prelu_per_channel},
      {"Add", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Sub", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Mul", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Div", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Pow", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"And", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Or", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Xor", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Equal", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Greater", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"Less", 1, 7, "opt-in broadcast with axis became numpy broadcasting in 7", legacy_broadcast},
      {"*", 1, 6, "consumed_inputs (an optimization hint) went away in 6", drop_consumed_inputs},
      {"Cast", 1, 6, "`to` was a type name string before 6", cast_to_string},
      {"Scatter", 9, 11, "Scatter was renamed ScatterElements in 11 (same semantics)", scatter_to_elements},
      {"Scatter", 11, 1 << 30, "deprecated alias of ScatterElements", scatter_to_elements},
      {"Upsample", 1, 1 << 30, "deprecated in 10: Resize with asymmetric coordinates", upsample_to_resize},
      {"Resize", 10, 11, "Resize-10 had no roi input and Upsample's coordinate mapping", resize10},
      {"Softmax", 1, 13, "coerced the input to 2-D before 13", softmax_2d},
      {"LogSoftmax", 1, 13, "coerced the input to 2-D before 13", softmax_2d},
      {"Hardmax", 1, 13, "coerced the input to 2-D before 13", softmax_2d},
      {"Reshape", 1, 5, "shape became an input in 5", reshape_attr},
      {"Concat", 1, 4, "axis defaulted to 1 before 4 (required since)", concat_axis},
      {"ConstantFill", 1, 1 << 30, "experimental op, removed: ConstantOfShape", constant_fill},
      {"ImageScaler", 1, 1 << 30, "experimental op, removed: Mul + Add", image_scaler},
      {"DFT", 17, 20, "axis became an input (default -2) in 20", dft_axis},
      {"Scan", 8, 9, "Scan-8 had a batch axis and a sequence_lens input; 9 has neither", scan8_batch},
      {"GridSample", 16, 20, "modes renamed bilinear→linear, bicubic→cubic in 20", grid_sample_modes},
      {"RoiAlign", 10, 16, "no half-pixel shift before 16 (coordinate_transformation_mode=output_half_pixel)",
       roi_align10},
      {"GroupNormalization", 18, 21, "scale/bias per channel instead of per group in 21", group_norm_scale},
  };
  return kRules;
}

void collect_names(const Graph& g, std::set<std::string>& names) {
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& v : g.outputs) names.insert(v.name);
  for (const auto& [n, t] : g.initializers) names.insert(n);
  for (const auto& [n, t] : g.value_types) names.insert(n);
  for (const auto& node : g.nodes) {
    if (!node.name.empty()) names.insert(node.name);
    for (const auto& o : node.outputs) names.insert(o);
    for (const auto& i : node.inputs) names.insert(i);
    for (const auto& a : node.attributes) {
      if (a.g) collect_names(*a.g, names);
      for (const auto& sg : a.graphs) collect_names(*sg, names);
    }
  }
}

void canon_graph(Canon& c, Graph& g) {
  c.scope.push_back(&g);
  auto saved_deferred = std::move(c.deferred);
  c.deferred.clear();
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    for (auto& a : n.attributes) {
      if (a.g) canon_graph(c, *a.g);
      for (auto& sg : a.graphs) canon_graph(c, *sg);
    }
    Emit e;
    if (n.domain.empty()) {
      for (const auto& r : rules()) {
        if (c.opset < r.lo || c.opset >= r.hi) continue;
        if (std::string_view(r.op) != "*" && n.op_type != r.op) continue;
        try {
          r.fn(c, g, n, e);
        } catch (const Error& err) {
          std::string msg = err.what();
          if (msg.rfind(c.what, 0) == 0) throw;
          throw err.with_context(c.what + ": " + n.describe() + ": ");
        }
      }
    }
    for (auto& b : e.before) out.push_back(std::move(b));
    if (!e.drop) out.push_back(std::move(n));
    for (auto& a : e.after) out.push_back(std::move(a));
  }
  g.nodes = std::move(out);
  for (auto& d : c.deferred) g.initializers.push_back(std::move(d));
  c.deferred = std::move(saved_deferred);
  c.scope.pop_back();
}

}  // namespace

void collect_graph_names(const Graph& g, std::set<std::string>& names) { collect_names(g, names); }

std::string fresh_name(std::set<std::string>& names, const std::string& base) {
  std::string n = base;
  for (int k = 1; names.count(n); ++k) n = base + "_" + std::to_string(k);
  names.insert(n);
  return n;
}

void canonicalize_onnx_model(Model& model, const std::string& what) {
  Canon c;
  c.what = what;
  auto it = model.opset_imports.find("");
  c.opset = it == model.opset_imports.end() ? kMaxOnnxOpset : static_cast<int>(it->second);
  if (c.opset >= kMaxOnnxOpset) return;
  collect_names(model.graph, c.names);
  canon_graph(c, model.graph);
}

}  // namespace hodu
