// Elementwise iteration for the eager kernels: operands broadcast to the
// output's shape, dims merged where every operand steps through them
// contiguously, the work split over the eager threads in blocks of the
// innermost dim. A kernel is a function of (pointers, byte strides of the
// innermost dim, count); it checks for the contiguous and scalar cases itself
// so that GCC vectorizes those loops. Internal; include only from .cc files
// compiled with OpenMP (src/frontend/CMakeLists.txt).
#pragma once
#include <omp.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hodu::tensor_kernels {

// The threads of every kernel here (oneDNN included): a ThreadScope's on this thread, else
// set_num_threads's (default HODU_NUM_THREADS, else the cores).
int num_threads();
void set_num_threads(int threads);
// Sets this thread's kernel thread count for its scope (an engine running a plan on N threads).
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

}  // namespace hodu::tensor_kernels

namespace hodu::tensor_kernels::loops {

constexpr int kMaxOperands = 4;
constexpr int kMaxDims = 16;  // after merging
// Below this many elements a loop runs on the calling thread.
constexpr int64_t kParallelMin = 32768;
// Innermost blocks of at most this many elements are the unit of work.
constexpr int64_t kBlock = 8192;

int num_threads();  // tensor_kernels::num_threads()

struct Iter {
  int nops = 0;                 // operand 0 is the output
  std::vector<int64_t> shape;   // merged dims, innermost last
  std::vector<std::array<int64_t, kMaxOperands>> strides;  // bytes, per dim
  std::array<char*, kMaxOperands> base{};
  int64_t numel = 1;
};

// Iteration over `out`'s shape (any strides: in-place ops write through views); each input
// broadcasts to it (numpy rules; InvalidArgument naming `op` otherwise).
Iter make_iter(hodu::Tensor& out, const std::vector<const hodu::Tensor*>& inputs, const char* op);
// Iteration over an explicit shape, each operand given with its strides in elements (0:
// broadcast) and element size: reductions use it with an output stride of 0.
Iter make_iter_strided(const std::vector<int64_t>& shape, const std::vector<char*>& bases,
                       const std::vector<std::vector<int64_t>>& strides, const std::vector<int64_t>& elem_sizes);

// The broadcast shape of two shapes (InvalidArgument naming `op` when they do not broadcast).
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const char* op);

// Runs fn(ptrs, strides, n) over every innermost block. With `parallel`, blocks go to the
// eager threads (fn must then not write what another block writes).
template <typename Fn>
void for_each(const Iter& it, Fn&& fn, bool parallel = true) {
  if (it.numel == 0) return;
  const int nd = static_cast<int>(it.shape.size());
  if (nd == 0) {
    std::array<char*, kMaxOperands> p = it.base;
    int64_t s[kMaxOperands] = {};
    fn(p.data(), s, int64_t{1});
    return;
  }
  const int64_t inner = it.shape[nd - 1];
  const int64_t block = inner < kBlock ? inner : kBlock;
  const int64_t per_row = (inner + block - 1) / block;
  const int64_t rows = it.numel / inner;
  const int64_t tasks = rows * per_row;
  int64_t inner_strides[kMaxOperands] = {};
  for (int k = 0; k < it.nops; ++k) inner_strides[k] = it.strides[nd - 1][k];

  auto run = [&](int64_t t0, int64_t t1) {
    if (t0 >= t1) return;
    // The row's index over the outer dims, advanced like an odometer.
    int64_t idx[kMaxDims] = {};
    int64_t row = t0 / per_row, b = t0 % per_row;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = row % it.shape[d];
      row /= it.shape[d];
    }
    std::array<char*, kMaxOperands> p{};
    auto row_ptrs = [&] {
      for (int k = 0; k < it.nops; ++k) {
        char* q = it.base[k];
        for (int d = 0; d < nd - 1; ++d) q += idx[d] * it.strides[d][k];
        p[k] = q;
      }
    };
    row_ptrs();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = b * block;
      const int64_t n = inner - start < block ? inner - start : block;
      std::array<char*, kMaxOperands> q{};
      for (int k = 0; k < it.nops; ++k) q[k] = p[k] + start * inner_strides[k];
      fn(q.data(), inner_strides, n);
      if (++b == per_row) {
        b = 0;
        for (int d = nd - 2; d >= 0; --d) {
          if (++idx[d] < it.shape[d]) break;
          idx[d] = 0;
        }
        row_ptrs();
      }
    }
  };
  const int threads = parallel && it.numel >= kParallelMin && tasks > 1 ? num_threads() : 1;
  if (threads <= 1) {
    run(0, tasks);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    run(tasks * id / nt, tasks * (id + 1) / nt);
  }
}

// Runs f(begin, end) over [0, n) split across the eager threads when `work` (elements touched)
// is large enough.
template <typename F>
void parallel_range(int64_t n, int64_t work, F&& f) {
  const int threads = work >= kParallelMin && n > 1 ? num_threads() : 1;
  if (threads <= 1) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t b = n * id / nt, e = n * (id + 1) / nt;
    if (b < e) f(b, e);
  }
}

}  // namespace hodu::tensor_kernels::loops
