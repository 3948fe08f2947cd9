// Control flow for the C generator. An If whose condition is known at build time (a
// constant, or computed from shapes the build binds) becomes the branch it takes: its
// nodes spliced into the graph under names of their own. Ifs decided only while running,
// Loop and Scan are not compiled yet: require_no_control_flow names them.
#pragma once
#include "ir/graph.h"

namespace hodu::compilers::c {

// Ifs whose condition is a constant (an initializer): replaced by the branch they take
// (Ifs nested in that branch come out as nodes of the graph, for the next fold round).
// True when something changed.
bool inline_constant_ifs(Graph& g);

// Unsupported, naming the node and why, for the first If, Loop or Scan left in the graph.
void require_no_control_flow(const Graph& g);

}  // namespace hodu::compilers::c
