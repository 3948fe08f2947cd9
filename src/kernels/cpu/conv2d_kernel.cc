// 2-D convolution on oneDNN. The primitive picks its layouts; weights are
// reordered once at prepare. The caller's tensors are plain NCHW, so when the
// primitive wants a blocked activation layout the run reorders through the
// context's scratch buffers. Bias, the residual (sum post-op) and the
// activation (eltwise post-ops) run inside the convolution. With dst_native
// the dst stays in the primitive's layout for the convs that read it (as src
// or as residual), which name this one as their producer.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/kernels_context.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/winograd.h"
#include "kernels/cpu/winograd_avx2.h"

namespace hodu::kernels {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Conv2dKernel : hodu_kernel {
  Conv2dKernel() : hodu_kernel(Kind::Conv2d) {}
  bool accumulate = false;
  bool silu = false;  // SiLU by vector_math's loop after the primitive (faster than oneDNN's swish post-op)
  size_t dst_bytes = 0;
  dnnl::memory src_user, dst_user, src_mem, dst_mem, scratch_mem;
  // The residual as given (plain, or its producer's layout); residual_staged:
  // dst's layout in the context's dst buffer, for a residual that is dst itself
  // in another layout (a reorder cannot run in place).
  dnnl::memory residual_user, residual_staged;
  Execution conv;
  Execution src_reorder, dst_reorder, residual_reorder, residual_stage;  // empty primitive: not needed
  PackedConstant weights, bias;
  // hodu's AVX2 Winograd in place of the primitive (below AVX-512, as in the cpu engine): src
  // and dst in nChw8c, bias, residual and activation in its output transform.
  std::unique_ptr<winograd::Conv> winograd;
};

bool plain(const dnnl::memory::desc& a, const dnnl::memory::desc& b) { return a == b; }

// hodu's Winograd kernel for this conv under HODU_CPU_WINOGRAD (the cpu engine's rule,
// winograd::tile_for), or null: a 3x3 stride-1 conv with an activation its epilogue has.
std::unique_ptr<winograd::Conv> winograd_conv(const hodu_conv2d_desc& d, const float* w, const float* b) {
  if (d.groups != 1 || d.kernel_height != 3 || d.kernel_width != 3 || d.stride_height != 1 || d.stride_width != 1 ||
      d.dilation_height != 1 || d.dilation_width != 1)
    return nullptr;
  packed_gemm::Epilogue ep;
  switch (d.activation) {
    case HODU_ACTIVATION_NONE: break;
    case HODU_ACTIVATION_CLIP:
      ep.act = d.activation_alpha == 0.0f && d.activation_beta == INFINITY ? packed_gemm::Act::Relu
                                                                            : packed_gemm::Act::Clip;
      ep.p0 = d.activation_alpha;
      ep.p1 = d.activation_beta;
      break;
    case HODU_ACTIVATION_SIGMOID: ep.act = packed_gemm::Act::Sigmoid; break;
    case HODU_ACTIVATION_TANH: ep.act = packed_gemm::Act::Tanh; break;
    case HODU_ACTIVATION_SILU: ep.act = packed_gemm::Act::Silu; break;
    case HODU_ACTIVATION_GELU: ep.act = packed_gemm::Act::Gelu; break;
    default: return nullptr;  // HardSwish: oneDNN's primitive has it as a post-op
  }
  winograd::ConvShape s;
  s.batch = d.batch;
  s.cin = d.in_channels;
  s.cout = d.out_channels;
  s.h = d.in_height;
  s.w = d.in_width;
  s.oh = d.out_height;
  s.ow = d.out_width;
  s.pad_top = d.pad_top;
  s.pad_left = d.pad_left;
  s.tile = winograd::tile_for(winograd::policy_from_env(), s);
  if (!s.tile) return nullptr;
  return std::make_unique<winograd::Conv>(s, w, b, ep);
}


void check(const hodu_conv2d_desc& d) {
  bool ok = d.batch > 0 && d.in_channels > 0 && d.out_channels > 0 && d.groups > 0 &&
            d.in_channels % d.groups == 0 && d.out_channels % d.groups == 0 && d.kernel_height > 0 &&
            d.kernel_width > 0 && d.stride_height > 0 && d.stride_width > 0 && d.dilation_height > 0 &&
            d.dilation_width > 0 && d.pad_top >= 0 && d.pad_left >= 0 && d.pad_bottom >= 0 && d.pad_right >= 0;
  if (!ok) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "conv2d: inconsistent descriptor");
}

}  // namespace

std::unique_ptr<hodu_kernel> make_conv2d(hodu_kernels& k, const hodu_conv2d_desc& d, const float* w, const float* b,
                                         const hodu_kernel* producer, const hodu_kernel* residual_producer,
                                         const hodu_kernel* dst_like) {
  check(d);
  auto op = std::make_unique<Conv2dKernel>();
  dnnl::memory::dims src_dims = {d.batch, d.in_channels, d.in_height, d.in_width};
  dnnl::memory::dims dst_dims = {d.batch, d.out_channels, d.out_height, d.out_width};
  dnnl::memory::desc src_plain(src_dims, dt::f32, tag::nchw), dst_plain(dst_dims, dt::f32, tag::nchw);
  dnnl::memory::dims w_dims = {d.out_channels, d.in_channels / d.groups, d.kernel_height, d.kernel_width};
  dnnl::memory::desc w_user(w_dims, dt::f32, tag::oihw);
  if (d.groups > 1) {
    w_dims.insert(w_dims.begin(), d.groups);
    w_dims[1] /= d.groups;
    w_user = dnnl::memory::desc(w_dims, dt::f32, tag::goihw);
  }
  // An image with few channels (the first conv) is read as it is: oneDNN has direct
  // kernels for it, and blocking 3 channels costs more than the conv gains.
  // A producer's native dst is read as it is when this primitive takes that layout.
  if (d.dst_native < HODU_DST_PLAIN || d.dst_native > HODU_DST_CONCAT || (dst_like && !d.dst_native))
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "conv2d: bad dst_native");
  dnnl::memory::desc src_given = producer ? written_by(producer, src_dims, "conv2d: src") : src_plain;
  if (residual_producer && !d.accumulate)
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "conv2d: a residual producer without accumulate");
  dnnl::memory::desc residual_given = residual_producer ? written_by(residual_producer, dst_dims, "conv2d: residual") : dst_plain;
  // After a Winograd conv the layout is chosen again: on Zen 5 keeping its nChw16c made the rest
  // of ResNet-50 run the jit kernels, not the nhwc brgemm ones (34.2 vs 31.9 ms a run). Only where
  // the caller allows nhwc (nhwc_stem: no Concat is assembled in place from oneDNN-layout parts;
  // in SqueezeNet nhwc reached the fire modules' parts, which then went plain: 3.0 -> 3.4 ms).
  const bool choose_again = producer && producer->layout_for_itself && d.nhwc_stem;
  dnnl::memory::desc src_md = d.in_channels <= 4         ? src_plain
                              : producer && !choose_again ? src_given
                                                          : dnnl::memory::desc(src_dims, dt::f32, tag::any);
  dnnl::memory::desc dst_any(dst_dims, dt::f32, tag::any);
  // dst_like: the primitive writes that op's layout when it has a fast kernel for it.
  int like = dst_like ? hodu_kernel_layout(dst_like) : HODU_LAYOUT_OTHER;
  if (dst_like && like == HODU_LAYOUT_OTHER) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "conv2d: dst_like in no named layout");
  dnnl::memory::desc dst_md = dst_like ? layout_desc(dst_dims, like) : dst_any;
  dnnl::memory::desc w_md(w_dims, dt::f32, tag::any);
  dnnl::memory::desc b_md({d.out_channels}, dt::f32, tag::x);

  dnnl::post_ops po;
  if (d.accumulate) po.append_sum(1.0f);
  op->silu = d.activation == HODU_ACTIVATION_SILU;
  if (!op->silu) append_activation(po, d.activation, d.activation_alpha, d.activation_beta);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::memory::dims strides = {d.stride_height, d.stride_width}, dilation = {d.dilation_height - 1, d.dilation_width - 1},
                     pad_l = {d.pad_top, d.pad_left}, pad_r = {d.pad_bottom, d.pad_right};
  auto make_pd = [&](const dnnl::memory::desc& src, const dnnl::memory::desc& dst,
                     dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
    auto desc = b ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src, w_md, b_md, dst,
                                                    strides, dilation, pad_l, pad_r)
                  : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src, w_md, dst, strides,
                                                    dilation, pad_l, pad_r);
    return dnnl::convolution_forward::primitive_desc(desc, attr, k.engine);
  };
  dnnl::convolution_forward::primitive_desc pd;
  // The descs the kernel reads src and writes dst in: the primitive's, or nChw8c for hodu's Winograd.
  dnnl::memory::desc kernel_src, kernel_dst;
  if (!dst_like && !d.exact) op->winograd = winograd_conv(d, w, b);
  if (op->winograd) {
    op->silu = false;  // in its epilogue
    kernel_src = layout_desc(src_dims, HODU_LAYOUT_NCHW8C);
    kernel_dst = layout_desc(dst_dims, HODU_LAYOUT_NCHW8C);
    k.scratchpad.reserve(static_cast<size_t>(winograd::scratch_floats(op->winograd->shape())) * sizeof(float));
  }
  // The image into the first conv, reordered to nhwc (cheap: few channels), lets
  // oneDNN's brgemm kernel run it and write nhwc, the layout the brgemm convs after
  // it keep (as the cpu engine does): faster than the direct nchw kernel writing
  // 16-channel blocks. Only when a brgemm kernel takes it, and when the caller
  // asks (nhwc does not suit convs writing the parts of an in-place concat).
  if (!op->winograd && d.nhwc_stem && d.in_channels <= 4 && !producer && !dst_like &&
      (d.dst_native == HODU_DST_NATIVE || d.dst_native == HODU_DST_SIMPLE)) {
    try {
      auto nhwc = make_pd(dnnl::memory::desc(src_dims, dt::f32, tag::nhwc), dst_md);
      if (std::string(nhwc.impl_info_str()).find("brg") != std::string::npos) pd = nhwc;
    } catch (const dnnl::error&) {
    }
  }
  // 3x3 stride-1 convolutions on Winograd's kernels (as the cpu engine does): 1.5-2x fewer
  // cycles than the direct kernel; a producer's layout is reordered into the one they take.
  if (!op->winograd && !pd && !dst_like && !d.exact && d.groups == 1 && d.kernel_height == 3 && d.kernel_width == 3 && d.stride_height == 1 &&
      d.stride_width == 1 && d.dilation_height == 1 && d.dilation_width == 1 && d.in_channels >= 16 &&
      d.out_height * d.out_width >= onednn::kWinogradMinPixels) {
    try {
      auto wino = make_pd(dnnl::memory::desc(src_dims, dt::f32, tag::any), dst_md, dnnl::algorithm::convolution_winograd);
      if (std::string(wino.impl_info_str()).find("wino") != std::string::npos) {
        pd = wino;
        op->layout_for_itself = true;
      }
    } catch (const dnnl::error&) {
    }
  }
  if (!op->winograd && !pd) {
    try {
      pd = make_pd(src_md, dst_md);
    } catch (const dnnl::error&) {
      if (!producer && !dst_like) throw;
    }
  }
  // No fast kernel for the producer's layout or dst_like's (only oneDNN's
  // reference one): let the primitive pick and reorder instead.
  if (!op->winograd && producer && (!pd || is_reference(pd))) {
    try {
      pd = make_pd(dnnl::memory::desc(src_dims, dt::f32, tag::any), dst_md);
    } catch (const dnnl::error&) {
      if (!dst_like) throw;
    }
  }
  if (dst_like && (!pd || is_reference(pd)))
    pd = make_pd(producer ? dnnl::memory::desc(src_dims, dt::f32, tag::any) : src_md, dst_any);
  if (!op->winograd) {
    kernel_src = pd.src_desc();
    kernel_dst = pd.dst_desc();
  }
  // A conv that only oneDNN's AVX2 kernel takes on an AVX-512 CPU, or that writes nChw8c there
  // (grouped 3x3 convs of 4 or 8 channels a group: ResNeXt, RegNet), leaves a layout the 1x1
  // convs after it would read with their AVX2 kernels too (ResNeXt-50: 38 of 45 ms): they
  // pick their own layout instead.
  if (!op->winograd && dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core &&
      (std::string(pd.impl_info_str()).find("avx2") != std::string::npos ||
       layout_of(pd.dst_desc()) == HODU_LAYOUT_NCHW8C))
    op->layout_for_itself = true;

  if (!op->winograd) op->weights = k.pack(w, w_user, pd.weights_desc());
  // Native dst: the primitive writes the caller's buffer in its own layout when
  // it fits (and, for SIMPLE/CONCAT, is one the caller's code knows); with
  // dst_like always that op's layout, through a reorder if need be.
  size_t native_bytes = native_dst_bytes(d.batch, d.out_channels, d.out_height, d.out_width);
  bool native_dst = native_dst_allowed(d.dst_native, kernel_dst, native_bytes);
  op->written = dst_like ? dst_md : native_dst ? kernel_dst : dst_plain;
  op->layout = layout_of(op->written);
  if (op->written.get_size() > native_bytes) fail(HODU_KERNELS_ERR_UNSUPPORTED, "conv2d: dst_like's layout does not fit");
  op->src_user = dnnl::memory(src_given, k.engine, nullptr);
  op->dst_user = dnnl::memory(op->written, k.engine, nullptr);
  op->src_mem = plain(kernel_src, src_given) ? op->src_user : dnnl::memory(kernel_src, k.engine, nullptr);
  op->dst_mem = plain(kernel_dst, op->written) ? op->dst_user : dnnl::memory(kernel_dst, k.engine, nullptr);
  if (!op->winograd) {
    op->scratch_mem = dnnl::memory(pd.scratchpad_desc(), k.engine, nullptr);
    k.scratchpad.reserve(pd.scratchpad_desc().get_size());
    op->conv.primitive = dnnl::convolution_forward(pd);
    op->conv.add(DNNL_ARG_SRC, op->src_mem);
    op->conv.add(DNNL_ARG_WEIGHTS, op->weights.mem);
    if (b) {
      op->bias = k.pack(b, b_md, pd.bias_desc());
      op->conv.add(DNNL_ARG_BIAS, op->bias.mem);
    }
    op->conv.add(DNNL_ARG_DST, op->dst_mem);
    op->conv.add(DNNL_ARG_SCRATCHPAD, op->scratch_mem);
  }
  if (op->src_mem != op->src_user) {
    k.src_buffer.reserve(kernel_src.get_size());
    op->src_reorder = reorder(op->src_user, op->src_mem);
  }
  if (op->dst_mem != op->dst_user) {
    k.dst_buffer.reserve(kernel_dst.get_size());
    op->dst_reorder = reorder(op->dst_mem, op->dst_user);
  }
  // The residual enters the destination, in the primitive's layout, before the
  // sum post-op adds to it: a copy when it is in that layout already (none when
  // it is dst itself), else a reorder.
  if (d.accumulate) {
    op->residual_user = dnnl::memory(residual_given, k.engine, nullptr);
    if (op->dst_mem != op->dst_user || residual_given != op->written) {
      op->residual_reorder = reorder(op->residual_user, op->dst_mem);
      if (op->dst_mem == op->dst_user) {
        k.dst_buffer.reserve(kernel_dst.get_size());
        op->residual_staged = dnnl::memory(kernel_dst, k.engine, nullptr);
        op->residual_stage = reorder(op->residual_user, op->residual_staged);
      }
    }
  }
  op->accumulate = d.accumulate != 0;
  op->dst_bytes = op->written.get_size();
  return op;
}

void run_conv2d(hodu_kernels& k, hodu_kernel& base, const float* src, const float* residual, float* dst) {
  if (base.kind != hodu_kernel::Kind::Conv2d) fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "conv2d_run: not a conv2d op");
  auto& op = static_cast<Conv2dKernel&>(base);
  if (!src || !dst || (op.accumulate && !residual))
    fail(HODU_KERNELS_ERR_INVALID_ARGUMENT, "conv2d_run: NULL tensor");
  op.src_user.set_data_handle(const_cast<float*>(src));
  op.dst_user.set_data_handle(dst);
  if (!op.winograd) op.scratch_mem.set_data_handle(k.scratchpad.data());
  if (op.src_reorder.primitive) {
    op.src_mem.set_data_handle(k.src_buffer.data());
    op.src_reorder.run(k.stream);
  }
  bool blocked_dst = static_cast<bool>(op.dst_reorder.primitive);
  if (blocked_dst) op.dst_mem.set_data_handle(k.dst_buffer.data());
  if (op.accumulate) {
    op.residual_user.set_data_handle(const_cast<float*>(residual));
    if (!op.residual_reorder.primitive) {
      if (residual != dst) std::memcpy(dst, residual, op.dst_bytes);
    } else if (blocked_dst || residual != dst) {
      op.residual_reorder.run(k.stream);
    } else {  // dst itself, in another layout: through the dst buffer
      op.residual_staged.set_data_handle(k.dst_buffer.data());
      op.residual_stage.run(k.stream);
      std::memcpy(dst, k.dst_buffer.data(), op.dst_bytes);
    }
  }
  if (op.winograd) {
    float* y = static_cast<float*>(op.dst_mem.get_data_handle());
    op.winograd->run(static_cast<const float*>(op.src_mem.get_data_handle()), op.accumulate ? y : nullptr, y,
                     static_cast<float*>(k.scratchpad.data()), k.threads);
  } else {
    op.conv.run(k.stream);
  }
  if (op.silu) {
    // Over the primitive's whole dst, padding included (silu(0) = 0 keeps a blocked layout's zeros).
    float* y = static_cast<float*>(op.dst_mem.get_data_handle());
    const int64_t n = static_cast<int64_t>(op.dst_mem.get_desc().get_size() / sizeof(float));
    const int64_t chunk = 16384, chunks = (n + chunk - 1) / chunk;
    const int threads = static_cast<int>(std::min<int64_t>(k.threads, chunks));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t c = 0; c < chunks; ++c) vector_math::silu_in_place(y + c * chunk, std::min(chunk, n - c * chunk));
  }
  if (blocked_dst) op.dst_reorder.run(k.stream);
}

}  // namespace hodu::kernels

extern "C" int hodu_conv2d_prepare(hodu_kernels* k, const hodu_conv2d_desc* desc, const float* weights,
                                   const float* bias, const hodu_kernel* src_producer,
                                   const hodu_kernel* residual_producer, const hodu_kernel* dst_like,
                                   hodu_kernel** out) {
  if (!k || !desc || !weights || !out) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  return k->guarded([&] {
    k->refuse_if_asked("conv2d");
    k->ops.push_back(hodu::kernels::make_conv2d(*k, *desc, weights, bias, src_producer, residual_producer, dst_like));
    *out = k->ops.back().get();
  });
}

extern "C" int hodu_conv2d_run(hodu_kernels* k, hodu_kernel* op, const float* src, const float* residual, float* dst) {
  if (!k || !op) return HODU_KERNELS_ERR_INVALID_ARGUMENT;
  return k->guarded([&] { hodu::kernels::run_conv2d(*k, *op, src, residual, dst); });
}
