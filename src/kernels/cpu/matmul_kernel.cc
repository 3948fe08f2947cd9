// Matrix multiplication on oneDNN's matmul (batched, broadcast batch dims,
// transposes as strided views). A constant B is reordered once at prepare
// with alpha folded in; the bias vector and the activation run inside. Where
// oneDNN has only its sgemm, a 2-D product runs as fixed tiles (onednn::TiledMatMul).
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/kernels_context.h"
#include "kernels/cpu/tiled_matmul.h"

namespace hodu::kernels {
namespace {

using dt = dnnl::memory::data_type;

struct MatMulKernel : hodu_kernel {
  MatMulKernel() : hodu_kernel(Kind::MatMul) {}
  bool b_constant = false;
  dnnl::memory a_mem, b_mem, dst_mem, scratch_mem;
  Execution matmul;
  PackedConstant packed_b, bias;
  std::unique_ptr<onednn::TiledMatMul> tiles;
};

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
    op->tiles = onednn::TiledMatMul::make(k.engine, k.threads, pd, [&](const dnnl::memory::desc&) { return attr; });
  op->a_mem = dnnl::memory(a_md, k.engine, nullptr);
  op->dst_mem = dnnl::memory(y_md, k.engine, nullptr);
  op->scratch_mem = dnnl::memory(pd.scratchpad_desc(), k.engine, nullptr);
  if (!op->tiles) {  // the whole product's primitive only runs untiled
    k.scratchpad.reserve(pd.scratchpad_desc().get_size());
    op->matmul.primitive = dnnl::matmul(pd);
  }
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
    op.tiles->run(k.threads, a, op.b_constant ? handle(op.packed_b.mem) : b,
                  op.bias.mem ? handle(op.bias.mem) : nullptr, nullptr, dst);
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
