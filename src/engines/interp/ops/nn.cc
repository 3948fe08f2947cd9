// The nn family: convolutions (nn_conv.cc), pooling (nn_pool.cc), resampling
// (nn_resize.cc) and the rest (nn_misc.cc). Shared geometry helpers live here.
#include "engines/interp/ops/nn_common.h"

#include <algorithm>

namespace hodu::interp {

std::vector<int64_t> ints_attr(const KernelContext& ctx, const std::string& name, size_t n, int64_t def) {
  auto v = ctx.node.get_ints(name);
  if (v.empty()) return std::vector<int64_t>(n, def);
  if (v.size() != n)
    ctx.fail(ErrorCode::InvalidArgument, "attribute '{}' has {} values, expected {}", name, v.size(), n);
  return v;
}

WindowGeom make_window_geom(const KernelContext& ctx, const std::vector<int64_t>& in_spatial,
                            const std::vector<int64_t>& kernel, bool ceil_mode) {
  WindowGeom g;
  g.nd = static_cast<int64_t>(in_spatial.size());
  size_t nd = in_spatial.size();
  g.in = in_spatial;
  g.kernel = kernel;
  if (kernel.size() != nd)
    ctx.fail(ErrorCode::InvalidArgument, "kernel has {} spatial dims, input has {}", kernel.size(), nd);
  g.strides = ints_attr(ctx, "strides", nd, 1);
  g.dilations = ints_attr(ctx, "dilations", nd, 1);
  for (size_t i = 0; i < nd; ++i) {
    if (g.strides[i] <= 0) ctx.fail(ErrorCode::InvalidArgument, "strides must be positive");
    if (g.dilations[i] <= 0) ctx.fail(ErrorCode::InvalidArgument, "dilations must be positive");
    if (kernel[i] <= 0) ctx.fail(ErrorCode::InvalidArgument, "kernel dims must be positive");
  }
  std::string auto_pad = ctx.node.get_string("auto_pad", "NOTSET");
  g.pad_begin.assign(nd, 0);
  g.pad_end.assign(nd, 0);
  g.out.assign(nd, 0);
  if (auto_pad == "NOTSET") {
    auto pads = ctx.node.get_ints("pads");
    if (!pads.empty()) {
      if (pads.size() != 2 * nd)
        ctx.fail(ErrorCode::InvalidArgument, "'pads' has {} values, expected {}", pads.size(), 2 * nd);
      for (size_t i = 0; i < nd; ++i) {
        g.pad_begin[i] = pads[i];
        g.pad_end[i] = pads[i + nd];
        if (pads[i] < 0 || pads[i + nd] < 0) ctx.fail(ErrorCode::InvalidArgument, "pads must be non-negative");
      }
    }
  } else if (auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    ctx.fail(ErrorCode::InvalidArgument, "unknown auto_pad '{}'", auto_pad);
  }
  for (size_t i = 0; i < nd; ++i) {
    int64_t ek = (kernel[i] - 1) * g.dilations[i] + 1;
    int64_t s = g.strides[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t o = (g.in[i] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (o - 1) * s + ek - g.in[i]);
      if (auto_pad == "SAME_UPPER") g.pad_begin[i] = total / 2;
      else g.pad_begin[i] = total - total / 2;
      g.pad_end[i] = total - g.pad_begin[i];
      g.out[i] = o;
    } else {
      int64_t span = g.in[i] + g.pad_begin[i] + g.pad_end[i] - ek;
      if (span < 0)
        ctx.fail(ErrorCode::InvalidArgument, "kernel extent {} is larger than the padded input {} on spatial dim {}",
                 ek, g.in[i] + g.pad_begin[i] + g.pad_end[i], i);
      int64_t o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
      // The last window must start inside the input or the begin padding.
      if (ceil_mode && (o - 1) * s >= g.in[i] + g.pad_begin[i]) --o;
      g.out[i] = o;
    }
  }
  return g;
}

void register_nn_ops(OpTable& t) {
  register_nn_conv_ops(t);
  register_nn_pool_ops(t);
  register_nn_resize_ops(t);
  register_nn_misc_ops(t);
}

}  // namespace hodu::interp
