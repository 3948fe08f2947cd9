// float16 / bfloat16 through the float32 kernels: a Conv, pool, MatMul or Gemm on half
// floats becomes Casts of its half inputs to float32, the op in float32, and a Cast of each
// result back: what the interpreter does (it widens these ops' inputs and narrows their
// results), so the compiled code rounds where it rounds. The Casts fuse into the
// neighbouring loops (f16 models cast between their ops anyway).
#pragma once
#include "ir/graph.h"

namespace hodu::compilers::c {

// True when a node was rewritten. Needs the value types inferred.
bool widen_half_ops(Graph& g);

}  // namespace hodu::compilers::c
