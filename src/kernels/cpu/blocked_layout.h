// oneDNN's channel-blocked activation layouts, as the engine's and the kernel library's
// own loops over them (vector_math::max_pool_blocked) recognise them.
#pragma once
#include <cstdint>

#include <dnnl.hpp>

namespace hodu::onednn {

// `dims` (4-D) in nChw8c (block 8) or nChw16c (block 16).
inline dnnl::memory::desc channel_blocked_md(const dnnl::memory::dims& dims, int64_t block) {
  using tag = dnnl::memory::format_tag;
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, block == 8 ? tag::aBcd8b : tag::aBcd16b);
}

// The channel block of `md` when it is `dims`' nChw8c / nChw16c layout, 0 for any other.
inline int64_t channel_block(const dnnl::memory::desc& md, const dnnl::memory::dims& dims) {
  if (dims.size() != 4) return 0;
  for (int64_t block : {8, 16})
    if (md == channel_blocked_md(dims, block)) return block;
  return 0;
}

}  // namespace hodu::onednn
