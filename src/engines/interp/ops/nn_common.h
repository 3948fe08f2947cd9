// Helpers shared by the nn family kernels (conv, pooling, resize, ...).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {

// Spatial geometry of a sliding-window op (Conv, pooling): per spatial dim.
struct WindowGeom {
  int64_t nd = 0;
  std::vector<int64_t> in, kernel, out, strides, dilations, pad_begin, pad_end;
  int64_t in_size() const { int64_t s = 1; for (auto v : in) s *= v; return s; }
  int64_t out_size() const { int64_t s = 1; for (auto v : out) s *= v; return s; }
  int64_t kernel_size() const { int64_t s = 1; for (auto v : kernel) s *= v; return s; }
};

// Reads strides/dilations/pads/auto_pad of `node` for `nd` spatial dims with the given
// kernel, validates them, and computes the output size. ceil_mode as in pooling.
WindowGeom make_window_geom(const KernelContext& ctx, const std::vector<int64_t>& in_spatial,
                            const std::vector<int64_t>& kernel, bool ceil_mode = false);

// Reads an int list attribute of exactly n values (default: n copies of def).
std::vector<int64_t> ints_attr(const KernelContext& ctx, const std::string& name, size_t n, int64_t def);

// Registration helpers per file.
void register_nn_conv_ops(OpTable& t);
void register_nn_pool_ops(OpTable& t);
void register_nn_resize_ops(OpTable& t);
void register_nn_misc_ops(OpTable& t);

}  // namespace hodu::interp
