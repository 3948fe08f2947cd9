// 2-D max and average pooling, NCHW: f32 on oneDNN's pooling (max keeps its
// workspace for the backward) where its padding rules are PyTorch's; loops
// elsewhere (f64; average pooling in ceil mode, whose divisor PyTorch clips
// to the padded input).
#include <algorithm>
#include <limits>

#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"
#include "kernels/cpu/tensor/onednn.h"

namespace hodu::tensor_kernels {
namespace {

using onednn::tag;

std::string pool_key(const char* what, const std::vector<int64_t>& x, const PoolParams& p) {
  return std::string(what) + "/" + onednn::key_of(x) + "/" + onednn::key_of(p.kernel) + "/" + onednn::key_of(p.stride) +
         "/" + onednn::key_of(p.padding) + "/" + onednn::key_of(p.dilation) + (p.ceil_mode ? "/c" : "/") +
         (p.count_include_pad ? "i/" : "/") + std::to_string(num_threads());
}

struct PoolPrims {
  dnnl::pooling_v2_forward::primitive_desc fwd_pd;
  dnnl::pooling_v2_forward fwd;
  dnnl::pooling_v2_backward::primitive_desc bwd_pd;
  dnnl::pooling_v2_backward bwd;
};

PoolPrims& pool_prims(const std::vector<int64_t>& x, const PoolParams& p, bool max) {
  return onednn::cached_as<PoolPrims>(pool_key(max ? "maxpool" : "avgpool", x, p), [&] {
    auto y = pool2d_output_shape(x, p);
    dnnl::memory::dims strides = {p.stride[0], p.stride[1]}, kernel = {p.kernel[0], p.kernel[1]},
                       dil = {p.dilation[0] - 1, p.dilation[1] - 1}, pl = {p.padding[0], p.padding[1]}, pr(2);
    for (int i = 0; i < 2; ++i)
      pr[i] = (y[2 + i] - 1) * p.stride[i] + (p.kernel[i] - 1) * p.dilation[i] + 1 - x[2 + i] - p.padding[i];
    auto src = dnnl::memory::desc({x.begin(), x.end()}, onednn::dt::f32, tag::nchw);
    auto dst = dnnl::memory::desc({y.begin(), y.end()}, onednn::dt::f32, tag::nchw);
    auto alg = max ? dnnl::algorithm::pooling_max
                   : p.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                         : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_v2_forward::desc fd(dnnl::prop_kind::forward_training, alg, src, dst, strides, kernel, dil, pl, pr);
    PoolPrims pp{dnnl::pooling_v2_forward::primitive_desc(fd, onednn::engine()), {}, {}, {}};
    pp.fwd = dnnl::pooling_v2_forward(pp.fwd_pd);
    dnnl::pooling_v2_backward::desc bd(alg, src, dst, strides, kernel, dil, pl, pr);
    pp.bwd_pd = dnnl::pooling_v2_backward::primitive_desc(bd, onednn::engine(), pp.fwd_pd);
    pp.bwd = dnnl::pooling_v2_backward(pp.bwd_pd);
    return pp;
  });
}

// oneDNN's rules are PyTorch's except for average pooling in ceil mode (divisor) and
// windows that fall wholly into padding (PyTorch refuses padding over half the kernel).
bool onednn_pool(DType dt, const PoolParams& p, bool max) { return dt == DType::F32 && (max || !p.ceil_mode); }

template <typename T>
void max_loops(const hodu::Tensor& x, hodu::Tensor& y, hodu::Tensor& idx, const PoolParams& p) {
  const int64_t NC = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3), OH = y.dim(2), OW = y.dim(3);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  int64_t* ip = static_cast<int64_t*>(idx.raw_data());
  loops::parallel_range(NC, NC * OH * OW * p.kernel[0] * p.kernel[1], [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t at = -1;
          for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
            const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
              const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
              if (iw < 0 || iw >= W) continue;
              const T v = xp[(c * H + ih) * W + iw];
              if (at < 0 || v > best || v != v) {
                best = v;
                at = ih * W + iw;
                if (v != v) break;
              }
            }
          }
          yp[(c * OH + oh) * OW + ow] = best;
          ip[(c * OH + oh) * OW + ow] = at;
        }
  });
}

template <typename T>
void max_backward_loops(const hodu::Tensor& g, hodu::Tensor& gx, const hodu::Tensor& idx) {
  const int64_t NC = gx.dim(0) * gx.dim(1), HW = gx.dim(2) * gx.dim(3), OHW = g.dim(2) * g.dim(3);
  const T* gp = static_cast<const T*>(g.raw_data());
  const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
  T* xp = static_cast<T*>(gx.raw_data());
  std::fill(xp, xp + gx.numel(), T(0));
  loops::parallel_range(NC, NC * (HW + OHW), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t o = 0; o < OHW; ++o)
        if (ip[c * OHW + o] >= 0) xp[c * HW + ip[c * OHW + o]] += gp[c * OHW + o];
  });
}

// The window of output (oh, ow) and its divisor, PyTorch's avg_pool2d rules.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};
inline AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const PoolParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  const int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  return {h0, h1, w0, w1, p.count_include_pad ? pool : (h1 - h0) * (w1 - w0)};
}

template <typename T>
void avg_loops(const hodu::Tensor& x, hodu::Tensor& y, const PoolParams& p) {
  const int64_t NC = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3), OH = y.dim(2), OW = y.dim(3);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  loops::parallel_range(NC, NC * OH * OW * p.kernel[0] * p.kernel[1], [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          AvgWindow w = avg_window(oh, ow, H, W, p);
          T s = 0;
          for (int64_t ih = w.h0; ih < w.h1; ++ih)
            for (int64_t iw = w.w0; iw < w.w1; ++iw) s += xp[(c * H + ih) * W + iw];
          yp[(c * OH + oh) * OW + ow] = w.divisor > 0 ? s / static_cast<T>(w.divisor) : T(0);
        }
  });
}

template <typename T>
void avg_backward_loops(const hodu::Tensor& g, hodu::Tensor& gx, const PoolParams& p) {
  const int64_t NC = gx.dim(0) * gx.dim(1), H = gx.dim(2), W = gx.dim(3), OH = g.dim(2), OW = g.dim(3);
  const T* gp = static_cast<const T*>(g.raw_data());
  T* xp = static_cast<T*>(gx.raw_data());
  std::fill(xp, xp + gx.numel(), T(0));
  loops::parallel_range(NC, NC * OH * OW * p.kernel[0] * p.kernel[1], [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          AvgWindow w = avg_window(oh, ow, H, W, p);
          if (w.divisor <= 0) continue;
          const T v = gp[(c * OH + oh) * OW + ow] / static_cast<T>(w.divisor);
          for (int64_t ih = w.h0; ih < w.h1; ++ih)
            for (int64_t iw = w.w0; iw < w.w1; ++iw) xp[(c * H + ih) * W + iw] += v;
        }
  });
}

}  // namespace

std::vector<int64_t> pool2d_output_shape(const std::vector<int64_t>& x, const PoolParams& p) {
  std::vector<int64_t> y = {x[0], x[1], 0, 0};
  for (int i = 0; i < 2; ++i) {
    HODU_CHECK(p.kernel[i] > 0 && p.stride[i] > 0 && p.dilation[i] > 0 && p.padding[i] >= 0, ErrorCode::InvalidArgument,
               "pool2d: kernel {}, stride {}, dilation {} must be positive and padding {} not negative",
               shape_to_string(p.kernel), shape_to_string(p.stride), shape_to_string(p.dilation),
               shape_to_string(p.padding));
    HODU_CHECK(p.padding[i] * 2 <= p.kernel[i], ErrorCode::InvalidArgument,
               "pool2d: padding {} should be at most half of the kernel {}", shape_to_string(p.padding),
               shape_to_string(p.kernel));
    const int64_t ext = (p.kernel[i] - 1) * p.dilation[i] + 1;
    const int64_t span = x[2 + i] + 2 * p.padding[i] - ext;
    HODU_CHECK(span >= 0, ErrorCode::InvalidArgument, "pool2d: input {} is smaller than the window {}",
               shape_to_string(x), shape_to_string(p.kernel));
    int64_t o = (p.ceil_mode ? (span + p.stride[i] - 1) / p.stride[i] : span / p.stride[i]) + 1;
    // The last window must start inside the input or its left padding (PyTorch's rule).
    if (p.ceil_mode && (o - 1) * p.stride[i] >= x[2 + i] + p.padding[i]) --o;
    y[2 + i] = o;
  }
  return y;
}

hodu::Tensor max_pool2d(const hodu::Tensor& x, const PoolParams& p, hodu::Tensor& saved) {
  auto ys = pool2d_output_shape(x.shape(), p);
  hodu::Tensor y = empty(x.dtype(), ys);
  if (y.numel() == 0) return y;
  if (onednn_pool(x.dtype(), p, true)) {
    PoolPrims& pp = pool_prims(x.shape(), p, true);
    saved = empty(DType::U8, {static_cast<int64_t>(pp.fwd_pd.workspace_desc().get_size())});
    onednn::use_eager_threads();
    pp.fwd.execute(onednn::stream(), {{DNNL_ARG_SRC, onednn::memory(pp.fwd_pd.src_desc(), x.raw_data())},
                                      {DNNL_ARG_DST, onednn::memory(pp.fwd_pd.dst_desc(), y.raw_data())},
                                      {DNNL_ARG_WORKSPACE, onednn::memory(pp.fwd_pd.workspace_desc(), saved.raw_data())}});
    onednn::stream().wait();
    return y;
  }
  saved = empty(DType::I64, ys);
  dispatch_float(x.dtype(), "max_pool2d", [&](auto tag) { max_loops<typename decltype(tag)::type>(x, y, saved, p); });
  return y;
}

hodu::Tensor max_pool2d_backward(const hodu::Tensor& g, const std::vector<int64_t>& xs, const hodu::Tensor& saved,
                                 const PoolParams& p) {
  hodu::Tensor gx = empty(g.dtype(), xs);
  if (gx.numel() == 0) return gx;
  if (onednn_pool(g.dtype(), p, true)) {
    PoolPrims& pp = pool_prims(xs, p, true);
    onednn::use_eager_threads();
    pp.bwd.execute(onednn::stream(),
                   {{DNNL_ARG_DIFF_DST, onednn::memory(pp.bwd_pd.diff_dst_desc(), g.raw_data())},
                    {DNNL_ARG_DIFF_SRC, onednn::memory(pp.bwd_pd.diff_src_desc(), gx.raw_data())},
                    {DNNL_ARG_WORKSPACE, onednn::memory(pp.fwd_pd.workspace_desc(), saved.raw_data())}});
    onednn::stream().wait();
    return gx;
  }
  dispatch_float(g.dtype(), "max_pool2d backward", [&](auto tag) {
    max_backward_loops<typename decltype(tag)::type>(g, gx, saved);
  });
  return gx;
}

hodu::Tensor avg_pool2d(const hodu::Tensor& x, const PoolParams& p) {
  auto ys = pool2d_output_shape(x.shape(), p);
  hodu::Tensor y = empty(x.dtype(), ys);
  if (y.numel() == 0) return y;
  if (onednn_pool(x.dtype(), p, false)) {
    PoolPrims& pp = pool_prims(x.shape(), p, false);
    onednn::use_eager_threads();
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, onednn::memory(pp.fwd_pd.src_desc(), x.raw_data())},
                                                  {DNNL_ARG_DST, onednn::memory(pp.fwd_pd.dst_desc(), y.raw_data())}};
    hodu::Tensor ws;
    if (pp.fwd_pd.workspace_desc().get_size()) {
      ws = empty(DType::U8, {static_cast<int64_t>(pp.fwd_pd.workspace_desc().get_size())});
      args[DNNL_ARG_WORKSPACE] = onednn::memory(pp.fwd_pd.workspace_desc(), ws.raw_data());
    }
    pp.fwd.execute(onednn::stream(), args);
    onednn::stream().wait();
    return y;
  }
  dispatch_float(x.dtype(), "avg_pool2d", [&](auto tag) { avg_loops<typename decltype(tag)::type>(x, y, p); });
  return y;
}

hodu::Tensor avg_pool2d_backward(const hodu::Tensor& g, const std::vector<int64_t>& xs, const PoolParams& p) {
  hodu::Tensor gx = empty(g.dtype(), xs);
  if (gx.numel() == 0) return gx;
  if (onednn_pool(g.dtype(), p, false)) {
    PoolPrims& pp = pool_prims(xs, p, false);
    onednn::use_eager_threads();
    pp.bwd.execute(onednn::stream(), {{DNNL_ARG_DIFF_DST, onednn::memory(pp.bwd_pd.diff_dst_desc(), g.raw_data())},
                                      {DNNL_ARG_DIFF_SRC, onednn::memory(pp.bwd_pd.diff_src_desc(), gx.raw_data())}});
    onednn::stream().wait();
    return gx;
  }
  dispatch_float(g.dtype(), "avg_pool2d backward", [&](auto tag) {
    avg_backward_loops<typename decltype(tag)::type>(g, gx, p);
  });
  return gx;
}

}  // namespace hodu::tensor_kernels
