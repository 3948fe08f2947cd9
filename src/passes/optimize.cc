// The pass pipeline by level (docs/passes.md).
#include "core/error.h"
#include "ir/schema.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

constexpr const char* kLevelKey = "hodu.opt_level";

// Runs `step` until it reports no change (bounded: passes shrink the graph).
template <typename F>
void to_fixed_point(F step) {
  for (int i = 0; i < 16 && step(); ++i) {}
}

}  // namespace

int optimized_level(const Model& model) {
  for (const auto& [k, v] : model.metadata)
    if (k == kLevelKey) return std::atoi(v.c_str());
  return -1;
}

// A Gradient node (ai.onnx.preview.training) differentiates the nodes between its
// xs and y by name at run time; any rewrite of them (folding, fusion, CSE, DCE of
// the values it reads) changes what it sees, so such graphs stay as loaded.
static bool has_gradient_node(const Graph& g) {
  for (const auto& n : g.nodes)
    if (n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training") return true;
  return false;
}

void optimize(Model& model, const OptimizeOptions& requested) {
  HODU_CHECK(requested.level >= 0 && requested.level <= 3, ErrorCode::InvalidArgument,
             "optimization level {} is out of range (0..3)", requested.level);
  Graph& g = model.graph;
  OptimizeOptions options = requested;
  if (has_gradient_node(g)) options.level = 0;
  if (options.level >= 1) {
    to_fixed_point([&] {
      bool changed = fold_shapes(g, options.input_shapes);
      changed |= fold_constants(g);
      changed |= inline_constant_ifs(g);
      changed |= eliminate_identities(g);
      changed |= eliminate_common_subexpressions(g);
      changed |= eliminate_dead_code(g);
      return changed;
    });
  }
  if (options.level >= 2) {
    infer_types(g);
    fold_transposes(g);
    fold_pads_into_windows(g);
    fold_conv_batchnorm(g);
    infer_types(g);
    drop_padding_only_conv_taps(g);
    split_concat_convs(g);
    infer_types(g);
    fuse_gelu(g);
    fuse_hardswish(g);
    fuse_layer_norm(g);
    if (options.level >= 3) {
      infer_types(g);
      fuse_attention(g);
      infer_types(g);
      absorb_attention_heads(g);
    }
    infer_types(g);
    fuse_matmul(g);
    infer_types(g);
    fuse_residual_add(g);
    infer_types(g);
    fuse_conv(g);
    if (options.level >= 3) {
      // Last: what the fusions above did not take into a conv or matmul.
      infer_types(g);
      fuse_elementwise(g);
    }
    eliminate_dead_code(g);
  }
  infer_types(g);
  for (auto it = model.metadata.begin(); it != model.metadata.end();)
    it = it->first == kLevelKey ? model.metadata.erase(it) : std::next(it);
  model.metadata.emplace_back(kLevelKey, std::to_string(options.level));
  if (options.level >= 2) model.opset_imports["hodu"] = 1;
}

}  // namespace hodu::passes
