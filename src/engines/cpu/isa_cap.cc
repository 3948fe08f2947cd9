// HODU_MAX_ISA (kernels/cpu/isa_cap.h) for the cpu engine: checked, and passed on to oneDNN
// as its max CPU ISA before the engine's first primitive, so oneDNN's kernels take the same cap
// as hodu's own vector loops.
#include <cstdlib>

#include "core/error.h"
#include "engines/cpu/cpu_engine.h"
#include "kernels/cpu/isa_cap_onednn.h"

namespace hodu::cpu {

void apply_isa_cap() {
  const char* v = std::getenv("HODU_MAX_ISA");
  const int level = isa_cap::level_of(v);
  HODU_CHECK(level >= 0, ErrorCode::InvalidArgument,
             "HODU_MAX_ISA={}: expected baseline, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16 or amx", v);
  isa_cap::pass_to_onednn(level);
}

}  // namespace hodu::cpu
