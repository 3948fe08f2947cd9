// Graph passes: each is a transform of a Graph that depends on nothing but the
// graph (and, for shape folding, the input shapes given). They mutate the graph
// in place and return whether anything changed, so a driver can iterate to a
// fixed point. optimize() runs them by level (docs/passes.md).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::passes {

// Nodes whose inputs are all constant (initializers, not overridable graph
// inputs) are run once through the interpreter's kernels and replaced by
// initializers. Random ops and ops with subgraphs are left alone.
bool fold_constants(Graph& g);

// Removes nodes none of whose outputs reach a graph output, and initializers
// nothing reads.
bool eliminate_dead_code(Graph& g);
// Initializers that no node reads and that are neither graph inputs nor outputs, dropped
// (the nodes stay, dead or not); true when one went.
bool drop_unread_initializers(Graph& g);

// Removes Identity, inference-mode Dropout and Cast to the same type,
// rewiring their consumers to the input.
bool eliminate_identities(Graph& g);

// Common-subexpression elimination: two nodes with the same op, domain,
// inputs and attributes become one. Random ops are never merged.
bool eliminate_common_subexpressions(Graph& g);

// QDQ graphs (QuantizeLinear/DequantizeLinear around Conv, MatMul, Gemm, as ORT's static
// quantizer writes them) → QLinearConv / QLinearMatMul (a Relu before the Q: Max with the zero
// point). Run by the cpu engine before optimize(); results within one quantum of the QDQ graph.
bool fuse_qdq(Graph& g);

// The float ops between per-tensor DequantizeLinears and a QuantizeLinear (elementwise ops with
// scalar constants, MaxPool, Concat: QOperator graphs' DQ → Relu → Q) → hodu LookupTable per DQ
// (a 256-byte table the interpreter computes, so exact) and MaxPool/Concat on the integers
// (quantized_lookup.cc). Run by the cpu engine after fuse_qdq.
bool fuse_quantized_lookups(Graph& g);

// f16/bf16 graphs computed in f32 (half_widening.cc): initializers converted, intermediate values
// f32, casts at the f16/bf16 graph inputs and outputs. For engines whose kernels are f32.
bool widen_half_precision(Graph& g);

// If with a constant condition → the nodes of the branch it takes, in its place (values the
// branch defines renamed where the outer graph uses their names).
bool inline_constant_ifs(Graph& g);

// With the graph input shapes (those given here override the declared ones;
// symbolic dims bound by `input_shapes`), runs shape inference and replaces
// Shape/Size of statically known tensors by constants; fold_constants then
// evaluates the Shape → Gather → Concat → Reshape chains.
bool fold_shapes(Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes = {});

// Transpose of a Transpose becomes one Transpose; an identity Transpose goes.
bool fold_transposes(Graph& g);

// Conv followed by BatchNormalization with constant parameters: the BN is
// folded into the conv's weights and bias.
bool fold_conv_batchnorm(Graph& g);

// Gemm with transB=1 and a constant B → transB=0 over a transposed copy of B (the old one
// goes when nothing else reads it). For `hodu pack`, not run by optimize().
bool pretranspose_gemm_weights(Graph& g);

// Conv kernel taps that read only padding for every output position (DeepLab's ASPP: 3x3 convs
// dilated past a small map's size) dropped: a smaller kernel, pads moved to match. Needs the
// conv input's static shape.
bool drop_padding_only_conv_taps(Graph& g);

// A constant-zero Pad of the spatial dims (the only reader of its output a Conv or an
// AveragePool without ceil_mode) folded into the reader's pads; the pool counts the zeros
// (count_include_pad), as it did when they were the Pad's.
bool fold_pads_into_windows(Graph& g);

// Conv of a channel Concat (read by nothing else) → one Conv per part, added (fuse_conv then
// makes each Add the next conv's residual); a pool of such a Concat → the Concat of the
// pooled parts. Only where the conv's output is no larger than the Concat.
// pool_only_into_one_conv: a pool moves below a Concat only when its result feeds one Conv
// (which then splits); otherwise a Concat of pooled parts remains, which hodu build's
// generator can only copy plain (GoogLeNet's stage-3 pool fed 4 branches).
bool split_concat_convs(Graph& g, bool pool_only_into_one_conv = false);

// Conv [+ Add of a same-shaped tensor] [+ activation] → hodu.FusedConv.
bool fuse_conv(Graph& g);

// MatMul [+ Add of a constant bias over the last dim] [+ activation] and
// Gemm [+ activation] → hodu.FusedMatMul / hodu.FusedGemm; a Transpose
// swapping the last two dims of B becomes transB.
bool fuse_matmul(Graph& g);

// Add(product [→ reshapes], z) with z of the sum's exact shape, made before the product →
// the product's residual input Z (MatMul/Gemm become hodu.FusedMatMul/FusedGemm; z gets a
// Reshape to the product's shape when the views between changed it). Products with an
// activation keep their Add (it would run before the residual).
bool fuse_residual_add(Graph& g);

// Erf-based GELU (x * 0.5 * (1 + erf(x / sqrt(2)))) → hodu.Gelu.
bool fuse_gelu(Graph& g);

// x * Clip(x + 3, 0, 6) / 6 and x * HardSigmoid(x, 1/6, 0.5) (float x) → HardSwish(x).
bool fuse_hardswish(Graph& g);

// LayerNormalization / RMSNormalization and their decomposed forms
// (ReduceMean, Sub, Pow, Add, Sqrt, Div, Mul, Add) → hodu.LayerNorm.
bool fuse_layer_norm(Graph& g);

// MatMul(Q, Kᵀ) [* scale] [+ mask] → Softmax → MatMul(·, V) on rank-4
// tensors → hodu.Attention.
bool fuse_attention(Graph& g);

// The head split (Reshape/Transpose chains giving a rank-4 Attention operand [B, H, S, D] from
// a source whose bytes are [B, S, H, D]) and head merge (back to [B, S, H·Dv] bytes) around a
// hodu.Attention → its rank-3 form (num_heads, kv_num_heads) on the sources directly.
bool absorb_attention_heads(Graph& g);

// Connected f32 elementwise ops (Add/Sub/Mul/Div, Relu, Sigmoid, Tanh, Exp, ...)
// over one shape, intermediates read once → hodu.FusedElementwise with the ops
// as its body graph.
bool fuse_elementwise(Graph& g);

struct OptimizeOptions {
  int level = 2;  // 0..3, see docs/passes.md
  // Concrete input shapes, when known (an engine preparing for one shape).
  std::map<std::string, std::vector<int64_t>> input_shapes;
};

// Runs the passes of a level to a fixed point and re-infers value types.
// Records the level in the model's metadata ("hodu.opt_level").
void optimize(Model& model, const OptimizeOptions& options);
// The level a model was optimized at (from its metadata), or -1.
int optimized_level(const Model& model);

}  // namespace hodu::passes
