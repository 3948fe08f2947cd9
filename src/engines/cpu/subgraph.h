// A subgraph (If branch, Loop or Scan body) run by the cpu engine itself: made a model of its
// own whose inputs are the body's inputs followed by the outer values it reads, optimized (with
// the concrete shapes, so shape guards fold and constant Ifs inline) and planned like the main
// graph, once per set of input types (past 8, once with the varying dims free, unless that plan
// would run more nodes on the interpreter's kernel than the per-shape ones: then the 8 most
// recently used shapes keep plans); a run binds the inputs to the caller's values without copying and may write the
// outputs straight into the caller's buffers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

class Subgraph {
 public:
  // `body` is the subgraph of a node of `parent` (the graph planned by `b`); the outer values it
  // reads that are constants there are copied in as its own initializers.
  Subgraph(PlanBuilder& b, const Graph& body, const PlanOptions& options);
  // The outer values the caller passes after the body's own inputs, in order.
  const std::vector<std::string>& outer() const { return outer_; }
  size_t formal_inputs() const { return body_.inputs.size(); }
  size_t outputs() const { return body_.outputs.size(); }
  // The plan for these inputs (the body's own, then outer()), built on first use.
  Plan& plan_for(const std::vector<RuntimeValue>& inputs);
  // Every plan built so far (tests, --verbose).
  std::vector<const Plan*> plans() const;

 private:
  struct Entry {
    std::vector<std::pair<DType, std::vector<int64_t>>> key;  // per input; shape {-1} for non-tensors
    std::vector<char> fixed;  // a generic plan: which inputs' shapes it was built for
    std::unique_ptr<Model> model;
    std::unique_ptr<Plan> plan;
    uint64_t used = 0;  // the call that last used it (plan_for's count)
  };
  bool matches(const Entry& e, const std::vector<RuntimeValue>& inputs) const;
  Entry& build(const std::vector<RuntimeValue>& inputs, bool generic);

  Graph body_;
  Model base_;  // metadata and opsets of the parent model, no graph
  std::vector<std::string> outer_;
  std::vector<std::pair<std::string, Tensor>> outer_constants_;
  PlanOptions options_;
  dnnl::engine& engine_;
  std::vector<std::unique_ptr<Entry>> entries_;
  size_t last_ = 0;  // the entry the last call used: tried first
  uint64_t tick_ = 0;
  bool generic_refused_ = false;  // the free-dim plan fell back more: per-shape plans only
};

// The names a graph reads from enclosing scopes (its nodes', its nested subgraphs', its outputs),
// in first-use order.
std::vector<std::string> free_values(const Graph& g);

}  // namespace hodu::cpu
