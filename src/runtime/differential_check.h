// Differential check: runs a model on an engine and on the reference
// interpreter with the same feeds and, when an output differs, bisects the
// graph to the first node whose result differs (`hodu run --check`).
//
// Bisection cuts the model after node k: the prefix keeps nodes 0..k and
// outputs every value those nodes produce that a later node (or subgraph)
// reads, plus node k's own outputs. Both engines run the prefix as a model of
// its own, so the engine applies its real passes and kernels to it; the first
// k whose prefix differs names the node. Passes may fuse across the cut, so the
// node named is where the difference first becomes visible, which is where a
// fused kernel starts or where a wrong pass rewrote the graph.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ir/graph.h"
#include "runtime/session.h"

namespace hodu {

struct DifferentialOptions {
  SessionOptions engine;      // the engine under test
  int opt_level = -1;         // passes run on each (prefix) model before the engine, as `hodu run -O`
  double tolerance = 1e-4;    // relative L2 error allowed on floating outputs
  double abs_tolerance = 1e-6;  // ... or this max abs error (outputs near zero)
  bool bisect = true;
};

struct ValueDifference {
  explicit ValueDifference(std::string name = {}) : value(std::move(name)) {}
  std::string value;
  bool matches = true;
  double rel_l2 = 0, max_abs = 0;
  std::string note;  // shape/dtype/kind mismatch, NaN placement, ...
  std::string to_string() const;
};

struct DifferentialReport {
  std::vector<ValueDifference> outputs;  // the whole model's outputs
  bool ok = true;
  // Set when an output differs and bisection found the node.
  struct Divergence {
    int node_index = -1;
    std::string node;  // Node::describe()
    std::vector<ValueDifference> values;  // that node's outputs
  };
  std::optional<Divergence> first;
  int prefixes_run = 0;
  std::string note;  // why bisection found nothing, when it did not
};

// Compares two run results (same names). Floating tensors: rel L2 <= tolerance
// or max abs <= abs_tolerance, NaNs in the same places; others exactly.
ValueDifference compare_values(const std::string& name, const RuntimeValue& got, const RuntimeValue& expected,
                               double tolerance, double abs_tolerance);

// The model cut after node `last`: nodes 0..last, outputs the values of those
// nodes read later (or graph outputs) plus node `last`'s outputs.
Model prefix_model(const Model& model, int last);

DifferentialReport differential_check(const Model& model, const std::map<std::string, RuntimeValue>& feeds,
                                      const DifferentialOptions& options);

}  // namespace hodu
