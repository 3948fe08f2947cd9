#include "distributed/edge/model_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "ir/schema.h"
#include "ir/topological_order.h"

namespace hodu::edge {
namespace {

// Every value a node reads, its subgraphs' reads of outer values included.
std::set<std::string> reads(const Node& n) {
  std::vector<std::string> r = node_reads(n);
  return {r.begin(), r.end()};
}

Value typed(const Graph& g, const std::string& name) {
  Value v;
  v.name = name;
  if (auto t = g.type_of(name)) v.type = *t;
  return v;
}

// A model with the source's metadata and the given nodes (in the source's order);
// its initializers are those the nodes read.
Model part(const Model& source, const std::vector<const Node*>& nodes, std::vector<Value> inputs,
           std::vector<Value> outputs, const std::string& suffix) {
  Model m;
  m.ir_version = source.ir_version;
  m.opset_imports = source.opset_imports;
  m.producer_name = source.producer_name;
  m.producer_version = source.producer_version;
  m.domain = source.domain;
  m.model_version = source.model_version;
  m.doc = source.doc;
  m.metadata = source.metadata;
  const Graph& g = source.graph;
  m.graph.name = g.name + suffix;
  m.graph.inputs = std::move(inputs);
  m.graph.outputs = std::move(outputs);
  std::set<std::string> used;
  for (const Node* n : nodes) {
    m.graph.nodes.push_back(*n);
    for (const auto& r : reads(*n)) used.insert(r);
    for (const auto& o : n->outputs)
      if (auto it = g.value_types.find(o); it != g.value_types.end()) m.graph.value_types.insert(*it);
  }
  for (const auto& o : m.graph.outputs) used.insert(o.name);
  for (const auto& [name, t] : g.initializers)
    if (used.count(name)) m.graph.initializers.emplace_back(name, t);
  return m;
}

}  // namespace

ModelSplit split_model(const Model& model, const std::string& value) {
  Model typed_model = model;  // types of the values that will cross, where inference knows them
  try {
    infer_types(typed_model.graph);
  } catch (const Error&) {
    // The declared types are kept; a value without one crosses untyped.
  }
  const Graph& g = typed_model.graph;
  int producer = g.producer_of(value);
  if (producer < 0) {
    bool is_input = g.input(value) || g.initializer(value);
    fail(ErrorCode::InvalidArgument, "cannot cut the model at '{}': {}", value,
         is_input ? "it is a graph input or initializer; no node computes it" : "no node produces a value of that name");
  }
  // The head: VALUE's producer and everything it depends on.
  std::vector<bool> in_head(g.nodes.size(), false);
  std::vector<int> stack = {producer};
  while (!stack.empty()) {
    int i = stack.back();
    stack.pop_back();
    if (in_head[i]) continue;
    in_head[i] = true;
    for (const auto& r : reads(g.nodes[i]))
      if (int p = g.producer_of(r); p >= 0 && !in_head[p]) stack.push_back(p);
  }
  std::vector<const Node*> head_nodes, tail_nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) (in_head[i] ? head_nodes : tail_nodes).push_back(&g.nodes[i]);
  auto from_head = [&](const std::string& name) {
    int p = g.producer_of(name);
    return p >= 0 && in_head[p];
  };
  // Values the tail reads from the head, in the order the tail first reads them.
  ModelSplit split;
  std::set<std::string> seen;
  for (const Node* n : tail_nodes)
    for (const auto& i : n->inputs)
      if (!i.empty() && from_head(i) && seen.insert(i).second) split.sent.push_back(i);
  for (const Node* n : tail_nodes)
    for (const auto& r : reads(*n))
      if (from_head(r) && seen.insert(r).second) split.sent.push_back(r);
  HODU_CHECK(seen.count(value), ErrorCode::InvalidArgument,
             "cannot cut the model at '{}': no node after it reads it, so nothing is left to run remotely", value);
  std::vector<Value> head_outputs, tail_outputs, head_inputs, tail_inputs;
  for (const auto& s : split.sent) head_outputs.push_back(typed(g, s));
  for (const auto& o : g.outputs) {
    bool head_side = from_head(o.name) || (g.producer_of(o.name) < 0);  // graph inputs passed through
    if (!head_side) {
      tail_outputs.push_back(o);
    } else if (!seen.count(o.name)) {
      head_outputs.push_back(o);
    }
  }
  HODU_CHECK(!tail_outputs.empty(), ErrorCode::InvalidArgument,
             "cannot cut the model at '{}': every graph output is computed before it", value);
  std::set<std::string> head_reads, tail_reads;
  for (const Node* n : head_nodes)
    for (const auto& r : reads(*n)) head_reads.insert(r);
  for (const Node* n : tail_nodes)
    for (const auto& r : reads(*n)) tail_reads.insert(r);
  for (const auto& o : head_outputs) head_reads.insert(o.name);
  for (const auto& o : tail_outputs) tail_reads.insert(o.name);
  for (const auto& s : split.sent) tail_inputs.push_back(typed(g, s));
  for (const auto& in : g.inputs) {
    if (g.initializer(in.name)) continue;
    if (head_reads.count(in.name)) head_inputs.push_back(in);
    if (tail_reads.count(in.name)) tail_inputs.push_back(in);
  }
  split.head = part(typed_model, head_nodes, std::move(head_inputs), std::move(head_outputs), "_head");
  split.tail = part(typed_model, tail_nodes, std::move(tail_inputs), std::move(tail_outputs), "_tail");
  return split;
}

}  // namespace hodu::edge
