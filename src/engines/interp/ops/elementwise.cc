// Elementwise ops: the family's registration and shared helpers. The kernels
// live in elementwise_unary.cc (math, activations, IsNaN/IsInf, Not,
// BitwiseNot), elementwise_binary.cc (arithmetic, comparison, logic, bitwise,
// variadic Max/Min/Sum/Mean, Where, Clip, PRelu, Pow, Mod) and cast.cc.
#include "engines/interp/ops/elementwise_common.h"

namespace hodu::interp {

std::vector<int64_t> broadcast_all(const KernelContext& ctx, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<int64_t> out;
  for (const auto& s : shapes) out = broadcast_shapes(ctx, out, s);
  return out;
}

void register_elementwise_ops(OpTable& t) {
  register_elementwise_unary_ops(t);
  register_elementwise_binary_ops(t);
  register_cast_ops(t);
}

}  // namespace hodu::interp
