// Helpers shared by the oneDNN-backed kernels.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engines/cpu/plan.h"

namespace hodu::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

inline dnnl::memory::dims to_dims(const std::vector<int64_t>& v) { return dnnl::memory::dims(v.begin(), v.end()); }

// Appends the fused activation of a hodu op (attributes activation /
// activation_params) as eltwise post-ops; false when oneDNN has no equivalent.
bool append_activation(dnnl::post_ops& po, const std::string& act, const std::vector<float>& params);

// Padding before and after one spatial dim of a conv/pool window of extent `ext` (dilated)
// for ONNX's auto_pad: SAME_UPPER/SAME_LOWER split what `out` needs, VALID none, NOTSET the
// given pads.
std::pair<int64_t, int64_t> spatial_pads(const std::string& auto_pad, int64_t in, int64_t out, int64_t stride,
                                         int64_t ext, int64_t pad_begin, int64_t pad_end);

// A Conv node's window in oneDNN's terms: strides, dilations (oneDNN counts 0 as none), the
// padding auto_pad resolves to, and the weights' dims with their ONNX layout ([G, O/G, I/G, k...]
// when grouped). Shared by the f32 and int8 convolutions.
struct ConvWindow {
  int64_t group = 1;
  dnnl::memory::dims strides, dilations, pad_l, pad_r, weight_dims;
  dnnl::memory::format_tag weight_tag = dnnl::memory::format_tag::undef;
  // The forward-inference descriptor over this window; bias may be null.
  dnnl::convolution_forward::desc desc(dnnl::algorithm alg, const dnnl::memory::desc& src,
                                       const dnnl::memory::desc& weights, const dnnl::memory::desc* bias,
                                       const dnnl::memory::desc& dst) const;
};
// nullopt when the node's attributes do not fit input `xs`, output `ys` and weights `ws`.
std::optional<ConvWindow> conv_window(const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                                      const std::vector<int64_t>& ws);

// A pooling node's window in oneDNN's terms (MaxPool, AveragePool, Global*Pool and their hodu
// *Grad ops): kernel, strides, dilations (0 = none), the padding auto_pad and ceil_mode resolve
// to, the algorithm. nullopt when oneDNN cannot express it (storage_order, ceil_mode with
// count_include_pad) or the attributes do not fit input `xs` and output `ys`.
struct PoolWindow {
  std::vector<int64_t> kernel, strides;
  dnnl::memory::dims dilations, pad_l, pad_r;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
};
std::optional<PoolWindow> pool_window(const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys);

// `t` reordered from layout `from` into a new buffer in layout `to` (PlanBuilder::pack also
// lets the original go where it may).
PackedConstant pack_constant(dnnl::engine& eng, const Tensor& t, const dnnl::memory::desc& from,
                             const dnnl::memory::desc& to);

// Sets a memory's handle to a slot's data.
inline void bind(dnnl::memory& m, RunState& rs, int slot) { m.set_data_handle(rs.slots[slot].data()); }

// oneDNN answered with its reference implementation (plain C++ loops, 10-500x slower than its
// jit kernels): the step runs something else where it can.
inline bool reference_impl(const char* impl) { return std::string(impl).rfind("ref", 0) == 0; }

// Whether this CPU runs oneDNN's int8 kernels exactly (VNNI); without it the quantized ops
// keep their interpreter kernels (dnnl_int8.cc).
bool int8_exact_isa();

// HODU_CPU_MATMUL allows a product with constant weights to run as oneDNN's 1x1 conv
// (kernels/cpu/matmul_as_conv.h); InvalidArgument for a value it does not know.
bool matmul_as_conv_allowed();

}  // namespace hodu::cpu
