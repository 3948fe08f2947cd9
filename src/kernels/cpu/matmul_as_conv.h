// A 2-D product with constant weights as oneDNN's 1x1 convolution, for CPUs (or HODU_MAX_ISA
// caps) below AVX-512. There oneDNN 2.6's matmul is its sgemm, which packs B again on every
// call (for 16 rows that is most of the call) and reached 60-100 GFLOP/s on transformer shapes
// on a Zen 4 core capped at AVX2; its 1x1 convolution (jit_1x1:avx2) reads weights reordered
// once, at prepare, at 105-115 (docs/performance.md). [M, K] x [K, N] over row-major A and C
// is that conv on a 1 x M image in channels-last layout (nhwc [1, K, 1, M] has A's bytes),
// with B as [N, K, 1, 1] weights. Each output is one chain of FMAs over K in order, whatever
// the thread count. Header-only: the cpu engine (libhodu) and libhodu_kernels.so (which does
// not link libhodu) both use it.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

#include <dnnl.hpp>

namespace hodu::onednn {

// A product of at most this many rows with constant weights (a classifier at batch 1) runs as
// the 1x1 conv on every ISA: at AVX-512 oneDNN 2.6's brgemm matmul streamed a 1280x1000 head's
// weights 15-22 % slower than its 1x1 conv (EfficientNet-B0, MobileNetV2/V3, MnasNet).
constexpr int64_t kMaxConvRows = 4;

// HODU_CPU_MATMUL: auto (unset) or conv let a product with constant weights run as the 1x1
// conv where oneDNN's matmul is its sgemm, or of at most kMaxConvRows rows; gemm keeps oneDNN's
// matmul. False with `error` set for any other value.
inline bool matmul_as_conv_allowed(std::string* error) {
  const char* v = std::getenv("HODU_CPU_MATMUL");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto" || s == "conv") return true;
  if (s != "gemm")
    *error = "HODU_CPU_MATMUL=" + s +
             ": expected auto (a product with constant weights runs as oneDNN's 1x1 convolution where oneDNN's "
             "matmul is its sgemm, i.e. below AVX-512, or of at most 4 rows), conv (the same) or gemm (oneDNN's "
             "matmul always)";
  return false;
}

// The conv computing [m, k] x [k, n] (+ bias [n]) under `attr` (its post-ops: a residual's sum,
// the activation); nullopt where oneDNN answers with anything but its AVX2 jit 1x1 kernel (the
// SSE4.1 one measured no faster than the sgemm there: bench/matmul_conv_bench.cc), or with
// `any_1x1_kernel` any of its jit/brgemm 1x1 kernels (kMaxConvRows).
inline std::optional<dnnl::convolution_forward::primitive_desc> conv_1x1_pd(const dnnl::engine& eng, int64_t m,
                                                                             int64_t k, int64_t n, bool bias,
                                                                             const dnnl::primitive_attr& attr,
                                                                             bool any_1x1_kernel = false) {
  using tag = dnnl::memory::format_tag;
  constexpr auto f32 = dnnl::memory::data_type::f32;
  dnnl::memory::desc src({1, k, 1, m}, f32, tag::nhwc), dst({1, n, 1, m}, f32, tag::nhwc);
  dnnl::memory::desc w({n, k, 1, 1}, f32, tag::any), b({n}, f32, tag::a);
  const auto prop = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::convolution_direct;
  try {
    auto desc = bias ? dnnl::convolution_forward::desc(prop, alg, src, w, b, dst, {1, 1}, {0, 0}, {0, 0})
                     : dnnl::convolution_forward::desc(prop, alg, src, w, dst, {1, 1}, {0, 0}, {0, 0});
    dnnl::convolution_forward::primitive_desc pd(desc, attr, eng);
    const std::string impl = pd.impl_info_str();
    const bool taken = impl == "jit_1x1:avx2" ||
                       (any_1x1_kernel && (impl.rfind("jit_1x1:", 0) == 0 || impl.rfind("brgconv_1x1:", 0) == 0));
    if (!taken || pd.src_desc() != src || pd.dst_desc() != dst)
      return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// B's bytes seen as the conv's [n, k, 1, 1] weights: element (o, i) is B(i, o), B stored
// [k, n] row-major, or [n, k] when `transposed`.
inline dnnl::memory::desc conv_1x1_weights(int64_t k, int64_t n, bool transposed) {
  return dnnl::memory::desc({n, k, 1, 1}, dnnl::memory::data_type::f32,
                            transposed ? dnnl::memory::dims{k, 1, 1, 1} : dnnl::memory::dims{1, n, 1, 1});
}

}  // namespace hodu::onednn
