/* hodu portable kernel library, emitted into every compiled model.
 * Plain C99 + libm; GCC/Clang vector extensions speed up GEMM where available.
 * No allocation: every scratch buffer comes from the caller (the model's arena).
 * Kernels that can fail on data (bad indices) return non-zero. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define HK static __attribute__((unused))
#else
#define HK static
#endif

/* Hot loops built for the widest vectors the running CPU has (AVX-512, AVX2 or the
 * baseline; the loader picks one) with GCC 6+ on x86-64 ELF (clang 14 refuses clones of
 * unused-marked statics); the baseline ISA otherwise. */
#if defined(__x86_64__) && defined(__ELF__) && !defined(HK_NO_CLONES) && defined(__GNUC__) && !defined(__clang__) && \
    __GNUC__ >= 6
#define HK_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#define HK_CLONES_ACTIVE 1 /* loops below leave vectorization to the compiler, per clone */
#else
#define HK_CLONES
#endif
/* GCC's -O2 cost model vectorizes no loop that needs an epilogue or an alias check. */
#if defined(__GNUC__) && !defined(__clang__)
#define HK_VECTORIZE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define HK_VECTORIZE
#endif

/* min(max(v, 0), 1) for HardSigmoid/HardSwish: GCC keeps fminf/fmaxf as libm calls (their
 * NaN rules), which cost MobileNetV3 a call per element; NaN stays NaN, as numpy's clip. */
HK inline float hk_clamp01f(float v) { return v < 0.f ? 0.f : v > 1.f ? 1.f : v; }
HK inline double hk_clamp01(double v) { return v < 0. ? 0. : v > 1. ? 1. : v; }

/* Integer and float helpers of the elementwise loops: ONNX's semantics (numpy's), no
 * undefined behaviour (a division by zero or INT_MIN / -1 gives 0 or wraps). */
HK inline int64_t hk_idiv(int64_t x, int64_t y) { return y == 0 ? 0 : y == -1 ? (int64_t)(0 - (uint64_t)x) : x / y; }
HK inline uint64_t hk_udiv(uint64_t x, uint64_t y) { return y ? x / y : 0; }
HK inline int64_t hk_imod(int64_t x, int64_t y) {
  int64_t m;
  if (y == 0 || y == -1) return 0;
  m = x % y;
  return m != 0 && ((m < 0) != (y < 0)) ? m + y : m;
}
HK inline int64_t hk_ifmod(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }
HK inline uint64_t hk_umod(uint64_t x, uint64_t y) { return y ? x % y : 0; }
/* numpy.mod of floats: the result has the divisor's sign. */
HK inline double hk_fmodpy(double x, double y) {
  double m = fmod(x, y);
  if (y == 0) return m;
  if (m != 0) return (y < 0) != (m < 0) ? m + y : m;
  return copysign(0.0, y);
}
HK inline float hk_fmodpyf(float x, float y) {
  float m = fmodf(x, y);
  if (y == 0) return m;
  if (m != 0) return (y < 0) != (m < 0) ? m + y : m;
  return copysignf(0.f, y);
}
/* Integer power with wrap-around; a negative exponent gives the truncated real result. */
HK inline int64_t hk_ipow(int64_t base, int64_t e) {
  uint64_t r = 1, b = (uint64_t)base, ue = (uint64_t)e;
  if (e < 0) return base == 1 ? 1 : base == -1 ? (e % 2 == 0 ? 1 : -1) : 0;
  while (ue) {
    if (ue & 1) r *= b;
    b *= b;
    ue >>= 1;
  }
  return (int64_t)r;
}
HK inline int64_t hk_pow_to_int(double v) { return !isfinite(v) || fabs(v) >= 9.2e18 ? INT64_MIN : (int64_t)v; }

/* ---- GEMM: C[M,N] = A[M,K] * B[K,N] (+ C when accumulate), row-major ------ */
#define HK_MR 4
#define HK_NR 8
#define HK_KC 256
#define HK_NC 512
#define HK_MC 64
/* Floats of packing space hk_gemm needs. */
#define HK_GEMM_PACK_FLOATS (HK_KC * HK_NC + HK_MC * HK_KC)

#if defined(__GNUC__) && defined(__AVX__)
typedef float hk_v8 __attribute__((vector_size(32)));
#define HK_VEC 8
#elif defined(__GNUC__)
/* 128-bit vectors: native on SSE2 and NEON, so the 8 accumulators stay in registers. */
typedef float hk_v4 __attribute__((vector_size(16)));
#define HK_VEC 4
#endif

static void hk_micro(int64_t kb, const float* ap, const float* bp, float* c, int64_t ldc, int mr, int nr, int load) {
  int r, j;
  float out[HK_MR][HK_NR];
  int64_t k;
#if defined(HK_VEC) && HK_VEC == 8
  hk_v8 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
  for (k = 0; k < kb; ++k) {
    hk_v8 b;
    memcpy(&b, bp + k * HK_NR, sizeof b);
    acc0 += ap[k * HK_MR + 0] * b;
    acc1 += ap[k * HK_MR + 1] * b;
    acc2 += ap[k * HK_MR + 2] * b;
    acc3 += ap[k * HK_MR + 3] * b;
  }
  memcpy(out[0], &acc0, sizeof acc0);
  memcpy(out[1], &acc1, sizeof acc1);
  memcpy(out[2], &acc2, sizeof acc2);
  memcpy(out[3], &acc3, sizeof acc3);
#elif defined(HK_VEC)
  hk_v4 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
  for (k = 0; k < kb; ++k) {
    hk_v4 b0, b1;
    const float* a = ap + k * HK_MR;
    memcpy(&b0, bp + k * HK_NR, sizeof b0);
    memcpy(&b1, bp + k * HK_NR + 4, sizeof b1);
    a00 += a[0] * b0;
    a01 += a[0] * b1;
    a10 += a[1] * b0;
    a11 += a[1] * b1;
    a20 += a[2] * b0;
    a21 += a[2] * b1;
    a30 += a[3] * b0;
    a31 += a[3] * b1;
  }
  memcpy(out[0], &a00, 16);
  memcpy(out[0] + 4, &a01, 16);
  memcpy(out[1], &a10, 16);
  memcpy(out[1] + 4, &a11, 16);
  memcpy(out[2], &a20, 16);
  memcpy(out[2] + 4, &a21, 16);
  memcpy(out[3], &a30, 16);
  memcpy(out[3] + 4, &a31, 16);
#else
  for (r = 0; r < HK_MR; ++r)
    for (j = 0; j < HK_NR; ++j) out[r][j] = 0.f;
  for (k = 0; k < kb; ++k)
    for (r = 0; r < HK_MR; ++r)
      for (j = 0; j < HK_NR; ++j) out[r][j] += ap[k * HK_MR + r] * bp[k * HK_NR + j];
#endif
  for (r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    if (load)
      for (j = 0; j < nr; ++j) cr[j] += out[r][j];
    else
      for (j = 0; j < nr; ++j) cr[j] = out[r][j];
  }
}

/* pack: HK_GEMM_PACK_FLOATS floats of scratch. */
HK void hk_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                int64_t ldc, int accumulate, float* pack) {
  float* bpack = pack;
  float* apack = pack + HK_KC * HK_NC;
  int64_t j0, k0, i0, i, j, k;
  if (K == 0) {
    if (!accumulate)
      for (i = 0; i < M; ++i)
        for (j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return;
  }
  for (j0 = 0; j0 < N; j0 += HK_NC) {
    int64_t nb = N - j0 < HK_NC ? N - j0 : HK_NC;
    for (k0 = 0; k0 < K; k0 += HK_KC) {
      int64_t kb = K - k0 < HK_KC ? K - k0 : HK_KC;
      int load = accumulate || k0 > 0;
      /* B block → panels of HK_NR columns, k-major, zero-padded. */
      for (j = 0; j < nb; j += HK_NR) {
        float* dst = bpack + j * kb;
        int64_t w = nb - j < HK_NR ? nb - j : HK_NR;
        for (k = 0; k < kb; ++k) {
          const float* src = B + (k0 + k) * ldb + j0 + j;
          int64_t t;
          for (t = 0; t < w; ++t) dst[k * HK_NR + t] = src[t];
          for (; t < HK_NR; ++t) dst[k * HK_NR + t] = 0.f;
        }
      }
      for (i0 = 0; i0 < M; i0 += HK_MC) {
        int64_t mb = M - i0 < HK_MC ? M - i0 : HK_MC;
        for (i = 0; i < mb; i += HK_MR) {
          float* dst = apack + i * kb;
          int64_t h = mb - i < HK_MR ? mb - i : HK_MR, r;
          for (k = 0; k < kb; ++k) {
            for (r = 0; r < h; ++r) dst[k * HK_MR + r] = A[(i0 + i + r) * lda + k0 + k];
            for (; r < HK_MR; ++r) dst[k * HK_MR + r] = 0.f;
          }
        }
        for (j = 0; j < nb; j += HK_NR) {
          int nr = (int)(nb - j < HK_NR ? nb - j : HK_NR);
          for (i = 0; i < mb; i += HK_MR) {
            int mr = (int)(mb - i < HK_MR ? mb - i : HK_MR);
            hk_micro(kb, apack + i * kb, bpack + j * kb, C + (i0 + i) * ldc + j0 + j, ldc, mr, nr, load);
          }
        }
      }
    }
  }
}

/* Batched matmul: offsets (in elements) of each batch's A, B and C. */
HK void hk_matmul_batched(int64_t batches, int64_t M, int64_t N, int64_t K, const float* A, const int64_t* a_off,
                          const float* B, const int64_t* b_off, float* C, float* pack) {
  int64_t b;
  for (b = 0; b < batches; ++b) hk_gemm(M, N, K, A + a_off[b], K, B + b_off[b], N, C + b * M * N, N, 0, pack);
}

/* Batched GEMM over `rank` broadcast batch dims known at run time: batch i of A and B at
 * sum(index_d * stride_d) (stride 0 on a broadcast dim) times M*K and K*N. */
HK void hk_matmul_bcast(int64_t rank, const int64_t* batch, const int64_t* a_stride, const int64_t* b_stride, int64_t M,
                        int64_t N, int64_t K, const float* A, const float* B, float* C, float* pack) {
  int64_t idx[8] = {0}, total = 1, i, d;
  for (d = 0; d < rank; ++d) total *= batch[d];
  for (i = 0; i < total; ++i) {
    int64_t ao = 0, bo = 0;
    for (d = 0; d < rank; ++d) {
      ao += idx[d] * a_stride[d];
      bo += idx[d] * b_stride[d];
    }
    hk_gemm(M, N, K, A + ao * M * K, K, B + bo * K * N, N, C + i * M * N, N, 0, pack);
    for (d = rank; d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
}

/* y[M,N] = alpha * y + beta * c (c read with row/col strides, 0 = broadcast). */
HK void hk_gemm_epilogue(float* y, int64_t M, int64_t N, float alpha, const float* c, int64_t c_rs, int64_t c_cs,
                         float beta) {
  int64_t i, j;
  for (i = 0; i < M; ++i)
    for (j = 0; j < N; ++j) y[i * N + j] = alpha * y[i * N + j] + (c ? beta * c[i * c_rs + j * c_cs] : 0.f);
}

/* y[i,j] = x[j,i] for a rows x cols matrix (floats). */
HK void hk_transpose2d(const float* x, float* y, int64_t rows, int64_t cols) {
  int64_t i, j, i0, j0;
  for (i0 = 0; i0 < rows; i0 += 32)
    for (j0 = 0; j0 < cols; j0 += 32)
      for (i = i0; i < rows && i < i0 + 32; ++i)
        for (j = j0; j < cols && j < j0 + 32; ++j) y[j * rows + i] = x[i * cols + j];
}

/* ---- Convolution (2-D; 1-D as H = 1) ------------------------------------- */
static void hk_im2col(const float* x, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                      int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, float* col) {
  int64_t c, kh, kw, oh, ow;
  for (c = 0; c < C; ++c)
    for (kh = 0; kh < KH; ++kh)
      for (kw = 0; kw < KW; ++kw) {
        float* dst = col + ((c * KH + kh) * KW + kw) * OH * OW;
        const float* src = x + c * H * W;
        for (oh = 0; oh < OH; ++oh) {
          int64_t ih = oh * sh - pt + kh * dh;
          float* d = dst + oh * OW;
          if (ih < 0 || ih >= H) {
            for (ow = 0; ow < OW; ++ow) d[ow] = 0.f;
            continue;
          }
          const float* s = src + ih * W;
          if (sw == 1) {
            int64_t off = kw * dw - pl;
            for (ow = 0; ow < OW; ++ow) {
              int64_t iw = ow + off;
              d[ow] = (iw >= 0 && iw < W) ? s[iw] : 0.f;
            }
          } else {
            for (ow = 0; ow < OW; ++ow) {
              int64_t iw = ow * sw - pl + kw * dw;
              d[ow] = (iw >= 0 && iw < W) ? s[iw] : 0.f;
            }
          }
        }
      }
}

/* y = clamp(conv(x, w) + bias, lo, hi). col: Cg*KH*KW*OH*OW floats (unused for 1x1 s1 p0). */
HK void hk_conv2d(const float* x, const float* w, const float* bias, float* y, int64_t N, int64_t C, int64_t H,
                  int64_t W, int64_t M, int64_t OH, int64_t OW, int64_t KH, int64_t KW, int64_t sh, int64_t sw,
                  int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t group, float lo, float hi, float* col,
                  float* pack) {
  int64_t Cg = C / group, Mg = M / group, Kg = Cg * KH * KW, P = OH * OW, n, g, m, p;
  int pointwise = KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
  for (n = 0; n < N; ++n) {
    if (Cg == 1 && Mg == 1) { /* depthwise: direct loops */
      for (g = 0; g < group; ++g) {
        const float* xs = x + (n * C + g) * H * W;
        const float* wk = w + g * KH * KW;
        float* yo = y + (n * M + g) * P;
        int64_t oh, ow, kh, kw;
        for (oh = 0; oh < OH; ++oh)
          for (ow = 0; ow < OW; ++ow) {
            float s = 0.f;
            for (kh = 0; kh < KH; ++kh) {
              int64_t ih = oh * sh - pt + kh * dh;
              if (ih < 0 || ih >= H) continue;
              for (kw = 0; kw < KW; ++kw) {
                int64_t iw = ow * sw - pl + kw * dw;
                if (iw >= 0 && iw < W) s += xs[ih * W + iw] * wk[kh * KW + kw];
              }
            }
            yo[oh * OW + ow] = s;
          }
      }
    } else {
      for (g = 0; g < group; ++g) {
        const float* xg = x + (n * C + g * Cg) * H * W;
        const float* b = xg;
        if (!pointwise) {
          hk_im2col(xg, Cg, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, col);
          b = col;
        }
        hk_gemm(Mg, P, Kg, w + g * Mg * Kg, Kg, b, P, y + (n * M + g * Mg) * P, P, 0, pack);
      }
    }
    for (m = 0; m < M; ++m) {
      float* yo = y + (n * M + m) * P;
      float bv = bias ? bias[m] : 0.f;
      for (p = 0; p < P; ++p) {
        float v = yo[p] + bv;
        v = v < lo ? lo : v;
        yo[p] = v > hi ? hi : v;
      }
    }
  }
}

/* ---- Pooling (2-D; 1-D as H = 1) ----------------------------------------- */
/* kind 0: max, 1: average (count_include_pad in `include_pad`). */
HK void hk_pool2d(const float* x, float* y, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH,
                  int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t pb,
                  int64_t pr, int kind, int include_pad) {
  int64_t c, oh, ow, kh, kw;
  for (c = 0; c < NC; ++c) {
    const float* xs = x + c * H * W;
    float* yo = y + c * OH * OW;
    for (oh = 0; oh < OH; ++oh)
      for (ow = 0; ow < OW; ++ow) {
        float acc = kind == 0 ? -INFINITY : 0.f;
        int64_t cnt = 0;
        for (kh = 0; kh < KH; ++kh) {
          int64_t ih = oh * sh - pt + kh * dh;
          if (ih < 0 || ih >= H) continue;
          for (kw = 0; kw < KW; ++kw) {
            int64_t iw = ow * sw - pl + kw * dw;
            if (iw < 0 || iw >= W) continue;
            float v = xs[ih * W + iw];
            if (kind == 0) acc = (v > acc || v != v) ? v : acc;
            else acc += v;
            ++cnt;
          }
        }
        if (kind == 1) {
          if (include_pad) {
            /* window clipped to the padded input (ceil_mode windows may run past it) */
            int64_t h0 = oh * sh - pt, w0 = ow * sw - pl;
            int64_t h1 = h0 + (KH - 1) * dh + 1, w1 = w0 + (KW - 1) * dw + 1;
            if (h1 > H + pb) h1 = H + pb;
            if (w1 > W + pr) w1 = W + pr;
            cnt = ((h1 - h0 + dh - 1) / dh) * ((w1 - w0 + dw - 1) / dw);
          }
          acc = cnt ? acc / (float)cnt : 0.f;
        }
        yo[oh * OW + ow] = acc;
      }
  }
}

/* kind 0: max, 1: average over `inner` elements per channel. */
HK void hk_global_pool(const float* x, float* y, int64_t NC, int64_t inner, int kind) {
  int64_t c, i;
  for (c = 0; c < NC; ++c) {
    const float* xs = x + c * inner;
    float acc = kind == 0 ? -INFINITY : 0.f;
    for (i = 0; i < inner; ++i) acc = kind == 0 ? (xs[i] > acc ? xs[i] : acc) : acc + xs[i];
    y[c] = kind == 0 ? acc : acc / (float)inner;
  }
}

/* ---- Per-channel scale in an activation layout ----------------------------- */
/* y = x * s[c] for x [N, C, H*W] stored in `layout`: 0 NCHW, 1 NHWC, 8 / 16
 * blocked [N][ceil(C / b)][HW][b] (lanes past C written 0). s: [N or 1, C]
 * (s_batch_stride C or 0). Work is split into hk_scale_tasks() independent
 * tasks (a range [begin, end) of them per call, so threads can share them). */
typedef struct {
  const float* x;
  const float* s;
  float* y;
  int64_t n, c, hw, s_batch_stride;
  int layout;
} hk_scale_args;

HK int64_t hk_scale_tasks(const hk_scale_args* a) {
  if (a->layout == 1) return a->n * a->hw;
  if (a->layout == 0) return a->n * a->c;
  return a->n * ((a->c + a->layout - 1) / a->layout);
}

/* x and y may be the same buffer: in place, same index, no dependence. */
HK_CLONES HK_VECTORIZE HK void hk_scale_range(void* arg, int64_t begin, int64_t end) {
  const hk_scale_args* a = (const hk_scale_args*)arg;
  int64_t t, i, j;
  if (a->layout == 1) { /* task: one pixel's C channels */
    for (t = begin; t < end; ++t) {
      const float* s = a->s + t / a->hw * a->s_batch_stride;
      const float* x = a->x + t * a->c;
      float* y = a->y + t * a->c;
      for (j = 0; j < a->c; ++j) y[j] = x[j] * s[j];
    }
  } else if (a->layout == 0) { /* task: one channel's plane */
    for (t = begin; t < end; ++t) {
      float v = a->s[t / a->c * a->s_batch_stride + t % a->c];
      const float* x = a->x + t * a->hw;
      float* y = a->y + t * a->hw;
      for (i = 0; i < a->hw; ++i) y[i] = x[i] * v;
    }
  } else { /* task: one block of b channels over the plane */
    int64_t b = a->layout, nb = (a->c + b - 1) / b;
    float v[16];
    for (t = begin; t < end; ++t) {
      int64_t n = t / nb, c0 = t % nb * b;
      const float* x = a->x + t * a->hw * b;
      float* y = a->y + t * a->hw * b;
      for (j = 0; j < b; ++j) v[j] = c0 + j < a->c ? a->s[n * a->s_batch_stride + c0 + j] : 0.f;
      if (b == 16) {
        for (i = 0; i < a->hw; ++i)
          for (j = 0; j < 16; ++j) y[i * 16 + j] = x[i * 16 + j] * v[j];
      } else {
        for (i = 0; i < a->hw; ++i)
          for (j = 0; j < 8; ++j) y[i * 8 + j] = x[i * 8 + j] * v[j];
      }
    }
  }
}

/* ---- Fully connected on a vector (1x1 conv over 1x1 pixels) ---------------- */
/* y[m] = act(b[m] + sum_k x[k] * wt[k, m]) for each of `batch` rows x [K] -> y [M];
 * wt is the weight transposed, [K, M]; b may be NULL. act: 0 none, 1 clamp
 * [lo, hi], 2 sigmoid, 4 silu, 6 hardswish (HODU_ACTIVATION_* codes). */
HK_CLONES HK_VECTORIZE HK void hk_fc(const float* x, const float* wt, const float* b, float* y, int64_t batch, int64_t K,
                                    int64_t M, int act, float lo, float hi) {
  int64_t n, k, m;
  for (n = 0; n < batch; ++n) {
    const float* xr = x + n * K;
    float* yr = y + n * M;
    for (m = 0; m < M; ++m) yr[m] = b ? b[m] : 0.f;
    for (k = 0; k < K; ++k) {
      const float xv = xr[k];
      const float* w = wt + k * M;
      m = 0;
#if defined(HK_VEC) && HK_VEC == 8 && !defined(HK_CLONES_ACTIVE)
      for (; m + 8 <= M; m += 8) {
        hk_v8 wv, yv;
        memcpy(&wv, w + m, sizeof wv);
        memcpy(&yv, yr + m, sizeof yv);
        yv += xv * wv;
        memcpy(yr + m, &yv, sizeof yv);
      }
#elif defined(HK_VEC) && !defined(HK_CLONES_ACTIVE)
      for (; m + 4 <= M; m += 4) {
        hk_v4 wv, yv;
        memcpy(&wv, w + m, sizeof wv);
        memcpy(&yv, yr + m, sizeof yv);
        yv += xv * wv;
        memcpy(yr + m, &yv, sizeof yv);
      }
#endif
      for (; m < M; ++m) yr[m] += xv * w[m];
    }
    for (m = 0; m < M; ++m) {
      float v = yr[m];
      if (act == 1) v = v < lo ? lo : v > hi ? hi : v;
      else if (act == 2) v = 1.f / (1.f + expf(-v));
      else if (act == 4) v = v / (1.f + expf(-v));
      else if (act == 6) v = v * hk_clamp01f(v / 6.f + 0.5f);
      yr[m] = v;
    }
  }
}

/* ---- Normalization -------------------------------------------------------- */
/* y[n,c,i] = x[n,c,i] * scale[c] + shift[c] (BatchNormalization at inference, folded). */
HK_CLONES HK_VECTORIZE HK void hk_channel_affine(const float* x, const float* scale, const float* shift, float* y,
                                                int64_t N, int64_t C, int64_t inner) {
  int64_t n, c, i;
  for (n = 0; n < N; ++n)
    for (c = 0; c < C; ++c) {
      const float* xs = x + (n * C + c) * inner;
      float* ys = y + (n * C + c) * inner;
      for (i = 0; i < inner; ++i) ys[i] = xs[i] * scale[c] + shift[c];
    }
}

/* Normalizes each of `rows` rows of `cols` elements; scale/bias have `cols` elements (bias may be NULL). */
HK void hk_layer_norm(const float* x, const float* scale, const float* bias, float* y, int64_t rows, int64_t cols,
                      float eps) {
  int64_t r, i;
  for (r = 0; r < rows; ++r) {
    const float* xs = x + r * cols;
    float* ys = y + r * cols;
    double mean = 0, var = 0;
    for (i = 0; i < cols; ++i) mean += xs[i];
    mean /= (double)cols;
    for (i = 0; i < cols; ++i) var += (xs[i] - mean) * (xs[i] - mean);
    var /= (double)cols;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (i = 0; i < cols; ++i) ys[i] = (float)(xs[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.f);
  }
}

/* Softmax over the middle dim of [outer, n, inner]; log = 1 for LogSoftmax. */
HK void hk_softmax(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, int log) {
  int64_t o, i, k;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      const float* xs = x + o * n * inner + i;
      float* ys = y + o * n * inner + i;
      float mx = -INFINITY, sum = 0.f;
      for (k = 0; k < n; ++k) mx = xs[k * inner] > mx ? xs[k * inner] : mx;
      for (k = 0; k < n; ++k) {
        float e = expf(xs[k * inner] - mx);
        sum += e;
        if (!log) ys[k * inner] = e;
      }
      if (log) {
        float ls = logf(sum);
        for (k = 0; k < n; ++k) ys[k * inner] = xs[k * inner] - mx - ls;
      } else {
        float inv = 1.f / sum;
        for (k = 0; k < n; ++k) ys[k * inner] *= inv;
      }
    }
}

/* ---- Data movement (any element size) ------------------------------------ */
#define HK_MAX_RANK 8
/* y (contiguous, dims) = x[offset + sum idx_d * strides_d]; strides in elements, may be 0 or negative.
 * Transpose, Slice, Expand and Split are this copy with different strides. */
HK void hk_strided_copy(const void* x, void* y, int rank, const int64_t* dims, const int64_t* strides, int64_t offset,
                        int64_t esize) {
  int64_t idx[HK_MAX_RANK] = {0}, total = 1, i, src = offset;
  int d;
  const char* xs = (const char*)x;
  char* ys = (char*)y;
  for (d = 0; d < rank; ++d) total *= dims[d];
  if (total == 0) return;
  if (rank == 0) {
    memcpy(ys, xs + src * esize, (size_t)esize);
    return;
  }
  int64_t last = dims[rank - 1], ls = strides[rank - 1];
  for (i = 0; i < total; i += last) {
    int64_t k;
    if (ls == 1) {
      memcpy(ys + i * esize, xs + src * esize, (size_t)(last * esize));
    } else if (esize == 4) {
      const float* s = (const float*)(xs) + src;
      float* t = (float*)(ys) + i;
      for (k = 0; k < last; ++k) t[k] = s[k * ls];
    } else {
      for (k = 0; k < last; ++k) memcpy(ys + (i + k) * esize, xs + (src + k * ls) * esize, (size_t)esize);
    }
    for (d = rank - 2; d >= 0; --d) {
      src += strides[d];
      if (++idx[d] < dims[d]) break;
      src -= strides[d] * dims[d];
      idx[d] = 0;
    }
  }
}

/* Copies `rows` rows of `bytes` bytes between two strided (byte) layouts: Concat. */
HK void hk_copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows, int64_t bytes) {
  int64_t r;
  for (r = 0; r < rows; ++r) memcpy((char*)dst + r * dst_stride, (const char*)src + r * src_stride, (size_t)bytes);
}

/* Gather along an axis: x [outer, n, inner], indices (i64 or i32) → y [outer, count, inner]. */
HK int hk_gather(const void* x, const void* indices, int idx_i32, void* y, int64_t outer, int64_t n, int64_t count,
                 int64_t inner_bytes) {
  int64_t o, k;
  for (k = 0; k < count; ++k) {
    int64_t ix = idx_i32 ? ((const int32_t*)indices)[k] : ((const int64_t*)indices)[k];
    if (ix < -n || ix >= n) return 1;
  }
  for (o = 0; o < outer; ++o)
    for (k = 0; k < count; ++k) {
      int64_t ix = idx_i32 ? ((const int32_t*)indices)[k] : ((const int64_t*)indices)[k];
      if (ix < 0) ix += n;
      memcpy((char*)y + (o * count + k) * inner_bytes, (const char*)x + (o * n + ix) * inner_bytes,
             (size_t)inner_bytes);
    }
  return 0;
}

/* Pad: mode 0 constant, 1 reflect, 2 edge, 3 wrap. begin: pads before each dim. */
HK void hk_pad(const void* x, void* y, int rank, const int64_t* in_dims, const int64_t* out_dims, const int64_t* begin,
               int mode, const void* value, int64_t esize) {
  int64_t idx[HK_MAX_RANK] = {0}, total = 1, i, in_strides[HK_MAX_RANK];
  int d;
  for (d = rank - 1; d >= 0; --d) in_strides[d] = d == rank - 1 ? 1 : in_strides[d + 1] * in_dims[d + 1];
  for (d = 0; d < rank; ++d) total *= out_dims[d];
  for (i = 0; i < total; ++i) {
    int64_t src = 0;
    int inside = 1;
    for (d = 0; d < rank; ++d) {
      int64_t c = idx[d] - begin[d], n = in_dims[d];
      if (c < 0 || c >= n) {
        if (mode == 0 || n == 0) {
          inside = 0;
          break;
        } else if (mode == 1) {
          int64_t period = 2 * (n - 1);
          if (period == 0) c = 0;
          else {
            c = c % period;
            if (c < 0) c += period;
            if (c >= n) c = period - c;
          }
        } else if (mode == 2) {
          c = c < 0 ? 0 : n - 1;
        } else {
          c = c % n;
          if (c < 0) c += n;
        }
      }
      src += c * in_strides[d];
    }
    memcpy((char*)y + i * esize, inside ? (const char*)x + src * esize : (const char*)value, (size_t)esize);
    for (d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out_dims[d]) break;
      idx[d] = 0;
    }
  }
}

/* Resize, nearest: per output dim d, src index table tables[d] (concatenated). */
HK void hk_resize_nearest(const void* x, void* y, int rank, const int64_t* in_dims, const int64_t* out_dims,
                          const int64_t* table, int64_t esize) {
  int64_t idx[HK_MAX_RANK] = {0}, total = 1, i, in_strides[HK_MAX_RANK], start[HK_MAX_RANK];
  int d;
  for (d = rank - 1; d >= 0; --d) in_strides[d] = d == rank - 1 ? 1 : in_strides[d + 1] * in_dims[d + 1];
  for (d = 0; d < rank; ++d) {
    start[d] = d == 0 ? 0 : start[d - 1] + out_dims[d - 1];
    total *= out_dims[d];
  }
  for (i = 0; i < total; ++i) {
    int64_t src = 0;
    for (d = 0; d < rank; ++d) src += table[start[d] + idx[d]] * in_strides[d];
    memcpy((char*)y + i * esize, (const char*)x + src * esize, (size_t)esize);
    for (d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out_dims[d]) break;
      idx[d] = 0;
    }
  }
}

/* Resize, bilinear over the last two dims: per output row/col two source indices and a weight. */
HK void hk_resize_linear2d(const float* x, float* y, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                           const int64_t* y0, const int64_t* y1, const float* wy, const int64_t* x0, const int64_t* x1,
                           const float* wx) {
  int64_t c, i, j;
  for (c = 0; c < NC; ++c) {
    const float* s = x + c * H * W;
    float* d = y + c * OH * OW;
    for (i = 0; i < OH; ++i) {
      const float* r0 = s + y0[i] * W;
      const float* r1 = s + y1[i] * W;
      float a = wy[i];
      for (j = 0; j < OW; ++j) {
        float top = r0[x0[j]] + (r0[x1[j]] - r0[x0[j]]) * wx[j];
        float bot = r1[x0[j]] + (r1[x1[j]] - r1[x0[j]]) * wx[j];
        d[i * OW + j] = top + (bot - top) * a;
      }
    }
  }
}

/* ---- Reductions ---------------------------------------------------------- */
/* op: 0 sum, 1 mean, 2 max, 3 min, 4 prod, 5 sum-square, 6 l1, 7 l2.
 * out_strides: for each input dim, the output stride (0 for reduced dims). */
/* One reduction step: a = op(a, v) (ops as hk_reduce's). */
#define HK_REDUCE_STEP(a, v)                             \
  switch (op) {                                          \
    case 0: case 1: a += v; break;                       \
    case 2: a = (v > a || v != v) ? v : a; break;        \
    case 3: a = (v < a || v != v) ? v : a; break;        \
    case 4: a *= v; break;                               \
    case 5: case 7: a += v * v; break;                   \
    case 6: a += fabsf(v); break;                        \
    default: break;                                      \
  }

/* y[o] = op over the x elements whose out_strides offset is o (0 on the reduced dims), each
 * output's elements taken in storage order. Neighbouring dims that are both reduced, or both
 * kept and contiguous in y, are merged, and the innermost run is one tight loop: a row's
 * reduction, or a row of y updated from a row of x (a per-element walk of the index cost
 * ~10x more: the DynamicQuantizeLinear min/max of a quantized transformer). */
HK void hk_reduce(const float* x, float* y, int rank, const int64_t* dims, const int64_t* out_strides, int64_t n_out,
                  int64_t per_out, int op) {
  int64_t md[HK_MAX_RANK], ms[HK_MAX_RANK], idx[HK_MAX_RANK] = {0}, total = 1, i, j, o, dst = 0, inner;
  int d, mr = 0;
  float init = op == 2 ? -INFINITY : op == 3 ? INFINITY : op == 4 ? 1.f : 0.f;
  for (d = 0; d < rank; ++d) total *= dims[d];
  for (o = 0; o < n_out; ++o) y[o] = init;
  for (d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    if (mr > 0 && (ms[mr - 1] == 0) == (out_strides[d] == 0) &&
        (out_strides[d] == 0 || ms[mr - 1] == out_strides[d] * dims[d])) {
      md[mr - 1] *= dims[d];
      ms[mr - 1] = out_strides[d];
    } else {
      md[mr] = dims[d];
      ms[mr++] = out_strides[d];
    }
  }
  if (mr == 0) md[mr] = 1, ms[mr++] = 0;
  inner = md[mr - 1];
  for (i = 0; i < total; i += inner) {
    const float* xr = x + i;
    if (ms[mr - 1] == 0) {
      float a = y[dst];
      for (j = 0; j < inner; ++j) {
        float v = xr[j];
        HK_REDUCE_STEP(a, v)
      }
      y[dst] = a;
    } else {
      float* yr = y + dst;
      for (j = 0; j < inner; ++j) {
        float v = xr[j], a = yr[j];
        HK_REDUCE_STEP(a, v)
        yr[j] = a;
      }
    }
    for (d = mr - 2; d >= 0; --d) {
      dst += ms[d];
      if (++idx[d] < md[d]) break;
      dst -= ms[d] * md[d];
      idx[d] = 0;
    }
  }
  for (o = 0; o < n_out; ++o) {
    if (op == 1) y[o] = per_out ? y[o] / (float)per_out : NAN;
    if (op == 7) y[o] = sqrtf(y[o]);
  }
}
#undef HK_REDUCE_STEP

/* ArgMax/ArgMin over the middle dim of [outer, n, inner] → int64; select_last picks the last of ties. */
HK void hk_argreduce(const float* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, int is_min, int select_last) {
  int64_t o, i, k;
  for (o = 0; o < outer; ++o)
    for (i = 0; i < inner; ++i) {
      const float* xs = x + o * n * inner + i;
      int64_t best = 0;
      float bv = xs[0];
      for (k = 1; k < n; ++k) {
        float v = xs[k * inner];
        int better = is_min ? (v < bv || (select_last && v == bv)) : (v > bv || (select_last && v == bv));
        if (better) {
          bv = v;
          best = k;
        }
      }
      y[o * inner + i] = best;
    }
}


/* The arena plan of a model whose sizes are known at run time (memory_plan.cc's algorithm,
 * run when the model first sees a shape): buffers joined in place share one slot whose life
 * is their union; slots largest first, each at the lowest 64-aligned offset that overlaps no
 * placed slot live at the same time. work: 5 * n int64s. Returns the arena bytes. */
HK int64_t hk_plan(int64_t n, const int64_t* bytes, const int32_t* first, const int32_t* last, const int32_t* reuse,
                   int64_t* offsets, int64_t* work) {
  int64_t* slot_of = work;            /* buffer -> slot */
  int64_t* size = work + n;           /* slot -> bytes (aligned) */
  int64_t* life = work + 2 * n;       /* slot -> first << 32 | last */
  int64_t* order = work + 3 * n;      /* slots by size */
  int64_t* off = work + 4 * n;        /* slot -> offset */
  int64_t slots = 0, i, j, k, total = 0;
  for (i = 0; i < n; ++i) {
    int64_t b = (bytes[i] < 1 ? 1 : bytes[i]) + 63;
    b -= b % 64;
    if (reuse[i] >= 0) {
      int64_t s = slot_of[reuse[i]];
      int64_t f = life[s] >> 32, l = life[s] & 0xffffffff;
      if (last[i] > l) l = last[i];
      life[s] = (f << 32) | l;
      if (b > size[s]) size[s] = b;
      slot_of[i] = s;
      continue;
    }
    slot_of[i] = slots;
    size[slots] = b;
    life[slots] = ((int64_t)first[i] << 32) | (int64_t)last[i];
    order[slots] = slots;
    ++slots;
  }
  /* Insertion sort by size, largest first, stable. */
  for (i = 1; i < slots; ++i) {
    int64_t s = order[i];
    for (j = i; j > 0 && size[order[j - 1]] < size[s]; --j) order[j] = order[j - 1];
    order[j] = s;
  }
  for (i = 0; i < slots; ++i) {
    int64_t s = order[i], at = 0, moved = 1;
    int64_t f = life[s] >> 32, l = life[s] & 0xffffffff;
    /* Lowest offset clear of every placed slot live at the same time (placed: order[0..i)). */
    while (moved) {
      moved = 0;
      for (k = 0; k < i; ++k) {
        int64_t p = order[k], pf = life[p] >> 32, pl = life[p] & 0xffffffff;
        if (pf <= l && f <= pl && at < off[p] + size[p] && off[p] < at + size[s]) {
          at = off[p] + size[p];
          moved = 1;
        }
      }
    }
    off[s] = at;
    if (at + size[s] > total) total = at + size[s];
  }
  for (i = 0; i < n; ++i) offsets[i] = off[slot_of[i]];
  return total;
}
