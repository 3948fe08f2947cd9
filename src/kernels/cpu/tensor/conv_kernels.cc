// 2-D convolution forward and backward: f32 on oneDNN (forward_training,
// backward_data, backward_weights; src/dst NCHW as the caller holds them,
// weights reordered into the layout each primitive prefers; primitives cached
// per shape), other dtypes on direct loops (the f64 gradient tests).
#include <algorithm>

#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"
#include "kernels/cpu/tensor/onednn.h"

namespace hodu::tensor_kernels {
namespace {

using onednn::tag;

std::string conv_key(const char* what, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                     const ConvParams& p, bool bias) {
  return std::string(what) + "/" + onednn::key_of(x) + "/" + onednn::key_of(w) + "/" + onednn::key_of(p.stride) + "/" +
         onednn::key_of(p.padding) + "/" + onednn::key_of(p.dilation) + "/" + std::to_string(p.groups) +
         (bias ? "/b/" : "//") + std::to_string(num_threads());
}

dnnl::memory::desc weights_md(const std::vector<int64_t>& w, int64_t groups, bool any) {
  if (groups == 1)
    return dnnl::memory::desc({w[0], w[1], w[2], w[3]}, onednn::dt::f32, any ? tag::any : tag::oihw);
  return dnnl::memory::desc({groups, w[0] / groups, w[1], w[2], w[3]}, onednn::dt::f32, any ? tag::any : tag::goihw);
}

struct ConvDims {
  dnnl::memory::dims strides, dilation, pad_l, pad_r;
};

ConvDims conv_dims(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
                   const ConvParams& p) {
  ConvDims d;
  d.strides = {p.stride[0], p.stride[1]};
  d.dilation = {p.dilation[0] - 1, p.dilation[1] - 1};
  d.pad_l = {p.padding[0], p.padding[1]};
  // The right padding that makes oneDNN's output size PyTorch's (the rows it never reaches).
  for (int i = 0; i < 2; ++i) {
    const int64_t ext = (w[2 + i] - 1) * p.dilation[i] + 1;
    d.pad_r.push_back((y[2 + i] - 1) * p.stride[i] + ext - x[2 + i] - p.padding[i]);
  }
  return d;
}

// The forward primitive and its descriptor (the backward ones take it as their hint).
struct ConvFwd {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc user_w;
  bool reorder_w = false;
};

ConvFwd& conv_fwd(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
                  const ConvParams& p, bool bias) {
  return onednn::cached_as<ConvFwd>(conv_key("conv_fwd", x, w, p, bias), [&] {
    ConvDims d = conv_dims(x, w, y, p);
    auto src = dnnl::memory::desc({x.begin(), x.end()}, onednn::dt::f32, tag::nchw);
    auto dst = dnnl::memory::desc({y.begin(), y.end()}, onednn::dt::f32, tag::nchw);
    auto wmd = weights_md(w, p.groups, true);
    auto bmd = dnnl::memory::desc({w[0]}, onednn::dt::f32, tag::x);
    auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                       dnnl::algorithm::convolution_direct, src, wmd, bmd, dst,
                                                       d.strides, d.dilation, d.pad_l, d.pad_r)
                     : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                       dnnl::algorithm::convolution_direct, src, wmd, dst, d.strides,
                                                       d.dilation, d.pad_l, d.pad_r);
    ConvFwd f{dnnl::convolution_forward::primitive_desc(desc, onednn::engine()), {}, weights_md(w, p.groups, false)};
    f.prim = dnnl::convolution_forward(f.pd);
    f.reorder_w = f.pd.weights_desc() != f.user_w;
    return f;
  });
}

// `data` (in layout `from`) in layout `to`: the same bytes when they agree, else a reordered copy
// held by `holder`.
dnnl::memory as_layout(const dnnl::memory::desc& from, const dnnl::memory::desc& to, const void* data,
                       hodu::Tensor& holder) {
  if (from == to) return onednn::memory(from, data);
  holder = empty(DType::F32, {static_cast<int64_t>(to.get_size() / sizeof(float)) + 1});
  dnnl::memory src = onednn::memory(from, data), dst = onednn::memory(to, holder.raw_data());
  dnnl::reorder(src, dst).execute(onednn::stream(), src, dst);
  return dst;
}

// The direct loops' geometry (x [N, C, H, W], w [O, C / G, KH, KW], y [N, O, OH, OW]).
struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW, CG, OG;
  const ConvParams& p;
  ConvGeom(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y, const ConvParams& q)
      : N(x[0]), C(x[1]), H(x[2]), W(x[3]), O(w[0]), KH(w[2]), KW(w[3]), OH(y[2]), OW(y[3]), CG(x[1] / q.groups),
        OG(w[0] / q.groups), p(q) {}
  int64_t work() const { return N * O * OH * OW * CG * KH * KW; }
  // f(x index, w index, y index) for every tap of image n and output channel o inside the input.
  template <typename F>
  void taps(int64_t n, int64_t o, F&& f) const {
    const int64_t g = o / OG;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t yi = ((n * O + o) * OH + oh) * OW + ow;
        for (int64_t c = 0; c < CG; ++c)
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
              if (iw < 0 || iw >= W) continue;
              f(((n * C + g * CG + c) * H + ih) * W + iw, ((o * CG + c) * KH + kh) * KW + kw, yi);
            }
          }
      }
  }
};

template <typename T>
void conv_loops_forward(const hodu::Tensor& x, const hodu::Tensor& w, const hodu::Tensor* bias, hodu::Tensor& y,
                        const ConvParams& p) {
  const ConvGeom G(x.shape(), w.shape(), y.shape(), p);
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* wp = static_cast<const T*>(w.raw_data());
  const T* bp = bias ? static_cast<const T*>(bias->raw_data()) : nullptr;
  T* yp = static_cast<T*>(y.raw_data());
  loops::parallel_range(G.N * G.O, G.work(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / G.O, o = r % G.O;
      std::fill(yp + (n * G.O + o) * G.OH * G.OW, yp + (n * G.O + o + 1) * G.OH * G.OW, bp ? bp[o] : T(0));
      G.taps(n, o, [&](int64_t xi, int64_t wi, int64_t yi) { yp[yi] += xp[xi] * wp[wi]; });
    }
  });
}

template <typename T>
void conv_loops_backward_input(const hodu::Tensor& gy, const hodu::Tensor& w, hodu::Tensor& gx, const ConvParams& p) {
  const ConvGeom G(gx.shape(), w.shape(), gy.shape(), p);
  const T* gp = static_cast<const T*>(gy.raw_data());
  const T* wp = static_cast<const T*>(w.raw_data());
  T* xp = static_cast<T*>(gx.raw_data());
  std::fill(xp, xp + gx.numel(), T(0));
  loops::parallel_range(G.N, G.work(), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t o = 0; o < G.O; ++o)
        G.taps(n, o, [&](int64_t xi, int64_t wi, int64_t yi) { xp[xi] += gp[yi] * wp[wi]; });
  });
}

template <typename T>
void conv_loops_backward_weight(const hodu::Tensor& gy, const hodu::Tensor& x, hodu::Tensor& gw, hodu::Tensor* gb,
                                const ConvParams& p) {
  const ConvGeom G(x.shape(), gw.shape(), gy.shape(), p);
  const T* gp = static_cast<const T*>(gy.raw_data());
  const T* xp = static_cast<const T*>(x.raw_data());
  T* wp = static_cast<T*>(gw.raw_data());
  T* bp = gb ? static_cast<T*>(gb->raw_data()) : nullptr;
  std::fill(wp, wp + gw.numel(), T(0));
  loops::parallel_range(G.O, G.work(), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      T bsum = 0;
      for (int64_t n = 0; n < G.N; ++n) {
        const T* row = gp + (n * G.O + o) * G.OH * G.OW;
        for (int64_t i = 0; i < G.OH * G.OW; ++i) bsum += row[i];
        G.taps(n, o, [&](int64_t xi, int64_t wi, int64_t yi) { wp[wi] += gp[yi] * xp[xi]; });
      }
      if (bp) bp[o] = bsum;
    }
  });
}

}  // namespace

std::vector<int64_t> conv2d_output_shape(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                                         const ConvParams& p) {
  std::vector<int64_t> y = {x[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t ext = (w[2 + i] - 1) * p.dilation[i] + 1;
    const int64_t span = x[2 + i] + 2 * p.padding[i] - ext;
    HODU_CHECK(span >= 0, ErrorCode::InvalidArgument,
               "conv2d: input {} with padding {} is smaller than the kernel extent {} (kernel {} dilation {})",
               shape_to_string(x), shape_to_string(p.padding), ext, shape_to_string(w), shape_to_string(p.dilation));
    y[2 + i] = span / p.stride[i] + 1;
  }
  return y;
}

hodu::Tensor conv2d(const hodu::Tensor& x, const hodu::Tensor& w, const hodu::Tensor* bias, const ConvParams& p) {
  auto ys = conv2d_output_shape(x.shape(), w.shape(), p);
  hodu::Tensor y = empty(x.dtype(), ys);
  if (y.numel() == 0) return y;
  if (x.dtype() == DType::F32) {
    ConvFwd& f = conv_fwd(x.shape(), w.shape(), ys, p, bias != nullptr);
    onednn::use_eager_threads();
    hodu::Tensor wbuf;
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, onednn::memory(f.pd.src_desc(), x.raw_data())},
        {DNNL_ARG_WEIGHTS, as_layout(f.user_w, f.pd.weights_desc(), w.raw_data(), wbuf)},
        {DNNL_ARG_DST, onednn::memory(f.pd.dst_desc(), y.raw_data())}};
    if (bias) args[DNNL_ARG_BIAS] = onednn::memory(f.pd.bias_desc(), bias->raw_data());
    f.prim.execute(onednn::stream(), args);
    onednn::stream().wait();
    return y;
  }
  dispatch_float(x.dtype(), "conv2d", [&](auto tag) { conv_loops_forward<typename decltype(tag)::type>(x, w, bias, y, p); });
  return y;
}

hodu::Tensor conv2d_backward_input(const hodu::Tensor& g, const hodu::Tensor& w, const std::vector<int64_t>& xs,
                                   const ConvParams& p) {
  hodu::Tensor gx = empty(g.dtype(), xs);
  if (gx.numel() == 0) return gx;
  if (g.dtype() == DType::F32) {
    struct Bwd {
      dnnl::convolution_backward_data::primitive_desc pd;
      dnnl::convolution_backward_data prim;
      dnnl::memory::desc user_w;
    };
    const auto& ys = g.shape();
    auto& b = onednn::cached_as<Bwd>(conv_key("conv_bwd_data", xs, w.shape(), p, false), [&] {
      ConvFwd& f = conv_fwd(xs, w.shape(), ys, p, false);
      ConvDims d = conv_dims(xs, w.shape(), ys, p);
      auto dsrc = dnnl::memory::desc({xs.begin(), xs.end()}, onednn::dt::f32, tag::nchw);
      auto ddst = dnnl::memory::desc({ys.begin(), ys.end()}, onednn::dt::f32, tag::nchw);
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, dsrc,
                                                 weights_md(w.shape(), p.groups, true), ddst, d.strides, d.dilation,
                                                 d.pad_l, d.pad_r);
      Bwd bw{dnnl::convolution_backward_data::primitive_desc(desc, onednn::engine(), f.pd), {},
             weights_md(w.shape(), p.groups, false)};
      bw.prim = dnnl::convolution_backward_data(bw.pd);
      return bw;
    });
    onednn::use_eager_threads();
    hodu::Tensor wbuf;
    b.prim.execute(onednn::stream(),
                   {{DNNL_ARG_DIFF_DST, onednn::memory(b.pd.diff_dst_desc(), g.raw_data())},
                    {DNNL_ARG_WEIGHTS, as_layout(b.user_w, b.pd.weights_desc(), w.raw_data(), wbuf)},
                    {DNNL_ARG_DIFF_SRC, onednn::memory(b.pd.diff_src_desc(), gx.raw_data())}});
    onednn::stream().wait();
    return gx;
  }
  dispatch_float(g.dtype(), "conv2d backward", [&](auto tag) {
    conv_loops_backward_input<typename decltype(tag)::type>(g, w, gx, p);
  });
  return gx;
}

void conv2d_backward_weight(const hodu::Tensor& g, const hodu::Tensor& x, const std::vector<int64_t>& ws,
                            const ConvParams& p, bool with_bias, hodu::Tensor& dw, hodu::Tensor& db) {
  dw = empty(g.dtype(), ws);
  if (with_bias) db = empty(g.dtype(), {ws[0]});
  if (g.dtype() == DType::F32) {
    struct Bwd {
      dnnl::convolution_backward_weights::primitive_desc pd;
      dnnl::convolution_backward_weights prim;
      dnnl::memory::desc user_w;
    };
    const auto& ys = g.shape();
    auto& b = onednn::cached_as<Bwd>(conv_key("conv_bwd_weights", x.shape(), ws, p, with_bias), [&] {
      ConvFwd& f = conv_fwd(x.shape(), ws, ys, p, with_bias);
      ConvDims d = conv_dims(x.shape(), ws, ys, p);
      auto src = dnnl::memory::desc({x.shape().begin(), x.shape().end()}, onednn::dt::f32, tag::nchw);
      auto ddst = dnnl::memory::desc({ys.begin(), ys.end()}, onednn::dt::f32, tag::nchw);
      auto dw_md = weights_md(ws, p.groups, true);
      auto db_md = dnnl::memory::desc({ws[0]}, onednn::dt::f32, tag::x);
      auto desc = with_bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, dw_md,
                                                                       db_md, ddst, d.strides, d.dilation, d.pad_l,
                                                                       d.pad_r)
                            : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, dw_md,
                                                                       ddst, d.strides, d.dilation, d.pad_l, d.pad_r);
      Bwd bw{dnnl::convolution_backward_weights::primitive_desc(desc, onednn::engine(), f.pd), {},
             weights_md(ws, p.groups, false)};
      bw.prim = dnnl::convolution_backward_weights(bw.pd);
      return bw;
    });
    onednn::use_eager_threads();
    const bool reorder = b.pd.diff_weights_desc() != b.user_w;
    hodu::Tensor wbuf;
    dnnl::memory dwm = reorder ? dnnl::memory(b.pd.diff_weights_desc(), onednn::engine())
                               : onednn::memory(b.user_w, dw.raw_data());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, onednn::memory(b.pd.src_desc(), x.raw_data())},
                                                  {DNNL_ARG_DIFF_DST, onednn::memory(b.pd.diff_dst_desc(), g.raw_data())},
                                                  {DNNL_ARG_DIFF_WEIGHTS, dwm}};
    if (with_bias) args[DNNL_ARG_DIFF_BIAS] = onednn::memory(b.pd.diff_bias_desc(), db.raw_data());
    b.prim.execute(onednn::stream(), args);
    if (reorder) {
      dnnl::memory user = onednn::memory(b.user_w, dw.raw_data());
      dnnl::reorder(dwm, user).execute(onednn::stream(), dwm, user);
    }
    onednn::stream().wait();
    return;
  }
  dispatch_float(g.dtype(), "conv2d backward", [&](auto tag) {
    conv_loops_backward_weight<typename decltype(tag)::type>(g, x, dw, with_bias ? &db : nullptr, p);
  });
}

}  // namespace hodu::tensor_kernels
