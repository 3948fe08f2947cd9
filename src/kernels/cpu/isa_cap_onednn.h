// HODU_MAX_ISA's level (isa_cap.h) passed on to oneDNN as its max CPU ISA, so that oneDNN's
// kernels take the same cap as hodu's own loops: by the cpu engine before its first primitive
// and by libhodu_kernels' hodu_kernels_create (a default-mode artifact run by a user's program).
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <mutex>

#include "kernels/cpu/isa_cap.h"

namespace hodu::isa_cap {

// level: isa_cap::level_of's (0..6; 99, no cap, does nothing). Once per process; oneDNN refuses
// it once it has created a primitive (or read ONEDNN_MAX_CPU_ISA): it then keeps the ISA it
// chose, which ONEDNN_MAX_CPU_ISA set by the caller decides.
inline void pass_to_onednn(int level) {
  if (level < 0 || level > 6) return;
  static std::once_flag once;
  std::call_once(once, [level] {
    using isa = dnnl::cpu_isa;
    const isa map[] = {isa::sse41,           isa::avx2,        isa::avx2_vnni,         isa::avx512_core,
                       isa::avx512_core_vnni, isa::avx512_core_bf16, isa::avx512_core_amx};
    try {
      dnnl::set_max_cpu_isa(map[level]);
    } catch (const dnnl::error&) {
    }
  });
}

}  // namespace hodu::isa_cap
