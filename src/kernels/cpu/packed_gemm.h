// hodu's own f32 GEMM for AVX2+FMA CPUs: C = A·B (+ bias, + C's own values, then an
// activation), B packed once into panels of 16 columns, a 6x16 register tile (12 accumulators,
// two B vectors and a broadcast A value: 15 of the 16 ymm registers), K in blocks of 256.
// The cpu engine runs it for the 36 products of its AVX2 Winograd convolution (winograd_avx2.h).
// As a 1x1 conv over nChw8c it measured 5-25 % slower than oneDNN's jit_1x1:avx2 on ResNet-50's
// shapes (docs/performance.md), so those stay on oneDNN.
// Each element of C is summed over k in one fixed order by one thread, so the bits do not
// depend on the thread count. Compiled into libhodu.
#pragma once
#include <cstdint>

namespace hodu::packed_gemm {

constexpr int64_t kPanel = 16;  // columns of a packed panel of B

// Floats of B packed for gemm(): ceil(n / 16) panels of k rows of 16, the last one zero-padded.
inline int64_t packed_size(int64_t k, int64_t n) { return (n + kPanel - 1) / kPanel * kPanel * k; }

// Packs B (k x n; element (i, j) at b[i * row + j * col]) into `out` (packed_size(k, n) floats).
void pack_b(const float* b, int64_t row, int64_t col, int64_t k, int64_t n, float* out);

enum class Act { None, Relu, LeakyRelu, Clip, HardSigmoid, Sigmoid, Tanh, Silu, Gelu, GeluTanh };

// Activation by the name hodu's fused ops give it (FusedConv/FusedMatMul "activation": "",
// Relu, LeakyRelu, Clip, HardSigmoid, Sigmoid, Tanh, Silu, Gelu, GeluTanh) with its
// parameters' defaults filled in; false for a name it does not know.
bool activation_of(const char* name, const float* params, int64_t n_params, Act* act, float* p0, float* p1);

struct Epilogue {
  const float* bias = nullptr;  // [n], added to every row; null: none
  bool accumulate = false;      // C = C + A·B (C holds a residual) instead of C = A·B
  Act act = Act::None;
  float p0 = 0, p1 = 0;  // LeakyRelu's alpha; Clip's bounds; HardSigmoid's alpha, beta
};

// Where row r of A or C starts: r * row, or, when group > 0, rows in groups of `group` that
// start group_row apart ((r / group) * group_row + (r % group) * row): a rectangle of an
// image's pixels (tap_conv.h reads and writes the window one kernel tap reaches).
struct Rows {
  int64_t row = 0, group = 0, group_row = 0;
  int64_t offset(int64_t r) const { return group > 0 ? (r / group) * group_row + (r % group) * row : r * row; }
};
// A(r, i) = data[rows.offset(r) + (i / 8) * kblock + i % 8]: row-major when kblock == 8 (any
// row stride), oneDNN's nChw8c seen as [H·W, C] when rows.row == 8 and kblock == H·W·8.
struct MatrixA {
  const float* data;
  int64_t row, kblock;
  int64_t group = 0, group_row = 0;  // see Rows
  Rows rows() const { return {row, group, group_row}; }
};
// C(r, j) = data[rows.offset(r) + (j / 8) * jblock + j % 8]: row-major with jblock == 8.
struct MatrixC {
  float* data;
  int64_t row, jblock;
  int64_t group = 0, group_row = 0;  // see Rows
  Rows rows() const { return {row, group, group_row}; }
};

// Whether gemm() may run here: AVX2 and FMA, and HODU_MAX_ISA allows AVX2.
bool available();

// C (m x n) = epilogue(A (m x k) · B), B packed by pack_b, on up to `threads` OpenMP threads.
void gemm(int64_t m, int64_t n, int64_t k, const MatrixA& a, const float* packed_b, const MatrixC& c,
          const Epilogue& ep, int threads);

// C (m x n, row-major, rows c_row apart) = A (m x k, row-major, rows a_row apart) · B for a few
// rows (an RNN's recurrent product, one row per batch entry): every row of A against two panels
// of B at a time (3 rows x 32 columns in 12 accumulators; gemm()'s 6x16 tile would spend half
// its multiply-adds on rows that are not there). One thread; the same sums as gemm().
void gemm_few_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, const float* packed_b, float* c,
                   int64_t c_row);

// The activation alone over y[0, n) in place (what gemm's epilogue applies), for tests.
void activate(float* y, int64_t n, const Epilogue& ep);

}  // namespace hodu::packed_gemm
