// Shape-subgraph folding: once input shapes are known, Shape/Size of tensors
// with static shapes are constants, and constant folding evaluates what
// follows (Gather, Concat, Unsqueeze, Reshape's shape input...). CastLike of a
// constant needs only the dtype of its second input: a constant too.
#include <algorithm>

#include "core/error.h"
#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {

bool fold_shapes(Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  for (auto& in : g.inputs) {
    auto it = input_shapes.find(in.name);
    if (it == input_shapes.end()) continue;
    if (!in.type.is_tensor()) continue;  // optional/sequence inputs keep their declared type
    const Shape& declared = in.type.shape;
    HODU_CHECK(!declared.rank_known() || declared.rank() == static_cast<int64_t>(it->second.size()),
               ErrorCode::InvalidArgument, "input '{}' has rank {}, given shape {}", in.name, declared.rank(),
               shape_to_string(it->second));
    in.type.shape = Shape::from(it->second);
  }
  infer_types(g);
  bool changed = false;
  std::set<size_t> folded;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    // CastLike of a constant reads only its second input's dtype (paddle2onnx writes Clip's
    // bounds so): the cast constant, and the Clip after it gets constant bounds.
    if (n.op_type == "CastLike" && n.inputs.size() == 2 && n.has_output(0)) {
      const Tensor* c = constant_of(g, n.inputs[0]);
      auto like = g.type_of(n.inputs[1]);
      if (c && c->dtype() != DType::String && like && like->is_tensor() && like->dtype != DType::Undefined &&
          like->dtype != DType::String && n.get_int("saturate", 1) != 0) {
        g.set_initializer(n.outputs[0], c->cast(like->dtype));
        folded.insert(k);
        changed = true;
      }
      continue;
    }
    if (n.op_type != "Shape" && n.op_type != "Size") continue;
    if (!n.has_input(0) || !n.has_output(0)) continue;
    auto shape = static_shape(g, n.inputs[0]);
    if (!shape) continue;
    Tensor t;
    if (n.op_type == "Size") {
      t = Tensor::scalar<int64_t>(DType::I64, shape_numel(*shape));
    } else {
      int64_t r = static_cast<int64_t>(shape->size());
      int64_t start = n.get_int("start", 0), end = n.get_int("end", r);
      if (start < 0) start += r;
      if (end < 0) end += r;
      start = std::clamp<int64_t>(start, 0, r);
      end = std::clamp<int64_t>(end, start, r);
      std::vector<int64_t> dims(shape->begin() + start, shape->begin() + end);
      t = Tensor::from_vector(DType::I64, {static_cast<int64_t>(dims.size())}, dims);
    }
    g.set_initializer(n.outputs[0], t);
    folded.insert(k);
    changed = true;
  }
  erase_nodes(g, folded);
  return changed;
}

}  // namespace hodu::passes
