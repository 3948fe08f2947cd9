// HODU_MAX_ISA: the highest instruction set hodu's kernels may choose at run time, so that the
// AVX2 paths can be run, tested and benchmarked on an AVX-512 CPU (and the portable ones on
// any). Values: baseline (no AVX), avx2, avx2_vnni (AVX2 with AVX-VNNI's int8 products: Alder Lake,
// Sierra Forest), avx512, avx512_vnni, avx512_bf16, amx; unset or empty: what the CPU has. Header-only: the cpu engine (libhodu) and libhodu_kernels.so both read it.
#pragma once
#include <cstdlib>
#include <cstring>

namespace hodu::isa_cap {

// The cap as a level (0 baseline, 1 avx2, 2 avx2_vnni, 3 avx512, 4 avx512_vnni, 5 avx512_bf16, 6 amx;
// 99 no cap); -1 for a value that is none of these (the cpu engine reports it as an error).
inline int level_of(const char* v) {
  if (!v || !*v) return 99;
  static const char* const names[] = {"baseline", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"};
  for (int i = 0; i < 7; ++i)
    if (std::strcmp(v, names[i]) == 0) return i;
  return -1;
}

// The highest level at which hodu's own vector loops still run AVX2 code.
constexpr int kAvx2Levels = 2;

inline int level() {
  static const int l = level_of(std::getenv("HODU_MAX_ISA"));
  return l;
}

}  // namespace hodu::isa_cap
