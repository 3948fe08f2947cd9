// The reference interpreter: runs a graph node by node with the kernels of
// OpTable. It is hodu's oracle: every op, every dtype, exact before fast.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ir/graph.h"

namespace hodu::interp {

struct InterpreterOptions {
  int threads = 1;
  uint64_t seed = 0;  // random ops
};

class Interpreter {
 public:
  // The model must outlive the interpreter. Checks that every op has a kernel
  // (Unsupported naming op, node and domain otherwise).
  Interpreter(const Model& model, InterpreterOptions options = {});

  // Runs the main graph. `inputs` are matched by name to the graph inputs;
  // returns the graph outputs in order.
  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& inputs) const;

  // Runs any graph with an outer scope (used for subgraphs and by tests).
  std::vector<RuntimeValue> run_graph(const Graph& graph, const std::vector<RuntimeValue>& inputs,
                                      const std::map<std::string, const RuntimeValue*>& outer) const;

 private:
  const Model& model_;
  InterpreterOptions options_;
};

}  // namespace hodu::interp
