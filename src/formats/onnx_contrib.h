// ONNX Runtime's contrib ops (domain com.microsoft) lowered to standard ONNX at
// import (private to src/formats; the op list and each lowering: docs/import.md).
//
// Every node of domain com.microsoft (and ORT's SimplifiedLayerNormalization,
// which it registers in the ai.onnx domain) is replaced by the standard nodes
// that compute it, once, when the model is loaded: every engine, level and
// `hodu build` then sees only ONNX ops, and the passes' fusions (GELU, layer
// norm, attention, QDQ -> int8 kernels) pick the standard form up. An op or
// attribute combination with no lowering is an Unsupported error naming the
// op, its domain, the node and what is missing.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu {

// Lowers the com.microsoft nodes of `model` (subgraphs included). `what` names
// the file in errors.
void lower_contrib_ops(Model& model, const std::string& what);

// The com.microsoft ops lower_contrib_ops knows, sorted.
std::vector<std::string> supported_contrib_ops();

}  // namespace hodu
