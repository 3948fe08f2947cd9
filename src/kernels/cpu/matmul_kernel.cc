// Matrix multiplication on oneDNN's matmul (batched, broadcast batch dims,
// transposes and caller-given strides as strided views). A constant B is
// reordered once at prepare with alpha folded in (a variable B: alpha is the
// output scale); the bias vector, a residual
// (sum post-op onto dst's starting values) and the activation run inside. Where
// oneDNN has only its sgemm, a 2-D product with constant B runs as its 1x1 convolution
// (matmul_as_conv.h), any other as fixed tiles (onednn::TiledMatMul).
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/kernels_context.h"
#include "kernels/cpu/matmul_as_conv.h"
#include "kernels/cpu/tiled_matmul.h"

namespace hodu::kernels {
namespace {

using dt = dnnl::memory::data_type;

struct MatMulKernel : hodu_kernel {
  MatMulKernel() : hodu_kernel(Kind::MatMul) {}
  bool b_constant = false;
  bool accumulate = false;
  size_t dst_bytes = 0;  // a residual copied into dst first (accumulate, residual != dst)
  dnnl::memory a_mem, b_mem, dst_mem, scratch_mem;
  Execution matmul;
  // Strided operands no jit kernel takes: copied plain (the context's buffers) around the product.
  dnnl::memory a_given, a_plain, b_given, b_plain, dst_plain, dst_given;
  Execution a_reorder, b_reorder, dst_reorder;  // empty primitive: not needed
  PackedConstant packed_b, bias;
  std::unique_ptr<onednn::TiledMatMul> tiles;
};

using Dims = std::vector<int64_t>;


Dims row_major_strides(const Dims& dims) {
  Dims st(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * dims[i + 1];
  return st;
}

dnnl::memory::desc row_major(const Dims& dims) {
  Dims st = row_major_strides(dims);
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32, dnnl::memory::dims(st.begin(), st.end()));
}

// A tensor stored as `stored` with element `strides`, seen with its last two dims swapped
// when `transposed`.
dnnl::memory::desc view(const Dims& stored, bool transposed, const Dims& strides) {
  size_t r = stored.size();
  dnnl::memory::dims dims(stored.begin(), stored.end()), st(strides.begin(), strides.end());
  if (transposed) {
    std::swap(dims[r - 1], dims[r - 2]);
    std::swap(st[r - 1], st[r - 2]);
  }
  return dnnl::memory::desc(dims, dt::f32, st);
}

// The distance between consecutive rows when every dim but the last of [..., rows, cols]
// folds into one row index (size-1 dims ignored) and the columns are adjacent; 0 otherwise.
int64_t stacked_row_stride(const Dims& dims, const Dims& strides) {
  size_t r = dims.size();
  if (dims[r - 1] != 1 && strides[r - 1] != 1) return 0;
  int64_t row = 0, next = 0;  // the innermost row dim's stride; the stride the next outer dim needs
  for (size_t i = r - 1; i-- > 0;) {
    if (dims[i] == 1) continue;
    if (row == 0) row = strides[i];
    else if (strides[i] != next) return 0;
    next = strides[i] * dims[i];
  }
  return row == 0 ? dims[r - 1] : row;
}

bool any_set(const int64_t* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (v[i] != 0) return true;
  return false;
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
  // alpha is folded into a constant B; with a variable one it is oneDNN's output scale,
  // whose order with the bias is not the formula's.
  if (d.alpha != 1.0f && !d.b_constant && d.has_bias)
    fail(HODU_KERNELS_ERR_UNSUPPORTED, "matmul: alpha with a variable B and a bias");
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
  const bool a_strided = any_set(d.a_strides, r), b_strided = !d.b_constant && any_set(d.b_strides, r),
             dst_strided = any_set(d.dst_strides, r);
  if (d.b_constant && any_set(d.b_strides, r))
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: strides for a constant B");
  if (d.accumulate && dst_strided) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul: accumulate with dst strides");
  const size_t dst_bytes = static_cast<size_t>(product(ys)) * sizeof(float);
  const Dims as0 = as, bs0 = bs, ys0 = ys;
  const size_t r0 = r;
  dnnl::post_ops po;
  if (d.accumulate) po.append_sum(1.0f);  // onto dst's starting values: the residual
  append_activation(po, d.activation, d.activation_alpha, d.activation_beta);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (d.alpha != 1.0f && !d.b_constant) attr.set_output_scales(0, {d.alpha});

  // The product's descriptors over the caller's strides (or row-major ones).
  struct Layout {
    Dims as, bs, ys, sa, sb, sy;
    size_t r = 0;
    dnnl::memory::desc a_md, b_user, b_md, y_md, bias_md;
  };
  auto layout = [&](bool strided) {
    Layout l;
    l.as = as0, l.bs = bs0, l.ys = ys0, l.r = r0;
    l.sa = strided && a_strided ? Dims(d.a_strides, d.a_strides + r0) : row_major_strides(as0);
    l.sb = strided && b_strided ? Dims(d.b_strides, d.b_strides + r0) : row_major_strides(bs0);
    l.sy = strided && dst_strided ? Dims(d.dst_strides, d.dst_strides + r0) : row_major_strides(ys0);
    // B shared by every batch: A's batches stacked as rows, one [batch·M, K] × [K, N] product
    // instead of many small ones, when A's and dst's rows are evenly spaced ([197, 1, 768] in
    // ViT, a head-split view with M = 1, is 197 rows 768 apart, not 197 GEMVs).
    bool b_shared = true;
    for (size_t i = 0; i + 2 < l.r; ++i) b_shared &= l.bs[i] == 1;
    const int64_t a_row = d.transpose_a ? 0 : stacked_row_stride(l.as, l.sa), y_row = stacked_row_stride(l.ys, l.sy);
    if (l.r > 2 && b_shared && a_row > 0 && y_row > 0) {
      l.as = {product(l.as) / l.as[l.r - 1], l.as[l.r - 1]};
      l.sa = {a_row, 1};
      l.bs = {l.bs[l.r - 2], l.bs[l.r - 1]};
      l.sb = {l.sb[l.r - 2], l.sb[l.r - 1]};
      l.ys = {product(l.ys) / n, n};
      l.sy = {y_row, 1};
      l.r = 2;
    }
    // oneDNN 2.6 runs a rank-3 product with strided operands ([heads, seq, dim] views) on its
    // slower gemm:jit kernel, the same product with a leading batch of 1 on brgemm (ViT's
    // attention: 3.3 vs 10 ms over 12 layers).
    if (l.r == 3) {
      auto widen = [](Dims& dims, Dims& st) {
        int64_t span = 1;
        for (size_t i = 0; i < dims.size(); ++i) span = std::max(span, st[i] * dims[i]);
        st.insert(st.begin(), span);
        dims.insert(dims.begin(), 1);
      };
      widen(l.as, l.sa);
      widen(l.bs, l.sb);
      widen(l.ys, l.sy);
      l.r = 4;
    }
    l.a_md = view(l.as, d.transpose_a, l.sa);
    l.b_user = view(l.bs, d.transpose_b, l.sb);
    Dims lb = logical(l.bs, d.transpose_b);
    l.b_md = d.b_constant ? dnnl::memory::desc(dnnl::memory::dims(lb.begin(), lb.end()), dt::f32,
                                               dnnl::memory::format_tag::any)
                          : l.b_user;
    l.y_md = view(l.ys, false, l.sy);
    Dims bias_dims(l.r, 1);
    bias_dims[l.r - 1] = n;
    l.bias_md = row_major(bias_dims);
    return l;
  };
  Layout l = layout(true);
  auto make_pd = [&](const dnnl::memory::desc& weights) {
    auto desc = d.has_bias ? dnnl::matmul::desc(l.a_md, weights, l.bias_md, l.y_md)
                           : dnnl::matmul::desc(l.a_md, weights, l.y_md);
    return dnnl::matmul::primitive_desc(desc, attr, k.engine);
  };
  dnnl::matmul::primitive_desc pd = make_pd(l.b_md);
  // No jit kernel for these strides (a head merge writing NCHW from NHWC rows: ConvNeXt's
  // MLP ran oneDNN's reference matmul, 500x slower): the plain product, with the strided
  // operands reordered into plain scratch before it and dst reordered out after it.
  const bool copied = (a_strided || b_strided || dst_strided) && is_reference(pd);
  if (copied) {
    l = layout(false);
    pd = make_pd(l.b_md);
  }
  as = l.as, bs = l.bs, ys = l.ys, r = l.r;
  bl = logical(bs, d.transpose_b);
  const bool plain = l.sa == row_major_strides(as) && l.sb == row_major_strides(bs) && l.sy == row_major_strides(ys);
  auto op = std::make_unique<MatMulKernel>();
  const dnnl::memory::desc &a_md = l.a_md, &b_user = l.b_user, &y_md = l.y_md, &bias_md = l.bias_md;
  if (copied) {
    auto given = [&](const Dims& dims, const int64_t* st, bool transposed) {
      return view(dims, transposed, Dims(st, st + r0));
    };
    auto plain_of = [&](const Dims& dims, bool transposed) { return view(dims, transposed, row_major_strides(dims)); };
    if (a_strided) {
      op->a_given = dnnl::memory(given(as0, d.a_strides, d.transpose_a), k.engine, nullptr);
      op->a_plain = dnnl::memory(plain_of(as0, d.transpose_a), k.engine, nullptr);
      op->a_reorder = reorder(op->a_given, op->a_plain);
      k.src_buffer.reserve(op->a_plain.get_desc().get_size());
    }
    if (b_strided) {
      op->b_given = dnnl::memory(given(bs0, d.b_strides, d.transpose_b), k.engine, nullptr);
      op->b_plain = dnnl::memory(plain_of(bs0, d.transpose_b), k.engine, nullptr);
      op->b_reorder = reorder(op->b_given, op->b_plain);
      k.b_buffer.reserve(op->b_plain.get_desc().get_size());
    }
    if (dst_strided) {
      op->dst_plain = dnnl::memory(plain_of(ys0, false), k.engine, nullptr);
      op->dst_given = dnnl::memory(given(ys0, d.dst_strides, false), k.engine, nullptr);
      op->dst_reorder = reorder(op->dst_plain, op->dst_given);
      k.dst_buffer.reserve(op->dst_plain.get_desc().get_size());
    }
  }
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

  const bool sgemm = std::string(pd.impl_info_str()).rfind("gemm", 0) == 0;
  std::optional<dnnl::convolution_forward::primitive_desc> conv;
  if (d.b_constant && r == 2 && plain && !d.transpose_a && sgemm) {
    std::string error;
    if (onednn::matmul_as_conv_allowed(&error)) conv = onednn::conv_1x1_pd(k.engine, as[0], as[1], n, d.has_bias, attr);
    else if (!error.empty()) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, error);
  }
  if (r == 2 && plain && sgemm && !conv)
    op->tiles = onednn::TiledMatMul::make(k.engine, k.threads, pd, [&](const dnnl::memory::desc&) { return attr; });
  op->accumulate = d.accumulate != 0;
  op->dst_bytes = dst_bytes;
  op->a_mem = dnnl::memory(conv ? conv->src_desc() : a_md, k.engine, nullptr);
  op->dst_mem = dnnl::memory(conv ? conv->dst_desc() : y_md, k.engine, nullptr);
  const dnnl::memory::desc scratch_md = conv ? conv->scratchpad_desc() : pd.scratchpad_desc();
  op->scratch_mem = dnnl::memory(scratch_md, k.engine, nullptr);
  if (!op->tiles) {  // the whole product's primitive only runs untiled
    k.scratchpad.reserve(scratch_md.get_size());
    if (conv) op->matmul.primitive = dnnl::convolution_forward(*conv);
    else op->matmul.primitive = dnnl::matmul(pd);
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
    op->packed_b = conv ? k.pack(from, onednn::conv_1x1_weights(as[1], n, d.transpose_b), conv->weights_desc(),
                                 /*share=*/from == b)
                        : k.pack(from, b_user, pd.weights_desc(), /*share=*/from == b);
    op->matmul.add(DNNL_ARG_WEIGHTS, op->packed_b.mem);
  } else {
    op->b_mem = dnnl::memory(b_user, k.engine, nullptr);
    op->matmul.add(DNNL_ARG_WEIGHTS, op->b_mem);
  }
  if (d.has_bias) {
    op->bias = conv ? k.pack(bias, conv->bias_desc(), conv->bias_desc()) : k.pack(bias, bias_md, pd.bias_desc());
    op->matmul.add(DNNL_ARG_BIAS, op->bias.mem);
  }
  op->matmul.add(DNNL_ARG_DST, op->dst_mem);
  op->matmul.add(DNNL_ARG_SCRATCHPAD, op->scratch_mem);
  return op;
}

void run_matmul(hodu_kernels& k, hodu_kernel& base, const float* a, const float* b, const float* residual,
                float* dst) {
  if (base.kind != hodu_kernel::Kind::MatMul) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul_run: not a matmul op");
  auto& op = static_cast<MatMulKernel&>(base);
  if (!a || !dst || (!op.b_constant && !b) || (op.accumulate && !residual))
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul_run: NULL tensor");
  if (!op.accumulate && residual) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "matmul_run: a residual without accumulate");
  // The sum post-op adds the product onto dst's starting values: the residual enters dst first.
  if (op.accumulate && residual != dst) std::memcpy(dst, residual, op.dst_bytes);
  // Operands copied plain first (strides no jit kernel takes), dst copied out after.
  auto stage = [&](const float* given, dnnl::memory& from, dnnl::memory& to, Execution& e, Scratch& buffer) {
    if (!e.primitive) return given;
    from.set_data_handle(const_cast<float*>(given));
    to.set_data_handle(buffer.data());
    e.run(k.stream);
    return static_cast<const float*>(to.get_data_handle());
  };
  a = stage(a, op.a_given, op.a_plain, op.a_reorder, k.src_buffer);
  if (!op.b_constant) b = stage(b, op.b_given, op.b_plain, op.b_reorder, k.b_buffer);
  float* const out = dst;
  if (op.dst_reorder.primitive) dst = static_cast<float*>(static_cast<void*>(k.dst_buffer.data()));
  op.a_mem.set_data_handle(const_cast<float*>(a));
  if (!op.b_constant) op.b_mem.set_data_handle(const_cast<float*>(b));
  if (op.tiles) {
    auto handle = [](const dnnl::memory& m) { return static_cast<const float*>(m.get_data_handle()); };
    op.tiles->run(k.threads, a, op.b_constant ? handle(op.packed_b.mem) : b,
                  op.bias.mem ? handle(op.bias.mem) : nullptr, nullptr, dst);
  } else {
    op.dst_mem.set_data_handle(dst);
    op.scratch_mem.set_data_handle(k.scratchpad.data());
    op.matmul.run(k.stream);
  }
  if (op.dst_reorder.primitive) {
    op.dst_plain.set_data_handle(dst);
    op.dst_given.set_data_handle(out);
    op.dst_reorder.run(k.stream);
  }
}

}  // namespace hodu::kernels

extern "C" int hodu_matmul_prepare(hodu_kernels* k, const hodu_matmul_desc* desc, const float* b, const float* bias,
                                   hodu_kernel** out) {
  if (!k || !desc || !out) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  return k->guarded([&] {
    k->refuse_if_asked("matmul");
    k->ops.push_back(hodu::kernels::make_matmul(*k, *desc, b, bias));
    *out = k->ops.back().get();
  });
}

extern "C" int hodu_matmul_run(hodu_kernels* k, hodu_kernel* op, const float* a, const float* b,
                               const float* residual, float* dst) {
  if (!k || !op) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  return k->guarded([&] { hodu::kernels::run_matmul(*k, *op, a, b, residual, dst); });
}
