// f16/bf16 graphs computed in f32: initializers converted once, every intermediate value f32,
// casts at the graph's f16/bf16 inputs and outputs so the caller sees the model's own types. An
// engine whose kernels are f32 (the cpu engine) then runs such a model on them; the results are
// those of f32 arithmetic rounded once at the outputs, not after every op (closer to the exact
// values than per-op f16 rounding; within f16's precision of it).
#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }
bool is_half_code(int64_t onnx_code) {
  auto d = dtype_from_onnx(static_cast<int>(onnx_code));
  return d && is_half(*d);
}

// Whether a graph (and its subgraphs) has f16/bf16 values the pass cannot widen: sequences or
// optionals of them.
bool has_half_containers(const Graph& g) {
  auto bad = [](const ValueType& t) {
    return (t.kind == ValueType::Kind::Sequence || t.kind == ValueType::Kind::Optional) && t.elem &&
           t.elem->is_tensor() && is_half(t.elem->dtype);
  };
  for (const auto& v : g.inputs)
    if (bad(v.type)) return true;
  for (const auto& v : g.outputs)
    if (bad(v.type)) return true;
  for (const auto& [name, t] : g.value_types)
    if (bad(t)) return true;
  for (const auto& n : g.nodes)
    for (const auto& a : n.attributes) {
      if (a.g && has_half_containers(*a.g)) return true;
      for (const auto& s : a.graphs)
        if (has_half_containers(*s)) return true;
    }
  return false;
}

// Whether `g` computes anything in f16/bf16: a half initializer or tensor attribute, a Cast to a
// half type other than one giving a graph output, a half input read by anything but a Cast (the
// boundary this pass leaves is not half computation).
bool uses_half(const Graph& g) {
  for (const auto& [name, t] : g.initializers)
    if (is_half(t.dtype())) return true;
  for (const auto& v : g.inputs) {
    if (!v.type.is_tensor() || !is_half(v.type.dtype)) continue;
    for (const auto& n : g.nodes)
      for (const auto& in : n.inputs)
        if (in == v.name && n.op_type != "Cast") return true;
  }
  for (const auto& n : g.nodes) {
    if (n.op_type == "Cast" && is_half_code(n.get_int("to", 0)) && !g.output(n.outputs[0])) return true;
    for (const auto& a : n.attributes) {
      if (a.kind == Attribute::Kind::Tensor && is_half(a.t.dtype())) return true;
      if (a.g && uses_half(*a.g)) return true;
      for (const auto& s2 : a.graphs)
        if (uses_half(*s2)) return true;
    }
  }
  return false;
}

// Every f16/bf16 inside `g` becomes f32: initializers, tensor attributes, Cast/dtype targets, the
// declared types (inputs and outputs of subgraphs too; the main graph's boundary is handled by
// the caller).
void widen_inside(Graph& g, bool boundary) {
  for (auto& [name, t] : g.initializers)
    if (is_half(t.dtype())) t = t.cast(DType::F32);
  auto widen_type = [](ValueType& t) {
    if (t.is_tensor() && is_half(t.dtype)) t.dtype = DType::F32;
  };
  for (auto& [name, t] : g.value_types) widen_type(t);
  if (boundary) {
    for (auto& v : g.inputs) widen_type(v.type);
    for (auto& v : g.outputs) widen_type(v.type);
  }
  const int64_t f32 = static_cast<int64_t>(dtype_to_onnx(DType::F32));
  for (auto& n : g.nodes)
    for (auto& a : n.attributes) {
      if (a.kind == Attribute::Kind::Tensor && is_half(a.t.dtype())) a.t = a.t.cast(DType::F32);
      // Cast's `to`, the dtype of generators (RandomNormal, EyeLike, ...), output_dtype of Q/DQ.
      if (a.kind == Attribute::Kind::Int && (a.name == "to" || a.name == "dtype" || a.name == "output_dtype") &&
          is_half_code(a.i))
        a.i = f32;
      if (a.g) widen_inside(*a.g, true);
      for (auto& s : a.graphs) widen_inside(*s, true);
    }
}

}  // namespace

bool widen_half_precision(Graph& g) {
  if (!uses_half(g) || has_half_containers(g)) return false;
  for (const auto& in : g.inputs)
    if (g.output(in.name)) return false;  // an input passed through as an output keeps its type
  widen_inside(g, false);
  // The boundary: f16/bf16 inputs cast to f32 where they enter, outputs cast back where they leave.
  std::vector<Node> entry;
  const int64_t f32 = static_cast<int64_t>(dtype_to_onnx(DType::F32));
  for (auto& in : g.inputs) {
    if (!in.type.is_tensor() || !is_half(in.type.dtype) || g.initializer(in.name)) continue;
    std::string wide = g.unique_name(in.name + "/f32");
    replace_uses(g, in.name, wide);
    Node c;
    c.name = in.name + "/to_f32";
    c.op_type = "Cast";
    c.inputs = {in.name};
    c.outputs = {wide};
    c.attributes = {Attribute::make_int("to", f32)};
    entry.push_back(std::move(c));
  }
  g.nodes.insert(g.nodes.begin(), entry.begin(), entry.end());
  for (auto& out : g.outputs) {
    if (!out.type.is_tensor() || !is_half(out.type.dtype)) continue;
    const DType half = out.type.dtype;
    std::string wide = g.unique_name(out.name + "/f32");
    // The producer (or the input / initializer it is) now gives f32 under another name.
    int p = g.producer_of(out.name);
    if (p >= 0) {
      for (auto& o : g.nodes[p].outputs)
        if (o == out.name) o = wide;
      replace_uses(g, out.name, wide);
    } else if (g.initializer(out.name)) {
      Tensor t = *g.initializer(out.name);
      g.remove_initializer(out.name);
      g.set_initializer(wide, t);
      replace_uses(g, out.name, wide);
    } else {
      continue;
    }
    Node c;
    c.name = out.name + "/to_half";
    c.op_type = "Cast";
    c.inputs = {wide};
    c.outputs = {out.name};
    c.attributes = {Attribute::make_int("to", static_cast<int64_t>(dtype_to_onnx(half)))};
    g.nodes.push_back(std::move(c));
    g.value_types.erase(out.name);
  }
  infer_types(g);
  return true;
}

}  // namespace hodu::passes
