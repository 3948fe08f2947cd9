// Helpers the graph tests share (passes and the cpu engine's): a node, a count of an op.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::testing {

// A node named after its first output.
inline Node test_node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                      std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = outs.empty() || outs[0].empty() ? op : outs[0];
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attributes = std::move(attrs);
  return n;
}

// Nodes of `g` (top level) with this op type.
inline int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

}  // namespace hodu::testing
