// Puts a graph's nodes in topological order, as engines and passes expect.
// ONNX requires it, but published models break the rule (some fp16 converters
// append the Casts they insert at the end); ONNX Runtime sorts such graphs and
// runs them, so the importer sorts too.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu {

// Reorders `graph.nodes` (and its subgraphs' nodes) so every node comes after
// the producers of what it reads, subgraph reads of outer values included.
// Nodes already in order keep their order. Returns false and leaves the graph
// as it is when the nodes form a cycle (the verifier then names it).
bool sort_topologically(Graph& graph);

// Every value a node reads: its inputs and, for If/Loop/Scan, the outer values
// its bodies read (a value may appear more than once).
std::vector<std::string> node_reads(const Node& n);

}  // namespace hodu
