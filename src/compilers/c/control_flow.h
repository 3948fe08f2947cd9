// Control flow for the C generator. An If whose condition is known at build time (a
// constant, or computed from shapes the build binds) becomes the branch it takes
// (passes::inline_constant_ifs, in graph_prep's fold rounds). Ifs decided only while
// running, Loop and Scan are not compiled yet: require_no_control_flow names them.
#pragma once
#include "ir/graph.h"

namespace hodu::compilers::c {

// Unsupported, naming the node and why, for the first If, Loop or Scan left in the graph.
void require_no_control_flow(const Graph& g);

}  // namespace hodu::compilers::c
