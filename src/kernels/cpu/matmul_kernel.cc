// Matrix multiplication on oneDNN's matmul (batched, broadcast batch dims,
// transposes as strided views). A constant B is reordered once at prepare
// with alpha folded in; the bias vector and the activation run inside. Where
// oneDNN has only its sgemm, a 2-D product runs as fixed tiles (MatMulTiles).
#include <omp.h>

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/kernels_context.h"

namespace hodu::kernels {
namespace {

using dt = dnnl::memory::data_type;

// oneDNN's sgemm splits K across threads for small M and N, so its sums would depend on the
// thread count: fixed 256x384 tiles, each one single-threaded call over all of K, give every
// thread count the same bits (as the cpu engine's TiledMatMul does).
struct MatMulTiles {
  static constexpr int64_t kRows = 256, kCols = 384;
  int64_t m = 0, n = 0, a_row = 0, b_col = 0;  // element strides of A's rows and B's columns
  std::array<dnnl::matmul, 4> prims;           // [full/last row tile][full/last column tile]
  struct Memories {
    dnnl::memory a, b, bias, dst, scratch;
    AlignedBytes scratch_bytes;
  };
  std::vector<std::array<Memories, 4>> per_thread;
  std::vector<dnnl::stream> streams;
};

struct MatMulKernel : hodu_kernel {
  MatMulKernel() : hodu_kernel(Kind::MatMul) {}
  bool b_constant = false;
  dnnl::memory a_mem, b_mem, dst_mem, scratch_mem;
  Execution matmul;
  PackedConstant packed_b, bias;
  std::unique_ptr<MatMulTiles> tiles;
};

std::unique_ptr<MatMulTiles> make_tiles(hodu_kernels& k, const dnnl::matmul::primitive_desc& pd,
                                        const dnnl::primitive_attr& attr, bool has_bias) {
  auto t = std::make_unique<MatMulTiles>();
  auto a_md = pd.src_desc(), w_md = pd.weights_desc(), y_md = pd.dst_desc(), bias_md = pd.bias_desc();
  t->m = y_md.dims()[0];
  t->n = y_md.dims()[1];
  t->a_row = a_md.data.format_desc.blocking.strides[0];
  t->b_col = w_md.data.format_desc.blocking.strides[1];
  const int64_t kdim = a_md.dims()[1];
  std::array<std::array<dnnl::memory::desc, 4>, 4> mds;  // a, b, bias, dst per shape
  std::array<dnnl::matmul::primitive_desc, 4> pds;
  for (int shape = 0; shape < 4; ++shape) {
    int64_t tm = shape & 2 && t->m % MatMulTiles::kRows ? t->m % MatMulTiles::kRows : std::min(t->m, MatMulTiles::kRows);
    int64_t tn = shape & 1 && t->n % MatMulTiles::kCols ? t->n % MatMulTiles::kCols : std::min(t->n, MatMulTiles::kCols);
    auto& d = mds[shape];
    d[0] = a_md.submemory_desc({tm, kdim}, {0, 0});
    d[1] = w_md.submemory_desc({kdim, tn}, {0, 0});
    if (has_bias) d[2] = bias_md.submemory_desc({1, tn}, {0, 0});
    d[3] = y_md.submemory_desc({tm, tn}, {0, 0});
    auto desc = has_bias ? dnnl::matmul::desc(d[0], d[1], d[2], d[3]) : dnnl::matmul::desc(d[0], d[1], d[3]);
    pds[shape] = dnnl::matmul::primitive_desc(desc, attr, k.engine);
    t->prims[shape] = dnnl::matmul(pds[shape]);
  }
  const int threads = std::max(k.threads, 1);
  t->per_thread.resize(threads);
  for (int i = 0; i < threads; ++i) {
    t->streams.emplace_back(k.engine);
    for (int shape = 0; shape < 4; ++shape) {
      auto& d = mds[shape];
      auto& mm = t->per_thread[i][shape];
      mm.a = dnnl::memory(d[0], k.engine, nullptr);
      mm.b = dnnl::memory(d[1], k.engine, nullptr);
      if (has_bias) mm.bias = dnnl::memory(d[2], k.engine, nullptr);
      mm.dst = dnnl::memory(d[3], k.engine, nullptr);
      // Tiles run at once on separate threads: each its own scratchpad (the context's is one).
      if (size_t bytes = pds[shape].scratchpad_desc().get_size(); bytes > 0) {
        mm.scratch_bytes = aligned_bytes(bytes);
        mm.scratch = dnnl::memory(pds[shape].scratchpad_desc(), k.engine, mm.scratch_bytes.get());
      }
    }
  }
  return t;
}

void run_tiles(hodu_kernels& k, MatMulTiles& t, const float* a, const float* b, const float* bias, float* y) {
  const int64_t rows = (t.m + MatMulTiles::kRows - 1) / MatMulTiles::kRows;
  const int64_t cols = (t.n + MatMulTiles::kCols - 1) / MatMulTiles::kCols;
  const int threads = static_cast<int>(std::min<int64_t>(t.per_thread.size(), rows * cols));
  // Each call single-threaded: inside the parallel loop oneDNN runs serially; outside it
  // (one thread or one tile) it would take every OpenMP thread.
  omp_set_num_threads(1);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t tile = 0; tile < rows * cols; ++tile) {
    const int64_t i = tile / cols, j = tile % cols;
    const int shape = (i == rows - 1 && t.m % MatMulTiles::kRows ? 2 : 0) + (j == cols - 1 && t.n % MatMulTiles::kCols ? 1 : 0);
    const int tid = threads > 1 ? omp_get_thread_num() : 0;
    auto& mm = t.per_thread[tid][shape];
    const int64_t r0 = i * MatMulTiles::kRows, c0 = j * MatMulTiles::kCols;
    mm.a.set_data_handle(const_cast<float*>(a + r0 * t.a_row));
    mm.b.set_data_handle(const_cast<float*>(b + c0 * t.b_col));
    mm.dst.set_data_handle(y + r0 * t.n + c0);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.dst}};
    if (bias) {
      mm.bias.set_data_handle(const_cast<float*>(bias + c0));
      args[DNNL_ARG_BIAS] = mm.bias;
    }
    if (mm.scratch_bytes) args[DNNL_ARG_SCRATCHPAD] = mm.scratch;
    t.prims[shape].execute(t.streams[tid], args);
  }
  omp_set_num_threads(k.threads);
}

using Dims = std::vector<int64_t>;

dnnl::memory::desc row_major(const Dims& dims) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32, strides);
}

// A tensor stored row-major as `stored`, seen with its last two dims swapped when `transposed`.
dnnl::memory::desc view(const Dims& stored, bool transposed) {
  if (!transposed) return row_major(stored);
  size_t r = stored.size();
  dnnl::memory::dims dims(stored.begin(), stored.end()), strides(r, 1);
  for (int i = static_cast<int>(r) - 2; i >= 0; --i) strides[i] = strides[i + 1] * stored[i + 1];
  std::swap(dims[r - 1], dims[r - 2]);
  std::swap(strides[r - 1], strides[r - 2]);
  return dnnl::memory::desc(dims, dt::f32, strides);
}

Dims logical(Dims d, bool transposed) {
  if (transposed) std::swap(d[d.size() - 1], d[d.size() - 2]);
  return d;
}

int64_t product(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

}  // namespace

std::unique_ptr<hodu_kernel> make_matmul(hodu_kernels& k, const hodu_matmul_desc& d, const float* b, const float* bias) {
  if (d.rank < 2 || d.rank > 6) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: rank must be 2 to 6");
  if (d.b_constant && !b) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: constant B is NULL");
  if (d.has_bias && !bias) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: bias is NULL");
  // alpha is folded into a constant B; a variable one has nowhere to put it.
  if (d.alpha != 1.0f && !d.b_constant) fail(HODU_KERNELS_ERR_UNSUPPORTED, "matmul: alpha with a variable B");
  size_t r = static_cast<size_t>(d.rank);
  Dims as(d.a_dims, d.a_dims + r), bs(d.b_dims, d.b_dims + r);
  Dims al = logical(as, d.transpose_a), bl = logical(bs, d.transpose_b);
  if (al[r - 1] != bl[r - 2]) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: inner dims differ");
  Dims ys(r);
  for (size_t i = 0; i + 2 < r; ++i) {
    if (as[i] != bs[i] && as[i] != 1 && bs[i] != 1) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: batch dims");
    ys[i] = std::max(as[i], bs[i]);
  }
  ys[r - 2] = al[r - 2];
  ys[r - 1] = bl[r - 1];
  int64_t n = ys[r - 1];
  // B shared by every batch and A row-major: A's batches stacked as rows, one
  // [batch·M, K] × [K, N] product instead of many small ones.
  bool b_shared = true;
  for (size_t i = 0; i + 2 < r; ++i) b_shared &= bs[i] == 1;
  if (r > 2 && b_shared && !d.transpose_a) {
    as = {product(as) / as[r - 1], as[r - 1]};
    bs = {bs[r - 2], bs[r - 1]};
    ys = {product(ys) / n, n};
    r = 2;
  }
  auto op = std::make_unique<MatMulKernel>();
  dnnl::memory::desc a_md = view(as, d.transpose_a), b_user = view(bs, d.transpose_b);
  bl = logical(bs, d.transpose_b);
  dnnl::memory::desc b_md =
      d.b_constant ? dnnl::memory::desc(dnnl::memory::dims(bl.begin(), bl.end()), dt::f32, dnnl::memory::format_tag::any)
                   : b_user;
  dnnl::memory::desc y_md = row_major(ys);
  Dims bias_dims(r, 1);
  bias_dims[r - 1] = n;
  dnnl::memory::desc bias_md = row_major(bias_dims);

  dnnl::post_ops po;
  append_activation(po, d.activation, d.activation_alpha, d.activation_beta);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto make_pd = [&](const dnnl::memory::desc& weights) {
    auto desc = d.has_bias ? dnnl::matmul::desc(a_md, weights, bias_md, y_md) : dnnl::matmul::desc(a_md, weights, y_md);
    return dnnl::matmul::primitive_desc(desc, attr, k.engine);
  };
  dnnl::matmul::primitive_desc pd = make_pd(b_md);
  // Without AVX-512 oneDNN's sgemm reads a constant B in plain rows; rows a multiple of 4 KiB
  // apart share cache sets (BERT's 768x3072 weights: 16.5 ms a product on Zen 3, 7-8 ms with
  // the rows 64 bytes further apart). The engine's matmul does the same (dnnl_matmul.cc).
  if (d.b_constant && r == 2 && pd.weights_desc() == row_major(bl)) {
    dnnl::memory::desc padded(dnnl::memory::dims(bl.begin(), bl.end()), dt::f32, dnnl::memory::dims{bl[1] + 16, 1});
    try {
      auto padded_pd = make_pd(padded);
      if (padded_pd.weights_desc() == padded) pd = padded_pd;
    } catch (const dnnl::error&) {
    }
  }

  if (r == 2 && std::string(pd.impl_info_str()).rfind("gemm", 0) == 0)
    op->tiles = make_tiles(k, pd, attr, d.has_bias);
  op->a_mem = dnnl::memory(a_md, k.engine, nullptr);
  op->dst_mem = dnnl::memory(y_md, k.engine, nullptr);
  op->scratch_mem = dnnl::memory(pd.scratchpad_desc(), k.engine, nullptr);
  k.scratchpad.reserve(pd.scratchpad_desc().get_size());
  op->matmul.primitive = dnnl::matmul(pd);
  op->matmul.add(DNNL_ARG_SRC, op->a_mem);
  if (d.b_constant) {
    op->b_constant = true;
    std::vector<float> scaled;
    const float* from = b;
    if (d.alpha != 1.0f) {
      size_t count = static_cast<size_t>(product(bs));
      scaled.assign(b, b + count);
      for (float& v : scaled) v *= d.alpha;
      from = scaled.data();
    }
    op->packed_b = k.pack(from, b_user, pd.weights_desc());
    op->matmul.add(DNNL_ARG_WEIGHTS, op->packed_b.mem);
  } else {
    op->b_mem = dnnl::memory(b_user, k.engine, nullptr);
    op->matmul.add(DNNL_ARG_WEIGHTS, op->b_mem);
  }
  if (d.has_bias) {
    op->bias = k.pack(bias, bias_md, pd.bias_desc());
    op->matmul.add(DNNL_ARG_BIAS, op->bias.mem);
  }
  op->matmul.add(DNNL_ARG_DST, op->dst_mem);
  op->matmul.add(DNNL_ARG_SCRATCHPAD, op->scratch_mem);
  return op;
}

void run_matmul(hodu_kernels& k, hodu_kernel& base, const float* a, const float* b, float* dst) {
  if (base.kind != hodu_kernel::Kind::MatMul) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul_run: not a matmul op");
  auto& op = static_cast<MatMulKernel&>(base);
  if (!a || !dst || (!op.b_constant && !b)) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul_run: NULL tensor");
  op.a_mem.set_data_handle(const_cast<float*>(a));
  if (!op.b_constant) op.b_mem.set_data_handle(const_cast<float*>(b));
  if (op.tiles) {
    auto handle = [](const dnnl::memory& m) { return static_cast<const float*>(m.get_data_handle()); };
    run_tiles(k, *op.tiles, a, op.b_constant ? handle(op.packed_b.mem) : b, op.bias.mem ? handle(op.bias.mem) : nullptr,
              dst);
    return;
  }
  op.dst_mem.set_data_handle(dst);
  op.scratch_mem.set_data_handle(k.scratchpad.data());
  op.matmul.run(k.stream);
}

}  // namespace hodu::kernels

extern "C" int hodu_matmul_prepare(hodu_kernels* k, const hodu_matmul_desc* desc, const float* b, const float* bias,
                                   hodu_kernel** out) {
  if (!k || !desc || !out) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  return k->guarded([&] {
    k->ops.push_back(hodu::kernels::make_matmul(*k, *desc, b, bias));
    *out = k->ops.back().get();
  });
}

extern "C" int hodu_matmul_run(hodu_kernels* k, hodu_kernel* op, const float* a, const float* b, float* dst) {
  if (!k || !op) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  return k->guarded([&] { hodu::kernels::run_matmul(*k, *op, a, b, dst); });
}
