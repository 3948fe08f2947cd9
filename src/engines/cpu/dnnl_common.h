// Helpers shared by the oneDNN-backed kernels.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
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

// A constant reordered once, at plan time, into the layout a primitive wants.
struct PackedConstant {
  std::shared_ptr<void> buffer;  // owns the bytes (not zeroed first: the reorder writes every one)
  dnnl::memory mem;
};
PackedConstant pack_constant(dnnl::engine& eng, const Tensor& t, const dnnl::memory::desc& from,
                             const dnnl::memory::desc& to);

// Sets a memory's handle to a slot's data.
inline void bind(dnnl::memory& m, RunState& rs, int slot) { m.set_data_handle(rs.slots[slot].data()); }

}  // namespace hodu::cpu
