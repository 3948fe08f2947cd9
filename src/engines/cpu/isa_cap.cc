// HODU_MAX_ISA (kernels/cpu/isa_cap.h) for the cpu engine: checked, and passed on to oneDNN
// as its max CPU ISA before the engine's first primitive, so oneDNN's kernels take the same cap
// as hodu's own vector loops.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "engines/cpu/cpu_engine.h"
#include "kernels/cpu/isa_cap.h"

namespace hodu::cpu {

void apply_isa_cap() {
  const char* v = std::getenv("HODU_MAX_ISA");
  const int level = isa_cap::level_of(v);
  HODU_CHECK(level >= 0, ErrorCode::InvalidArgument,
             "HODU_MAX_ISA={}: expected baseline, avx2, avx512, avx512_vnni, avx512_bf16 or amx", v);
  if (level == 99) return;
  static std::once_flag once;
  std::call_once(once, [level] {
    using isa = dnnl::cpu_isa;
    const isa map[] = {isa::sse41, isa::avx2, isa::avx512_core, isa::avx512_core_vnni, isa::avx512_core_bf16,
                       isa::avx512_core_amx};
    // Refused once oneDNN has created a primitive (or read ONEDNN_MAX_CPU_ISA): it then keeps the
    // ISA it chose, which ONEDNN_MAX_CPU_ISA set by the caller decides.
    try {
      dnnl::set_max_cpu_isa(map[level]);
    } catch (const dnnl::error&) {
    }
  });
}

}  // namespace hodu::cpu
