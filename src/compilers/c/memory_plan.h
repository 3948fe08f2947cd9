// Static memory plan: every intermediate buffer gets an offset in one arena,
// computed at build time from liveness (the steps during which it is live).
// Buffers whose lifetimes do not overlap share memory; a buffer may ask to
// reuse a specific buffer in place (an elementwise op writing over an input that
// dies at that step).
#pragma once
#include <cstdint>
#include <vector>

#include "compilers/c/sym_int.h"

namespace hodu::compilers::c {

struct PlanBuffer {
  SymInt bytes = 0;
  int first_step = 0;  // written at this step
  int last_step = 0;   // last read at this step (inclusive)
  int reuse = -1;      // index of a buffer to share in place, or -1
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per buffer, aligned to `alignment`
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;  // sum of all buffer sizes (what no planning would need)
};

// In-place requests are honoured when legal: the reused buffer's last step is
// the requester's first step (their shared slot grows to the larger of the two).
// Throws Internal on a request that is not legal (a codegen bug).
MemoryPlan plan_memory(const std::vector<PlanBuffer>& buffers, int64_t alignment = 64);

}  // namespace hodu::compilers::c
