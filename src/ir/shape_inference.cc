// Type and shape inference: infer_types() walks a graph in order, resolving
// each node's schema and calling its inference function; ops without one get
// the dtype of an input that shares the output's type constraint (shape
// unknown). Small int64 tensors that describe shapes (Shape -> Gather ->
// Concat -> Reshape chains) are tracked symbolically, so Reshape/Expand/
// ConstantOfShape see [batch, seq, 768] rather than unknown.
#include <algorithm>
#include <climits>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "ir/schema.h"

namespace hodu {

namespace {

using VT = ValueType;

// ---- symbolic values of small integer tensors -------------------------------

struct SymValue {
  std::vector<Dim> v;   // elements (known ints or symbols)
  bool scalar = false;  // rank 0 (v has one element)
};

// Negative integer literals (the -1 of a Reshape shape) are kept as a reserved
// symbol so they are not confused with unknown dims.
Dim lit(int64_t x) { return x >= 0 ? Dim(x) : Dim::sym(fmt::format("\x01{}", x)); }
std::optional<int64_t> lit_value(const Dim& d) {
  if (d.is_known()) return d.value;
  if (d.is_symbolic() && d.symbol[0] == '\x01') return std::stoll(d.symbol.substr(1));
  return std::nullopt;
}
bool is_neg_lit(const Dim& d) { return d.is_symbolic() && d.symbol[0] == '\x01'; }

// The symbolic values of the current node's inputs, set by the driver while an
// inference function runs (they live in this file only).
thread_local const std::vector<const SymValue*>* t_sym_inputs = nullptr;

const SymValue* sym_input(size_t i) {
  if (!t_sym_inputs || i >= t_sym_inputs->size()) return nullptr;
  return (*t_sym_inputs)[i];
}

[[noreturn]] void bad(const std::string& msg) { throw Error(ErrorCode::InvalidModel, msg); }

// ---- helpers ----------------------------------------------------------------

const VT* tensor_in(InferenceContext& c, size_t i) {
  const VT* t = c.input(i);
  return t && (t->kind == VT::Kind::Tensor || t->kind == VT::Kind::SparseTensor) ? t : nullptr;
}

DType in_dtype(InferenceContext& c, size_t i) {
  const VT* t = tensor_in(c, i);
  return t ? t->dtype : DType::Undefined;
}

const Shape* in_shape(InferenceContext& c, size_t i) {
  const VT* t = tensor_in(c, i);
  return t && t->shape.rank_known() ? &t->shape : nullptr;
}

void set_tensor(InferenceContext& c, size_t i, DType dt, Shape s) {
  if (i < c.output_types.size() && c.node.has_output(i)) c.set_output(i, VT::tensor(dt, std::move(s)));
}

// Integer values of a constant input, or its symbolic value when every element is known.
std::optional<std::vector<int64_t>> const_ints(InferenceContext& c, size_t i) {
  if (const Tensor* t = c.constant(i)) {
    if (dtype_is_integer(t->dtype()) || t->dtype() == DType::Bool) return t->to_int64s();
    return std::nullopt;
  }
  if (const SymValue* s = sym_input(i)) {
    std::vector<int64_t> out;
    for (const auto& d : s->v) {
      auto x = lit_value(d);
      if (!x) return std::nullopt;
      out.push_back(*x);
    }
    return out;
  }
  return std::nullopt;
}

std::optional<std::vector<double>> const_doubles(InferenceContext& c, size_t i) {
  if (const Tensor* t = c.constant(i)) {
    if (t->dtype() == DType::String) return std::nullopt;
    return t->to_doubles();
  }
  if (auto v = const_ints(c, i)) return std::vector<double>(v->begin(), v->end());
  return std::nullopt;
}

// A 1-D shape tensor as dims (symbolic allowed), from a constant or a tracked value.
std::optional<std::vector<Dim>> shape_dims_input(InferenceContext& c, size_t i) {
  if (const Tensor* t = c.constant(i)) {
    std::vector<Dim> out;
    for (int64_t v : t->to_int64s()) out.push_back(v < 0 ? Dim::unknown() : Dim(v));
    return out;
  }
  if (const SymValue* s = sym_input(i)) {
    std::vector<Dim> out = s->v;
    for (auto& d : out)
      if (is_neg_lit(d)) d = Dim::unknown();
    return out;
  }
  return std::nullopt;
}

int64_t norm_axis(int64_t axis, int64_t rank, const char* what = "axis") {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1) || (rank == 0 && axis != 0 && axis != -1))
    bad(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  return axis < 0 ? axis + rank : axis;
}

std::optional<int64_t> dim_product(const std::vector<Dim>& ds) {
  int64_t p = 1;
  for (const auto& d : ds) {
    if (!d.is_known()) return std::nullopt;
    p *= d.value;
  }
  return p;
}

Dim dim_mul(const Dim& a, const Dim& b) {
  if (a.is_known() && b.is_known()) return Dim(a.value * b.value);
  if (a.is_known() && a.value == 1) return b;
  if (b.is_known() && b.value == 1) return a;
  return Dim::unknown();
}

Dim broadcast_dim(const Dim& a, const Dim& b, const Shape& sa, const Shape& sb) {
  if (a.is_known() && a.value == 1) return b;
  if (b.is_known() && b.value == 1) return a;
  if (a.is_known() && b.is_known()) {
    if (a.value != b.value)
      bad(fmt::format("shapes {} and {} cannot be broadcast", sa.to_string(), sb.to_string()));
    return a;
  }
  if (a.is_known()) return a;
  if (b.is_known()) return b;
  if (a.is_symbolic() && (a == b || !b.is_symbolic())) return a;
  if (b.is_symbolic() && !a.is_symbolic()) return b;
  return Dim::unknown();
}

Shape broadcast(const Shape& a, const Shape& b) {
  if (!a.rank_known() || !b.rank_known()) return Shape::unknown_rank();
  size_t r = std::max(a.dims().size(), b.dims().size());
  std::vector<Dim> out(r);
  for (size_t k = 0; k < r; ++k) {
    size_t ia = a.dims().size(), ib = b.dims().size();
    Dim da = k < r - ia ? Dim(1) : a.dims()[k - (r - ia)];
    Dim db = k < r - ib ? Dim(1) : b.dims()[k - (r - ib)];
    out[k] = broadcast_dim(da, db, a, b);
  }
  return Shape(std::move(out));
}

Shape input_shape_or_unknown(InferenceContext& c, size_t i) {
  const VT* t = tensor_in(c, i);
  return t ? t->shape : Shape::unknown_rank();
}

std::optional<DType> onnx_dtype(int64_t code) {
  return dtype_from_onnx(static_cast<int>(code));
}

// ---- families ----------------------------------------------------------------

void same_as_input0(InferenceContext& c) {
  if (const VT* t = c.input(0)) c.set_output(0, *t);
}

void unary_to(InferenceContext& c, DType dt) {
  set_tensor(c, 0, dt, input_shape_or_unknown(c, 0));
}

void broadcast_n(InferenceContext& c, DType out_dt, size_t dtype_input = 0) {
  Shape s;
  bool first = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.node.has_input(i)) continue;
    const VT* t = tensor_in(c, i);
    Shape si = t ? t->shape : Shape::unknown_rank();
    s = first ? si : broadcast(s, si);
    first = false;
  }
  if (out_dt == DType::Undefined) {
    out_dt = in_dtype(c, dtype_input);
    for (size_t i = 0; out_dt == DType::Undefined && i < c.num_inputs(); ++i) out_dt = in_dtype(c, i);
  }
  set_tensor(c, 0, out_dt, s);
}

void elementwise(InferenceContext& c) { broadcast_n(c, DType::Undefined); }
void comparison(InferenceContext& c) { broadcast_n(c, DType::Bool); }

void cast(InferenceContext& c) {
  auto dt = onnx_dtype(c.node.get_int("to", 0));
  if (!dt) bad(fmt::format("attribute 'to' = {} is not a known data type", c.node.get_int("to", 0)));
  unary_to(c, *dt);
}

void cast_like(InferenceContext& c) { unary_to(c, in_dtype(c, 1)); }

void bool_unary(InferenceContext& c) { unary_to(c, DType::Bool); }

// MatMul with numpy semantics.
Shape matmul_shape(const Shape& a, const Shape& b) {
  if (!a.rank_known() || !b.rank_known()) return Shape::unknown_rank();
  if (a.rank() == 0 || b.rank() == 0) bad("MatMul inputs must not be scalars");
  std::vector<Dim> da = a.dims(), db = b.dims();
  bool a1 = da.size() == 1, b1 = db.size() == 1;
  if (a1) da.insert(da.begin(), Dim(1));
  if (b1) db.push_back(Dim(1));
  const Dim& k1 = da.back();
  const Dim& k2 = db[db.size() - 2];
  if (k1.is_known() && k2.is_known() && k1.value != k2.value)
    bad(fmt::format("inner dimensions do not match: {} x {}", a.to_string(), b.to_string()));
  Shape ba(std::vector<Dim>(da.begin(), da.end() - 2)), bb(std::vector<Dim>(db.begin(), db.end() - 2));
  Shape batch = broadcast(ba, bb);
  std::vector<Dim> out = batch.dims();
  if (!a1) out.push_back(da[da.size() - 2]);
  if (!b1) out.push_back(db.back());
  return Shape(std::move(out));
}

void matmul(InferenceContext& c) {
  set_tensor(c, 0, in_dtype(c, 0), matmul_shape(input_shape_or_unknown(c, 0), input_shape_or_unknown(c, 1)));
}

void matmul_integer(InferenceContext& c) {
  set_tensor(c, 0, DType::I32, matmul_shape(input_shape_or_unknown(c, 0), input_shape_or_unknown(c, 1)));
}

void qlinear_matmul(InferenceContext& c) {
  set_tensor(c, 0, in_dtype(c, 7), matmul_shape(input_shape_or_unknown(c, 0), input_shape_or_unknown(c, 3)));
}

void gemm(InferenceContext& c) {
  const Shape* a = in_shape(c, 0);
  const Shape* b = in_shape(c, 1);
  Shape out = Shape::unknown_rank();
  if (a && b) {
    if (a->rank() != 2 || b->rank() != 2)
      bad(fmt::format("Gemm inputs must be 2-D, got {} and {}", a->to_string(), b->to_string()));
    bool ta = c.node.get_int("transA", 0), tb = c.node.get_int("transB", 0);
    Dim m = (*a)[ta ? 1 : 0], ka = (*a)[ta ? 0 : 1];
    Dim kb = (*b)[tb ? 1 : 0], n = (*b)[tb ? 0 : 1];
    if (ka.is_known() && kb.is_known() && ka.value != kb.value)
      bad(fmt::format("inner dimensions do not match: {} x {} (transA={}, transB={})", a->to_string(),
                      b->to_string(), int(ta), int(tb)));
    out = Shape({m, n});
  }
  set_tensor(c, 0, in_dtype(c, 0), out);
}

// Spatial output size of conv/pool.
struct ConvGeom {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string auto_pad;
};

ConvGeom conv_geom(InferenceContext& c, size_t spatial, const std::vector<int64_t>& kernel) {
  ConvGeom g;
  g.kernel = kernel;
  g.strides = c.node.get_ints("strides", std::vector<int64_t>(spatial, 1));
  g.dilations = c.node.get_ints("dilations", std::vector<int64_t>(spatial, 1));
  g.pads = c.node.get_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  g.auto_pad = c.node.get_string("auto_pad", "NOTSET");
  if (g.kernel.size() != spatial) bad(fmt::format("kernel_shape has {} dims, the input has {} spatial dims", g.kernel.size(), spatial));
  if (g.strides.size() != spatial) bad(fmt::format("strides has {} values, expected {}", g.strides.size(), spatial));
  if (g.dilations.size() != spatial) bad(fmt::format("dilations has {} values, expected {}", g.dilations.size(), spatial));
  if (g.pads.size() != 2 * spatial) bad(fmt::format("pads has {} values, expected {}", g.pads.size(), 2 * spatial));
  for (auto s : g.strides)
    if (s <= 0) bad("strides must be positive");
  return g;
}

Dim conv_out_dim(const Dim& in, const ConvGeom& g, size_t k, bool ceil_mode) {
  if (!in.is_known()) return Dim::unknown();
  int64_t s = g.strides[k];
  if (g.auto_pad == "SAME_UPPER" || g.auto_pad == "SAME_LOWER") return Dim((in.value + s - 1) / s);
  int64_t eff = g.dilations[k] * (g.kernel[k] - 1) + 1;
  int64_t pad = g.auto_pad == "VALID" ? 0 : g.pads[k] + g.pads[k + g.kernel.size()];
  int64_t span = in.value + pad - eff;
  if (span < 0) bad(fmt::format("kernel of effective size {} is larger than the padded input ({})", eff, in.value + pad));
  int64_t out = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
  if (ceil_mode && (out - 1) * s >= in.value + (g.auto_pad == "VALID" ? 0 : g.pads[k])) --out;
  return Dim(out);
}

void conv(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  const Shape* w = in_shape(c, 1);
  DType dt = in_dtype(c, 0);
  if (c.node.op_type == "ConvInteger") dt = DType::I32;
  if (c.node.op_type == "QLinearConv") dt = in_dtype(c, 7);
  size_t wi = c.node.op_type == "QLinearConv" ? 3 : 1;
  w = in_shape(c, wi);
  // A rank-known input below 3 (no channel and spatial dims) cannot run: say so here, as
  // the engines do when they meet it, so hodu info --check flags the model.
  if (x && x->rank_known() && x->rank() < 3)
    bad(fmt::format("{} input X must have rank >= 3 (batch, channels, spatial dims), got {}", c.node.op_type,
                    x->to_string()));
  if (!x || x->rank() < 3) {
    set_tensor(c, 0, dt, Shape::unknown_rank());
    return;
  }
  size_t sp = static_cast<size_t>(x->rank() - 2);
  std::vector<int64_t> kernel = c.node.get_ints("kernel_shape");
  if (kernel.empty() && w && w->rank() == x->rank()) {
    for (size_t k = 0; k < sp; ++k) kernel.push_back((*w)[k + 2].value);
  }
  std::vector<Dim> out{(*x)[0], w && w->rank() >= 1 ? (*w)[0] : Dim::unknown()};
  if (w && w->rank() != x->rank())
    bad(fmt::format("weight {} and input {} have different ranks", w->to_string(), x->to_string()));
  int64_t group = c.node.get_int("group", 1);
  if (w && (*x)[1].is_known() && (*w)[1].is_known() && (*x)[1].value != (*w)[1].value * group)
    bad(fmt::format("input has {} channels, weight {} with group {} expects {}", (*x)[1].value, w->to_string(),
                    group, (*w)[1].value * group));
  if (w && w->rank() == x->rank() && kernel.size() == sp)
    for (size_t k = 0; k < sp; ++k)
      if ((*w)[k + 2].is_known() && (*w)[k + 2].value != kernel[k])
        bad(fmt::format("kernel_shape {} does not match weight {}", shape_to_string(kernel), w->to_string()));
  // The bias: one value per output channel (ConvInteger has none; QLinearConv's is input 8).
  const size_t bi = c.node.op_type == "QLinearConv" ? 8 : c.node.op_type == "DeformConv" ? 3 : 2;
  if (c.node.op_type != "ConvInteger")
    if (const Shape* b = in_shape(c, bi); b && b->rank_known()) {
      const bool fits = b->rank() == 1 && (!(*b)[0].is_known() || !out[1].is_known() || (*b)[0].value == out[1].value);
      if (!fits) bad(fmt::format("bias {} must be 1-D with one value per output channel ({})", b->to_string(),
                                 out[1].is_known() ? std::to_string(out[1].value) : std::string("M")));
    }
  bool kernel_known = std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k >= 0; });
  if (kernel.size() != sp || !kernel_known) {
    for (size_t k = 0; k < sp; ++k) out.push_back(Dim::unknown());
  } else {
    ConvGeom g = conv_geom(c, sp, kernel);
    for (size_t k = 0; k < sp; ++k) out.push_back(conv_out_dim((*x)[k + 2], g, k, false));
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void conv_transpose(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  const Shape* w = in_shape(c, 1);
  DType dt = in_dtype(c, 0);
  if (!x || x->rank() < 3) {
    set_tensor(c, 0, dt, Shape::unknown_rank());
    return;
  }
  size_t sp = static_cast<size_t>(x->rank() - 2);
  int64_t group = c.node.get_int("group", 1);
  std::vector<Dim> out{(*x)[0], w && w->rank() >= 2 ? dim_mul((*w)[1], Dim(group)) : Dim::unknown()};
  std::vector<int64_t> kernel = c.node.get_ints("kernel_shape");
  if (kernel.empty() && w && w->rank() == x->rank())
    for (size_t k = 0; k < sp; ++k) kernel.push_back((*w)[k + 2].value);
  std::vector<int64_t> output_shape = c.node.get_ints("output_shape");
  if (output_shape.size() == sp) {
    for (auto v : output_shape) out.push_back(Dim(v));
  } else if (kernel.size() == sp &&
             std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k >= 0; })) {
    auto strides = c.node.get_ints("strides", std::vector<int64_t>(sp, 1));
    auto dil = c.node.get_ints("dilations", std::vector<int64_t>(sp, 1));
    auto pads = c.node.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
    auto opad = c.node.get_ints("output_padding", std::vector<int64_t>(sp, 0));
    std::string ap = c.node.get_string("auto_pad", "NOTSET");
    if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || opad.size() != sp)
      bad("strides/dilations/pads/output_padding do not match the spatial rank");
    for (size_t k = 0; k < sp; ++k) {
      const Dim& in = (*x)[k + 2];
      if (!in.is_known()) {
        out.push_back(Dim::unknown());
      } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
        out.push_back(Dim(in.value * strides[k]));
      } else {
        int64_t p = ap == "VALID" ? 0 : pads[k] + pads[k + sp];
        out.push_back(Dim(strides[k] * (in.value - 1) + opad[k] + ((kernel[k] - 1) * dil[k] + 1) - p));
      }
    }
  } else {
    for (size_t k = 0; k < sp; ++k) out.push_back(Dim::unknown());
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void pool(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  DType dt = in_dtype(c, 0);
  if (!x) {
    set_tensor(c, 0, dt, Shape::unknown_rank());
    if (c.output_types.size() > 1) set_tensor(c, 1, DType::I64, Shape::unknown_rank());
    return;
  }
  if (x->rank() < 3) bad(fmt::format("input {} must have rank >= 3", x->to_string()));
  size_t sp = static_cast<size_t>(x->rank() - 2);
  auto kernel = c.node.get_ints("kernel_shape");
  ConvGeom g = conv_geom(c, sp, kernel);
  bool ceil_mode = c.node.get_int("ceil_mode", 0) != 0;
  std::vector<Dim> out{(*x)[0], (*x)[1]};
  for (size_t k = 0; k < sp; ++k) out.push_back(conv_out_dim((*x)[k + 2], g, k, ceil_mode));
  Shape s(std::move(out));
  set_tensor(c, 0, dt, s);
  if (c.output_types.size() > 1) set_tensor(c, 1, DType::I64, s);
}

void global_pool(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  if (!x) return unary_to(c, in_dtype(c, 0));
  std::vector<Dim> out = x->dims();
  for (size_t k = 2; k < out.size(); ++k) out[k] = Dim(1);
  set_tensor(c, 0, in_dtype(c, 0), Shape(std::move(out)));
}

// Reductions: axes from input 1 (constant) or the "axes" attribute (ArgMax: "axis").
void reduce(InferenceContext& c) {
  const std::string& op = c.node.op_type;
  bool arg = op == "ArgMax" || op == "ArgMin";
  DType dt = arg ? DType::I64 : in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  bool keep = c.node.get_int("keepdims", 1) != 0;
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  std::vector<int64_t> axes;
  if (arg) {
    axes = {c.node.get_int("axis", 0)};
  } else if (c.node.has_attr("axes")) {
    axes = c.node.get_ints("axes");
  } else if (c.node.has_input(1)) {
    auto v = const_ints(c, 1);
    if (!v) {
      // Unknown axes: the rank is known only with keepdims.
      if (keep) return set_tensor(c, 0, dt, Shape(std::vector<Dim>(static_cast<size_t>(r), Dim::unknown())));
      return set_tensor(c, 0, dt, Shape::unknown_rank());
    }
    axes = *v;
  }
  if (axes.empty()) {
    if (c.node.get_int("noop_with_empty_axes", 0) != 0) return set_tensor(c, 0, dt, *x);
    for (int64_t k = 0; k < r; ++k) axes.push_back(k);
  }
  std::vector<bool> red(static_cast<size_t>(r), false);
  for (auto a : axes) red[static_cast<size_t>(norm_axis(a, r))] = true;
  std::vector<Dim> out;
  for (int64_t k = 0; k < r; ++k) {
    if (!red[static_cast<size_t>(k)])
      out.push_back((*x)[k]);
    else if (keep)
      out.push_back(Dim(1));
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void reshape(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  auto target = shape_dims_input(c, 1);
  if (!target) {
    const Shape* s = in_shape(c, 1);
    if (s && s->rank() == 1 && (*s)[0].is_known())
      return set_tensor(c, 0, dt, Shape(std::vector<Dim>(static_cast<size_t>((*s)[0].value), Dim::unknown())));
    return set_tensor(c, 0, dt, Shape::unknown_rank());
  }
  const Shape* x = in_shape(c, 0);
  bool allowzero = c.node.get_int("allowzero", 0) != 0;
  std::vector<Dim> out = *target;
  std::vector<int64_t> raw;
  if (auto v = const_ints(c, 1)) raw = *v;
  const SymValue* sv = c.constant(1) ? nullptr : sym_input(1);
  int minus_one = -1;
  for (size_t k = 0; k < out.size(); ++k) {
    std::optional<int64_t> lv = sv && k < sv->v.size() ? lit_value(sv->v[k]) : std::nullopt;
    int64_t v = k < raw.size() ? raw[k] : lv ? *lv : -2;
    if (v == 0 && !allowzero) {
      if (x) {
        if (static_cast<int64_t>(k) >= x->rank()) bad(fmt::format("shape value 0 at position {} has no input dim ({})", k, x->to_string()));
        out[k] = (*x)[k];
      } else {
        out[k] = Dim::unknown();
      }
    } else if (v == -1) {
      if (minus_one >= 0) bad("shape has more than one -1");
      minus_one = static_cast<int>(k);
      out[k] = Dim::unknown();
    } else if (v < -1) {
      if (!raw.empty()) bad(fmt::format("invalid shape value {}", v));
    }
  }
  if (minus_one >= 0 && x) {
    // Solve for -1 with known sizes, cancelling identical symbols.
    std::vector<Dim> in = x->dims();
    std::vector<Dim> rest;
    for (size_t k = 0; k < out.size(); ++k)
      if (static_cast<int>(k) != minus_one) rest.push_back(out[k]);
    for (auto it = rest.begin(); it != rest.end();) {
      auto f = it->is_symbolic() ? std::find(in.begin(), in.end(), *it) : in.end();
      if (f != in.end()) {
        in.erase(f);
        it = rest.erase(it);
      } else {
        ++it;
      }
    }
    auto pi = dim_product(in), pr = dim_product(rest);
    if (pi && pr && *pr != 0) {
      if (*pi % *pr != 0) bad(fmt::format("cannot reshape {} to {}", x->to_string(), Shape(*target).to_string()));
      out[static_cast<size_t>(minus_one)] = Dim(*pi / *pr);
    } else if (pr && *pr == 1 && in.size() == 1) {
      out[static_cast<size_t>(minus_one)] = in[0];
    }
  } else if (minus_one < 0 && x) {
    auto pi = dim_product(x->dims()), po = dim_product(out);
    if (pi && po && *pi != *po)
      bad(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", x->to_string(), *pi,
                      Shape(out).to_string(), *po));
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void transpose(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  DType dt = in_dtype(c, 0);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  std::vector<int64_t> perm = c.node.get_ints("perm");
  if (perm.empty())
    for (int64_t k = r - 1; k >= 0; --k) perm.push_back(k);
  if (static_cast<int64_t>(perm.size()) != r)
    bad(fmt::format("perm has {} entries, the input {} has rank {}", perm.size(), x->to_string(), r));
  std::vector<Dim> out;
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (auto p : perm) {
    int64_t a = norm_axis(p, r, "perm entry");
    if (seen[static_cast<size_t>(a)]) bad(fmt::format("perm repeats axis {}", a));
    seen[static_cast<size_t>(a)] = true;
    out.push_back((*x)[a]);
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void concat(InferenceContext& c) {
  DType dt = DType::Undefined;
  const Shape* first = nullptr;
  bool all = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (dt == DType::Undefined) dt = in_dtype(c, i);
    const Shape* s = in_shape(c, i);
    if (!s) all = false;
    if (s && !first) first = s;
  }
  if (!first) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = first->rank();
  int64_t axis = norm_axis(c.node.get_int("axis", 0), r);
  std::vector<Dim> out = first->dims();
  Dim sum(0);
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const Shape* s = in_shape(c, i);
    if (!s) {
      sum = Dim::unknown();
      continue;
    }
    if (s->rank() != r) bad(fmt::format("input {} has rank {}, input 0 has rank {}", i, s->rank(), r));
    for (int64_t k = 0; k < r; ++k) {
      if (k == axis) continue;
      const Dim& a = out[static_cast<size_t>(k)];
      const Dim& b = (*s)[k];
      if (a.is_known() && b.is_known() && a.value != b.value)
        bad(fmt::format("input {} {} does not match {} outside axis {}", i, s->to_string(), first->to_string(), axis));
      if (!a.is_known() && b.is_known()) out[static_cast<size_t>(k)] = b;
    }
    const Dim& d = (*s)[axis];
    sum = sum.is_known() && d.is_known() ? Dim(sum.value + d.value) : Dim::unknown();
  }
  if (!all) sum = Dim::unknown();
  if (c.num_inputs() == 1) sum = (*first)[axis];
  out[static_cast<size_t>(axis)] = sum;
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void split(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  size_t n = c.output_types.size();
  if (!x) {
    for (size_t i = 0; i < n; ++i) set_tensor(c, i, dt, Shape::unknown_rank());
    return;
  }
  int64_t axis = norm_axis(c.node.get_int("axis", 0), x->rank());
  std::vector<int64_t> sizes;
  bool known_sizes = false;
  if (c.node.has_input(1)) {
    if (auto v = const_ints(c, 1)) {
      sizes = *v;
      known_sizes = true;
    }
  } else if (c.node.has_attr("split")) {
    sizes = c.node.get_ints("split");
    known_sizes = true;
  } else if ((*x)[axis].is_known()) {
    int64_t total = (*x)[axis].value;
    int64_t parts = c.node.get_int("num_outputs", static_cast<int64_t>(n));
    int64_t chunk = (total + parts - 1) / std::max<int64_t>(parts, 1);
    for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::max<int64_t>(0, std::min(chunk, total - k * chunk)));
    known_sizes = true;
  }
  if (known_sizes && sizes.size() != n)
    bad(fmt::format("split gives {} parts for {} outputs", sizes.size(), n));
  if (known_sizes && (*x)[axis].is_known()) {
    int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
    if (total != (*x)[axis].value)
      bad(fmt::format("split sizes sum to {}, but axis {} of {} has {}", total, axis, x->to_string(), (*x)[axis].value));
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<Dim> d = x->dims();
    d[static_cast<size_t>(axis)] = known_sizes ? Dim(sizes[i]) : Dim::unknown();
    set_tensor(c, i, dt, Shape(std::move(d)));
  }
}

int64_t clamp_index(int64_t v, int64_t dim, bool end, int64_t step) {
  if (v < 0) v += dim;
  if (step > 0) return std::clamp<int64_t>(v, 0, dim);
  return std::clamp<int64_t>(v, -1, dim - 1);
  (void)end;
}

void slice(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (c.node.has_attr("starts")) {  // Slice-1 attributes
    starts = c.node.get_ints("starts");
    ends = c.node.get_ints("ends");
    if (c.node.has_attr("axes")) axes = c.node.get_ints("axes");
  } else {
    starts = const_ints(c, 1);
    ends = const_ints(c, 2);
    if (c.node.has_input(3)) axes = const_ints(c, 3);
    if (c.node.has_input(4)) steps = const_ints(c, 4);
  }
  bool axes_ok = !c.node.has_input(3) || axes || c.node.has_attr("starts");
  bool steps_ok = !c.node.has_input(4) || steps;
  std::vector<Dim> out = x->dims();
  if (!starts || !ends || !axes_ok || !steps_ok) {
    if (axes) {
      for (auto a : *axes) out[static_cast<size_t>(norm_axis(a, r))] = Dim::unknown();
      return set_tensor(c, 0, dt, Shape(std::move(out)));
    }
    return set_tensor(c, 0, dt, Shape(std::vector<Dim>(static_cast<size_t>(r), Dim::unknown())));
  }
  size_t n = starts->size();
  if (ends->size() != n) bad(fmt::format("starts has {} values, ends {}", n, ends->size()));
  if (!axes) {
    axes = std::vector<int64_t>(n);
    std::iota(axes->begin(), axes->end(), 0);
  }
  if (!steps) steps = std::vector<int64_t>(n, 1);
  if (axes->size() != n || steps->size() != n) bad("starts, ends, axes and steps must have the same length");
  for (size_t k = 0; k < n; ++k) {
    int64_t a = norm_axis((*axes)[k], r);
    int64_t step = (*steps)[k];
    if (step == 0) bad("slice step must not be 0");
    const Dim& d = (*x)[a];
    if (!d.is_known()) {
      // [0:INT_MAX] keeps a symbolic dim.
      if ((*starts)[k] == 0 && step == 1 && (*ends)[k] >= INT32_MAX) continue;
      out[static_cast<size_t>(a)] = Dim::unknown();
      continue;
    }
    int64_t s = clamp_index((*starts)[k], d.value, false, step);
    int64_t e = clamp_index((*ends)[k], d.value, true, step);
    int64_t len = step > 0 ? (e - s + step - 1) / step : (s - e + (-step) - 1) / (-step);
    out[static_cast<size_t>(a)] = Dim(std::max<int64_t>(0, len));
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void gather(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  const Shape* idx = in_shape(c, 1);
  if (!x || !idx) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t axis = norm_axis(c.node.get_int("axis", 0), x->rank());
  std::vector<Dim> out(x->dims().begin(), x->dims().begin() + axis);
  out.insert(out.end(), idx->dims().begin(), idx->dims().end());
  out.insert(out.end(), x->dims().begin() + axis + 1, x->dims().end());
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void gather_elements(InferenceContext& c) { set_tensor(c, 0, in_dtype(c, 0), input_shape_or_unknown(c, 1)); }

void gather_nd(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  const Shape* idx = in_shape(c, 1);
  if (!x || !idx || idx->rank() == 0 || !(*idx)[idx->rank() - 1].is_known())
    return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t b = c.node.get_int("batch_dims", 0);
  int64_t last = (*idx)[idx->rank() - 1].value;
  if (b + last > x->rank()) bad(fmt::format("indices {} index more dims than data {} has", idx->to_string(), x->to_string()));
  std::vector<Dim> out(idx->dims().begin(), idx->dims().end() - 1);
  out.insert(out.end(), x->dims().begin() + b + last, x->dims().end());
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

std::optional<std::vector<int64_t>> axes_of(InferenceContext& c) {
  if (c.node.has_attr("axes")) return c.node.get_ints("axes");
  if (c.node.has_input(1)) return const_ints(c, 1);
  return std::vector<int64_t>{};
}

void squeeze(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  auto axes = axes_of(c);
  if (!x || !axes) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  std::vector<bool> drop(static_cast<size_t>(r), false);
  if (axes->empty()) {
    for (int64_t k = 0; k < r; ++k) {
      if (!(*x)[k].is_known()) return set_tensor(c, 0, dt, Shape::unknown_rank());
      drop[static_cast<size_t>(k)] = (*x)[k].value == 1;
    }
  }
  for (auto a : *axes) {
    int64_t k = norm_axis(a, r);
    if ((*x)[k].is_known() && (*x)[k].value != 1)
      bad(fmt::format("cannot squeeze axis {} of size {} ({})", a, (*x)[k].value, x->to_string()));
    drop[static_cast<size_t>(k)] = true;
  }
  std::vector<Dim> out;
  for (int64_t k = 0; k < r; ++k)
    if (!drop[static_cast<size_t>(k)]) out.push_back((*x)[k]);
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void unsqueeze(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  auto axes = axes_of(c);
  if (!x || !axes) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> ins(static_cast<size_t>(r), false);
  for (auto a : *axes) {
    int64_t k = norm_axis(a, r);
    if (ins[static_cast<size_t>(k)]) bad(fmt::format("axes repeat {}", a));
    ins[static_cast<size_t>(k)] = true;
  }
  std::vector<Dim> out;
  size_t j = 0;
  for (int64_t k = 0; k < r; ++k) out.push_back(ins[static_cast<size_t>(k)] ? Dim(1) : (*x)[j++]);
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void flatten(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  int64_t axis = c.node.get_int("axis", 1);
  if (axis < -r || axis > r) bad(fmt::format("axis {} is out of range for rank {}", axis, r));
  if (axis < 0) axis += r;
  Dim a(1), b(1);
  for (int64_t k = 0; k < r; ++k) (k < axis ? a : b) = dim_mul(k < axis ? a : b, (*x)[k]);
  set_tensor(c, 0, dt, Shape({a, b}));
}

void expand(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  auto target = shape_dims_input(c, 1);
  if (!target) return set_tensor(c, 0, dt, Shape::unknown_rank());
  set_tensor(c, 0, dt, broadcast(input_shape_or_unknown(c, 0), Shape(*target)));
}

void tile(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  auto reps = const_ints(c, 1);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  if (!reps) return set_tensor(c, 0, dt, Shape(std::vector<Dim>(static_cast<size_t>(x->rank()), Dim::unknown())));
  if (static_cast<int64_t>(reps->size()) != x->rank())
    bad(fmt::format("repeats has {} values for input {}", reps->size(), x->to_string()));
  std::vector<Dim> out;
  for (int64_t k = 0; k < x->rank(); ++k) out.push_back(dim_mul((*x)[k], Dim((*reps)[static_cast<size_t>(k)])));
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t r) {
  int64_t s = n.get_int("start", 0), e = n.get_int("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, 0, r);
  return {s, std::max(s, e)};
}

void shape_op(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  if (!x) return set_tensor(c, 0, DType::I64, Shape({Dim::unknown()}));
  auto [s, e] = shape_range(c.node, x->rank());
  set_tensor(c, 0, DType::I64, Shape({Dim(e - s)}));
}

void size_op(InferenceContext& c) { set_tensor(c, 0, DType::I64, Shape::scalar()); }

void constant(InferenceContext& c) {
  const Node& n = c.node;
  if (const Tensor* t = n.get_tensor("value")) return set_tensor(c, 0, t->dtype(), Shape::from(t->shape()));
  if (n.has_attr("value_float")) return set_tensor(c, 0, DType::F32, Shape::scalar());
  if (n.has_attr("value_int")) return set_tensor(c, 0, DType::I64, Shape::scalar());
  if (n.has_attr("value_string")) return set_tensor(c, 0, DType::String, Shape::scalar());
  if (n.has_attr("value_floats")) return set_tensor(c, 0, DType::F32, Shape::from({static_cast<int64_t>(n.get_floats("value_floats").size())}));
  if (n.has_attr("value_ints")) return set_tensor(c, 0, DType::I64, Shape::from({static_cast<int64_t>(n.get_ints("value_ints").size())}));
  if (n.has_attr("value_strings")) return set_tensor(c, 0, DType::String, Shape::from({static_cast<int64_t>(n.get_strings("value_strings").size())}));
  if (n.has_attr("sparse_value")) return;
  bad("Constant has no value attribute");
}

void constant_of_shape(InferenceContext& c) {
  const Tensor* v = c.node.get_tensor("value");
  DType dt = v ? v->dtype() : DType::F32;
  auto dims = shape_dims_input(c, 0);
  if (dims) return set_tensor(c, 0, dt, Shape(*dims));
  const Shape* s = in_shape(c, 0);
  if (s && s->rank() == 1 && (*s)[0].is_known())
    return set_tensor(c, 0, dt, Shape(std::vector<Dim>(static_cast<size_t>((*s)[0].value), Dim::unknown())));
  set_tensor(c, 0, dt, Shape::unknown_rank());
}

void range(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  auto s = const_doubles(c, 0), l = const_doubles(c, 1), d = const_doubles(c, 2);
  if (s && l && d && s->size() == 1 && l->size() == 1 && d->size() == 1) {
    if ((*d)[0] == 0) bad("Range delta is 0");
    double n = std::ceil(((*l)[0] - (*s)[0]) / (*d)[0]);
    return set_tensor(c, 0, dt, Shape({Dim(std::max<int64_t>(0, static_cast<int64_t>(n)))}));
  }
  set_tensor(c, 0, dt, Shape({Dim::unknown()}));
}

void resize(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  bool upsample = c.node.op_type == "Upsample";
  std::vector<int64_t> axes = c.node.get_ints("axes");
  if (axes.empty())
    for (int64_t k = 0; k < r; ++k) axes.push_back(k);
  std::vector<Dim> out = x->dims();
  auto sizes = upsample ? std::nullopt : (c.node.has_input(3) ? const_ints(c, 3) : std::nullopt);
  std::optional<std::vector<double>> scales;
  if (upsample)
    scales = c.node.has_attr("scales") ? std::optional(std::vector<double>(c.node.get_floats("scales").begin(), c.node.get_floats("scales").end()))
                                       : const_doubles(c, 1);
  else if (c.node.has_input(2))
    scales = const_doubles(c, 2);
  if (sizes && !sizes->empty()) {
    if (sizes->size() != axes.size()) bad(fmt::format("sizes has {} values for {} axes", sizes->size(), axes.size()));
    std::string policy = c.node.get_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      for (auto a : axes) out[static_cast<size_t>(norm_axis(a, r))] = Dim::unknown();
      bool all = true;
      double scale = policy == "not_larger" ? 1e300 : 0;
      for (size_t k = 0; k < axes.size(); ++k) {
        const Dim& d = (*x)[norm_axis(axes[k], r)];
        if (!d.is_known() || d.value == 0) { all = false; break; }
        double s = double((*sizes)[k]) / double(d.value);
        scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
      }
      if (all)
        for (auto a : axes) {
          int64_t k = norm_axis(a, r);
          out[static_cast<size_t>(k)] = Dim(static_cast<int64_t>(std::round(scale * double((*x)[k].value))));
        }
    } else {
      for (size_t k = 0; k < axes.size(); ++k) out[static_cast<size_t>(norm_axis(axes[k], r))] = Dim((*sizes)[k]);
    }
  } else if (scales && !scales->empty()) {
    if (scales->size() != axes.size()) bad(fmt::format("scales has {} values for {} axes", scales->size(), axes.size()));
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t a = norm_axis(axes[k], r);
      const Dim& d = (*x)[a];
      out[static_cast<size_t>(a)] = d.is_known() ? Dim(static_cast<int64_t>(std::floor(double(d.value) * (*scales)[k])))
                                   : ((*scales)[k] == 1.0 ? d : Dim::unknown());
    }
  } else {
    for (auto a : axes) out[static_cast<size_t>(norm_axis(a, r))] = Dim::unknown();
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void topk(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x) {
    set_tensor(c, 0, dt, Shape::unknown_rank());
    set_tensor(c, 1, DType::I64, Shape::unknown_rank());
    return;
  }
  int64_t axis = norm_axis(c.node.get_int("axis", -1), x->rank());
  std::vector<Dim> out = x->dims();
  Dim k = Dim::unknown();
  if (c.node.has_attr("k")) k = Dim(c.node.get_int("k", 0));
  else if (auto v = const_ints(c, 1); v && v->size() == 1) k = Dim((*v)[0]);
  if (k.is_known() && out[static_cast<size_t>(axis)].is_known() && k.value > out[static_cast<size_t>(axis)].value)
    bad(fmt::format("k = {} is larger than axis {} of {}", k.value, axis, x->to_string()));
  out[static_cast<size_t>(axis)] = k;
  set_tensor(c, 0, dt, Shape(out));
  set_tensor(c, 1, DType::I64, Shape(out));
}

void pad(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = x->rank();
  std::optional<std::vector<int64_t>> pads = c.node.has_attr("pads") ? std::optional(c.node.get_ints("pads")) : const_ints(c, 1);
  std::vector<int64_t> axes;
  if (c.node.has_input(3)) {
    auto a = const_ints(c, 3);
    if (!a) return set_tensor(c, 0, dt, Shape(std::vector<Dim>(static_cast<size_t>(r), Dim::unknown())));
    axes = *a;
  } else {
    for (int64_t k = 0; k < r; ++k) axes.push_back(k);
  }
  if (!pads) {
    std::vector<Dim> out = x->dims();
    for (auto a : axes) out[static_cast<size_t>(norm_axis(a, r))] = Dim::unknown();
    return set_tensor(c, 0, dt, Shape(std::move(out)));
  }
  if (pads->size() != 2 * axes.size()) bad(fmt::format("pads has {} values for {} axes", pads->size(), axes.size()));
  std::vector<Dim> out = x->dims();
  size_t n = axes.size();
  for (size_t k = 0; k < n; ++k) {
    int64_t a = norm_axis(axes[k], r);
    const Dim& d = (*x)[a];
    int64_t total = (*pads)[k] + (*pads)[k + n];
    out[static_cast<size_t>(a)] = d.is_known() ? Dim(d.value + total) : (total == 0 ? d : Dim::unknown());
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void depth_space(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x || x->rank() != 4) return set_tensor(c, 0, dt, x ? *x : Shape::unknown_rank());
  int64_t b = c.node.get_int("blocksize", 1);
  bool d2s = c.node.op_type == "DepthToSpace";
  auto div = [&](const Dim& d) { return d.is_known() ? Dim(d.value / (b * b)) : Dim::unknown(); };
  auto divb = [&](const Dim& d) { return d.is_known() ? Dim(d.value / b) : Dim::unknown(); };
  auto mul = [&](const Dim& d, int64_t m) { return dim_mul(d, Dim(m)); };
  if (d2s) set_tensor(c, 0, dt, Shape({(*x)[0], div((*x)[1]), mul((*x)[2], b), mul((*x)[3], b)}));
  else set_tensor(c, 0, dt, Shape({(*x)[0], mul((*x)[1], b * b), divb((*x)[2]), divb((*x)[3])}));
}

void one_hot(InferenceContext& c) {
  DType dt = in_dtype(c, 2);
  const Shape* idx = in_shape(c, 0);
  if (!idx) return set_tensor(c, 0, dt, Shape::unknown_rank());
  int64_t r = idx->rank() + 1;
  int64_t axis = norm_axis(c.node.get_int("axis", -1), r);
  Dim depth = Dim::unknown();
  if (auto v = const_doubles(c, 1); v && v->size() == 1) depth = Dim(static_cast<int64_t>((*v)[0]));
  std::vector<Dim> out = idx->dims();
  out.insert(out.begin() + axis, depth);
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void non_zero(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  set_tensor(c, 0, DType::I64, Shape({x ? Dim(x->rank()) : Dim::unknown(), Dim::unknown()}));
}

void layer_norm(InferenceContext& c) {
  const VT* x = tensor_in(c, 0);
  if (!x) return;
  c.set_output(0, *x);
  if (c.output_types.size() < 2) return;
  DType st = onnx_dtype(c.node.get_int("stash_type", 1)).value_or(DType::F32);
  if (!x->shape.rank_known()) {
    for (size_t i = 1; i < 3; ++i) set_tensor(c, i, st, Shape::unknown_rank());
    return;
  }
  int64_t axis = norm_axis(c.node.get_int("axis", -1), x->shape.rank());
  std::vector<Dim> d = x->shape.dims();
  for (size_t k = static_cast<size_t>(axis); k < d.size(); ++k) d[k] = Dim(1);
  for (size_t i = 1; i < 3; ++i) set_tensor(c, i, st, Shape(d));
}

// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss: the loss is a scalar, or per sample
// (input without its class dim) with reduction "none"; log_prob is the input's type.
void nll_loss(InferenceContext& c) {
  const VT* x = tensor_in(c, 0);
  if (!x) return;
  Shape s = Shape::scalar();
  if (c.node.get_string("reduction", "mean") == "none") {
    s = Shape::unknown_rank();
    if (x->shape.rank_known() && x->shape.rank() >= 2) {
      std::vector<Dim> d = x->shape.dims();
      d.erase(d.begin() + 1);
      s = Shape(d);
    }
  }
  set_tensor(c, 0, x->dtype, s);
  c.set_output(1, *x);
}

void batch_norm(InferenceContext& c) {
  same_as_input0(c);
  for (size_t i = 1; i < c.output_types.size(); ++i) {
    const VT* m = tensor_in(c, i + 2);
    if (m) c.set_output(i, *m);
  }
}

void dropout(InferenceContext& c) {
  same_as_input0(c);
  if (c.output_types.size() > 1) set_tensor(c, 1, DType::Bool, input_shape_or_unknown(c, 0));
}

void where(InferenceContext& c) {
  Shape s = broadcast(broadcast(input_shape_or_unknown(c, 0), input_shape_or_unknown(c, 1)), input_shape_or_unknown(c, 2));
  DType dt = in_dtype(c, 1);
  if (dt == DType::Undefined) dt = in_dtype(c, 2);
  set_tensor(c, 0, dt, s);
}

void quantize(InferenceContext& c) {
  DType dt = DType::U8;
  if (c.node.has_input(2) && in_dtype(c, 2) != DType::Undefined) dt = in_dtype(c, 2);
  else if (auto od = c.node.get_int("output_dtype", 0); od != 0) dt = onnx_dtype(od).value_or(DType::Undefined);
  unary_to(c, dt);
}

void dequantize(InferenceContext& c) {
  DType dt = in_dtype(c, 1);
  if (auto od = c.node.get_int("output_dtype", 0); od != 0) dt = onnx_dtype(od).value_or(dt);
  unary_to(c, dt == DType::Undefined ? DType::F32 : dt);
}

void dynamic_quantize(InferenceContext& c) {
  set_tensor(c, 0, DType::U8, input_shape_or_unknown(c, 0));
  set_tensor(c, 1, DType::F32, Shape::scalar());
  set_tensor(c, 2, DType::U8, Shape::scalar());
}

void dtype_attr_like(InferenceContext& c) {  // EyeLike, RandomXLike, Bernoulli
  DType dt = in_dtype(c, 0);
  if (c.node.has_attr("dtype")) dt = onnx_dtype(c.node.get_int("dtype", 1)).value_or(dt);
  unary_to(c, dt);
}

void random_fixed(InferenceContext& c) {  // RandomNormal, RandomUniform
  DType dt = onnx_dtype(c.node.get_int("dtype", 1)).value_or(DType::F32);
  set_tensor(c, 0, dt, Shape::from(c.node.get_ints("shape")));
}

void multinomial(InferenceContext& c) {
  DType dt = onnx_dtype(c.node.get_int("dtype", 6)).value_or(DType::I32);
  const Shape* x = in_shape(c, 0);
  set_tensor(c, 0, dt, x && x->rank() == 2 ? Shape({(*x)[0], Dim(c.node.get_int("sample_size", 1))}) : Shape::unknown_rank());
}

void compress(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  if (!c.node.has_attr("axis")) return set_tensor(c, 0, dt, Shape({Dim::unknown()}));
  std::vector<Dim> out = x->dims();
  out[static_cast<size_t>(norm_axis(c.node.get_int("axis", 0), x->rank()))] = Dim::unknown();
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void unique(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  if (x && c.node.has_attr("axis")) {
    std::vector<Dim> out = x->dims();
    out[static_cast<size_t>(norm_axis(c.node.get_int("axis", 0), x->rank()))] = Dim::unknown();
    set_tensor(c, 0, dt, Shape(std::move(out)));
  } else {
    set_tensor(c, 0, dt, Shape({Dim::unknown()}));
  }
  for (size_t i = 1; i < 4; ++i) set_tensor(c, i, DType::I64, Shape({Dim::unknown()}));
}

void einsum(InferenceContext& c) {
  std::string eq = c.node.get_string("equation", "");
  std::string rhs;
  auto arrow = eq.find("->");
  DType dt = in_dtype(c, 0);
  if (arrow == std::string::npos) return set_tensor(c, 0, dt, Shape::unknown_rank());
  std::string lhs = eq.substr(0, arrow);
  rhs = eq.substr(arrow + 2);
  std::vector<std::string> terms;
  {
    std::string cur;
    for (char ch : lhs) {
      if (ch == ',') { terms.push_back(cur); cur.clear(); }
      else if (ch != ' ') cur.push_back(ch);
    }
    terms.push_back(cur);
  }
  if (eq.find("...") != std::string::npos) {
    int64_t n = 0;
    for (char ch : rhs) n += std::isalpha(static_cast<unsigned char>(ch)) ? 1 : 0;
    (void)n;
    return set_tensor(c, 0, dt, Shape::unknown_rank());
  }
  std::map<char, Dim> dims;
  for (size_t i = 0; i < terms.size() && i < c.num_inputs(); ++i) {
    const Shape* s = in_shape(c, i);
    if (!s) continue;
    if (static_cast<size_t>(s->rank()) != terms[i].size())
      bad(fmt::format("term '{}' does not match input {} of shape {}", terms[i], i, s->to_string()));
    for (size_t k = 0; k < terms[i].size(); ++k) {
      Dim d = (*s)[k];
      auto it = dims.find(terms[i][k]);
      if (it == dims.end() || (!it->second.is_known() && d.is_known()) || (it->second.is_known() && it->second.value == 1))
        dims[terms[i][k]] = d;
    }
  }
  std::vector<Dim> out;
  for (char ch : rhs) {
    if (ch == ' ') continue;
    auto it = dims.find(ch);
    out.push_back(it == dims.end() ? Dim::unknown() : it->second);
  }
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

// RNN/GRU/LSTM: Y [seq, dirs, batch, hidden] (layout 0) and Y_h/Y_c [dirs, batch, hidden].
void rnn(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  int64_t hidden = c.node.get_int("hidden_size", -1);
  std::string dir = c.node.get_string("direction", "forward");
  int64_t dirs = dir == "bidirectional" ? 2 : 1;
  bool layout = c.node.get_int("layout", 0) != 0;
  Dim h = hidden > 0 ? Dim(hidden) : Dim::unknown();
  Dim seq = x && x->rank() == 3 ? (*x)[layout ? 1 : 0] : Dim::unknown();
  Dim batch = x && x->rank() == 3 ? (*x)[layout ? 0 : 1] : Dim::unknown();
  if (layout) {
    set_tensor(c, 0, dt, Shape({batch, seq, Dim(dirs), h}));
    for (size_t i = 1; i < 3; ++i) set_tensor(c, i, dt, Shape({batch, Dim(dirs), h}));
  } else {
    set_tensor(c, 0, dt, Shape({seq, Dim(dirs), batch, h}));
    for (size_t i = 1; i < 3; ++i) set_tensor(c, i, dt, Shape({Dim(dirs), batch, h}));
  }
}

void attention(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* q = in_shape(c, 0);
  const Shape* v = in_shape(c, 2);
  if (!q) return set_tensor(c, 0, dt, Shape::unknown_rank());
  if (q->rank() == 4) {
    Dim dv = v && v->rank() == 4 ? (*v)[3] : Dim::unknown();
    set_tensor(c, 0, dt, Shape({(*q)[0], (*q)[1], (*q)[2], dv}));
  } else if (q->rank() == 3) {
    int64_t qh = c.node.get_int("q_num_heads", c.node.get_int("num_heads", 0));
    int64_t kvh = c.node.get_int("kv_num_heads", qh);
    Dim hidden = Dim::unknown();
    if (v && v->rank() == 3) {
      if ((*v)[2].is_known() && kvh > 0 && qh > 0) hidden = Dim((*v)[2].value / kvh * qh);
    } else if (v && v->rank() == 4 && qh > 0) {
      hidden = dim_mul((*v)[3], Dim(qh));
    }
    if (c.node.domain == "hodu" && !hidden.is_known()) hidden = (*q)[2];
    set_tensor(c, 0, dt, Shape({(*q)[0], (*q)[1], hidden}));
  } else {
    bad(fmt::format("Q {} must have rank 3 or 4", q->to_string()));
  }
}

void rms_norm(InferenceContext& c) {
  DType dt = in_dtype(c, 1);
  if (dt == DType::Undefined) dt = in_dtype(c, 0);
  set_tensor(c, 0, dt, input_shape_or_unknown(c, 0));
}

void string_split(InferenceContext& c) {
  const Shape* x = in_shape(c, 0);
  if (x) {
    std::vector<Dim> d = x->dims();
    set_tensor(c, 1, DType::I64, Shape(d));
    d.push_back(Dim::unknown());
    set_tensor(c, 0, DType::String, Shape(std::move(d)));
  } else {
    set_tensor(c, 0, DType::String, Shape::unknown_rank());
    set_tensor(c, 1, DType::I64, Shape::unknown_rank());
  }
}

void nms(InferenceContext& c) { set_tensor(c, 0, DType::I64, Shape({Dim::unknown(), Dim(3)})); }

void center_crop_pad(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  auto shape = const_ints(c, 1);
  if (!x) return set_tensor(c, 0, dt, Shape::unknown_rank());
  std::vector<Dim> out = x->dims();
  std::vector<int64_t> axes = c.node.get_ints("axes");
  if (axes.empty())
    for (int64_t k = 0; k < x->rank(); ++k) axes.push_back(k);
  for (size_t k = 0; k < axes.size(); ++k)
    out[static_cast<size_t>(norm_axis(axes[k], x->rank()))] = shape && k < shape->size() ? Dim((*shape)[k]) : Dim::unknown();
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void grid_sample(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  const Shape* g = in_shape(c, 1);
  if (!x || !g || x->rank() < 3 || g->rank() != x->rank()) return set_tensor(c, 0, dt, Shape::unknown_rank());
  std::vector<Dim> out{(*x)[0], (*x)[1]};
  for (int64_t k = 1; k + 1 < g->rank(); ++k) out.push_back((*g)[k]);
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void affine_grid(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  auto size = const_ints(c, 1);
  if (!size || size->size() < 4) return set_tensor(c, 0, dt, Shape::unknown_rank());
  std::vector<Dim> out{Dim((*size)[0])};
  for (size_t k = 2; k < size->size(); ++k) out.push_back(Dim((*size)[k]));
  out.push_back(Dim(static_cast<int64_t>(size->size() - 2)));
  set_tensor(c, 0, dt, Shape(std::move(out)));
}

void roi_align(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  const Shape* rois = in_shape(c, 1);
  set_tensor(c, 0, dt, Shape({rois && rois->rank() == 2 ? (*rois)[0] : Dim::unknown(),
                              x && x->rank() == 4 ? (*x)[1] : Dim::unknown(),
                              Dim(c.node.get_int("output_height", 1)), Dim(c.node.get_int("output_width", 1))}));
}

void causal_conv(InferenceContext& c) {
  same_as_input0(c);
  const Shape* x = in_shape(c, 0);
  const Shape* w = in_shape(c, 1);
  if (x && x->rank() == 3 && w && w->rank() == 3 && (*w)[2].is_known())
    set_tensor(c, 1, in_dtype(c, 0), Shape({(*x)[0], (*x)[1], Dim((*w)[2].value - 1)}));
}

void image_decoder(InferenceContext& c) {
  std::string fmt_ = c.node.get_string("pixel_format", "RGB");
  set_tensor(c, 0, DType::U8, Shape({Dim::unknown(), Dim::unknown(), Dim(fmt_ == "Grayscale" ? 1 : 3)}));
}

// ---- sequences and optionals ------------------------------------------------------

void sequence_construct(InferenceContext& c) {
  if (const VT* t = c.input(0)) {
    VT e = *t;
    for (size_t i = 1; i < c.num_inputs(); ++i)
      if (const VT* u = c.input(i); u && !(*u == e)) e.shape = Shape::unknown_rank();
    c.set_output(0, VT::sequence(e));
  }
}

void sequence_empty(InferenceContext& c) {
  DType dt = onnx_dtype(c.node.get_int("dtype", 1)).value_or(DType::F32);
  c.set_output(0, VT::sequence(VT::tensor(dt, Shape::unknown_rank())));
}

void sequence_same(InferenceContext& c) {  // SequenceInsert / SequenceErase
  if (const VT* t = c.input(0)) c.set_output(0, *t);
}

void sequence_at(InferenceContext& c) {
  if (const VT* t = c.input(0); t && t->kind == VT::Kind::Sequence && t->elem) c.set_output(0, *t->elem);
}

void sequence_length(InferenceContext& c) { set_tensor(c, 0, DType::I64, Shape::scalar()); }

void split_to_sequence(InferenceContext& c) {
  DType dt = in_dtype(c, 0);
  const Shape* x = in_shape(c, 0);
  Shape es = Shape::unknown_rank();
  if (x && !c.node.has_input(1)) {
    int64_t axis = norm_axis(c.node.get_int("axis", 0), x->rank());
    std::vector<Dim> d = x->dims();
    if (c.node.get_int("keepdims", 1)) d[static_cast<size_t>(axis)] = Dim(1);
    else d.erase(d.begin() + axis);
    es = Shape(std::move(d));
  } else if (x) {
    es = Shape(std::vector<Dim>(static_cast<size_t>(x->rank()), Dim::unknown()));
  }
  c.set_output(0, VT::sequence(VT::tensor(dt, es)));
}

void concat_from_sequence(InferenceContext& c) {
  const VT* t = c.input(0);
  if (!t || t->kind != VT::Kind::Sequence || !t->elem) return;
  DType dt = t->elem->dtype;
  const Shape& s = t->elem->shape;
  if (!s.rank_known()) return set_tensor(c, 0, dt, Shape::unknown_rank());
  bool new_axis = c.node.get_int("new_axis", 0) != 0;
  int64_t r = s.rank() + (new_axis ? 1 : 0);
  int64_t axis = norm_axis(c.node.get_int("axis", 0), r);
  std::vector<Dim> d = s.dims();
  if (new_axis) d.insert(d.begin() + axis, Dim::unknown());
  else d[static_cast<size_t>(axis)] = Dim::unknown();
  set_tensor(c, 0, dt, Shape(std::move(d)));
}

void optional_op(InferenceContext& c) {
  if (const VT* t = c.input(0)) c.set_output(0, VT::optional(*t));
  else if (c.node.has_attr("type")) {
    const Attribute* a = c.node.attr("type");
    if (a && !a->types.empty()) c.set_output(0, VT::optional(a->types[0]));
  }
}

void optional_get(InferenceContext& c) {
  if (const VT* t = c.input(0)) {
    if (t->kind == VT::Kind::Optional && t->elem) c.set_output(0, *t->elem);
    else c.set_output(0, *t);
  }
}

void optional_has(InferenceContext& c) { set_tensor(c, 0, DType::Bool, Shape::scalar()); }

// ---- control flow (subgraph types were inferred by the driver) ---------------------

std::optional<VT> graph_output_type(const Graph* g, size_t i) {
  if (!g || i >= g->outputs.size()) return std::nullopt;
  return g->type_of(g->outputs[i].name);
}

VT merge_types(const VT& a, const VT& b) {
  if (a.kind != b.kind) return VT();
  if (a.kind == VT::Kind::Tensor) {
    if (a.dtype != b.dtype) bad(fmt::format("then/else branches give different types {} and {}", a.to_string(), b.to_string()));
    if (!a.shape.rank_known() || !b.shape.rank_known() || a.shape.rank() != b.shape.rank())
      return VT::tensor(a.dtype, Shape::unknown_rank());
    std::vector<Dim> d;
    for (int64_t k = 0; k < a.shape.rank(); ++k) d.push_back(a.shape[k] == b.shape[k] ? a.shape[k] : Dim::unknown());
    return VT::tensor(a.dtype, Shape(std::move(d)));
  }
  return a == b ? a : VT();
}

void if_op(InferenceContext& c) {
  const Graph* t = c.node.get_graph("then_branch");
  const Graph* e = c.node.get_graph("else_branch");
  for (size_t i = 0; i < c.output_types.size(); ++i) {
    auto a = graph_output_type(t, i), b = graph_output_type(e, i);
    if (a && b) {
      VT m = merge_types(*a, *b);
      if (m.kind != VT::Kind::Unknown) c.set_output(i, m);
    } else if (a || b) {
      VT x = a ? *a : *b;
      if (x.kind == VT::Kind::Tensor) x.shape = Shape::unknown_rank();
      c.set_output(i, x);
    }
  }
}

void loop_op(InferenceContext& c) {
  const Graph* body = c.node.get_graph("body");
  if (!body) return;
  size_t n_carried = c.num_inputs() >= 2 ? c.num_inputs() - 2 : 0;
  for (size_t i = 0; i < c.output_types.size(); ++i) {
    auto t = graph_output_type(body, i + 1);  // body outputs: cond, carried..., scan...
    if (i < n_carried) {
      const VT* init = c.input(i + 2);
      if (init && t && t->kind == VT::Kind::Tensor && init->kind == VT::Kind::Tensor) {
        c.set_output(i, merge_types(*init, VT::tensor(init->dtype, t->shape)));
      } else if (init) {
        c.set_output(i, *init);
      } else if (t) {
        c.set_output(i, *t);
      }
    } else if (t && t->kind == VT::Kind::Tensor) {
      std::vector<Dim> d{Dim::unknown()};
      if (t->shape.rank_known()) d.insert(d.end(), t->shape.dims().begin(), t->shape.dims().end());
      c.set_output(i, VT::tensor(t->dtype, t->shape.rank_known() ? Shape(d) : Shape::unknown_rank()));
    }
  }
}

void scan_op(InferenceContext& c) {
  const Graph* body = c.node.get_graph("body");
  if (!body) return;
  int64_t n_scan_in = c.node.get_int("num_scan_inputs", 0);
  size_t n_state = c.num_inputs() - static_cast<size_t>(n_scan_in);
  // Sequence length from the first scan input.
  Dim len = Dim::unknown();
  if (const Shape* s = in_shape(c, n_state); s && s->rank() > 0) {
    auto axes = c.node.get_ints("scan_input_axes");
    int64_t ax = axes.empty() ? 0 : norm_axis(axes[0], s->rank());
    len = (*s)[ax];
  }
  auto out_axes = c.node.get_ints("scan_output_axes");
  for (size_t i = 0; i < c.output_types.size(); ++i) {
    auto t = graph_output_type(body, i);
    if (!t) continue;
    if (i < n_state || t->kind != VT::Kind::Tensor) {
      c.set_output(i, *t);
      continue;
    }
    if (!t->shape.rank_known()) {
      c.set_output(i, VT::tensor(t->dtype, Shape::unknown_rank()));
      continue;
    }
    std::vector<Dim> d = t->shape.dims();
    size_t k = i - n_state;
    int64_t ax = k < out_axes.size() ? out_axes[k] : 0;
    ax = norm_axis(ax, static_cast<int64_t>(d.size()) + 1);
    d.insert(d.begin() + ax, len);
    c.set_output(i, VT::tensor(t->dtype, Shape(std::move(d))));
  }
}

// hodu's gradient ops: dX is the forward input's type (input 1); a ConvGrad's dW is W's, its dB
// [M]; a normalization's dscale/dbias are its scale's.
void gradient_op(InferenceContext& c) {
  if (const VT* x = c.input(1)) c.set_output(0, *x);
  const VT* w = c.input(2);
  if (!w || !w->is_tensor()) return;
  if (c.node.op_type == "ConvGrad") {
    c.set_output(1, *w);
    Dim m = w->shape.rank_known() && w->shape.rank() > 0 ? w->shape[0] : Dim();
    c.set_output(2, VT::tensor(w->dtype, Shape({m})));
  } else if (c.node.op_type == "LayerNormGrad" || c.node.op_type == "BatchNormGrad") {
    c.set_output(1, *w);
    c.set_output(2, *w);
  }
}

void fused_elementwise(InferenceContext& c) {
  const Graph* body = c.node.get_graph("body");
  Shape s;
  bool first = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    Shape si = input_shape_or_unknown(c, i);
    s = first ? si : broadcast(s, si);
    first = false;
  }
  for (size_t i = 0; i < c.output_types.size(); ++i) {
    auto t = graph_output_type(body, i);
    DType dt = t && t->kind == VT::Kind::Tensor ? t->dtype : in_dtype(c, 0);
    set_tensor(c, i, dt, s);
  }
}

void fused_matmul(InferenceContext& c) {
  Shape a = input_shape_or_unknown(c, 0), b = input_shape_or_unknown(c, 1);
  auto tr = [](Shape s) {
    if (s.rank_known() && s.rank() >= 2) std::swap(s.dims()[s.dims().size() - 1], s.dims()[s.dims().size() - 2]);
    return s;
  };
  if (c.node.get_int("transA", 0)) a = tr(a);
  if (c.node.get_int("transB", 0)) b = tr(b);
  set_tensor(c, 0, in_dtype(c, 0), matmul_shape(a, b));
}

// ---- the op table -------------------------------------------------------------------

const std::unordered_map<std::string, InferenceFn>& onnx_table() {
  static const auto* table = [] {
    auto* m = new std::unordered_map<std::string, InferenceFn>();
    auto& t = *m;
    for (const char* op : {"Abs", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Floor",
                           "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
                           "Acosh", "Atanh", "Erf", "Sign", "Softplus", "Softsign", "Elu", "Selu", "LeakyRelu",
                           "ThresholdedRelu", "HardSigmoid", "HardSwish", "Mish", "Gelu", "Swish", "Celu",
                           "Identity", "Not", "BitwiseNot", "Clip", "Shrink", "CumSum", "CumProd", "LRN",
                           "LpNormalization", "Softmax", "LogSoftmax", "Hardmax", "InstanceNormalization",
                           "MeanVarianceNormalization", "Trilu", "ReverseSequence", "GroupNormalization",
                           "ScatterElements", "ScatterND", "Scatter", "TensorScatter", "RotaryEmbedding",
                           "Det", "Binarizer", "Normalizer", "Imputer", "Scaler"})
      t[op] = same_as_input0;
    t["Det"] = [](InferenceContext& c) {
      const Shape* x = in_shape(c, 0);
      if (x && x->rank() >= 2) set_tensor(c, 0, in_dtype(c, 0), Shape(std::vector<Dim>(x->dims().begin(), x->dims().end() - 2)));
      else set_tensor(c, 0, in_dtype(c, 0), Shape::unknown_rank());
    };
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr",
                           "BitwiseXor", "PRelu", "Max", "Min", "Sum", "Mean", "StringConcat"})
      t[op] = elementwise;
    for (const char* op : {"And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
      t[op] = comparison;
    for (const char* op : {"IsNaN", "IsInf", "RegexFullMatch"}) t[op] = bool_unary;
    t["Cast"] = cast;
    t["BitCast"] = cast;
    t["CastLike"] = cast_like;
    t["MatMul"] = matmul;
    t["MatMulInteger"] = matmul_integer;
    t["QLinearMatMul"] = qlinear_matmul;
    t["Gemm"] = gemm;
    for (const char* op : {"Conv", "ConvInteger", "QLinearConv", "DeformConv"}) t[op] = conv;
    t["ConvTranspose"] = conv_transpose;
    for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) t[op] = pool;
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) t[op] = global_pool;
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})
      t[op] = reduce;
    t["Reshape"] = reshape;
    t["Transpose"] = transpose;
    t["Concat"] = concat;
    t["Split"] = split;
    t["Slice"] = slice;
    t["Gather"] = gather;
    t["GatherElements"] = gather_elements;
    t["GatherND"] = gather_nd;
    t["Squeeze"] = squeeze;
    t["Unsqueeze"] = unsqueeze;
    t["Flatten"] = flatten;
    t["Expand"] = expand;
    t["Tile"] = tile;
    t["Shape"] = shape_op;
    t["Size"] = size_op;
    t["Constant"] = constant;
    t["ConstantOfShape"] = constant_of_shape;
    t["Range"] = range;
    t["Resize"] = resize;
    t["Upsample"] = resize;
    t["TopK"] = topk;
    t["Pad"] = pad;
    t["DepthToSpace"] = depth_space;
    t["SpaceToDepth"] = depth_space;
    t["OneHot"] = one_hot;
    t["NonZero"] = non_zero;
    t["LayerNormalization"] = layer_norm;
    t["SoftmaxCrossEntropyLoss"] = nll_loss;
    t["NegativeLogLikelihoodLoss"] = nll_loss;
    t["BatchNormalization"] = batch_norm;
    t["Dropout"] = dropout;
    t["Where"] = where;
    t["QuantizeLinear"] = quantize;
    t["DequantizeLinear"] = dequantize;
    t["DynamicQuantizeLinear"] = dynamic_quantize;
    for (const char* op : {"EyeLike", "RandomNormalLike", "RandomUniformLike", "Bernoulli"}) t[op] = dtype_attr_like;
    for (const char* op : {"RandomNormal", "RandomUniform"}) t[op] = random_fixed;
    t["Multinomial"] = multinomial;
    t["Compress"] = compress;
    t["Unique"] = unique;
    t["Einsum"] = einsum;
    for (const char* op : {"RNN", "GRU", "LSTM"}) t[op] = rnn;
    t["Attention"] = attention;
    t["RMSNormalization"] = rms_norm;
    t["StringSplit"] = string_split;
    t["NonMaxSuppression"] = nms;
    t["CenterCropPad"] = center_crop_pad;
    t["GridSample"] = grid_sample;
    t["AffineGrid"] = affine_grid;
    t["RoiAlign"] = roi_align;
    t["CausalConvWithState"] = causal_conv;
    t["ImageDecoder"] = image_decoder;
    t["SequenceConstruct"] = sequence_construct;
    t["SequenceEmpty"] = sequence_empty;
    t["SequenceInsert"] = sequence_same;
    t["SequenceErase"] = sequence_same;
    t["SequenceAt"] = sequence_at;
    t["SequenceLength"] = sequence_length;
    t["SplitToSequence"] = split_to_sequence;
    t["ConcatFromSequence"] = concat_from_sequence;
    t["Optional"] = optional_op;
    t["OptionalGetElement"] = optional_get;
    t["OptionalHasElement"] = optional_has;
    t["If"] = if_op;
    t["Loop"] = loop_op;
    t["Scan"] = scan_op;
    return m;
  }();
  return *table;
}

// ---- constant tracking used by the driver -----------------------------------------

struct Scope {
  Graph* graph = nullptr;
  const Scope* parent = nullptr;
  std::vector<InferenceProblem>* problems = nullptr;  // collect contradictions and go on, instead of throwing
  std::unordered_map<std::string, Tensor> consts;    // Constant node outputs
  std::unordered_map<std::string, SymValue> values;  // symbolic small int tensors

  std::optional<VT> type_of(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto t = s->graph->type_of(n)) return t;
    return std::nullopt;
  }
  const Tensor* constant(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent) {
      // A graph input shadows an initializer of the same name (overridable).
      if (s->graph->input(n)) return nullptr;
      if (const Tensor* t = s->graph->initializer(n)) return t;
      if (auto it = s->consts.find(n); it != s->consts.end()) return &it->second;
    }
    return nullptr;
  }
  const SymValue* value(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->values.find(n); it != s->values.end()) return &it->second;
    return nullptr;
  }
};

std::optional<SymValue> sym_from_tensor(const Tensor& t) {
  if (!(t.dtype() == DType::I64 || t.dtype() == DType::I32) || t.rank() > 1 || t.numel() > 64) return std::nullopt;
  SymValue v;
  v.scalar = t.rank() == 0;
  for (int64_t x : t.to_int64s()) v.v.push_back(lit(x));
  return v;
}

// Propagates symbolic values of small int tensors through shape arithmetic.
void propagate_values(Scope& sc, const Node& n, const std::vector<const SymValue*>& in,
                      const std::vector<std::optional<VT>>& in_types) {
  if (n.outputs.empty() || n.outputs[0].empty() || !(n.domain.empty() || n.domain == "ai.onnx")) return;
  const std::string& op = n.op_type;
  auto put = [&](SymValue v) { sc.values[n.outputs[0]] = std::move(v); };
  if (op == "Shape") {
    if (!in_types.empty() && in_types[0] && in_types[0]->is_tensor() && in_types[0]->shape.rank_known()) {
      const Shape& s = in_types[0]->shape;
      auto [b, e] = shape_range(n, s.rank());
      SymValue v;
      v.v.assign(s.dims().begin() + b, s.dims().begin() + e);
      put(std::move(v));
    }
    return;
  }
  if (op == "Size") {
    if (!in_types.empty() && in_types[0] && in_types[0]->is_tensor()) {
      if (auto p = in_types[0]->shape.numel()) put(SymValue{{Dim(*p)}, true});
    }
    return;
  }
  if (in.empty() || !in[0]) return;
  if (op == "Identity" || op == "Cast") {
    if (op == "Cast") {
      auto to = dtype_from_onnx(static_cast<int>(n.get_int("to", 0)));
      if (!to || !(*to == DType::I64 || *to == DType::I32)) return;
    }
    put(*in[0]);
  } else if (op == "Gather") {
    if (in.size() < 2 || !in[1] || in[0]->scalar || n.get_int("axis", 0) != 0) return;
    SymValue v;
    v.scalar = in[1]->scalar;
    for (const Dim& d : in[1]->v) {
      auto dv = lit_value(d);
      if (!dv) return;
      int64_t k = *dv < 0 ? *dv + static_cast<int64_t>(in[0]->v.size()) : *dv;
      if (k < 0 || k >= static_cast<int64_t>(in[0]->v.size())) return;
      v.v.push_back(in[0]->v[static_cast<size_t>(k)]);
    }
    put(std::move(v));
  } else if (op == "Unsqueeze") {
    if (!in[0]->scalar) return;
    put(SymValue{in[0]->v, false});
  } else if (op == "Squeeze") {
    if (in[0]->v.size() != 1) return;
    put(SymValue{in[0]->v, true});
  } else if (op == "Concat") {
    SymValue v;
    for (auto* p : in) {
      if (!p || p->scalar) return;
      v.v.insert(v.v.end(), p->v.begin(), p->v.end());
    }
    put(std::move(v));
  } else if (op == "Slice") {
    if (in.size() < 3 || !in[1] || !in[2] || in[0]->scalar) return;
    if (in.size() > 4 && in[4] && !(in[4]->v.size() == 1 && lit_value(in[4]->v[0]) == 1)) return;
    if (in.size() > 3 && in[3] && !(in[3]->v.size() == 1 && (lit_value(in[3]->v[0]) == 0 || lit_value(in[3]->v[0]) == -1))) return;
    if (in[1]->v.size() != 1 || in[2]->v.size() != 1) return;
    auto s0 = lit_value(in[1]->v[0]), e0 = lit_value(in[2]->v[0]);
    if (!s0 || !e0) return;
    int64_t len = static_cast<int64_t>(in[0]->v.size());
    int64_t s = std::clamp<int64_t>(*s0 < 0 ? *s0 + len : *s0, 0, len);
    int64_t e = std::clamp<int64_t>(*e0 < 0 ? *e0 + len : *e0, 0, len);
    SymValue v;
    if (e > s) v.v.assign(in[0]->v.begin() + s, in[0]->v.begin() + e);
    put(std::move(v));
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    if (in.size() < 2 || !in[1]) return;
    const SymValue& a = *in[0];
    const SymValue& b = *in[1];
    size_t len = std::max(a.v.size(), b.v.size());
    if (!(a.v.size() == len || a.v.size() == 1) || !(b.v.size() == len || b.v.size() == 1)) return;
    SymValue v;
    v.scalar = a.scalar && b.scalar;
    for (size_t k = 0; k < len; ++k) {
      const Dim& x = a.v[a.v.size() == 1 ? 0 : k];
      const Dim& y = b.v[b.v.size() == 1 ? 0 : k];
      auto lx = lit_value(x), ly = lit_value(y);
      if (lx && ly) {
        if (op == "Div" && *ly == 0) return;
        int64_t r = op == "Add" ? *lx + *ly : op == "Sub" ? *lx - *ly : op == "Mul" ? *lx * *ly : *lx / *ly;
        v.v.push_back(lit(r));
      } else if (op == "Mul") {
        v.v.push_back(is_neg_lit(x) || is_neg_lit(y) ? Dim::unknown() : dim_mul(x, y));
      } else if ((op == "Add" || op == "Sub") && y.is_known() && y.value == 0) {
        v.v.push_back(x);
      } else if (op == "Div" && y.is_known() && y.value == 1) {
        v.v.push_back(x);
      } else {
        v.v.push_back(Dim::unknown());
      }
    }
    put(std::move(v));
  }
}

// Merges an inferred type with one already recorded (value_info): known dims win.
VT refine(const VT& inferred, const std::optional<VT>& known) {
  if (!known || known->kind != VT::Kind::Tensor || inferred.kind != VT::Kind::Tensor) return inferred;
  if (known->dtype != inferred.dtype) return inferred;
  if (!inferred.shape.rank_known()) return *known;
  if (!known->shape.rank_known() || known->shape.rank() != inferred.shape.rank()) return inferred;
  VT out = inferred;
  for (int64_t k = 0; k < out.shape.rank(); ++k)
    if (!out.shape[k].is_known() && !out.shape[k].is_symbolic()) out.shape[k] = known->shape[k];
  return out;
}

void infer_graph(Scope& sc);

// Types of a subgraph's formal inputs, from the node (Loop/Scan); If has none.
void prepare_subgraph(const Node& n, const Attribute& a, Graph& g, const Scope& sc) {
  auto set_if_unknown = [&](size_t i, const VT& t) {
    if (i < g.inputs.size() && g.inputs[i].type.kind == VT::Kind::Unknown) g.inputs[i].type = t;
  };
  if (n.op_type == "Loop" && a.name == "body") {
    set_if_unknown(0, VT::tensor(DType::I64, Shape::scalar()));
    set_if_unknown(1, VT::tensor(DType::Bool, Shape::scalar()));
    for (size_t i = 2; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty())
        if (auto t = sc.type_of(n.inputs[i])) set_if_unknown(i, *t);
  } else if (n.op_type == "Scan" && a.name == "body") {
    int64_t n_scan = n.get_int("num_scan_inputs", 0);
    size_t n_state = n.inputs.size() - static_cast<size_t>(n_scan);
    auto axes = n.get_ints("scan_input_axes");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto t = sc.type_of(n.inputs[i]);
      if (!t) continue;
      if (i >= n_state && t->is_tensor() && t->shape.rank_known() && t->shape.rank() > 0) {
        size_t k = i - n_state;
        int64_t ax = k < axes.size() ? axes[k] : 0;
        if (ax < 0) ax += t->shape.rank();
        if (ax >= 0 && ax < t->shape.rank()) t->shape.dims().erase(t->shape.dims().begin() + ax);
      }
      set_if_unknown(i, *t);
    }
  }
}

void infer_node(Scope& sc, Node& n) {
  // Subgraphs first: their output types feed If/Loop/Scan.
  for (auto& a : n.attributes) {
    auto run = [&](const std::shared_ptr<Graph>& g) {
      if (!g) return;
      prepare_subgraph(n, a, *g, sc);
      Scope sub;
      sub.graph = g.get();
      sub.parent = &sc;
      sub.problems = sc.problems;
      infer_graph(sub);
    };
    if (a.kind == Attribute::Kind::Graph) run(a.g);
    if (a.kind == Attribute::Kind::Graphs)
      for (auto& g : a.graphs) run(g);
  }
  const OpSchema* schema = SchemaRegistry::instance().find(n.domain, n.op_type);
  InferenceContext ctx{n, {}, {}, {}};
  std::vector<const SymValue*> syms;
  for (const auto& in : n.inputs) {
    ctx.input_types.push_back(in.empty() ? std::nullopt : sc.type_of(in));
    ctx.input_constants.push_back(in.empty() ? nullptr : sc.constant(in));
    const SymValue* sv = nullptr;
    if (!in.empty()) {
      sv = sc.value(in);
      if (!sv)
        if (const Tensor* t = ctx.input_constants.back())
          if (auto v = sym_from_tensor(*t)) sv = &(sc.values[in] = *v);
    }
    syms.push_back(sv);
  }
  ctx.output_types.resize(n.outputs.size());
  if (schema) {
    try {
      t_sym_inputs = &syms;
      if (schema->infer) {
        schema->infer(ctx);
      } else {
        // Output dtype from an input sharing its type constraint; shape unknown.
        for (size_t o = 0; o < n.outputs.size() && o < schema->outputs.size() + 64; ++o) {
          const FormalParameter& fo = schema->outputs[std::min(o, schema->outputs.size() - 1)];
          if (fo.type_str.rfind("tensor(", 0) == 0) {
            if (auto dt = parse_dtype(fo.type_str.substr(7, fo.type_str.size() - 8)))
              ctx.set_output(o, VT::tensor(*dt, Shape::unknown_rank()));
            continue;
          }
          for (size_t i = 0; i < n.inputs.size() && !schema->inputs.empty(); ++i) {
            const FormalParameter& fi = schema->inputs[std::min(i, schema->inputs.size() - 1)];
            if (fi.type_str == fo.type_str && ctx.input(i) && ctx.input(i)->is_tensor()) {
              ctx.set_output(o, VT::tensor(ctx.input(i)->dtype, Shape::unknown_rank()));
              break;
            }
          }
        }
      }
      t_sym_inputs = nullptr;
    } catch (const Error& e) {
      t_sym_inputs = nullptr;
      if (e.code() == ErrorCode::InvalidModel) throw e.with_context(n.describe() + ": ");
      throw;
    }
  }
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (n.outputs[o].empty() || !ctx.output_types[o]) continue;
    auto it = sc.graph->value_types.find(n.outputs[o]);
    std::optional<VT> known;
    if (it != sc.graph->value_types.end()) known = it->second;
    else if (const Value* v = sc.graph->output(n.outputs[o]); v && v->type.kind != VT::Kind::Unknown) known = v->type;
    sc.graph->value_types[n.outputs[o]] = refine(*ctx.output_types[o], known);
  }
  // Remember constants and symbolic values for later nodes.
  if (n.op_type == "Constant" && (n.domain.empty() || n.domain == "ai.onnx") && n.has_output(0)) {
    if (const Tensor* t = n.get_tensor("value")) sc.consts[n.outputs[0]] = *t;
    else if (n.has_attr("value_int")) sc.consts[n.outputs[0]] = Tensor::scalar<int64_t>(DType::I64, n.get_int("value_int", 0));
    else if (n.has_attr("value_ints")) {
      auto v = n.get_ints("value_ints");
      sc.consts[n.outputs[0]] = Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v);
    } else if (n.has_attr("value_float")) sc.consts[n.outputs[0]] = Tensor::scalar<float>(DType::F32, n.get_float("value_float", 0));
    else if (n.has_attr("value_floats")) {
      auto v = n.get_floats("value_floats");
      sc.consts[n.outputs[0]] = Tensor::from_vector(DType::F32, {static_cast<int64_t>(v.size())}, v);
    }
    if (auto it = sc.consts.find(n.outputs[0]); it != sc.consts.end())
      if (auto v = sym_from_tensor(it->second)) sc.values[n.outputs[0]] = *v;
  } else {
    propagate_values(sc, n, syms, ctx.input_types);
  }
}

void infer_graph(Scope& sc) {
  for (auto& n : sc.graph->nodes) {
    if (!sc.problems) {
      infer_node(sc, n);
      continue;
    }
    try {
      infer_node(sc, n);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::InvalidModel) throw;
      sc.problems->push_back({n.name, n.domain.empty() ? n.op_type : n.domain + "." + n.op_type, e.what()});
    }
  }
}

// ai.onnx.ml ops: results as the reference interpreter (engines/interp/ops/ml.cc) makes them.
void ml_op(InferenceContext& c) {
  const std::string& op = c.node.op_type;
  const Shape* xs = in_shape(c, 0);
  // [N, C] view of a rank 0-2 input: N.
  auto rows = [&]() -> Dim {
    if (!xs || !xs->rank_known() || xs->rank() > 2) return Dim::unknown();
    return xs->rank() == 2 ? xs->dims()[0] : Dim(1);
  };
  if (op == "Binarizer" || op == "Imputer") return same_as_input0(c);
  if (op == "Scaler" || op == "Normalizer") return unary_to(c, DType::F32);
  if (op == "TreeEnsemble") {
    return set_tensor(c, 0, in_dtype(c, 0), Shape({rows(), Dim(c.node.get_int("n_targets", 0))}));
  }
  if (op == "LinearRegressor")
    return set_tensor(c, 0, DType::F32, Shape({rows(), Dim(c.node.get_int("targets", 1))}));
  if (op == "FeatureVectorizer") {
    int64_t total = 0;
    for (int64_t d : c.node.get_ints("inputdimensions")) total += d;
    return set_tensor(c, 0, DType::F32, Shape({rows(), Dim(total)}));
  }
  if (op == "ArrayFeatureExtractor") {
    if (!xs || !xs->rank_known() || xs->rank() == 0) return set_tensor(c, 0, in_dtype(c, 0), Shape::unknown_rank());
    Dim k = Dim::unknown();
    if (const Shape* is = in_shape(c, 1); is && is->rank_known())
      if (auto p = dim_product(is->dims())) k = Dim(*p);
    std::vector<Dim> d = xs->rank() == 1 ? std::vector<Dim>{Dim(1)}
                                         : std::vector<Dim>(xs->dims().begin(), xs->dims().end() - 1);
    d.push_back(k);
    return set_tensor(c, 0, in_dtype(c, 0), Shape(std::move(d)));
  }
  if (op == "OneHotEncoder") {
    if (!xs || !xs->rank_known()) return set_tensor(c, 0, DType::F32, Shape::unknown_rank());
    size_t n = in_dtype(c, 0) == DType::String ? c.node.get_strings("cats_strings").size()
                                               : c.node.get_ints("cats_int64s").size();
    std::vector<Dim> d = xs->dims();
    d.push_back(Dim(static_cast<int64_t>(n)));
    return set_tensor(c, 0, DType::F32, Shape(std::move(d)));
  }
  if (op == "CategoryMapper")
    return unary_to(c, in_dtype(c, 0) == DType::String ? DType::I64 : DType::String);
  if (op == "LabelEncoder") {
    DType dt = DType::Undefined;
    if (const Tensor* t = c.node.get_tensor("values_tensor")) dt = t->dtype();
    else if (c.node.has_attr("values_strings")) dt = DType::String;
    else if (c.node.has_attr("values_int64s")) dt = DType::I64;
    else if (c.node.has_attr("values_floats")) dt = DType::F32;
    if (dt != DType::Undefined) unary_to(c, dt);
  }
}

}  // namespace

namespace detail {

InferenceFn inference_for(const std::string& domain, const std::string& op) {
  if (domain.empty() || domain == "ai.onnx.preview" || domain == "ai.onnx.ml") {
    const auto& t = onnx_table();
    if (domain == "ai.onnx.preview" && op == "FlexAttention") return attention;
    if (domain == "ai.onnx.ml") return ml_op;
    if (auto it = t.find(op); it != t.end() && domain.empty()) return it->second;
    return {};
  }
  if (domain == "hodu") {
    if (op == "FusedConv") return conv;
    if (op == "FusedMatMul") return fused_matmul;
    if (op == "FusedGemm") return gemm;
    if (op == "Attention") return attention;
    if (op == "LayerNorm" || op == "Gelu") return same_as_input0;
    if (op == "FusedElementwise") return fused_elementwise;
    if (op == "LookupTable")
      return [](InferenceContext& c) {
        const VT* table = c.input(1);
        if (table && table->is_tensor()) set_tensor(c, 0, table->dtype, input_shape_or_unknown(c, 0));
      };
    if (op.size() > 4 && op.compare(op.size() - 4, 4, "Grad") == 0) return gradient_op;
  }
  return {};
}

}  // namespace detail

void infer_types(Graph& graph) {
  Scope sc;
  sc.graph = &graph;
  infer_graph(sc);
}

std::vector<InferenceProblem> infer_types_collecting_problems(Graph& graph) {
  std::vector<InferenceProblem> problems;
  Scope sc;
  sc.graph = &graph;
  sc.problems = &problems;
  infer_graph(sc);
  return problems;
}

}  // namespace hodu
