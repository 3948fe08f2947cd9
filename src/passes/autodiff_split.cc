// split_gradient_graph: the gradient graph cut between what the forward outputs depend on and
// the rest, the values crossing the cut becoming the forward's extra outputs.
#include "passes/autodiff_split.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "ir/schema.h"
#include "passes/autodiff.h"
#include "passes/graph_utils.h"

namespace hodu::passes {
namespace {

Node make_node(std::string name, std::string op, std::vector<std::string> inputs, std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = name;
  n.op_type = std::move(op);
  n.inputs = std::move(inputs);
  n.outputs = {std::move(name)};
  n.attributes = std::move(attrs);
  return n;
}

bool is_float(DType t) { return dtype_is_float(t) && !dtype_is_complex(t); }

bool is_integer_type(const Graph& g, const std::string& v) {
  auto t = g.type_of(v);
  return t && t->is_tensor() && t->dtype != DType::Undefined && !is_float(t->dtype);
}

ValueType type_or_unknown(const Graph& g, const std::string& v) {
  auto t = g.type_of(v);
  return t ? *t : ValueType{};
}

// The joint graph: forward nodes, then the backward's, with one seed input per output.
Graph joint_graph(const Graph& forward, const std::vector<std::string>& outputs, const std::vector<std::string>& wrt,
                  std::vector<std::string>& seeds) {
  if (outputs.size() == 1) {
    seeds = {"grad." + outputs[0]};
    return build_gradient_graph(forward, {outputs[0], wrt, /*seed_input=*/true});
  }
  // Several outputs: differentiate sum_i <y_i, grad.y_i>, whose gradient with respect to y_i
  // is grad.y_i itself.
  Graph g = forward;
  std::vector<std::string> terms;
  for (const auto& y : outputs) {
    std::string seed = "grad." + y;
    if (g.input(seed) || g.initializer(seed) || g.producer_of(seed) >= 0)
      fail(ErrorCode::InvalidArgument, "autodiff split: the graph already has a value '{}'", seed);
    g.inputs.push_back(Value{seed, type_or_unknown(g, y), "dL/d" + y});
    seeds.push_back(seed);
    std::string product = g.unique_name("autodiff_split/" + y + "/product");
    g.nodes.push_back(make_node(product, "Mul", {y, seed}));
    std::string sum = g.unique_name("autodiff_split/" + y + "/sum");
    g.nodes.push_back(make_node(sum, "ReduceSum", {product}, {Attribute::make_int("keepdims", 0)}));
    terms.push_back(sum);
  }
  std::string objective = g.unique_name("autodiff_split/objective");
  g.nodes.push_back(make_node(objective, "Sum", terms));
  return build_gradient_graph(g, {objective, wrt, /*seed_input=*/false});
}

}  // namespace

ForwardBackward split_gradient_graph(const Graph& forward_in, const SplitRequest& request) {
  Graph forward = forward_in;
  try {
    infer_types(forward);
  } catch (const Error& e) {
    throw e.with_context("autodiff split: the forward graph's types: ");
  }
  std::vector<std::string> outputs = request.outputs;
  if (outputs.empty()) {
    for (const auto& o : forward.outputs)
      if (o.type.is_tensor() && (o.type.dtype == DType::Undefined || is_float(o.type.dtype))) outputs.push_back(o.name);
    if (outputs.empty())
      fail(ErrorCode::InvalidArgument, "autodiff split: graph '{}' has no float output to differentiate",
           forward.name);
  }
  std::set<std::string> seen;
  for (const auto& y : outputs) {
    const Value* o = forward.output(y);
    if (!o) fail(ErrorCode::InvalidArgument, "autodiff split: '{}' is not an output of graph '{}'", y, forward.name);
    if (o->type.is_tensor() && o->type.dtype != DType::Undefined && !is_float(o->type.dtype))
      fail(ErrorCode::InvalidArgument, "autodiff split: output '{}' has dtype {}; gradients need a float tensor", y,
           dtype_name(o->type.dtype));
    if (!seen.insert(y).second) fail(ErrorCode::InvalidArgument, "autodiff split: output '{}' named twice", y);
  }

  ForwardBackward r;
  Graph j = joint_graph(forward, outputs, request.wrt, r.seeds);
  const size_t n_fwd_outputs = forward.outputs.size();
  const std::set<std::string> seed_set(r.seeds.begin(), r.seeds.end());

  std::map<std::string, size_t> producer;
  for (size_t k = 0; k < j.nodes.size(); ++k)
    for (const auto& o : j.nodes[k].outputs)
      if (!o.empty()) producer[o] = k;
  std::vector<std::set<std::string>> reads(j.nodes.size());
  for (size_t k = 0; k < j.nodes.size(); ++k) reads[k] = reads_of(j.nodes[k]);

  // The nodes the values in `roots` depend on.
  auto ancestors = [&](const std::vector<std::string>& roots) {
    std::vector<bool> in(j.nodes.size(), false);
    std::vector<std::string> stack = roots;
    while (!stack.empty()) {
      std::string v = std::move(stack.back());
      stack.pop_back();
      auto it = producer.find(v);
      if (it == producer.end() || in[it->second]) continue;
      in[it->second] = true;
      for (const auto& x : reads[it->second]) stack.push_back(x);
    }
    return in;
  };
  std::vector<std::string> fwd_roots, grad_roots;
  for (size_t i = 0; i < j.outputs.size(); ++i) (i < n_fwd_outputs ? fwd_roots : grad_roots).push_back(j.outputs[i].name);
  const std::vector<bool> is_fwd_root = ancestors(fwd_roots), is_grad_root = ancestors(grad_roots);

  enum class Side { None, Forward, Backward };
  std::vector<Side> side(j.nodes.size(), Side::None);
  std::set<std::string> seed_dependent(seed_set), moved_values;
  for (size_t k = 0; k < j.nodes.size(); ++k) {
    const Node& n = j.nodes[k];
    bool dep = std::any_of(reads[k].begin(), reads[k].end(), [&](const std::string& v) { return seed_dependent.count(v) > 0; });
    if (dep)
      for (const auto& o : n.outputs)
        if (!o.empty()) seed_dependent.insert(o);
    if (is_fwd_root[k]) {
      side[k] = Side::Forward;
      continue;
    }
    if (!is_grad_root[k]) continue;
    side[k] = Side::Backward;
    if (dep) continue;
    // Shape/Size of a forward value, and integer arithmetic on such shapes and constants, run in
    // the forward: the backward then gets the small result instead of the tensor.
    bool shape_op = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
    bool int_math = !n.inputs.empty() && !has_subgraph(n) &&
                    std::all_of(reads[k].begin(), reads[k].end(),
                                [&](const std::string& v) { return moved_values.count(v) || constant_of(j, v); }) &&
                    std::all_of(n.outputs.begin(), n.outputs.end(),
                                [&](const std::string& o) { return o.empty() || is_integer_type(j, o); });
    if (shape_op || int_math) {
      side[k] = Side::Forward;
      for (const auto& o : n.outputs)
        if (!o.empty()) moved_values.insert(o);
    }
  }

  // What the backward reads from the forward side.
  std::set<std::string> fwd_outputs_set;
  for (size_t i = 0; i < n_fwd_outputs; ++i) fwd_outputs_set.insert(j.outputs[i].name);
  std::set<size_t> copied_constants;
  std::set<std::string> saved_set, reused_set;
  auto note_backward_read = [&](const std::string& v) {
    if (v.empty() || seed_set.count(v)) return;
    auto it = producer.find(v);
    if (it != producer.end()) {
      if (side[it->second] != Side::Forward) return;
      const Node& p = j.nodes[it->second];
      if (p.domain.empty() && p.op_type == "Constant") {
        copied_constants.insert(it->second);
      } else if (saved_set.insert(v).second) {
        r.saved.push_back(v);
      }
    } else if (j.input(v) && reused_set.insert(v).second) {
      r.reused_inputs.push_back(v);
    }
  };
  for (size_t k = 0; k < j.nodes.size(); ++k)
    if (side[k] == Side::Backward)
      for (const auto& v : reads[k]) note_backward_read(v);
  for (size_t i = n_fwd_outputs; i < j.outputs.size(); ++i) note_backward_read(j.outputs[i].name);
  // Graph inputs keep their order (the caller feeds them by name; the order reads better).
  std::vector<std::string> reused;
  for (const auto& in : j.inputs)
    if (reused_set.count(in.name)) reused.push_back(in.name);
  r.reused_inputs = std::move(reused);

  auto copy_initializers = [&](Graph& dst) {
    std::set<std::string> read;
    for (const auto& n : dst.nodes) {
      auto rs = reads_of(n);
      read.insert(rs.begin(), rs.end());
    }
    for (const auto& o : dst.outputs) read.insert(o.name);
    for (const auto& [name, t] : j.initializers)
      if (read.count(name)) dst.initializers.emplace_back(name, t);
  };
  auto copy_types = [&](Graph& dst) {
    for (const auto& n : dst.nodes)
      for (const auto& o : n.outputs)
        if (auto it = j.value_types.find(o); !o.empty() && it != j.value_types.end()) dst.value_types.insert(*it);
  };

  Graph& f = r.forward;
  f.name = j.name;
  f.doc = j.doc;
  for (const auto& in : j.inputs)
    if (!seed_set.count(in.name)) f.inputs.push_back(in);
  for (size_t k = 0; k < j.nodes.size(); ++k)
    if (side[k] == Side::Forward) f.nodes.push_back(j.nodes[k]);
  for (size_t i = 0; i < n_fwd_outputs; ++i) f.outputs.push_back(j.outputs[i]);
  for (const auto& v : r.saved)
    if (!fwd_outputs_set.count(v)) f.outputs.push_back(Value{v, type_or_unknown(j, v), "saved for the backward"});
  copy_initializers(f);
  copy_types(f);

  Graph& b = r.backward;
  b.name = j.name + ".backward";
  for (const auto& s : r.seeds) b.inputs.push_back(*j.input(s));
  for (const auto& v : r.saved) b.inputs.push_back(Value{v, type_or_unknown(j, v), "saved by the forward"});
  for (const auto& v : r.reused_inputs) b.inputs.push_back(*j.input(v));
  for (size_t k : copied_constants) b.nodes.push_back(j.nodes[k]);
  for (size_t k = 0; k < j.nodes.size(); ++k)
    if (side[k] == Side::Backward) b.nodes.push_back(j.nodes[k]);
  for (size_t i = n_fwd_outputs; i < j.outputs.size(); ++i) b.outputs.push_back(j.outputs[i]);
  copy_initializers(b);
  copy_types(b);
  return r;
}

}  // namespace hodu::passes
