#include "engines/cpu/dnnl_common.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>

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

PackedConstant pack_constant(dnnl::engine& eng, const Tensor& t, const dnnl::memory::desc& from,
                             const dnnl::memory::desc& to) {
  PackedConstant p;
  // 64-byte aligned for the JIT kernels; aligned_alloc wants a multiple of the alignment.
  size_t bytes = (std::max<size_t>(to.get_size(), 1) + 63) / 64 * 64;
  void* raw = std::aligned_alloc(64, bytes);
  if (!raw) throw std::bad_alloc();
  p.buffer = std::shared_ptr<void>(raw, [](void* q) { std::free(q); });
  p.mem = dnnl::memory(to, eng, raw);
  Tensor src = t.contiguous();
  dnnl::memory src_mem(from, eng, const_cast<void*>(src.raw_data()));
  dnnl::stream s(eng);
  dnnl::reorder(src_mem, p.mem).execute(s, src_mem, p.mem);
  s.wait();
  return p;
}

}  // namespace hodu::cpu
