// The elementwise nodes after a conv that its oneDNN primitive can run as eltwise post-ops:
// PaddleOCR's PP-LCNetV3 writes conv → Mul(scale) → Add(shift) → HardSwish → Mul → Add before
// the next conv; as post-ops the chain costs nothing, as steps each one read and wrote the
// whole tensor (and the FusedElementwise loop, plain-only, reordered it out of the conv's
// blocked layout and back).
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

struct EltwisePostOp {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
  // An eltwise_linear run as binary mul/add post-ops by one-element tensors (oneDNN 2.6 keeps
  // one alpha/beta per eltwise algorithm: see post_op_chain).
  bool binary = false;
};

struct PostOpChain {
  std::vector<const Node*> nodes;  // claimed by the conv's step when it takes the chain
  std::vector<EltwisePostOp> ops;
  std::string output;  // the last node's output (the conv's step writes it); empty: no chain
};

// The longest chain of f32 nodes after `y`, each the only reader of the one before, none of
// their values a graph output: unary activations (Relu, LeakyRelu, Sigmoid, Tanh, HardSwish,
// HardSigmoid, Clip with constant bounds, Abs, Neg, Elu, Exp, Sqrt), Add/Sub/Mul/Div by a
// one-element constant, and hodu.FusedElementwise bodies made only of those. `before`: the
// eltwise post-ops the primitive already has (its own activation).
PostOpChain post_op_chain(const PlanBuilder& b, const std::string& y, const std::vector<EltwisePostOp>& before);

// The eltwise entries of `po`, in order.
std::vector<EltwisePostOp> eltwise_ops_of(const dnnl::post_ops& po);

// Appends `ops` for a primitive whose dst has `rank` dims. The binary ones need their one-element
// operand at run time: `operands` gets (DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, value).
void append_post_ops(dnnl::post_ops& po, const std::vector<EltwisePostOp>& ops, int rank,
                     std::vector<std::pair<int, float>>& operands);

}  // namespace hodu::cpu
