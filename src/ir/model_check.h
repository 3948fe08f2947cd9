// Finds what makes a model unable to run, without running it: structure (the
// verifier), type and shape contradictions (inference, going on past the first),
// inputs whose dtypes break an op's type constraints, and shapes too large to
// exist. `hodu info` lists them; `hodu info --check` fails on any.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu {

struct ModelProblem {
  std::string node;     // node name ("" for the graph itself or an unnamed node)
  std::string op;       // op type, "domain.Op" outside ai.onnx; "" for the graph
  std::string message;  // names the node, op and values concerned
};

std::vector<ModelProblem> find_model_problems(const Model& model);

}  // namespace hodu
