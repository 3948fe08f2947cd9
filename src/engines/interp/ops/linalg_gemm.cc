#include "engines/interp/ops/linalg_gemm.h"

#include <algorithm>
#include <cstring>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

typedef float v4 __attribute__((vector_size(16)));
typedef float v4u __attribute__((vector_size(16), aligned(4)));

constexpr int64_t kMR = 6, kNR = 8;
constexpr int64_t kKC = 256, kMC = 72;

// Packs B[K, N] into strips of kNR columns: strip s holds [K][kNR] (zero padded).
void pack_b(const float* b, int64_t ldb, int64_t K, int64_t N, float* dst) {
  int64_t strips = (N + kNR - 1) / kNR;
  for (int64_t s = 0; s < strips; ++s) {
    int64_t j0 = s * kNR, nr = std::min(kNR, N - j0);
    float* d = dst + s * K * kNR;
    for (int64_t k = 0; k < K; ++k) {
      const float* src = b + k * ldb + j0;
      int64_t j = 0;
      for (; j < nr; ++j) d[k * kNR + j] = src[j];
      for (; j < kNR; ++j) d[k * kNR + j] = 0.f;
    }
  }
}

// acc[MR rows][kNR cols] over k in [k0, k1); first block starts from zero, later blocks from C.
template <int MR>
void micro(const float* a, int64_t lda, const float* bp, int64_t kc, float* c, int64_t ldc, int64_t nr, bool first) {
  v4 acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    if (first) {
      acc[r][0] = v4{0, 0, 0, 0};
      acc[r][1] = v4{0, 0, 0, 0};
    } else if (nr == kNR) {
      acc[r][0] = *reinterpret_cast<const v4u*>(c + r * ldc);
      acc[r][1] = *reinterpret_cast<const v4u*>(c + r * ldc + 4);
    } else {
      float tmp[kNR] = {};
      std::memcpy(tmp, c + r * ldc, sizeof(float) * nr);
      std::memcpy(&acc[r][0], tmp, 16);
      std::memcpy(&acc[r][1], tmp + 4, 16);
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    v4 b0 = *reinterpret_cast<const v4*>(bp + k * kNR);
    v4 b1 = *reinterpret_cast<const v4*>(bp + k * kNR + 4);
    for (int r = 0; r < MR; ++r) {
      float av = a[r * lda + k];
      v4 va = v4{av, av, av, av};
      acc[r][0] += va * b0;
      acc[r][1] += va * b1;
    }
  }
  for (int r = 0; r < MR; ++r) {
    if (nr == kNR) {
      *reinterpret_cast<v4u*>(c + r * ldc) = acc[r][0];
      *reinterpret_cast<v4u*>(c + r * ldc + 4) = acc[r][1];
    } else {
      float tmp[kNR];
      std::memcpy(tmp, &acc[r][0], 16);
      std::memcpy(tmp + 4, &acc[r][1], 16);
      std::memcpy(c + r * ldc, tmp, sizeof(float) * nr);
    }
  }
}

}  // namespace

void sgemm_batched(int64_t M, int64_t N, int64_t K, const std::vector<GemmBatchItem>& items, int64_t lda,
                   int64_t ldb, int64_t ldc, int threads) {
  int64_t nb = static_cast<int64_t>(items.size());
  if (nb == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    for (const auto& it : items)
      for (int64_t i = 0; i < M; ++i) std::fill(it.c + i * ldc, it.c + i * ldc + N, 0.f);
    return;
  }
  int64_t strips = (N + kNR - 1) / kNR;
  int64_t packed_size = strips * kNR * K;
  // Items sharing one B (broadcast batch) are packed once.
  std::vector<const float*> uniq;
  std::vector<int64_t> which(static_cast<size_t>(nb));
  for (int64_t i = 0; i < nb; ++i) {
    auto it = uniq.size() <= 64 ? std::find(uniq.begin(), uniq.end(), items[i].b) : uniq.end();
    if (it == uniq.end()) {  // the linear search stays cheap
      which[i] = static_cast<int64_t>(uniq.size());
      uniq.push_back(items[i].b);
    } else {
      which[i] = it - uniq.begin();
    }
  }
  std::vector<float> packed(static_cast<size_t>(packed_size * static_cast<int64_t>(uniq.size())));
  parallel_for(threads, static_cast<int64_t>(uniq.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) pack_b(uniq[u], ldb, K, N, packed.data() + u * packed_size);
  });
  int64_t row_blocks = (M + kMC - 1) / kMC;
  int64_t tasks = nb * row_blocks;
  int64_t work_per_task = std::min(M, kMC) * N * K;
  int64_t min_chunk = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(work_per_task, 1));
  parallel_for(threads, tasks, min_chunk, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      int64_t bi = t / row_blocks, rb = t % row_blocks;
      const GemmBatchItem& it = items[bi];
      const float* bp_all = packed.data() + which[bi] * packed_size;
      int64_t i0 = rb * kMC, i1 = std::min(M, i0 + kMC);
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        int64_t kc = std::min(kKC, K - k0);
        bool first = k0 == 0;
        for (int64_t s = 0; s < strips; ++s) {
          int64_t j0 = s * kNR, nr = std::min(kNR, N - j0);
          const float* bp = bp_all + s * K * kNR + k0 * kNR;
          int64_t i = i0;
          for (; i + kMR <= i1; i += kMR)
            micro<kMR>(it.a + i * lda + k0, lda, bp, kc, it.c + i * ldc + j0, ldc, nr, first);
          for (; i < i1; ++i) micro<1>(it.a + i * lda + k0, lda, bp, kc, it.c + i * ldc + j0, ldc, nr, first);
        }
      }
    }
  });
}

}  // namespace hodu::interp
