#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {

void register_gradient_ops(OpTable& t) { (void)t; }

}  // namespace hodu::interp
