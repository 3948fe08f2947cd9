#include "engines/interp/ops/nn_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engines/interp/ops/op_utils.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HODU_NN_GEMM_X86 1
#endif

namespace hodu::interp {
namespace {

constexpr int64_t MR = 6, NR = 16;
constexpr int64_t MC = 96, KC = 256, NC = 512;

using MicroFn = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr, int64_t nr,
                         bool acc);

// Writes a computed MR×NR tile (row-major, stride NR) into C.
inline void store_tile(const float* t, float* c, int64_t ldc, int64_t mr, int64_t nr, bool acc) {
  for (int64_t r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    const float* tr = t + r * NR;
    if (acc)
      for (int64_t j = 0; j < nr; ++j) cr[j] += tr[j];
    else
      for (int64_t j = 0; j < nr; ++j) cr[j] = tr[j];
  }
}

void micro_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr, int64_t nr,
                   bool acc) {
  alignas(64) float t[MR * NR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * NR;
    const float* ak = a + k * MR;
    for (int64_t r = 0; r < MR; ++r) {
      float av = ak[r];
      for (int64_t j = 0; j < NR; ++j) t[r * NR + j] += av * bk[j];
    }
  }
  store_tile(t, c, ldc, mr, nr, acc);
}

#ifdef HODU_NN_GEMM_X86
__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const float* a, const float* b, float* c,
                                                   int64_t ldc, int64_t mr, int64_t nr, bool acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
         c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
         c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
         c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
    a += MR;
    b += NR;
  }
  if (mr == MR && nr == NR) {
    __m256 rows[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    for (int r = 0; r < 6; ++r) {
      float* cr = c + r * ldc;
      if (acc) {
        _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), rows[2 * r]));
        _mm256_storeu_ps(cr + 8, _mm256_add_ps(_mm256_loadu_ps(cr + 8), rows[2 * r + 1]));
      } else {
        _mm256_storeu_ps(cr, rows[2 * r]);
        _mm256_storeu_ps(cr + 8, rows[2 * r + 1]);
      }
    }
    return;
  }
  alignas(64) float t[MR * NR];
  _mm256_store_ps(t + 0, c00); _mm256_store_ps(t + 8, c01);
  _mm256_store_ps(t + 16, c10); _mm256_store_ps(t + 24, c11);
  _mm256_store_ps(t + 32, c20); _mm256_store_ps(t + 40, c21);
  _mm256_store_ps(t + 48, c30); _mm256_store_ps(t + 56, c31);
  _mm256_store_ps(t + 64, c40); _mm256_store_ps(t + 72, c41);
  _mm256_store_ps(t + 80, c50); _mm256_store_ps(t + 88, c51);
  store_tile(t, c, ldc, mr, nr, acc);
}
#endif

MicroFn pick_micro() {
#ifdef HODU_NN_GEMM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return micro_avx2;
#endif
  return micro_generic;
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float, AlignedFree>;
Buf aligned_buffer(int64_t n) {
  size_t bytes = static_cast<size_t>((n * 4 + 63) / 64 * 64);
  return Buf(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

// Packs A[m0:m0+mc, k0:k0+kc] into MR-row micro-panels (k-major), zero-padded.
void pack_a(const float* A, int64_t lda, int64_t mc, int64_t kc, float* out) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    int64_t mr = std::min(MR, mc - i0);
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < mr; ++r) out[k * MR + r] = A[(i0 + r) * lda + k];
      for (int64_t r = mr; r < MR; ++r) out[k * MR + r] = 0.f;
    }
    out += kc * MR;
  }
}

// Packs B[k0:k0+kc, n0:n0+nc] into NR-column micro-panels, zero-padded.
void pack_b(const float* B, int64_t ldb, int64_t kc, int64_t nc, float* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    int64_t nr = std::min(NR, nc - j0);
    for (int64_t k = 0; k < kc; ++k) {
      const float* bk = B + k * ldb + j0;
      float* o = out + k * NR;
      if (nr == NR) std::memcpy(o, bk, NR * sizeof(float));
      else {
        for (int64_t j = 0; j < nr; ++j) o[j] = bk[j];
        for (int64_t j = nr; j < NR; ++j) o[j] = 0.f;
      }
    }
    out += kc * NR;
  }
}

}  // namespace

void nn_sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate, int threads) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    return;
  }
  static const MicroFn micro = pick_micro();
  int64_t mt = (M + MC - 1) / MC, nt = (N + NC - 1) / NC;
  // Fewer, larger N tiles when M is small keeps every thread busy without tiny tiles.
  int64_t tasks = mt * nt;
  double flops = 2.0 * static_cast<double>(M) * N * K;
  int th = flops < 2e6 ? 1 : threads;
  parallel_for(th, tasks, 1, [&](int64_t t0, int64_t t1) {
    Buf apack = aligned_buffer(MC * KC);
    Buf bpack = aligned_buffer(KC * (NC + NR));
    for (int64_t t = t0; t < t1; ++t) {
      int64_t mi = t / nt, ni = t % nt;
      int64_t m0 = mi * MC, mc = std::min(MC, M - m0);
      int64_t n0 = ni * NC, nc = std::min(NC, N - n0);
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kc = std::min(KC, K - k0);
        bool acc = accumulate || k0 > 0;
        pack_a(A + m0 * lda + k0, lda, mc, kc, apack.get());
        pack_b(B + k0 * ldb + n0, ldb, kc, nc, bpack.get());
        for (int64_t j0 = 0; j0 < nc; j0 += NR) {
          int64_t nr = std::min(NR, nc - j0);
          const float* bp = bpack.get() + (j0 / NR) * kc * NR;
          for (int64_t i0 = 0; i0 < mc; i0 += MR) {
            int64_t mr = std::min(MR, mc - i0);
            micro(kc, apack.get() + (i0 / MR) * kc * MR, bp, C + (m0 + i0) * ldc + n0 + j0, ldc, mr, nr, acc);
          }
        }
      }
    }
  });
}

void nn_dgemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb,
              double* C, int64_t ldc, bool accumulate, int threads) {
  if (M <= 0 || N <= 0) return;
  double flops = 2.0 * static_cast<double>(M) * N * K;
  parallel_for(flops < 2e6 ? 1 : threads, M, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double* c = C + i * ldc;
      if (!accumulate) std::fill(c, c + N, 0.0);
      for (int64_t k = 0; k < K; ++k) {
        double a = A[i * lda + k];
        const double* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  });
}

}  // namespace hodu::interp
