// A 2-D oneDNN matmul run as fixed tiles, each one single-threaded call over all of K.
// oneDNN's sgemm (what it has without AVX-512) splits K across threads when M and N are
// small, so its sums would depend on the thread count; tiles of a fixed size give every
// thread count the same bits (and split the work as evenly). Header-only: the cpu engine
// (libhodu) and libhodu_kernels.so (which does not link libhodu) both use it.
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

namespace hodu::onednn {

// Index of the (first) binary post-op of `pd`'s attributes: a sum post-op may come before it.
inline int binary_post_op_index(const dnnl::matmul::primitive_desc& pd) {
  // get_post_ops() returns a view into the attr: the attr must outlive it (a temporary did not).
  dnnl::primitive_attr attr = pd.get_primitive_attr();
  dnnl::post_ops po = attr.get_post_ops();
  for (int i = 0; i < po.len(); ++i)
    if (po.kind(i) == dnnl::primitive::kind::binary) return i;
  return 0;
}

class TiledMatMul {
 public:
  static constexpr int64_t kRows = 256, kCols = 384;
  using AttrFor = std::function<dnnl::primitive_attr(const dnnl::memory::desc& addend)>;

  // The tiles of the product `pd` computes ([m, k] x [k, n], 2-D), for up to `threads`
  // threads; null when oneDNN declines a tile shape. `attr_for(c)`: the product's attributes
  // with its binary post-op addend seen as `c` (a tile of `c_md`: [m or 1, n or 1]; an empty
  // desc when there is none). A tile needing a scratchpad gets its own per thread.
  static std::unique_ptr<TiledMatMul> make(const dnnl::engine& eng, int threads,
                                           const dnnl::matmul::primitive_desc& pd, const AttrFor& attr_for,
                                           const dnnl::memory::desc& c_md = {}) {
    auto t = std::unique_ptr<TiledMatMul>(new TiledMatMul());
    auto a_md = pd.src_desc(), w_md = pd.weights_desc(), y_md = pd.dst_desc(), bias_md = pd.bias_desc();
    t->m_ = y_md.dims()[0];
    t->n_ = y_md.dims()[1];
    t->a_row_ = a_md.data.format_desc.blocking.strides[0];
    t->b_col_ = w_md.data.format_desc.blocking.strides[1];
    const bool has_c = c_md.get_size() > 0, has_bias = bias_md.get_size() > 0;
    const int64_t cm = has_c ? c_md.dims()[0] : 1, cn = has_c ? c_md.dims()[1] : 1, k = a_md.dims()[1];
    t->c_row_ = cm > 1 ? cn : 0;
    t->c_col_ = cn > 1 ? 1 : 0;
    std::array<dnnl::matmul::primitive_desc, 4> pds;
    for (int shape = 0; shape < 4; ++shape) {
      const int64_t tm = shape & 2 && t->m_ % kRows ? t->m_ % kRows : std::min(t->m_, kRows);
      const int64_t tn = shape & 1 && t->n_ % kCols ? t->n_ % kCols : std::min(t->n_, kCols);
      auto a = a_md.submemory_desc({tm, k}, {0, 0}), w = w_md.submemory_desc({k, tn}, {0, 0});
      auto y = y_md.submemory_desc({tm, tn}, {0, 0});
      auto c = has_c ? c_md.submemory_desc({cm > 1 ? tm : 1, cn > 1 ? tn : 1}, {0, 0}) : dnnl::memory::desc();
      try {
        auto desc = has_bias ? dnnl::matmul::desc(a, w, bias_md.submemory_desc({1, tn}, {0, 0}), y)
                             : dnnl::matmul::desc(a, w, y);
        // Tiles of one shape run on several threads at once: each call needs its own
        // scratchpad. In library mode a primitive has one, shared by every thread executing
        // it (sgemm with a bias and a sum post-op accumulates there: a race, wrong sums).
        dnnl::primitive_attr attr = attr_for(c);
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        pds[shape] = dnnl::matmul::primitive_desc(desc, attr, eng);
      } catch (const dnnl::error&) {
        return nullptr;
      }
      t->prims_[shape] = dnnl::matmul(pds[shape]);
    }
    t->per_thread_.resize(std::max(threads, 1));
    for (auto& calls : t->per_thread_) {
      t->streams_.emplace_back(eng);
      for (int shape = 0; shape < 4; ++shape) calls[shape] = Call(eng, pds[shape], has_bias, has_c);
    }
    return t;
  }

  // y = the product of a and b (plus bias, plus the addend c; each null when absent; plus y's
  // own values where the attributes have a sum post-op) on up to `threads` threads, which stay
  // the caller's OpenMP thread count afterwards.
  void run(int threads, const float* a, const float* b, const float* bias, const float* c, float* y) {
    const int64_t rows = (m_ + kRows - 1) / kRows, cols = (n_ + kCols - 1) / kCols;
    const int workers = static_cast<int>(std::min<int64_t>({threads, static_cast<int64_t>(per_thread_.size()),
                                                            rows * cols}));
    // Each call single-threaded: inside the parallel loop oneDNN runs serially; outside it
    // (one thread or one tile) it would take every OpenMP thread.
    omp_set_num_threads(1);
#pragma omp parallel for num_threads(workers) schedule(static) if (workers > 1)
    for (int64_t tile = 0; tile < rows * cols; ++tile) {
      const int64_t i = tile / cols, j = tile % cols, r0 = i * kRows, c0 = j * kCols;
      const int shape = (i == rows - 1 && m_ % kRows ? 2 : 0) + (j == cols - 1 && n_ % kCols ? 1 : 0);
      const int tid = workers > 1 ? omp_get_thread_num() : 0;
      Call& call = per_thread_[tid][shape];
      call.a.set_data_handle(const_cast<float*>(a + r0 * a_row_));
      call.b.set_data_handle(const_cast<float*>(b + c0 * b_col_));
      call.dst.set_data_handle(y + r0 * n_ + c0);
      if (bias) call.bias.set_data_handle(const_cast<float*>(bias + c0));
      if (c) call.c.set_data_handle(const_cast<float*>(c + r0 * c_row_ + c0 * c_col_));
      prims_[shape].execute(streams_[tid], call.args);
    }
    omp_set_num_threads(threads);
  }

 private:
  TiledMatMul() = default;

  // One tile shape's memories on one thread; `args` holds the same handles, built once.
  struct Call {
    Call() = default;
    Call(const dnnl::engine& eng, const dnnl::matmul::primitive_desc& pd, bool has_bias, bool has_c)
        : a(pd.src_desc(), eng, nullptr), b(pd.weights_desc(), eng, nullptr), dst(pd.dst_desc(), eng, nullptr) {
      args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, dst}};
      if (has_bias) args[DNNL_ARG_BIAS] = bias = dnnl::memory(pd.bias_desc(), eng, nullptr);
      if (has_c) {
        int arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(binary_post_op_index(pd)) | DNNL_ARG_SRC_1;
        args[arg] = c = dnnl::memory(pd.query_md(dnnl::query::exec_arg_md, arg), eng, nullptr);
      }
      if (size_t bytes = pd.scratchpad_desc().get_size(); bytes > 0) {
        scratch.reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
        if (!scratch) throw std::bad_alloc();
        args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(pd.scratchpad_desc(), eng, scratch.get());
      }
    }
    dnnl::memory a, b, bias, c, dst;
    std::unique_ptr<void, decltype(&std::free)> scratch{nullptr, &std::free};
    std::unordered_map<int, dnnl::memory> args;
  };

  int64_t m_ = 0, n_ = 0;
  // Element strides: A's rows, B's columns, the addend's rows/columns (0 where broadcast).
  int64_t a_row_ = 0, b_col_ = 0, c_row_ = 0, c_col_ = 0;
  std::array<dnnl::matmul, 4> prims_;  // [full/last row tile][full/last column tile]
  std::vector<std::array<Call, 4>> per_thread_;
  std::vector<dnnl::stream> streams_;
};

}  // namespace hodu::onednn
