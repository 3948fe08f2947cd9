#include "engines/interp/interpreter.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "core/error.h"
#include "engines/interp/kernel.h"
#include "runtime/profiler.h"

namespace hodu::interp {
namespace {

const char* value_kind_name(const RuntimeValue& v) {
  switch (v.kind) {
    case RuntimeValue::Kind::Tensor: return "tensor";
    case RuntimeValue::Kind::Sequence: return "sequence";
    case RuntimeValue::Kind::OptionalEmpty: return "empty optional";
    case RuntimeValue::Kind::Map: return "map";
    default: return "nothing";
  }
}

// Checks every op of a graph (and its subgraphs) has a kernel.
void check_kernels(const Graph& g) {
  const OpTable& table = OpTable::instance();
  for (const auto& n : g.nodes) {
    if (!table.find(n.domain, n.op_type))
      fail(ErrorCode::Unsupported, "{}: op '{}'{} is not supported by the interp engine", n.describe(), n.op_type,
           n.domain.empty() ? "" : " of domain '" + n.domain + "'");
    for (const auto& a : n.attributes) {
      if (a.g) check_kernels(*a.g);
      for (const auto& sg : a.graphs) check_kernels(*sg);
    }
  }
}

uint64_t mix_seed(uint64_t seed, const std::string& name, size_t index) {
  uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h ^ (index * 0xBF58476D1CE4E5B9ull);
}

}  // namespace

const Tensor& KernelContext::input(size_t i) const {
  if (!has_input(i)) fail(ErrorCode::InvalidModel, "input {} is required but missing", i);
  const RuntimeValue& v = *inputs[i];
  if (!v.is_tensor()) fail(ErrorCode::InvalidModel, "input {} must be a tensor, got a {}", i, value_kind_name(v));
  return v.tensor;
}

const RuntimeValue& KernelContext::value(size_t i) const {
  if (i >= inputs.size() || !inputs[i]) fail(ErrorCode::InvalidModel, "input {} is required but missing", i);
  return *inputs[i];
}

Interpreter::Interpreter(const Model& model, InterpreterOptions options) : model_(model), options_(options) {
  check_kernels(model.graph);
}

std::vector<RuntimeValue> Interpreter::run(const std::map<std::string, RuntimeValue>& inputs) const {
  std::vector<RuntimeValue> ordered;
  for (const auto& in : model_.graph.inputs) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) {
      // A graph input that is also an initializer keeps its default.
      if (const Tensor* init = model_.graph.initializer(in.name)) {
        ordered.emplace_back(*init);
        continue;
      }
      fail(ErrorCode::InvalidArgument, "missing input '{}'", in.name);
    }
    ordered.push_back(it->second);
  }
  for (const auto& [name, v] : inputs)
    if (!model_.graph.input(name))
      fail(ErrorCode::InvalidArgument, "'{}' is not an input of the model", name);
  return run_graph(model_.graph, ordered, {});
}

std::vector<RuntimeValue> Interpreter::run_graph(const Graph& graph, const std::vector<RuntimeValue>& inputs,
                                                 const std::map<std::string, const RuntimeValue*>& outer) const {
  std::unordered_map<std::string, RuntimeValue> env;
  env.reserve(graph.nodes.size() * 2 + graph.initializers.size() + inputs.size());
  for (const auto& [name, t] : graph.initializers) env.emplace(name, RuntimeValue(t));
  HODU_CHECK(inputs.size() <= graph.inputs.size(), ErrorCode::InvalidArgument,
             "graph '{}' takes {} inputs, got {}", graph.name, graph.inputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs[i].name] = inputs[i];

  // Last use of each value, to free intermediates early (keeps peak memory sane on big models).
  std::unordered_map<std::string, size_t> last_use;
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    for (const auto& in : graph.nodes[k].inputs)
      if (!in.empty()) last_use[in] = k;
  // Values read implicitly by subgraphs must stay alive: treat them as used by the node owning the subgraph.
  std::function<void(const Graph&, size_t)> mark_subgraph_uses = [&](const Graph& sg, size_t owner) {
    for (const auto& n : sg.nodes) {
      for (const auto& in : n.inputs)
        if (!in.empty() && (!last_use.count(in) || last_use[in] < owner)) last_use[in] = owner;
      for (const auto& a : n.attributes) {
        if (a.g) mark_subgraph_uses(*a.g, owner);
        for (const auto& g2 : a.graphs) mark_subgraph_uses(*g2, owner);
      }
    }
    for (const auto& o : sg.outputs)
      if (!last_use.count(o.name) || last_use[o.name] < owner) last_use[o.name] = owner;
  };
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    for (const auto& a : graph.nodes[k].attributes) {
      if (a.g) mark_subgraph_uses(*a.g, k);
      for (const auto& g2 : a.graphs) mark_subgraph_uses(*g2, k);
    }
  // Gradient re-evaluates part of this graph: everything read before it stays alive until it ran.
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    if (graph.nodes[k].op_type == "Gradient" && graph.nodes[k].domain == "ai.onnx.preview.training")
      for (auto& [name, use] : last_use) use = std::max(use, k);
  for (const auto& o : graph.outputs) last_use[o.name] = graph.nodes.size();

  auto lookup = [&](const std::string& name) -> const RuntimeValue* {
    if (auto it = env.find(name); it != env.end()) return &it->second;
    if (auto it = outer.find(name); it != outer.end()) return it->second;
    return nullptr;
  };

  const OpTable& table = OpTable::instance();
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& node = graph.nodes[k];
    KernelFn fn = table.find(node.domain, node.op_type);
    if (!fn)
      fail(ErrorCode::Unsupported, "{}: op '{}' is not supported by the interp engine", node.describe(), node.op_type);
    KernelContext ctx{node, {}, {}, options_.threads, mix_seed(options_.seed, node.name, k), {}};
    ctx.inputs.reserve(node.inputs.size());
    for (const auto& in : node.inputs) {
      if (in.empty()) { ctx.inputs.push_back(nullptr); continue; }
      const RuntimeValue* v = lookup(in);
      if (!v) fail(ErrorCode::InvalidModel, "{}: input '{}' is not defined", node.describe(), in);
      ctx.inputs.push_back(v);
    }
    ctx.outputs.resize(node.outputs.size());
    ctx.graph = &graph;
    ctx.run_subgraph = [&](const Graph& sg, const std::vector<RuntimeValue>& sg_inputs) {
      // The subgraph sees this graph's values and everything outer.
      std::map<std::string, const RuntimeValue*> scope = outer;
      for (const auto& [name, v] : env) scope[name] = &v;
      return run_graph(sg, sg_inputs, scope);
    };
    try {
      NodeSpan span(Profiler::active(), node, ctx.inputs, "interp", "reference");  // inert unless profiling
      fn(ctx);
      span.finish(ctx.outputs);
    } catch (const Error& e) {
      std::string prefix = node.describe();
      if (std::string_view(e.what()).find(prefix) != std::string_view::npos) throw;
      throw e.with_context(prefix + ": ");
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::OutOfMemory, "{}: out of memory", node.describe());
    } catch (const std::exception& e) {
      fail(ErrorCode::Internal, "{}: {}", node.describe(), e.what());
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i].empty()) continue;
      if (ctx.outputs[i].is_none())
        fail(ErrorCode::Internal, "{}: kernel did not produce output {} ('{}')", node.describe(), i, node.outputs[i]);
      env[node.outputs[i]] = std::move(ctx.outputs[i]);
    }
    // Free inputs whose last use was this node (never graph inputs held by the caller: they are copies).
    for (const auto& in : node.inputs) {
      auto it = last_use.find(in);
      if (!in.empty() && it != last_use.end() && it->second == k) env.erase(in);
    }
  }

  std::vector<RuntimeValue> outs;
  outs.reserve(graph.outputs.size());
  for (const auto& o : graph.outputs) {
    const RuntimeValue* v = lookup(o.name);
    if (!v) fail(ErrorCode::InvalidModel, "graph output '{}' is never produced", o.name);
    outs.push_back(*v);
  }
  return outs;
}

}  // namespace hodu::interp
