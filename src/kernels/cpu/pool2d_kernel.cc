// 2-D max/average pooling on oneDNN: src plain NCHW or a producer's native
// layout; dst plain, or with dst_native the primitive's own layout. A ceil-mode last
// window is covered by growing the bottom/right padding, which never counts
// in an average that excludes padding. Max pooling from a producer's nChw8c/16c
// into the same layout runs vector_math's loop instead (oneDNN's is slow on AVX2).
#include <omp.h>

#include "kernels/cpu/blocked_layout.h"
#include "kernels/cpu/kernels_context.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_math.h"

namespace hodu::kernels {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Pool2dKernel : hodu_kernel {
  Pool2dKernel() : hodu_kernel(Kind::Pool2d) {}
  dnnl::memory src_mem, dst_mem, dst_user, scratch_mem, workspace_mem;
  Execution pool, dst_reorder;
  AlignedBytes workspace;
  bool own_max = false;  // vector_math::max_pool_blocked instead of oneDNN
  vector_math::BlockedPool2d blocked{};
  int64_t rows = 0;
};

HODU_ISA_BODY void max_pool_blocked_rows_body(const float* x, float* y, const vector_math::BlockedPool2d& p,
                                              int64_t begin, int64_t end) {
  vector_math::max_pool_blocked(x, y, p, begin, end);
}
HODU_ISA_VARIANTS(void, max_pool_blocked_rows,
                  (const float* x, float* y, const vector_math::BlockedPool2d& p, int64_t begin, int64_t end),
                  (x, y, p, begin, end))

// Padding after the input so that `out` windows fit; -1 when none does.
int64_t end_padding(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t dilation, int64_t begin,
                    int64_t end) {
  int64_t ext = (kernel - 1) * dilation + 1;
  if ((in + begin + end - ext) / stride + 1 == out) return end;
  int64_t grown = (out - 1) * stride + ext - in - begin;
  return grown >= 0 && (in + begin + grown - ext) / stride + 1 == out ? grown : -1;
}

}  // namespace

std::unique_ptr<hodu_kernel> make_pool2d(hodu_kernels& k, const hodu_pool2d_desc& d, const hodu_kernel* producer) {
  if (d.dst_native < HODU_DST_PLAIN || d.dst_native > HODU_DST_CONCAT ||
      d.batch <= 0 || d.channels <= 0 || d.kernel_height <= 0 || d.kernel_width <= 0 || d.stride_height <= 0 ||
      d.stride_width <= 0 || d.dilation_height <= 0 || d.dilation_width <= 0 || d.kind < 0 || d.kind > 2)
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "pool2d: inconsistent descriptor");
  int64_t bottom = end_padding(d.in_height, d.out_height, d.kernel_height, d.stride_height, d.dilation_height,
                               d.pad_top, d.pad_bottom);
  int64_t right = end_padding(d.in_width, d.out_width, d.kernel_width, d.stride_width, d.dilation_width, d.pad_left,
                              d.pad_right);
  if (bottom < 0 || right < 0) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "pool2d: output size does not match");
  // Grown padding would count in an average that includes padding.
  if (d.kind == HODU_POOL_AVERAGE_INCLUDE_PAD && (bottom != d.pad_bottom || right != d.pad_right))
    fail(HODU_KERNELS_ERR_UNSUPPORTED, "pool2d: ceil mode with count_include_pad");
  auto op = std::make_unique<Pool2dKernel>();
  dnnl::memory::dims src_dims = {d.batch, d.channels, d.in_height, d.in_width};
  dnnl::memory::dims dst_dims = {d.batch, d.channels, d.out_height, d.out_width};
  dnnl::memory::desc src_md = producer ? written_by(producer, src_dims, "pool2d: src")
                                       : dnnl::memory::desc(src_dims, dt::f32, tag::nchw);
  dnnl::memory::desc dst_plain(dst_dims, dt::f32, tag::nchw);
  // Plain src: plain dst. A producer's layout: the primitive picks (its src layout).
  dnnl::memory::desc dst_md = producer ? dnnl::memory::desc(dst_dims, dt::f32, tag::any) : dst_plain;
  auto alg = d.kind == HODU_POOL_MAX                 ? dnnl::algorithm::pooling_max
             : d.kind == HODU_POOL_AVERAGE_INCLUDE_PAD ? dnnl::algorithm::pooling_avg_include_padding
                                                       : dnnl::algorithm::pooling_avg_exclude_padding;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src_md, dst_md,
                                      {d.stride_height, d.stride_width}, {d.kernel_height, d.kernel_width},
                                      {d.dilation_height - 1, d.dilation_width - 1}, {d.pad_top, d.pad_left},
                                      {bottom, right});
  dnnl::pooling_v2_forward::primitive_desc pd(desc, attr, k.engine);
  size_t native_bytes = native_dst_bytes(d.batch, d.channels, d.out_height, d.out_width);
  bool native_dst = native_dst_allowed(d.dst_native, pd.dst_desc(), native_bytes);
  op->written = native_dst ? pd.dst_desc() : dst_plain;
  op->layout = layout_of(op->written);
  op->src_mem = dnnl::memory(src_md, k.engine, nullptr);
  op->dst_user = dnnl::memory(op->written, k.engine, nullptr);
  op->dst_mem = pd.dst_desc() == op->written ? op->dst_user : dnnl::memory(pd.dst_desc(), k.engine, nullptr);
  if (op->dst_mem != op->dst_user) {
    k.dst_buffer.reserve(pd.dst_desc().get_size());
    op->dst_reorder.primitive = dnnl::reorder(op->dst_mem, op->dst_user);
    op->dst_reorder.add(DNNL_ARG_FROM, op->dst_mem);
    op->dst_reorder.add(DNNL_ARG_TO, op->dst_user);
  }
  int64_t block = onednn::channel_block(src_md, src_dims);
  if (d.kind == HODU_POOL_MAX && d.dilation_height == 1 && d.dilation_width == 1 && block > 0 &&
      op->written == onednn::channel_blocked_md(dst_dims, block) &&
      d.pad_top < d.kernel_height && d.pad_left < d.kernel_width) {
    op->own_max = true;
    op->blocked = {block,           d.in_height,     d.in_width, d.out_height, d.out_width, d.kernel_height,
                   d.kernel_width,  d.stride_height, d.stride_width, d.pad_top, d.pad_left};
    op->rows = d.batch * ((d.channels + block - 1) / block) * d.out_height;
    return op;
  }
  op->scratch_mem = dnnl::memory(pd.scratchpad_desc(), k.engine, nullptr);
  k.scratchpad.reserve(pd.scratchpad_desc().get_size());
  op->pool.primitive = dnnl::pooling_v2_forward(pd);
  op->pool.add(DNNL_ARG_SRC, op->src_mem);
  op->pool.add(DNNL_ARG_DST, op->dst_mem);
  op->pool.add(DNNL_ARG_SCRATCHPAD, op->scratch_mem);
  if (size_t ws = pd.workspace_desc().get_size(); ws > 0) {
    op->workspace = aligned_bytes(ws);
    op->workspace_mem = dnnl::memory(pd.workspace_desc(), k.engine, op->workspace.get());
    op->pool.add(DNNL_ARG_WORKSPACE, op->workspace_mem);
  }
  return op;
}

void run_pool2d(hodu_kernels& k, hodu_kernel& base, const float* src, float* dst) {
  if (base.kind != hodu_kernel::Kind::Pool2d) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "pool2d_run: not a pool2d op");
  if (!src || !dst) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "pool2d_run: NULL tensor");
  auto& op = static_cast<Pool2dKernel&>(base);
  if (op.own_max) {
    const int64_t rows = op.rows, chunks = std::min<int64_t>(k.threads, rows);
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c)
      max_pool_blocked_rows(src, dst, op.blocked, rows * c / chunks, rows * (c + 1) / chunks);
    return;
  }
  op.src_mem.set_data_handle(const_cast<float*>(src));
  op.dst_user.set_data_handle(dst);
  if (op.dst_reorder.primitive) op.dst_mem.set_data_handle(k.dst_buffer.data());
  op.scratch_mem.set_data_handle(k.scratchpad.data());
  op.pool.run(k.stream);
  if (op.dst_reorder.primitive) op.dst_reorder.run(k.stream);
}

}  // namespace hodu::kernels

extern "C" int hodu_pool2d_prepare(hodu_kernels* k, const hodu_pool2d_desc* desc, const hodu_kernel* src_producer,
                                   hodu_kernel** out) {
  if (!k || !desc || !out) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  return k->guarded([&] {
    k->refuse_if_asked("pool2d");
    k->ops.push_back(hodu::kernels::make_pool2d(*k, *desc, src_producer));
    *out = k->ops.back().get();
  });
}

extern "C" int hodu_pool2d_run(hodu_kernels* k, hodu_kernel* op, const float* src, float* dst) {
  if (!k || !op) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  return k->guarded([&] { hodu::kernels::run_pool2d(*k, *op, src, dst); });
}
