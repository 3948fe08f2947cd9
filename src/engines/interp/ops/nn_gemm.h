// A small cache-blocked, multithreaded single-precision GEMM used by the
// reference interpreter's convolution kernels (Conv, ConvTranspose,
// DeformConv). Row-major. Deterministic: every element of C is summed over K in
// the same order whatever the thread count (threads split C into tiles).
#pragma once
#include <cstdint>

namespace hodu::interp {

// C[M,N] = A[M,K] · B[K,N] (+ C when accumulate). lda/ldb/ldc are row strides.
void nn_sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate, int threads);

// Same for double (simple blocked loops, still deterministic).
void nn_dgemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb,
              double* C, int64_t ldc, bool accumulate, int threads);

}  // namespace hodu::interp
