// ONNX opset conversion, both directions (private to src/formats).
//
// Import: a model declares an opset per domain; every node is rewritten into
// the canonical form of its op (the semantics of the newest ONNX version, see
// "One op table" in the architecture notes). The declared versions stay in
// Model::opset_imports.
//
// Export: the canonical form is written down at a target opset, moving inputs
// back into attributes where that opset needs it.
#pragma once
#include <map>
#include <set>
#include <string>

#include "ir/graph.h"

namespace onnx {
class TypeProto;
class GraphProto;
}  // namespace onnx

namespace hodu {

// Highest ai.onnx opset hodu knows.
inline constexpr int kMaxOnnxOpset = 27;
// Highest ai.onnx.ml opset hodu knows.
inline constexpr int kMaxOnnxMlOpset = 5;

// Rewrites every node (subgraphs included) of `model` from the opsets it
// declares (Model::opset_imports) into canonical form. `what` names the file.
void canonicalize_onnx_model(Model& model, const std::string& what);

// Every value and node name of `g` and its subgraphs, into `names` (so rewrites
// can make fresh ones).
void collect_graph_names(const Graph& g, std::set<std::string>& names);
// `base`, or `base_1`, `base_2`... : the first not in `names`, which it joins.
std::string fresh_name(std::set<std::string>& names, const std::string& base);

// Converts a canonical graph (a copy) to the form of the given ai.onnx opset.
// Unsupported when an op cannot be written at that opset.
void downgrade_graph(Graph& graph, int opset);

// The lowest ai.onnx opset >= `floor` at which every node of the graph (and its
// subgraphs) can be written.
int required_onnx_opset(const Graph& graph, int floor);

// ValueType <-> TypeProto (shared by import and export).
ValueType value_type_from_onnx(const onnx::TypeProto& t, const std::string& what);
void value_type_to_onnx(const ValueType& t, onnx::TypeProto* proto);

}  // namespace hodu
