#include "compilers/c/graph_prep.h"

#include <optional>
#include <set>

#include "compilers/c/half_widening.h"
#include "compilers/c/if_continuation.h"
#include "compilers/c/quant_lowering.h"
#include "compilers/c/sequence_lowering.h"

#include "core/error.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::compilers::c {
namespace {

void bind_inputs(Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                 const std::map<std::string, int64_t>& dims, SymInfo& sym) {
  for (const auto& [name, shape] : input_shapes) {
    HODU_CHECK(g.input(name) && !g.initializer(name), ErrorCode::InvalidArgument,
               "--shape {}: the model has no input named '{}'", name, name);
  }
  for (auto& in : g.inputs) {
    if (g.initializer(in.name)) continue;
    HODU_CHECK(in.type.is_tensor(), ErrorCode::Unsupported, "input '{}' is a {}, not supported by compiled code: it takes tensor inputs only (the C API carries no sequences, maps or optionals)",
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
    // Dims left free become run-time dims (named by their symbol, or "<input>_<d>").
    SymShape shape;
    for (size_t d = 0; d < in.type.shape.dims().size(); ++d) {
      Dim& dim = in.type.shape[d];
      if (!dim.is_known() && dim.is_symbolic())
        if (auto it = dims.find(dim.symbol); it != dims.end()) dim = Dim(it->second);
      if (dim.is_known()) {
        shape.push_back(dim.value);
        continue;
      }
      std::string name = dim.is_symbolic() ? dim.symbol : fmt::format("{}_{}", in.name, d);
      dim = Dim::sym(name);
      shape.push_back(SymInt::dim(current_sym_table()->input_dim(name)));
    }
    if (!is_static(shape)) sym.shapes[in.name] = shape;
  }

  // The bound input types drive inference; stale intermediate types would not.
  g.value_types.clear();
}

// Evaluates one node on constant inputs with the reference interpreter; nullopt when a result
// is not a tensor (SequenceEmpty: the node stays, for the op check to name).
std::optional<std::vector<Tensor>> evaluate(const Node& node, const Graph& g, const Model& model) {
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
    if (!v.is_tensor()) return std::nullopt;
    out.push_back(v.tensor.contiguous());
  }
  return out;
}

bool has_half_weights(const Graph& g) {
  for (const auto& [name, t] : g.initializers)
    if (t.dtype() == DType::F16 || t.dtype() == DType::BF16) return true;
  return false;
}

}  // namespace

void refresh_sym_shapes(const Graph& g, const std::map<std::string, SymShape>& free_inputs, SymInfo& info,
                        bool partial) {
  info.shapes = free_inputs;
  for (const auto& [name, s] : info.value_shapes) info.shapes[name] = to_sym(s);
  infer_sym_shapes(g, info, partial);
}

PreparedGraph prepare_graph(const Model& model, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                            const std::map<std::string, int64_t>& dims) {
  PreparedGraph p;
  p.graph = model.graph;
  Graph& g = p.graph;
  bind_inputs(g, input_shapes, dims, p.sym);
  // A model with f16/bf16 weights computes in f32 between casts at its half inputs and outputs,
  // as the cpu engine and ONNX Runtime's CPU provider run it: per-op f16 rounding put a
  // MobileNetV3 4e-3 off both, and a half transformer ran its products and norms on the portable
  // double-precision loops (100x slower). Graphs of half ops without weights (the node suite's
  // cases) keep the per-op rounding of the interpreter.
  if (has_half_weights(g)) passes::widen_half_precision(g);
  const bool dynamic = !p.sym.shapes.empty();
  const auto onnx_opset = model.opset_imports.find("");
  const int64_t opset = onnx_opset == model.opset_imports.end() ? 21 : onnx_opset->second;
  p.free_inputs = p.sym.shapes;
  // Shapes over the free dims, afresh for the graph as it is now (nodes are folded away).
  auto infer_sizes = [&](bool partial) { refresh_sym_shapes(g, p.free_inputs, p.sym, partial); };
  // Folds what is constant now, to a fixed point.
  auto fold_rounds = [&] {
    for (int round = 0; round < 64; ++round) {
      // Infers types and folds Shape/Size of tensors whose shape is now static.
      size_t before = g.nodes.size();
      bool changed = passes::fold_shapes(g);
      p.folded_nodes += static_cast<int>(before - g.nodes.size());
      if (dynamic) {
        // The Shape → Gather → Concat glue over free dims: size values, or constants.
        infer_sizes(true);
        before = g.nodes.size();
        if (fold_sym_values(g, p.sym)) {
          changed = true;
          p.folded_nodes += static_cast<int>(before - g.nodes.size());
        }
      }
      // Sequences and optionals used only inside the graph as the tensor ops they stand for.
      if (lower_sequences(g, opset)) changed = true;
      // Quantization ops as the float ops they are defined by (types are known now).
      if (lower_quantization(g)) changed = true;
      // Half-float convolutions, pools and products on the float32 kernels.
      if (widen_half_ops(g)) changed = true;
      // An If on a condition known now is the branch it takes.
      if (passes::inline_constant_ifs(g)) changed = true;
      std::vector<Node> kept;
      for (const auto& n : g.nodes) {
        bool all_const = !passes::is_random_op(n) && !passes::has_subgraph(n);
        for (const auto& in : n.inputs) all_const = all_const && (in.empty() || g.initializer(in));
        if (!all_const) {
          kept.push_back(n);
          continue;
        }
        auto values = evaluate(n, g, model);
        if (!values) {
          kept.push_back(n);
          continue;
        }
        size_t k = 0;
        for (const auto& out : n.outputs)
          if (!out.empty() && k < values->size()) g.set_initializer(out, (*values)[k++]);
        changed = true;
        ++p.folded_nodes;
      }
      g.nodes = std::move(kept);
      if (!changed) break;
    }
  };
  fold_rounds();
  // An If whose branches give different ranks at sizes known only while running: the nodes
  // after it move into its branches until the ranks agree (if_continuation.h); what that
  // makes constant folds on.
  std::set<std::string> tried;
  while (reconcile_divergent_ifs(g, model, tried)) fold_rounds();
  require_quantization_lowered(g);
  // Ops that pass their input through once shapes are known: Identity, Dropout at inference
  // (or with ratio 0), same-type Casts, Pads of 0 on every side (Swin-T's window padding at
  // 224x224: a full copy each, 9 % of its run).
  passes::eliminate_identities(g);
  infer_types(g);
  // Shapes over the free dims, and (static models too) the sizes only known while running.
  infer_sizes(false);
  return p;
}

}  // namespace hodu::compilers::c
