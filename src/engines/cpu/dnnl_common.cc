#include "engines/cpu/dnnl_common.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>

#include "core/error.h"
#include "core/weight_arena.h"
#include "kernels/cpu/matmul_as_conv.h"

namespace hodu::cpu {

bool append_activation(dnnl::post_ops& po, const std::string& act, const std::vector<float>& p) {
  using alg = dnnl::algorithm;
  auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
  if (act.empty()) return true;
  if (act == "Relu") po.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f);
  else if (act == "LeakyRelu") po.append_eltwise(1.0f, alg::eltwise_relu, param(0, 0.01f), 0.0f);
  else if (act == "Sigmoid") po.append_eltwise(1.0f, alg::eltwise_logistic, 0.0f, 0.0f);
  else if (act == "Tanh") po.append_eltwise(1.0f, alg::eltwise_tanh, 0.0f, 0.0f);
  else if (act == "Clip") {
    float lo = param(0, -std::numeric_limits<float>::infinity()), hi = param(1, std::numeric_limits<float>::infinity());
    if (lo == 0.0f && hi == std::numeric_limits<float>::infinity()) po.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f);
    else po.append_eltwise(1.0f, alg::eltwise_clip_v2, lo, hi);
  } else if (act == "HardSigmoid") {
    po.append_eltwise(1.0f, alg::eltwise_linear, param(0, 0.2f), param(1, 0.5f));
    po.append_eltwise(1.0f, alg::eltwise_clip_v2, 0.0f, 1.0f);
  } else if (act == "Silu") po.append_eltwise(1.0f, alg::eltwise_swish, 1.0f, 0.0f);
  else if (act == "Gelu") po.append_eltwise(1.0f, alg::eltwise_gelu_erf, 0.0f, 0.0f);
  else if (act == "GeluTanh") po.append_eltwise(1.0f, alg::eltwise_gelu_tanh, 0.0f, 0.0f);
  else if (act == "HardSwish") po.append_eltwise(1.0f, alg::eltwise_hardswish, 0.0f, 0.0f);  // x * relu6(x + 3) / 6
  else return false;
  return true;
}

std::pair<int64_t, int64_t> spatial_pads(const std::string& auto_pad, int64_t in, int64_t out, int64_t stride,
                                         int64_t ext, int64_t pad_begin, int64_t pad_end) {
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    int64_t total = std::max<int64_t>(0, (out - 1) * stride + ext - in);
    int64_t begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    return {begin, total - begin};
  }
  if (auto_pad == "VALID") return {0, 0};
  return {pad_begin, pad_end};
}

std::optional<ConvWindow> conv_window(const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                                      const std::vector<int64_t>& ws) {
  const int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  ConvWindow win;
  win.group = n.get_int("group", 1);
  auto strides = n.get_ints("strides", std::vector<int64_t>(spatial, 1));
  auto dil = n.get_ints("dilations", std::vector<int64_t>(spatial, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  if (spatial < 1 || spatial > 3 || static_cast<int64_t>(ws.size()) != spatial + 2 || ys.size() != xs.size() ||
      win.group < 1 || ys[1] % win.group != 0 || xs[1] != ws[1] * win.group ||
      static_cast<int64_t>(strides.size()) != spatial || static_cast<int64_t>(dil.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    return std::nullopt;
  win.strides = to_dims(strides);
  win.pad_l.resize(spatial);
  win.pad_r.resize(spatial);
  win.dilations.resize(spatial);
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t k = ws[2 + i], in = xs[2 + i], out = ys[2 + i];
    int64_t ext = (k - 1) * dil[i] + 1;
    std::tie(win.pad_l[i], win.pad_r[i]) = spatial_pads(auto_pad, in, out, strides[i], ext, pads[i], pads[i + spatial]);
    win.dilations[i] = dil[i] - 1;
    if ((in + win.pad_l[i] + win.pad_r[i] - ext) / strides[i] + 1 != out) return std::nullopt;
  }
  win.weight_dims = to_dims(ws);
  if (win.group > 1) {
    win.weight_dims.insert(win.weight_dims.begin(), win.group);
    win.weight_dims[1] /= win.group;
    win.weight_tag = spatial == 1 ? tag::goiw : spatial == 2 ? tag::goihw : tag::goidhw;
  } else {
    win.weight_tag = spatial == 1 ? tag::oiw : spatial == 2 ? tag::oihw : tag::oidhw;
  }
  return win;
}

dnnl::convolution_forward::desc ConvWindow::desc(dnnl::algorithm alg, const dnnl::memory::desc& src,
                                                 const dnnl::memory::desc& weights, const dnnl::memory::desc* bias,
                                                 const dnnl::memory::desc& dst) const {
  using fwd = dnnl::convolution_forward;
  return bias ? fwd::desc(dnnl::prop_kind::forward_inference, alg, src, weights, *bias, dst, strides, dilations, pad_l,
                          pad_r)
              : fwd::desc(dnnl::prop_kind::forward_inference, alg, src, weights, dst, strides, dilations, pad_l, pad_r);
}

PackedConstant pack_constant(dnnl::engine& eng, const Tensor& t, const dnnl::memory::desc& from,
                             const dnnl::memory::desc& to) {
  PackedConstant p;
  // 64-byte aligned for the JIT kernels, on huge pages beside the plan's other weights.
  p.buffer = weight_buffer(to.get_size());
  p.mem = dnnl::memory(to, eng, p.buffer.get());
  Tensor src = t.contiguous();
  dnnl::memory src_mem(from, eng, const_cast<void*>(src.raw_data()));
  dnnl::stream s(eng);
  dnnl::reorder(src_mem, p.mem).execute(s, src_mem, p.mem);
  s.wait();
  return p;
}

bool matmul_as_conv_allowed() {
  std::string error;
  if (onednn::matmul_as_conv_allowed(&error)) return true;
  if (!error.empty()) throw Error(ErrorCode::InvalidArgument, error);
  return false;
}

}  // namespace hodu::cpu
