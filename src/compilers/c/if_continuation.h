// An If whose branches give tensors of different ranks, decided by a size known only while
// running (torch's squeeze of a dim that may be 1: Silero VAD's decoder at free sample counts),
// has no rank that compiled code can give its output. Its continuation — the nodes reading such
// outputs, then what reads theirs, until the ranks agree again — moves into both branches, so
// each branch computes it at its own rank (its rank tests fold there, a branch that cannot run
// at its rank becomes compiled code's run-time error). ONNX semantics are unchanged: the same
// nodes run on the same values, only inside the If.
#pragma once
#include <set>
#include <string>

#include "ir/graph.h"

namespace hodu::compilers::c {

// Reconciles every such If of `g` (`model` gives the opsets; after the fold rounds of graph_prep; types inferred): the
// If's outputs whose rank inference leaves unknown get the rank both branches agree on (the
// branches folded as their compiled bodies will be, a branch that cannot run left out), as
// `g.value_types`, else the nodes reading them move into the branches and it is tried again.
// An If whose divergent output is a graph output, or that needs more than a bounded number of
// moved nodes, is left as it was (graph_prep's shapes then refuse it, naming it). One If per
// call (the caller folds what it made constant, then calls again); `tried` (kept by the
// caller between calls) holds the Ifs already looked at. Returns whether `g` changed.
bool reconcile_divergent_ifs(Graph& g, const Model& model, std::set<std::string>& tried);

}  // namespace hodu::compilers::c
