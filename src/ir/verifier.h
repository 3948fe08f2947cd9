// Checks that a graph is well formed: every input of a node is produced
// earlier (or is a graph input, initializer or outer-scope value), names are
// unique, ops are known with the right arity and attribute kinds, the graph is
// acyclic. Errors name the node, op and value.
#pragma once
#include <set>
#include <string>

#include "ir/graph.h"

namespace hodu {

// `outer_scope`: names visible from enclosing graphs (for subgraphs).
void verify_graph(const Graph& graph, const std::set<std::string>& outer_scope = {});
void verify_model(const Model& model);

}  // namespace hodu
