// Hand-written row kernels (softmax, layer norm): compiled for AVX2+FMA and
// for plain x86-64, the variant picked at run time by the CPU (target_clones).
#pragma once
#include <cstdint>

namespace hodu::cpu {

// y[i] = softmax(x[i] + add[i]) over one row of n; add may be null, add_stride 0 broadcasts one value.
// masked_from: columns >= masked_from get -inf (causal), n when none.
void softmax_row(const float* x, const float* add, int64_t add_stride, float* y, int64_t n, int64_t masked_from);
// y = (x - mean) / sqrt(var + eps) * scale + bias over one row (rms: no mean, root mean square).
void layer_norm_row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps, bool rms);

// Runs f(i) for i in [0, n) on `threads` OpenMP threads.
template <typename F>
void parallel_for(int64_t n, int threads, F&& f) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n > 1)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace hodu::cpu
