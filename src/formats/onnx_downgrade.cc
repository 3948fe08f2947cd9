// Canonical form (newest op versions) → an older ai.onnx opset, for export.
//
// Each conversion below undoes one newer-version change (an input that used
// to be an attribute, a renamed mode, a new attribute left at its default).
// After it, the node is checked against the op's schema at the target opset
// (ir/schema.h): the op must exist there and know every attribute the node
// has. required_onnx_opset() finds the lowest opset at which all of that works.
#include <algorithm>
#include <set>

#include "core/error.h"
#include "formats/onnx_canonicalize.h"
#include "ir/schema.h"

namespace hodu {
namespace {

constexpr int kMinExportOpset = 13;

struct Scope {
  std::vector<const Graph*> graphs;  // innermost last
  const Tensor* constant(const std::string& v) const {
    if (v.empty()) return nullptr;
    for (auto it = graphs.rbegin(); it != graphs.rend(); ++it)
      if (auto* t = (*it)->initializer(v)) return t;
    return nullptr;
  }
  // The type of `v` as the innermost graph declaring it knows it (an initializer: its tensor type).
  std::optional<ValueType> type_of(const std::string& v) const {
    if (auto* c = constant(v)) return ValueType::tensor(c->dtype(), Shape::from(c->shape()));
    for (auto it = graphs.rbegin(); it != graphs.rend(); ++it)
      if (auto t = (*it)->type_of(v)) return t;
    return std::nullopt;
  }
  // The innermost tensor type of `v` with a known rank (a subgraph may know less than its owner).
  std::optional<ValueType> ranked_type(const std::string& v) const {
    if (auto* c = constant(v)) return ValueType::tensor(c->dtype(), Shape::from(c->shape()));
    for (auto it = graphs.rbegin(); it != graphs.rend(); ++it)
      if (auto t = (*it)->type_of(v); t && t->is_tensor() && t->shape.rank_known()) return t;
    return std::nullopt;
  }
  std::optional<int64_t> rank_of(const std::string& v) const {
    auto t = ranked_type(v);
    return t ? std::optional<int64_t>(t->shape.rank()) : std::nullopt;
  }
  // A static dim of `v` along `axis` (negative counts from the end), if known.
  std::optional<int64_t> dim_of(const std::string& v, int64_t axis) const {
    auto t = ranked_type(v);
    if (!t) return std::nullopt;
    int64_t a = axis < 0 ? axis + t->shape.rank() : axis;
    if (a < 0 || a >= t->shape.rank() || !t->shape[static_cast<size_t>(a)].is_known()) return std::nullopt;
    return t->shape[static_cast<size_t>(a)].value;
  }
};

// Why a node cannot be written at an opset (empty: it can).
using Why = std::string;

// ONNX's spelling of a value type in schemas: "tensor(float)", "seq(tensor(int64))".
std::string onnx_type_string(const ValueType& t) {
  switch (t.kind) {
    case ValueType::Kind::Tensor: return fmt::format("tensor({})", dtype_onnx_name(t.dtype));
    case ValueType::Kind::SparseTensor: return fmt::format("sparse_tensor({})", dtype_onnx_name(t.dtype));
    case ValueType::Kind::Sequence: return t.elem ? "seq(" + onnx_type_string(*t.elem) + ")" : "";
    case ValueType::Kind::Optional: return t.elem ? "optional(" + onnx_type_string(*t.elem) + ")" : "";
    default: return "";
  }
}

// A type the schema version does not allow for an input/output (e.g. IsInf on
// float16 before 20): that version cannot express the node. Unknown types pass.
Why type_blocker(const Node& n, const OpSchema& sc, const Scope& s, int t) {
  // Whether a newer version allows type `ts` at parameter `i`. A type no version
  // allows (some ONNX test models feed OptionalGetElement a sequence) is the
  // model's own choice, not a reason to pick a newer opset.
  auto allowed_later = [&](bool inputs, size_t i, const std::string& ts) {
    for (const OpSchema* v : SchemaRegistry::instance().versions("", n.op_type)) {
      if (v->since_version <= t) continue;
      const auto& ps = inputs ? v->inputs : v->outputs;
      if (ps.empty()) continue;
      const FormalParameter& p = ps[std::min(i, ps.size() - 1)];
      bool constrained = false;
      for (const auto& tc : v->type_constraints)
        if (tc.name == p.type_str) {
          constrained = true;
          if (std::find(tc.allowed.begin(), tc.allowed.end(), ts) != tc.allowed.end()) return true;
        }
      if (!constrained && p.type_str == ts) return true;
    }
    return false;
  };
  auto check = [&](const std::vector<FormalParameter>& params, const std::vector<std::string>& names,
                   bool inputs) -> Why {
    for (size_t i = 0; i < params.size(); ++i)  // required inputs the node omits (optional only later)
      if (params[i].option == FormalParameter::Option::Single && (i >= names.size() || names[i].empty()))
        return fmt::format("{} without its input '{}' needs an opset newer than {}", n.op_type, params[i].name, t);
    for (size_t i = 0; i < names.size() && !params.empty(); ++i) {
      if (names[i].empty()) continue;
      const FormalParameter& p = params[std::min(i, params.size() - 1)];
      if (i >= params.size() && p.option != FormalParameter::Option::Variadic) break;
      std::optional<ValueType> vt = s.type_of(names[i]);
      if (!vt || vt->kind == ValueType::Kind::Unknown) continue;
      std::string ts = onnx_type_string(*vt);
      if (ts.empty() || ts.find("undefined") != std::string::npos) continue;
      const std::vector<std::string>* allowed = nullptr;
      for (const auto& tc : sc.type_constraints)
        if (tc.name == p.type_str) allowed = &tc.allowed;
      bool ok = allowed ? std::find(allowed->begin(), allowed->end(), ts) != allowed->end() : p.type_str == ts;
      if (!ok && allowed_later(inputs, i, ts))
        return fmt::format("{} on {} ('{}') needs an opset newer than {}", n.op_type, ts, names[i], t);
    }
    return {};
  };
  if (Why w = check(sc.inputs, n.inputs, true); !w.empty()) return w;
  return check(sc.outputs, n.outputs, false);
}

void trim_inputs(Node& n) {
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
}

// Input `idx` (a constant) → ints attribute. Records the detached constant.
Why input_to_attr(Node& n, size_t idx, const std::string& attr, const Scope& s, std::set<std::string>& detached,
                  int needs) {
  if (!n.has_input(idx)) return {};
  const Tensor* c = s.constant(n.inputs[idx]);
  if (!c) return fmt::format("input '{}' of {} is not a constant (needs opset {})", n.inputs[idx], n.op_type, needs);
  detached.insert(n.inputs[idx]);
  n.set_attr(Attribute::make_ints(attr, c->to_int64s()));
  n.inputs[idx].clear();
  trim_inputs(n);
  return {};
}

bool is_reduce(const std::string& op) {
  static const std::set<std::string> k = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                          "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  return k.count(op) > 0;
}

// Converts `n` for opset `t` in place. Returns why it cannot be, or "".
// `strict` (the automatic opset choice): also refuse conversions that the
// importer would not undo exactly (dropping an explicit default attribute,
// renaming a constant), so that export → import gives back the same graph.
Why downgrade_node(Node& n, int t, const Scope& s, std::set<std::string>& detached, bool strict) {
  if (!n.domain.empty()) return {};
  const std::string& op = n.op_type;
  auto lossy_drop = [&](const char* attr, int needs) -> Why {
    if (strict && n.has_attr(attr)) return fmt::format("{} attribute '{}' is kept from opset {}", op, attr, needs);
    n.remove_attr(attr);
    return {};
  };
  auto generated = [&](size_t idx, const std::string& suffix) {
    // The importer names the constants it makes "<output>_<attr>".
    return n.has_input(idx) && !n.outputs.empty() && n.inputs[idx].rfind(n.outputs[0] + suffix, 0) == 0;
  };
  if ((is_reduce(op) && t < 18) || (op == "ReduceSum" && t < 13)) {
    int needs = op == "ReduceSum" ? 13 : 18;
    bool noop = n.get_int("noop_with_empty_axes", 0) != 0;
    if (n.has_input(1)) {
      const Tensor* c = s.constant(n.inputs[1]);
      if (!c) return fmt::format("{} with computed axes needs opset {}", op, needs);
      if (strict && (c->numel() == 0 || !generated(1, "_axes")))
        return fmt::format("{} keeps its axes input from opset {}", op, needs);
      if (c->numel() == 0) {
        if (noop) return fmt::format("{} with noop_with_empty_axes needs opset {}", op, needs);
        detached.insert(n.inputs[1]);
        n.inputs[1].clear();
        trim_inputs(n);
      } else if (Why w = input_to_attr(n, 1, "axes", s, detached, needs); !w.empty()) {
        return w;
      }
    } else if (noop) {
      return fmt::format("{} with noop_with_empty_axes needs opset {}", op, needs);
    }
    if (Why w = lossy_drop("noop_with_empty_axes", needs); !w.empty()) return w;
  }
  if ((op == "Squeeze" || op == "Unsqueeze") && t < 13 && strict && n.has_input(1)) return "axes input since 13";
  if ((op == "Squeeze" || op == "Unsqueeze") && t < 13)
    if (Why w = input_to_attr(n, 1, "axes", s, detached, 13); !w.empty()) return w;
  if (op == "Split") {
    if (t < 18 && n.has_attr("num_outputs")) {
      int64_t parts = n.get_int("num_outputs", 0);
      if (n.has_input(1) || parts != static_cast<int64_t>(n.outputs.size()))
        return "Split with num_outputs different from its output count needs opset 18";
      // Before 18, Split without sizes needs an evenly divisible axis; 18 lets the last part be smaller.
      auto dim = n.inputs.empty() ? std::nullopt : s.dim_of(n.inputs[0], n.get_int("axis", 0));
      if (!dim || parts <= 0 || *dim % parts != 0)
        return "Split with num_outputs that may not divide the axis evenly needs opset 18";
      n.remove_attr("num_outputs");
    }
    if (t < 13)
      if (Why w = input_to_attr(n, 1, "split", s, detached, 13); !w.empty()) return w;
  }
  if (op == "Pad") {
    if (t < 19 && n.get_string("mode", "constant") == "wrap") return "Pad mode 'wrap' needs opset 19";
    if (t < 18 && n.has_input(3)) {
      if (strict) return "Pad keeps its axes input from opset 18";
      const Tensor* axes = s.constant(n.inputs[3]);
      const Tensor* pads = n.has_input(1) ? s.constant(n.inputs[1]) : nullptr;
      auto rank = n.inputs.empty() ? std::nullopt : s.rank_of(n.inputs[0]);
      if (!axes || !pads || !rank) return "Pad with axes needs opset 18 unless axes, pads and the rank are known";
      std::vector<int64_t> a = axes->to_int64s(), p = pads->to_int64s(), full(2 * *rank, 0);
      if (p.size() != 2 * a.size()) return "Pad: pads do not match axes";
      for (size_t k = 0; k < a.size(); ++k) {
        int64_t ax = a[k] < 0 ? a[k] + *rank : a[k];
        if (ax < 0 || ax >= *rank) return "Pad: axis out of range";
        full[ax] = p[k];
        full[ax + *rank] = p[k + a.size()];
      }
      // A fresh constant for the full pads: the caller adds it (see pending_consts).
      n.set_attr(Attribute::make_ints("__hodu_full_pads", full));
      detached.insert(n.inputs[3]);
      detached.insert(n.inputs[1]);
      n.inputs[3].clear();
      trim_inputs(n);
    }
  }
  if (op == "Resize") {
    if (t < 18) {
      if (n.has_attr("axes")) return "Resize with axes needs opset 18";
      if (n.get_int("antialias", 0) != 0) return "Resize with antialias needs opset 18";
      if (n.get_string("keep_aspect_ratio_policy", "stretch") != "stretch")
        return "Resize with keep_aspect_ratio_policy needs opset 18";
      if (Why w = lossy_drop("antialias", 18); !w.empty()) return w;
      if (Why w = lossy_drop("keep_aspect_ratio_policy", 18); !w.empty()) return w;
    }
    if (t < 19 && n.get_string("coordinate_transformation_mode", "") == "half_pixel_symmetric")
      return "Resize with half_pixel_symmetric needs opset 19";
  }
  if ((op == "Cast" || op == "CastLike") && t < 19)
    if (Why w = lossy_drop("saturate", 19); !w.empty()) return w;
  if (op == "DFT" && t < 20) {
    int64_t axis = -2;
    if (strict && !generated(2, "_axis")) return "DFT keeps its axis input from opset 20";
    if (n.has_input(2)) {
      const Tensor* c = s.constant(n.inputs[2]);
      if (!c || c->numel() != 1) return "DFT with a computed axis needs opset 20";
      axis = c->get_int64(0);
      detached.insert(n.inputs[2]);
      n.inputs[2].clear();
      trim_inputs(n);
    }
    n.set_attr(Attribute::make_int("axis", axis));
  }
  if (op == "GridSample" && t < 20 && n.has_attr("mode")) {
    std::string m = n.get_string("mode", "linear");
    if (m == "linear") m = "bilinear";
    else if (m == "cubic") m = "bicubic";
    n.set_attr(Attribute::make_string("mode", m));
  }
  if (op == "RoiAlign" && t < 16) {
    // RoiAlign-10 knows only output_half_pixel, and has no attribute for it.
    if (n.get_string("coordinate_transformation_mode", "half_pixel") != "output_half_pixel")
      return "RoiAlign with coordinate_transformation_mode half_pixel needs opset 16";
    n.remove_attr("coordinate_transformation_mode");
  }
  if (op == "GroupNormalization" && t < 21) return "GroupNormalization (per-channel scale) needs opset 21";
  if (op == "OptionalGetElement" && t < 18 && !n.inputs.empty()) {
    auto in_type = s.type_of(n.inputs[0]);
    if (!in_type || in_type->kind != ValueType::Kind::Optional)
      return "OptionalGetElement on a value that is not an optional needs opset 18";
  }
  if (op == "Scan" && t >= 9)
    if (const Attribute* body = n.attr("body"); body && body->g && n.inputs.size() == body->g->inputs.size() + 1)
      return "Scan in its opset-8 form (batch axis, sequence_lens input) can only be written at opset 8 (--opset 8)";
  if (op == "GridSample" && t < 20 && !n.inputs.empty() && s.rank_of(n.inputs[0]).value_or(4) != 4)
    return "GridSample on other than 4-D input needs opset 20";
  if (op == "DFT" && t < 20 && n.get_int("onesided", 0) != 0 && n.get_int("inverse", 0) != 0)
    return "DFT with both onesided and inverse (irfft) needs opset 20";
  if ((op == "ScatterElements" || op == "ScatterND") && t < 18) {
    std::string r = n.get_string("reduction", "none");
    if (r == "min" || r == "max") return fmt::format("{} with reduction '{}' needs opset 18", op, r);
  }
  if ((op == "AveragePool" || op == "MaxPool" || op == "LpPool") && n.has_attr("dilations")) {
    auto d = n.get_ints("dilations");
    bool ones = std::all_of(d.begin(), d.end(), [](int64_t v) { return v == 1; });
    if (op == "AveragePool" && t < 19 && ones)
      if (Why w = lossy_drop("dilations", 19); !w.empty()) return w;
  }
  if (op == "LpPool" && t < 18 && n.get_int("ceil_mode", 0) == 0)
    if (Why w = lossy_drop("ceil_mode", 18); !w.empty()) return w;

  // The op at the target opset must exist and know every attribute.
  const auto& reg = SchemaRegistry::instance();
  if (reg.versions("", op).empty()) return {};  // not a standard op: written as is
  const OpSchema* sc = reg.find("", op, t);
  if (!sc) {
    auto vs = reg.versions("", op);
    return fmt::format("{} needs opset {}", op, vs.front()->since_version);
  }
  if (Why w = type_blocker(n, *sc, s, t); !w.empty()) return w;
  for (const auto& a : n.attributes) {
    if (a.name == "__hodu_full_pads") continue;
    if (!sc->attribute(a.name))
      return fmt::format("{} attribute '{}' needs an opset newer than {}", op, a.name, t);
  }
  int ni = static_cast<int>(n.inputs.size());
  if (ni > sc->max_inputs) return fmt::format("{} with {} inputs needs an opset newer than {}", op, ni, t);
  int no = static_cast<int>(n.outputs.size());
  if (no > sc->max_outputs) return fmt::format("{} with {} outputs needs an opset newer than {}", op, no, t);
  return {};
}

int dtype_min_opset(DType d) {
  switch (d) {
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ: return 19;
    case DType::U4: case DType::I4: return 21;
    case DType::F4E2M1: return 23;
    case DType::F8E8M0: return 24;
    case DType::U2: case DType::I2: return 25;
    default: return 1;
  }
}

int type_min_opset(const ValueType& t) {
  int v = dtype_min_opset(t.dtype);
  if (t.elem) v = std::max(v, type_min_opset(*t.elem));
  return v;
}

int graph_dtype_min_opset(const Graph& g) {
  int v = 1;
  for (const auto& x : g.inputs) v = std::max(v, type_min_opset(x.type));
  for (const auto& x : g.outputs) v = std::max(v, type_min_opset(x.type));
  for (const auto& [n, t] : g.value_types) v = std::max(v, type_min_opset(t));
  for (const auto& [n, t] : g.initializers) v = std::max(v, dtype_min_opset(t.dtype()));
  for (const auto& n : g.nodes) {
    if (n.domain.empty() && (n.op_type == "Cast" || n.op_type == "CastLike" || n.op_type == "QuantizeLinear")) {
      for (const char* a : {"to", "output_dtype"})
        if (const Attribute* at = n.attr(a); at && at->kind == Attribute::Kind::Int)
          if (auto d = dtype_from_onnx(static_cast<int>(at->i))) v = std::max(v, dtype_min_opset(*d));
    }
    for (const auto& a : n.attributes) {
      if (a.t.defined()) v = std::max(v, dtype_min_opset(a.t.dtype()));
      for (const auto& t : a.tensors) v = std::max(v, dtype_min_opset(t.dtype()));
      if (a.g) v = std::max(v, graph_dtype_min_opset(*a.g));
      for (const auto& sg : a.graphs) v = std::max(v, graph_dtype_min_opset(*sg));
    }
  }
  return v;
}

// First reason found why some node of `g` cannot be written at `t`.
Why graph_blocker(const Graph& g, int t, Scope& s) {
  s.graphs.push_back(&g);
  Why why;
  for (const auto& n : g.nodes) {
    Node copy = n;
    std::set<std::string> detached;
    why = downgrade_node(copy, t, s, detached, true);
    if (!why.empty()) break;
    for (const auto& a : n.attributes) {
      if (a.g) why = graph_blocker(*a.g, t, s);
      for (const auto& sg : a.graphs)
        if (why.empty()) why = graph_blocker(*sg, t, s);
      if (!why.empty()) break;
    }
    if (!why.empty()) {
      why = n.describe() + ": " + why;
      break;
    }
  }
  s.graphs.pop_back();
  return why;
}

bool used_in(const Graph& g, const std::string& v) {
  for (const auto& o : g.outputs)
    if (o.name == v) return true;
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs)
      if (i == v) return true;
    for (const auto& a : n.attributes) {
      if (a.g && used_in(*a.g, v)) return true;
      for (const auto& sg : a.graphs)
        if (used_in(*sg, v)) return true;
    }
  }
  return false;
}

void downgrade_in_place(Graph& g, int t, Scope& s, const Graph& root) {
  s.graphs.push_back(&g);
  std::set<std::string> detached;
  for (auto& n : g.nodes) {
    for (auto& a : n.attributes) {
      if (a.g) {
        a.g = std::make_shared<Graph>(*a.g);
        downgrade_in_place(*a.g, t, s, root);
      }
      for (auto& sg : a.graphs) {
        sg = std::make_shared<Graph>(*sg);
        downgrade_in_place(*sg, t, s, root);
      }
    }
    Why why = downgrade_node(n, t, s, detached, false);
    HODU_CHECK(why.empty(), ErrorCode::Unsupported, "cannot write {} at ONNX opset {}: {}", n.describe(), t, why);
    if (const Attribute* fp = n.attr("__hodu_full_pads")) {
      std::vector<int64_t> full = fp->ints;
      n.remove_attr("__hodu_full_pads");
      std::string name = n.inputs[1] + "_full";
      for (int k = 1; g.initializer(name) || g.producer_of(name) >= 0; ++k)
        name = n.inputs[1] + "_full_" + std::to_string(k);
      g.set_initializer(name, Tensor::from_vector(DType::I64, {int64_t(full.size())}, full));
      n.inputs[1] = name;
    }
  }
  s.graphs.pop_back();
  // Constants that were moved into attributes go away when nothing else reads them.
  for (const auto& d : detached) {
    if (!g.initializer(d) || g.input(d) || used_in(root, d)) continue;
    g.remove_initializer(d);
  }
}

}  // namespace

int required_onnx_opset(const Graph& graph, int floor) {
  int t = std::max({floor, kMinExportOpset, graph_dtype_min_opset(graph)});
  for (; t < kMaxOnnxOpset; ++t) {
    Scope s;
    if (graph_blocker(graph, t, s).empty()) return t;
  }
  return kMaxOnnxOpset;
}

void downgrade_graph(Graph& graph, int opset) {
  HODU_CHECK(opset >= kMinExportOpset, ErrorCode::Unsupported,
             "hodu writes ONNX opset {} or newer (asked for {})", kMinExportOpset, opset);
  int dt = graph_dtype_min_opset(graph);
  HODU_CHECK(dt <= opset, ErrorCode::Unsupported, "the graph uses element types that need ONNX opset {} (asked for {})",
             dt, opset);
  Scope s;
  downgrade_in_place(graph, opset, s, graph);
}

}  // namespace hodu
