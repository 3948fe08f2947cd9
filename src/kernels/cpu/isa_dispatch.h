// Run-time ISA dispatch that honours HODU_MAX_ISA: HODU_ISA_VARIANTS(ret, name, (params), (args))
// defines `ret name(params)` calling one of three copies of `name##_body` (an always-inline
// function defined before it) compiled for AVX-512, AVX2+FMA and plain x86-64, chosen by
// vector_math::cpu_isa(). GCC's target_clones would choose by the CPU alone, so a cap could
// not reach these loops.
#pragma once
#include "kernels/cpu/vector_math.h"

#define HODU_ISA_VARIANTS(ret, name, params, args)                                                   \
  __attribute__((target("avx512f"))) static ret name##_avx512 params { return name##_body args; } \
  __attribute__((target("avx2,fma"))) static ret name##_avx2 params { return name##_body args; }  \
  static ret name##_plain params { return name##_body args; }                                      \
  ret name params {                                                                                \
    switch (::hodu::vector_math::cpu_isa()) {                                                      \
      case ::hodu::vector_math::Isa::Avx512: return name##_avx512 args;                            \
      case ::hodu::vector_math::Isa::Avx2: return name##_avx2 args;                                \
      default: return name##_plain args;                                                           \
    }                                                                                              \
  }

#define HODU_ISA_BODY static inline __attribute__((always_inline))
