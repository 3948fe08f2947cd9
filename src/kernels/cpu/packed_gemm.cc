// The AVX2+FMA GEMM of packed_gemm.h.
#include "kernels/cpu/packed_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <immintrin.h>

#include "kernels/cpu/vector_math.h"

namespace hodu::packed_gemm {
namespace {

constexpr int64_t kRows = 6;    // rows of the register tile
constexpr int64_t kDepth = 256;  // k per block: a panel's block (16 KB) stays in L1 across a row block
// Rows a thread works on at a time: their block of A (192 x 256, 192 KB) stays in L2.
constexpr int64_t kRowBlock = 192;
// Panels of B a pass over the rows works on: 256 columns x 256 k (256 KB) stay in L2.
constexpr int64_t kChunk = 16;

#define HODU_AVX2 __attribute__((target("avx2,fma")))
#define HODU_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

// GCC 12's intrinsics headers fill unused lanes from undefined values: false warnings.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

HODU_AVX2_INLINE __m256i lanes_below(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// tanh as a rational function of x (Eigen's fast tanh: 13/6 degree, a few ulp on [-9, 9]).
HODU_AVX2_INLINE __m256 tanh8(__m256 x) {
  const __m256 c = _mm256_set1_ps(7.90531110763549805f);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_sub_ps(_mm256_setzero_ps(), c)), c);
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
  return _mm256_div_ps(p, q);
}

// erf(x) by Abramowitz & Stegun 7.1.26 (absolute error under 1.5e-7), the form oneDNN's
// gelu_erf uses: 1 - t·poly(t)·exp(-x²) with t = 1 / (1 + p|x|), the sign put back.
HODU_AVX2_INLINE __m256 erf8(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 e = vector_math::exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
  const __m256 y = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
  return _mm256_or_ps(y, sign);
}

HODU_AVX2_INLINE __m256 activate8(__m256 v, const Epilogue& ep) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  switch (ep.act) {
    case Act::None: return v;
    case Act::Relu: return _mm256_max_ps(v, zero);
    case Act::LeakyRelu:
      return _mm256_blendv_ps(_mm256_mul_ps(v, _mm256_set1_ps(ep.p0)), v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case Act::Clip: return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.p0)), _mm256_set1_ps(ep.p1));
    case Act::HardSigmoid:
      return _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(ep.p0), _mm256_set1_ps(ep.p1)), zero), one);
    case Act::Sigmoid: return _mm256_div_ps(one, _mm256_add_ps(one, vector_math::exp8(_mm256_sub_ps(zero, v))));
    case Act::Tanh: return tanh8(v);
    case Act::Silu: return _mm256_div_ps(v, _mm256_add_ps(one, vector_math::exp8(_mm256_sub_ps(zero, v))));
    case Act::Gelu:
      return _mm256_mul_ps(_mm256_mul_ps(half, v),
                           _mm256_add_ps(one, erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)))));
    case Act::GeluTanh: {
      const __m256 inner = _mm256_mul_ps(
          _mm256_set1_ps(0.79788456080286536f),
          _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(v, v)), v, v));
      return _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, tanh8(inner)));
    }
  }
  return v;
}

// The tile's inner loop: `groups` groups of 8 k, the accumulators acc[0..12) (row r's two
// vectors at 2r, 2r + 1) in ymm0-11 throughout, B's two vectors in ymm12-13, A's broadcasts in
// ymm14-15. In assembly because GCC 12 spilled an accumulator of the intrinsics version to the
// stack (15 of the 16 registers are live): 3-5 % faster on a Cascade Lake core, the same sums
// in the same order. Each row's A pointer moves a_kb_bytes a group, B 8 rows of its panel.
#define HODU_GEMM_ROW(aoff, r, reg, acc0, acc1)                  \
  "vbroadcastss " #aoff "(%[a" #r "]), %%ymm" #reg "\n\t"        \
  "vfmadd231ps %%ymm12, %%ymm" #reg ", %%ymm" #acc0 "\n\t"       \
  "vfmadd231ps %%ymm13, %%ymm" #reg ", %%ymm" #acc1 "\n\t"
#define HODU_GEMM_K(boff0, boff1, aoff)                                                   \
  "vmovaps " #boff0 "(%[b]), %%ymm12\n\t"                                                 \
  "vmovaps " #boff1 "(%[b]), %%ymm13\n\t"                                                 \
  HODU_GEMM_ROW(aoff, 0, 14, 0, 1) HODU_GEMM_ROW(aoff, 1, 15, 2, 3) HODU_GEMM_ROW(aoff, 2, 14, 4, 5) \
  HODU_GEMM_ROW(aoff, 3, 15, 6, 7) HODU_GEMM_ROW(aoff, 4, 14, 8, 9) HODU_GEMM_ROW(aoff, 5, 15, 10, 11)
HODU_AVX2 void multiply_groups(int64_t groups, const float* a0, const float* a1, const float* a2, const float* a3,
                               const float* a4, const float* a5, int64_t a_kb_bytes, const float* b, __m256* acc) {
  asm volatile(
      "vmovaps 0(%[acc]), %%ymm0\n\t"
      "vmovaps 32(%[acc]), %%ymm1\n\t"
      "vmovaps 64(%[acc]), %%ymm2\n\t"
      "vmovaps 96(%[acc]), %%ymm3\n\t"
      "vmovaps 128(%[acc]), %%ymm4\n\t"
      "vmovaps 160(%[acc]), %%ymm5\n\t"
      "vmovaps 192(%[acc]), %%ymm6\n\t"
      "vmovaps 224(%[acc]), %%ymm7\n\t"
      "vmovaps 256(%[acc]), %%ymm8\n\t"
      "vmovaps 288(%[acc]), %%ymm9\n\t"
      "vmovaps 320(%[acc]), %%ymm10\n\t"
      "vmovaps 352(%[acc]), %%ymm11\n\t"
      "1:\n\t"
      HODU_GEMM_K(0, 32, 0) HODU_GEMM_K(64, 96, 4) HODU_GEMM_K(128, 160, 8) HODU_GEMM_K(192, 224, 12)
      HODU_GEMM_K(256, 288, 16) HODU_GEMM_K(320, 352, 20) HODU_GEMM_K(384, 416, 24) HODU_GEMM_K(448, 480, 28)
      "add $512, %[b]\n\t"
      "add %[s], %[a0]\n\t"
      "add %[s], %[a1]\n\t"
      "add %[s], %[a2]\n\t"
      "add %[s], %[a3]\n\t"
      "add %[s], %[a4]\n\t"
      "add %[s], %[a5]\n\t"
      "dec %[g]\n\t"
      "jnz 1b\n\t"
      "vmovaps %%ymm0, 0(%[acc])\n\t"
      "vmovaps %%ymm1, 32(%[acc])\n\t"
      "vmovaps %%ymm2, 64(%[acc])\n\t"
      "vmovaps %%ymm3, 96(%[acc])\n\t"
      "vmovaps %%ymm4, 128(%[acc])\n\t"
      "vmovaps %%ymm5, 160(%[acc])\n\t"
      "vmovaps %%ymm6, 192(%[acc])\n\t"
      "vmovaps %%ymm7, 224(%[acc])\n\t"
      "vmovaps %%ymm8, 256(%[acc])\n\t"
      "vmovaps %%ymm9, 288(%[acc])\n\t"
      "vmovaps %%ymm10, 320(%[acc])\n\t"
      "vmovaps %%ymm11, 352(%[acc])\n\t"
      : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [a4] "+r"(a4), [a5] "+r"(a5), [b] "+r"(b),
        [g] "+r"(groups)
      : [s] "r"(a_kb_bytes), [acc] "r"(acc)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}
#undef HODU_GEMM_K
#undef HODU_GEMM_ROW

// One 6 x 16 tile of C over a block of k: row r of A at a[r] (the block's first k; 8 k apart by
// a_kb; read in place, as MLAS does: packing it cost as much as the products of a 16-column B;
// rows past `rows` repeat the last one, their sums never stored), `b` the panel's block
// (kc x 16), row r of C at c[r]; rows [0, rows) and columns [0, cols) of the tile are written.
// Starts from zero or C's values (`load`), plus `bias` when not null (the first block); `last`:
// the final block of k, whose activation is applied before the store.
HODU_AVX2 void tile(int64_t kc, const float* const* a, int64_t a_kb, const float* b, float* const* c, int64_t c_jb,
                    int64_t rows, int64_t cols, bool load, const float* bias, const Epilogue* last) {
  const __m256i m0 = lanes_below(cols), m1 = lanes_below(cols - 8);
  const bool two = cols > 8, full = cols >= 16;
  alignas(32) __m256 acc[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    const float* cr = c[r];
    if (!load || r >= rows) {
      acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    } else if (full) {
      acc[r][0] = _mm256_loadu_ps(cr);
      acc[r][1] = _mm256_loadu_ps(cr + c_jb);
    } else {
      acc[r][0] = _mm256_maskload_ps(cr, m0);
      acc[r][1] = two ? _mm256_maskload_ps(cr + c_jb, m1) : _mm256_setzero_ps();
    }
  }
  if (bias) {
    const __m256 b0 = _mm256_maskload_ps(bias, m0), b1 = two ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = _mm256_add_ps(acc[r][0], b0);
      acc[r][1] = _mm256_add_ps(acc[r][1], b1);
    }
  }
  const int64_t groups = kc / 8, tail = kc % 8;
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
  if (groups > 0) {
    multiply_groups(groups, a0, a1, a2, a3, a4, a5, a_kb * 4, b, &acc[0][0]);
    const int64_t done = groups * a_kb;
    a0 += done, a1 += done, a2 += done, a3 += done, a4 += done, a5 += done;
    b += groups * 8 * kPanel;
  }
  const float* const ar[kRows] = {a0, a1, a2, a3, a4, a5};
  for (int64_t kk = 0; kk < tail; ++kk, b += kPanel) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 av = _mm256_broadcast_ss(ar[r] + kk);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    __m256 v0 = acc[r][0], v1 = acc[r][1];
    if (last && last->act != Act::None) {
      v0 = activate8(v0, *last);
      v1 = activate8(v1, *last);
    }
    float* cr = c[r];
    if (full) {
      _mm256_storeu_ps(cr, v0);
      _mm256_storeu_ps(cr + c_jb, v1);
    } else {
      _mm256_maskstore_ps(cr, m0, v0);
      if (two) _mm256_maskstore_ps(cr + c_jb, m1, v1);
    }
  }
}

// Rows [r0, r1) by panels [p0, p1) of C, all of k: for a chunk of panels (their block of B in
// L2) and a block of k, each 6 rows of A (in L1) against every panel of the chunk.
void block(int64_t r0, int64_t r1, int64_t p0, int64_t p1, int64_t n, int64_t k, const MatrixA& a, const float* pb,
           const MatrixC& c, const Epilogue& ep) {
  const Rows a_rows = a.rows(), c_rows = c.rows();
  for (int64_t q0 = p0; q0 < p1; q0 += kChunk) {
    const int64_t q1 = std::min(p1, q0 + kChunk);
    // One pass with kc = 0 when k is 0: C = activation(bias, or C's own values).
    for (int64_t k0 = 0; k0 == 0 || k0 < k; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, k - k0);
      const bool first = k0 == 0, last = k0 + kc == k;
      const float* a_k = a.data + (k0 / 8) * a.kblock;
      for (int64_t r = r0; r < r1; r += kRows) {
        const int64_t rows = std::min(kRows, r1 - r);
        const float* ar[kRows];
        int64_t c_off[kRows];
        for (int64_t i = 0; i < kRows; ++i) {
          const int64_t ri = r + std::min(i, rows - 1);  // rows past the end repeat the last
          ar[i] = a_k + a_rows.offset(ri);
          c_off[i] = c_rows.offset(ri);
        }
        for (int64_t p = q0; p < q1; ++p) {
          const int64_t j0 = p * kPanel, cols = std::min(kPanel, n - j0);
          float* cr[kRows];
          for (int64_t i = 0; i < kRows; ++i) cr[i] = c.data + (j0 / 8) * c.jblock + c_off[i];
          tile(kc, ar, a.kblock, pb + (p * k + k0) * kPanel, cr, c.jblock, rows, cols, !first || ep.accumulate,
               first && ep.bias ? ep.bias + j0 : nullptr, last ? &ep : nullptr);
        }
      }
    }
  }
}

// Rows [0, M) of C, columns [j0, j0 + 16·P) (P panels from `b`, the first panel's block), all of k.
template <int M, int P>
HODU_AVX2 void few_rows_tile(int64_t k, const float* a, int64_t a_row, const float* b, float* c, int64_t c_row,
                             int64_t cols) {
  __m256 acc[M][2 * P];
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * P; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m256 bv[2 * P];
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      bv[2 * q] = _mm256_load_ps(b + (q * k + i) * kPanel);
      bv[2 * q + 1] = _mm256_load_ps(b + (q * k + i) * kPanel + 8);
    }
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * a_row + i);
#pragma GCC unroll 8
      for (int v = 0; v < 2 * P; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * P; ++v) {
      const int64_t j = v * 8;
      if (j + 8 <= cols) _mm256_storeu_ps(c + r * c_row + j, acc[r][v]);
      else if (j < cols) _mm256_maskstore_ps(c + r * c_row + j, lanes_below(cols - j), acc[r][v]);
    }
}

template <int M>
HODU_AVX2 void few_rows(int64_t n, int64_t k, const float* a, int64_t a_row, const float* pb, float* c, int64_t c_row) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  int64_t p = 0;
  for (; p + 2 <= panels; p += 2)
    few_rows_tile<M, 2>(k, a, a_row, pb + p * k * kPanel, c + p * kPanel, c_row, std::min(2 * kPanel, n - p * kPanel));
  if (p < panels) few_rows_tile<M, 1>(k, a, a_row, pb + p * k * kPanel, c + p * kPanel, c_row, n - p * kPanel);
}

HODU_AVX2 void activate_avx2(float* y, int64_t n, const Epilogue& ep) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, activate8(_mm256_loadu_ps(y + j), ep));
  if (j < n) {
    const __m256i m = lanes_below(n - j);
    _mm256_maskstore_ps(y + j, m, activate8(_mm256_maskload_ps(y + j, m), ep));
  }
}

#pragma GCC diagnostic pop

}  // namespace

void pack_b(const float* b, int64_t row, int64_t col, int64_t k, int64_t n, float* out) {
  for (int64_t p = 0; p * kPanel < n; ++p) {
    const int64_t j0 = p * kPanel, cols = std::min(kPanel, n - j0);
    float* o = out + p * k * kPanel;
    for (int64_t i = 0; i < k; ++i, o += kPanel) {
      const float* bi = b + i * row + j0 * col;
      int64_t j = 0;
      if (col == 1)
        for (; j < cols; ++j) o[j] = bi[j];
      else
        for (; j < cols; ++j) o[j] = bi[j * col];
      for (; j < kPanel; ++j) o[j] = 0.0f;
    }
  }
}

bool activation_of(const char* name, const float* params, int64_t n_params, Act* act, float* p0, float* p1) {
  auto param = [&](int64_t i, float def) { return i < n_params ? params[i] : def; };
  const std::string s = name ? name : "";
  *p0 = *p1 = 0;
  if (s.empty()) *act = Act::None;
  else if (s == "Relu") *act = Act::Relu;
  else if (s == "LeakyRelu") *act = Act::LeakyRelu, *p0 = param(0, 0.01f);
  else if (s == "Clip") {
    *act = Act::Clip;
    *p0 = param(0, -INFINITY);
    *p1 = param(1, INFINITY);
  } else if (s == "HardSigmoid") {
    *act = Act::HardSigmoid;
    *p0 = param(0, 0.2f);
    *p1 = param(1, 0.5f);
  } else if (s == "Sigmoid") *act = Act::Sigmoid;
  else if (s == "Tanh") *act = Act::Tanh;
  else if (s == "Silu") *act = Act::Silu;
  else if (s == "Gelu") *act = Act::Gelu;
  else if (s == "GeluTanh") *act = Act::GeluTanh;
  else return false;
  return true;
}

bool available() {
  return vector_math::cpu_isa() == vector_math::Isa::Avx2 || vector_math::cpu_isa() == vector_math::Isa::Avx512;
}

void gemm(int64_t m, int64_t n, int64_t k, const MatrixA& a, const float* packed_b, const MatrixC& c,
          const Epilogue& ep, int threads) {
  if (m <= 0 || n <= 0) return;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  // Blocks of about kRowBlock rows, each over all columns (A packed once per block of k) unless
  // there are fewer blocks than threads: then the panels are split too.
  int64_t rb = (m + kRowBlock - 1) / kRowBlock;
  // Past one block, a multiple of the threads: 5 blocks over 2 threads (784 rows, a 28x28 image's
  // pixels) left one thread idle for a fifth of the product.
  if (rb > 1 && threads > 1) rb = std::min((rb + threads - 1) / threads * threads, (m + kRows - 1) / kRows);
  const int64_t row_block = ((m + rb - 1) / rb + kRows - 1) / kRows * kRows;
  const int64_t cb = std::min<int64_t>(panels, std::max<int64_t>(1, (threads + rb - 1) / rb));
  const int64_t panel_block = (panels + cb - 1) / cb;
  const int64_t units = rb * cb;
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, units)));
#pragma omp parallel for num_threads(workers) schedule(static) if (workers > 1)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t i = u / cb, j = u % cb;
    block(i * row_block, std::min(m, (i + 1) * row_block), j * panel_block, std::min(panels, (j + 1) * panel_block), n,
          k, a, packed_b, c, ep);
  }
}

void gemm_few_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, const float* packed_b, float* c,
                   int64_t c_row) {
  for (int64_t r = 0; r < m; r += 3) {
    const int64_t rows = std::min<int64_t>(3, m - r);
    const float* ar = a + r * a_row;
    float* cr = c + r * c_row;
    if (rows == 3) few_rows<3>(n, k, ar, a_row, packed_b, cr, c_row);
    else if (rows == 2) few_rows<2>(n, k, ar, a_row, packed_b, cr, c_row);
    else few_rows<1>(n, k, ar, a_row, packed_b, cr, c_row);
  }
}

void activate(float* y, int64_t n, const Epilogue& ep) { activate_avx2(y, n, ep); }

}  // namespace hodu::packed_gemm
