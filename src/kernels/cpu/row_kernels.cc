// Row-wise kernels of a transformer that oneDNN 2.6 has no cheap primitive for
// at these sizes: layer normalization and softmax (with the attention's scale
// and additive mask), vectorized for the host (isa_dispatch.h: AVX-512, AVX2
// or plain, capped by HODU_MAX_ISA) and split over the context's threads by
// rows. No prepare: nothing to reorder.
#include <omp.h>

#include <algorithm>
#include <limits>

#include "kernels/cpu/kernels_context.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::kernels {
namespace {

// y = softmax(x * scale + add) over n values (add may be NULL; y may be x).
HODU_ISA_BODY void softmax_row_body(const float* x, float scale, const float* add, float* y, int64_t n) {
  if (add) {
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] * scale + add[j];
  } else if (scale != 1.0f) {
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] * scale;
  } else if (y != x) {
    for (int64_t j = 0; j < n; ++j) y[j] = x[j];
  }
  // Every entry -inf: ONNX gives NaN (0/0), as the reference does.
  if (!vector_math::softmax_in_place_fast(y, n))
    for (int64_t j = 0; j < n; ++j) y[j] = std::numeric_limits<float>::quiet_NaN();
}
HODU_ISA_VARIANTS(void, softmax_row, (const float* x, float scale, const float* add, float* y, int64_t n),
                  (x, scale, add, y, n))

HODU_ISA_BODY void layer_norm_row_body(const float* x, const float* scale, const float* bias, float* y, int64_t n,
                                       float eps) {
  vector_math::layer_norm(x, scale, bias, y, n, eps, false);
}
HODU_ISA_VARIANTS(void, layer_norm_row,
                  (const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps),
                  (x, scale, bias, y, n, eps))

// body(r) for every row, split over at most `threads` threads (one when the work is small).
template <class F>
void for_rows(int threads, int64_t rows, int64_t cols, F&& body) {
  int64_t chunks = std::min<int64_t>(threads, rows);
  if (rows * cols < 32768) chunks = 1;
  if (chunks < 2) {
    for (int64_t r = 0; r < rows; ++r) body(r);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) body(r);
}

}  // namespace
}  // namespace hodu::kernels

extern "C" int hodu_layer_norm(hodu_kernels* k, const float* x, const float* scale, const float* bias, float* y,
                               int64_t rows, int64_t cols, float epsilon) {
  if (!k || !x || !scale || !y || rows < 0 || cols <= 0) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  hodu::kernels::for_rows(k->threads, rows, cols, [&](int64_t r) {
    hodu::kernels::layer_norm_row(x + r * cols, scale, bias, y + r * cols, cols, epsilon);
  });
  return HODU_KERNELS_OK;
}

extern "C" int hodu_softmax(hodu_kernels* k, const float* x, float scale, const float* add, int64_t add_rows, float* y,
                            int64_t rows, int64_t cols) {
  if (!k || !x || !y || rows < 0 || cols <= 0 || (add && add_rows <= 0)) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  hodu::kernels::for_rows(k->threads, rows, cols, [&](int64_t r) {
    hodu::kernels::softmax_row(x + r * cols, scale, add ? add + (r % add_rows) * cols : nullptr, y + r * cols, cols);
  });
  return HODU_KERNELS_OK;
}
