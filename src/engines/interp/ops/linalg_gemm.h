// Deterministic matrix products shared by the reference kernels (MatMul, Gemm,
// attention). Every output element is the sum over k in ascending order, so the
// result does not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

namespace hodu::interp {

// One product of a batch: C[M,N] = A[M,K] * B[K,N], all row-major with the given
// leading dimensions (elements between rows).
struct GemmBatchItem {
  const float* a;
  const float* b;
  float* c;
};

// f32 products for a batch of equally shaped problems, cache-blocked and
// multithreaded (split over batch items and row blocks only). C is overwritten.
void sgemm_batched(int64_t M, int64_t N, int64_t K, const std::vector<GemmBatchItem>& items, int64_t lda,
                   int64_t ldb, int64_t ldc, int threads);

inline void sgemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                  float* c, int64_t ldc, int threads) {
  sgemm_batched(M, N, K, {GemmBatchItem{a, b, c}}, lda, ldb, ldc, threads);
}

}  // namespace hodu::interp
