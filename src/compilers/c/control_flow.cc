#include "compilers/c/control_flow.h"

#include "core/error.h"

namespace hodu::compilers::c {

void require_no_control_flow(const Graph& g) {
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || (n.op_type != "If" && n.op_type != "Loop" && n.op_type != "Scan")) continue;
    fail(ErrorCode::Unsupported,
         "{}: control flow is not supported by compiled code yet ({} {}); an If compiles when its condition "
         "is known at build time (from constants, or from shapes bound with --shape/--dim); run this model "
         "on the cpu engine (hodu run MODEL)",
         n.describe(), n.op_type,
         n.op_type == "If" ? "whose condition is known only at run time" : "with a body run while running");
  }
}

}  // namespace hodu::compilers::c
