#include "compilers/c/graph_prep.h"

#include <set>

#include "core/error.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"

namespace hodu::compilers::c {
namespace {

// Ops whose result must not be computed once at build time.
bool is_nondeterministic(const Node& n) {
  static const std::set<std::string> ops = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                            "Multinomial", "Bernoulli"};
  return ops.count(n.op_type) > 0;
}

bool has_subgraph(const Node& n) {
  for (const auto& a : n.attributes)
    if (a.kind == Attribute::Kind::Graph || a.kind == Attribute::Kind::Graphs) return true;
  return false;
}

void bind_inputs(Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                 const std::map<std::string, int64_t>& dims) {
  for (const auto& [name, shape] : input_shapes) {
    HODU_CHECK(g.input(name) && !g.initializer(name), ErrorCode::InvalidArgument,
               "--shape {}: the model has no input named '{}'", name, name);
  }
  for (auto& in : g.inputs) {
    if (g.initializer(in.name)) continue;
    HODU_CHECK(in.type.is_tensor(), ErrorCode::Unsupported, "input '{}' is a {}, only tensor inputs can be compiled",
               in.name, in.type.to_string());
    if (auto it = input_shapes.find(in.name); it != input_shapes.end()) {
      const Shape& s = in.type.shape;
      if (s.rank_known()) {
        HODU_CHECK(s.rank() == static_cast<int64_t>(it->second.size()), ErrorCode::InvalidArgument,
                   "--shape {}: rank {} does not match the model's {}", in.name, it->second.size(), s.to_string());
        for (size_t d = 0; d < it->second.size(); ++d)
          HODU_CHECK(!s[d].is_known() || s[d].value == it->second[d], ErrorCode::InvalidArgument,
                     "--shape {}: dim {} is {} but the model fixes it to {}", in.name, d, it->second[d], s[d].value);
      }
      in.type.shape = Shape::from(it->second);
      continue;
    }
    HODU_CHECK(in.type.shape.rank_known(), ErrorCode::InvalidArgument,
               "input '{}' has unknown rank: give its shape with --shape {}=1x3x224x224", in.name, in.name);
    for (size_t d = 0; d < in.type.shape.dims().size(); ++d) {
      Dim& dim = in.type.shape[d];
      if (dim.is_known()) continue;
      if (dim.is_symbolic()) {
        auto it = dims.find(dim.symbol);
        HODU_CHECK(it != dims.end(), ErrorCode::InvalidArgument,
                   "input '{}' has symbolic shape {}: compiled code needs static shapes; give --dim {}=N or "
                   "--shape {}=...",
                   in.name, in.type.shape.to_string(), dim.symbol, in.name);
        dim = Dim(it->second);
      } else {
        fail(ErrorCode::InvalidArgument, "input '{}' has an unknown dim {} (shape {}): give --shape {}=...", in.name, d,
             in.type.shape.to_string(), in.name);
      }
    }
  }
  // The bound input types drive inference; stale intermediate types would not.
  g.value_types.clear();
}

// Evaluates one node on constant inputs with the reference interpreter.
std::vector<Tensor> evaluate(const Node& node, const Graph& g, const Model& model) {
  Model m;
  m.opset_imports = model.opset_imports;
  m.graph.nodes.push_back(node);
  for (const auto& in : node.inputs)
    if (!in.empty() && !m.graph.initializer(in)) m.graph.set_initializer(in, *g.initializer(in));
  for (const auto& out : node.outputs)
    if (!out.empty()) m.graph.outputs.push_back(Value{out, {}, {}});
  interp::Interpreter interp(m);
  auto values = interp.run({});
  std::vector<Tensor> out;
  for (auto& v : values) {
    HODU_CHECK(v.is_tensor(), ErrorCode::Unsupported, "{}: folding produced a non-tensor value", node.describe());
    out.push_back(v.tensor.contiguous());
  }
  return out;
}

}  // namespace

PreparedGraph prepare_graph(const Model& model, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                            const std::map<std::string, int64_t>& dims) {
  PreparedGraph p;
  p.graph = model.graph;
  Graph& g = p.graph;
  bind_inputs(g, input_shapes, dims);
  std::set<std::string> outputs;
  for (const auto& o : g.outputs) outputs.insert(o.name);
  for (int round = 0; round < 64; ++round) {
    infer_types(g);
    bool changed = false;
    std::vector<Node> kept;
    for (const auto& n : g.nodes) {
      bool all_const = !is_nondeterministic(n) && !has_subgraph(n);
      for (const auto& in : n.inputs) all_const = all_const && (in.empty() || g.initializer(in));
      // Shape and Size only need the (static) shape of their input.
      std::optional<Tensor> shape_value;
      if (!all_const && (n.op_type == "Shape" || n.op_type == "Size") && n.domain.empty() && n.has_input(0)) {
        auto t = g.type_of(n.inputs[0]);
        if (t && t->is_tensor())
          if (auto s = t->shape.to_static()) {
            if (n.op_type == "Size") {
              shape_value = Tensor::scalar<int64_t>(DType::I64, shape_numel(*s));
            } else {
              int64_t r = static_cast<int64_t>(s->size());
              int64_t start = n.get_int("start", 0), end = n.get_int("end", r);
              if (start < 0) start += r;
              if (end < 0) end += r;
              start = std::clamp<int64_t>(start, 0, r);
              end = std::clamp<int64_t>(end, start, r);
              std::vector<int64_t> v(s->begin() + start, s->begin() + end);
              shape_value = Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v);
            }
          }
      }
      if (shape_value) {
        g.set_initializer(n.outputs[0], *shape_value);
        changed = true;
        ++p.folded_nodes;
        continue;
      }
      if (!all_const) {
        kept.push_back(n);
        continue;
      }
      auto values = evaluate(n, g, model);
      size_t k = 0;
      for (const auto& out : n.outputs)
        if (!out.empty() && k < values.size()) g.set_initializer(out, values[k++]);
      changed = true;
      ++p.folded_nodes;
    }
    g.nodes = std::move(kept);
    if (!changed) break;
  }
  infer_types(g);
  return p;
}

}  // namespace hodu::compilers::c
