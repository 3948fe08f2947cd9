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

// Who produces each value and what each node reads, and the nodes some values depend on.
struct NodeIndex {
  explicit NodeIndex(const Graph& g) : graph(g), reads(g.nodes.size()) {
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      for (const auto& o : g.nodes[k].outputs)
        if (!o.empty()) producer[o] = k;
      reads[k] = reads_of(g.nodes[k]);
    }
  }
  std::vector<bool> ancestors(const std::vector<std::string>& roots) const {
    std::vector<bool> in(graph.nodes.size(), false);
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
  }
  const Graph& graph;
  std::map<std::string, size_t> producer;
  std::vector<std::set<std::string>> reads;
};

// Shape(v) of a forward value in the backward half, written from v's type where that is known
// (numbers, and symbols read from the Shape of a graph input that has them), so the backward
// neither keeps v nor gets its shape as a run-time value an engine cannot plan with.
void shapes_from_types(Graph& j, const std::vector<bool>& forward_side) {
  std::map<std::string, std::pair<std::string, int64_t>> symbol_source;  // symbol → (input, axis)
  for (const auto& in : j.inputs)
    if (in.type.is_tensor() && in.type.shape.rank_known())
      for (int64_t a = 0; a < in.type.shape.rank(); ++a)
        if (in.type.shape[a].is_symbolic()) symbol_source.emplace(in.type.shape[a].symbol, std::make_pair(in.name, a));
  std::map<size_t, std::vector<Node>> replacement;
  for (size_t k = 0; k < j.nodes.size(); ++k) {
    const Node& n = j.nodes[k];
    if (forward_side[k] || !n.domain.empty() || n.op_type != "Shape" || n.inputs.empty() || j.input(n.inputs[0]))
      continue;
    auto t = j.type_of(n.inputs[0]);
    if (!t || !t->is_tensor() || !t->shape.rank_known()) continue;
    std::vector<Dim> dims = t->shape.dims();
    const int64_t rank = static_cast<int64_t>(dims.size());
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
    const int64_t start = clamp(n.get_int("start", 0)), end = clamp(n.get_int("end", rank));
    dims = std::vector<Dim>(dims.begin() + start, dims.begin() + std::max(start, end));
    bool known = std::all_of(dims.begin(), dims.end(), [&](const Dim& d) {
      return d.is_known() || (d.is_symbolic() && symbol_source.count(d.symbol));
    });
    if (!known) continue;
    std::vector<Node> nodes;
    std::vector<std::string> parts;
    std::vector<int64_t> run;  // consecutive known dims, one constant
    auto flush = [&] {
      if (run.empty()) return;
      std::string c = j.unique_name(n.name + "/dims");
      j.set_initializer(c, Tensor::from_vector(DType::I64, {static_cast<int64_t>(run.size())}, run));
      parts.push_back(c);
      run.clear();
    };
    // One Shape per source input and one Gather per symbol: the names made here are not in the
    // graph yet, so unique_name alone would give two of them the same name.
    std::map<std::string, std::string> source_shape, symbol_dim;
    for (const auto& d : dims) {
      if (d.is_known()) {
        run.push_back(d.value);
        continue;
      }
      flush();
      if (auto it = symbol_dim.find(d.symbol); it != symbol_dim.end()) {
        parts.push_back(it->second);
        continue;
      }
      const auto& [src, axis] = symbol_source.at(d.symbol);
      std::string idx = j.unique_name(n.name + "/axis");
      j.set_initializer(idx, Tensor::from_vector(DType::I64, {1}, std::vector<int64_t>{axis}));
      auto [sit, added] = source_shape.emplace(src, "");
      if (added) {
        sit->second = j.unique_name(n.name + "/shape_of_" + src);
        nodes.push_back(make_node(sit->second, "Shape", {src}));
      }
      std::string dim = j.unique_name(n.name + "/" + d.symbol);
      nodes.push_back(make_node(dim, "Gather", {sit->second, idx}));
      symbol_dim[d.symbol] = dim;
      parts.push_back(dim);
    }
    flush();
    if (parts.empty()) {  // a scalar's shape: an empty 1-D tensor
      std::string c = j.unique_name(n.name + "/dims");
      j.set_initializer(c, Tensor::from_vector(DType::I64, {0}, std::vector<int64_t>{}));
      parts.push_back(c);
    }
    Node out = make_node(n.outputs[0], parts.size() == 1 ? "Identity" : "Concat", parts,
                         parts.size() == 1 ? std::vector<Attribute>{} : std::vector<Attribute>{Attribute::make_int("axis", 0)});
    out.name = n.name;
    nodes.push_back(std::move(out));
    replacement[k] = std::move(nodes);
  }
  std::set<size_t> replaced;
  for (const auto& [k, nodes] : replacement) replaced.insert(k);
  splice_nodes(j, replaced, std::move(replacement));
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
    for (const auto& o : forward.outputs) {
      auto t = forward.type_of(o.name);
      if (!t || t->kind == ValueType::Kind::Unknown || (t->is_tensor() && (t->dtype == DType::Undefined || is_float(t->dtype))))
        outputs.push_back(o.name);
    }
    if (outputs.empty())
      fail(ErrorCode::InvalidArgument, "autodiff split: graph '{}' has no float output to differentiate",
           forward.name);
  }
  std::set<std::string> seen;
  for (const auto& y : outputs) {
    if (!forward.output(y))
      fail(ErrorCode::InvalidArgument, "autodiff split: '{}' is not an output of graph '{}'", y, forward.name);
    auto t = forward.type_of(y);
    if (t && t->is_tensor() && t->dtype != DType::Undefined && !is_float(t->dtype))
      fail(ErrorCode::InvalidArgument, "autodiff split: output '{}' has dtype {}; gradients need a float tensor", y,
           dtype_name(t->dtype));
    if (!seen.insert(y).second) fail(ErrorCode::InvalidArgument, "autodiff split: output '{}' named twice", y);
  }

  ForwardBackward r;
  Graph j = joint_graph(forward, outputs, request.wrt, r.seeds);
  const size_t n_fwd_outputs = forward.outputs.size();
  const std::set<std::string> seed_set(r.seeds.begin(), r.seeds.end());

  std::vector<std::string> fwd_roots, grad_roots;
  for (size_t i = 0; i < j.outputs.size(); ++i) (i < n_fwd_outputs ? fwd_roots : grad_roots).push_back(j.outputs[i].name);
  shapes_from_types(j, NodeIndex(j).ancestors(fwd_roots));
  const NodeIndex index(j);
  const auto& producer = index.producer;
  const auto& reads = index.reads;
  const std::vector<bool> is_fwd_root = index.ancestors(fwd_roots), is_grad_root = index.ancestors(grad_roots);

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
    bool shape_op = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size") && !n.inputs.empty() &&
                    producer.count(n.inputs[0]);
    bool int_math = !has_subgraph(n) &&
                    std::any_of(reads[k].begin(), reads[k].end(), [&](const std::string& v) { return moved_values.count(v) > 0; }) &&
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
