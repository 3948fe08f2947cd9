// Helpers the graph tests share (passes and the cpu engine's): a node, a count of an op, an
// environment variable for one scope.
#pragma once
#include <cstdlib>
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

// An environment variable set (or, with a null value, unset) for one scope, unset after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Nodes of `g` (top level) with this op type.
inline int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

}  // namespace hodu::testing
