// Layout and selection ops of the nn family: Pad, CenterCropPad, DepthToSpace,
// SpaceToDepth, NonMaxSuppression. (ImageDecoder is in image.cc.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <array>
#include <numeric>
#include <vector>

#include "engines/interp/ops/nn_common.h"

namespace hodu::interp {
namespace {

// Builds out[...] from x[...] where, per dim d, output index o reads source index
// src[d][o] (or -1: the fill element). Works on any non-packed dtype, strings too.
Tensor gather_by_tables(const KernelContext& ctx, const Tensor& x0, const std::vector<int64_t>& out_shape,
                        const std::vector<std::vector<int64_t>>& src, const Tensor* fill) {
  DType dt = x0.dtype();
  if (dtype_is_packed4(dt)) ctx.fail(ErrorCode::Unsupported, "dtype {} is not supported by this op", dtype_name(dt));
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(dt, out_shape);
  const int64_t r = static_cast<int64_t>(out_shape.size());
  int64_t total = y.numel();
  if (total == 0) return y;
  auto in_st = contiguous_strides(x.shape());
  if (r == 0) {
    if (dt == DType::String) y.string_data()[0] = x.string_data()[0];
    else std::memcpy(y.raw_data(), x.raw_data(), dtype_storage_bytes(dt, 1));
    return y;
  }
  const bool is_str = dt == DType::String;
  const size_t esz = is_str ? 0 : dtype_storage_bytes(dt, 1);
  std::vector<char> fill_bytes(esz, 0);
  std::string fill_str;
  if (fill && fill->numel() > 0) {
    if (fill->dtype() != dt)
      ctx.fail(ErrorCode::InvalidArgument, "constant_value dtype {} differs from data dtype {}",
               dtype_name(fill->dtype()), dtype_name(dt));
    Tensor f = fill->contiguous();
    if (is_str) fill_str = f.string_data()[0];
    else std::memcpy(fill_bytes.data(), f.raw_data(), esz);
  }
  const int64_t inner = out_shape[r - 1], outer = total / inner;
  const auto& last = src[r - 1];
  auto body = [&](int64_t q0, int64_t q1) {
    std::vector<int64_t> o(static_cast<size_t>(r), 0);
    for (int64_t q = q0; q < q1; ++q) {
      int64_t rem = q;
      for (int64_t d = r - 2; d >= 0; --d) { o[d] = rem % out_shape[d]; rem /= out_shape[d]; }
      bool ok = true;
      int64_t off = 0;
      for (int64_t d = 0; d < r - 1; ++d) {
        int64_t s = src[d][o[d]];
        if (s < 0) { ok = false; break; }
        off += s * in_st[d];
      }
      int64_t yo = q * inner;
      if (is_str) {
        std::string* ys = y.string_data();
        const std::string* xs = x.string_data();
        for (int64_t j = 0; j < inner; ++j) {
          int64_t s = ok ? last[j] : -1;
          ys[yo + j] = s < 0 ? fill_str : xs[off + s];
        }
      } else {
        char* yb = static_cast<char*>(y.raw_data()) + yo * esz;
        const char* xb = static_cast<const char*>(x.raw_data());
        for (int64_t j = 0; j < inner; ++j) {
          int64_t s = ok ? last[j] : -1;
          std::memcpy(yb + j * esz, s < 0 ? fill_bytes.data() : xb + (off + s) * esz, esz);
        }
      }
    }
  };
  if (is_str) body(0, outer);
  else parallel_for(ctx.threads, outer, 64, body);
  return y;
}

// ---- Pad ----
void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  std::string mode = ctx.node.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
  std::vector<int64_t> pads;
  if (ctx.has_input(1)) pads = ctx.input(1).to_int64s();
  else pads = ctx.node.get_ints("pads");
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) axes = ctx.input(3).to_int64s();
  else
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  const size_t na = axes.size();
  if (pads.size() != 2 * na)
    ctx.fail(ErrorCode::InvalidArgument, "pads has {} values, expected {} (2 × number of axes)", pads.size(), 2 * na);
  std::vector<int64_t> pb(static_cast<size_t>(r), 0), pe(static_cast<size_t>(r), 0);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < na; ++i) {
    int64_t a = normalize_axis(ctx, axes[i], r);
    if (seen[a]) ctx.fail(ErrorCode::InvalidArgument, "axes has a repeated axis {}", a);
    seen[a] = true;
    pb[a] = pads[i];
    pe[a] = pads[na + i];
  }
  std::vector<int64_t> out(static_cast<size_t>(r));
  std::vector<std::vector<int64_t>> src(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    int64_t in = x.dim(d);
    out[d] = in + pb[d] + pe[d];
    if (out[d] < 0) ctx.fail(ErrorCode::InvalidArgument, "pads {} make dim {} negative", shape_to_string(pads), d);
    if (out[d] > 0 && in == 0 && mode != "constant")
      ctx.fail(ErrorCode::InvalidArgument, "mode '{}' cannot pad an empty dimension {}", mode, d);
    if (mode == "reflect" && in == 1 && (pb[d] > 0 || pe[d] > 0))
      ctx.fail(ErrorCode::InvalidArgument, "reflect padding needs at least 2 elements on dim {}", d);
    src[d].resize(static_cast<size_t>(out[d]));
    for (int64_t o = 0; o < out[d]; ++o) {
      int64_t i = o - pb[d];
      if (i < 0 || i >= in) {
        if (mode == "constant") i = -1;
        else if (mode == "edge") i = std::clamp<int64_t>(i, 0, in - 1);
        else if (mode == "wrap") i = ((i % in) + in) % in;
        else {
          int64_t period = 2 * (in - 1);
          i = ((i % period) + period) % period;
          if (i >= in) i = period - i;
        }
      }
      src[d][o] = i;
    }
  }
  const Tensor* fill = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  ctx.set_output(0, gather_by_tables(ctx, x, out, src, fill));
}

// ---- CenterCropPad ----
void center_crop_pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  auto shape = ctx.input(1).to_int64s();
  std::vector<int64_t> axes = ctx.node.get_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  if (shape.size() != axes.size())
    ctx.fail(ErrorCode::InvalidArgument, "shape has {} values, expected {}", shape.size(), axes.size());
  std::vector<int64_t> out(x.shape());
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalize_axis(ctx, axes[i], r);
    if (shape[i] < 0) ctx.fail(ErrorCode::InvalidArgument, "shape values must be non-negative");
    out[a] = shape[i];
  }
  std::vector<std::vector<int64_t>> src(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    int64_t in = x.dim(d), on = out[d];
    src[d].resize(static_cast<size_t>(on));
    for (int64_t o = 0; o < on; ++o) {
      int64_t i;
      if (on <= in) i = o + (in - on) / 2;
      else {
        i = o - (on - in) / 2;
        if (i < 0 || i >= in) i = -1;
      }
      src[d][o] = i;
    }
  }
  ctx.set_output(0, gather_by_tables(ctx, x, out, src, nullptr));
}

// ---- DepthToSpace / SpaceToDepth ----
Tensor permute_copy(const Tensor& x, const std::vector<int64_t>& view_shape, const std::vector<int64_t>& perm,
                    const std::vector<int64_t>& out_shape) {
  return x.contiguous().reshape(view_shape).permute(perm).contiguous().reshape(out_shape);
}

void depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = ctx.node.get_int("blocksize", 0);
  std::string mode = ctx.node.get_string("mode", "DCR");
  if (x.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "input must be 4-D, got {}", x.shape_string());
  if (b <= 0) ctx.fail(ErrorCode::InvalidArgument, "blocksize must be positive");
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (C % (b * b) != 0) ctx.fail(ErrorCode::InvalidArgument, "channels {} not divisible by blocksize² {}", C, b * b);
  int64_t c2 = C / (b * b);
  if (mode == "DCR")
    ctx.set_output(0, permute_copy(x, {N, b, b, c2, H, W}, {0, 3, 4, 1, 5, 2}, {N, c2, H * b, W * b}));
  else if (mode == "CRD")
    ctx.set_output(0, permute_copy(x, {N, c2, b, b, H, W}, {0, 1, 4, 2, 5, 3}, {N, c2, H * b, W * b}));
  else
    ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
}

void space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = ctx.node.get_int("blocksize", 0);
  if (x.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "input must be 4-D, got {}", x.shape_string());
  if (b <= 0) ctx.fail(ErrorCode::InvalidArgument, "blocksize must be positive");
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (H % b != 0 || W % b != 0)
    ctx.fail(ErrorCode::InvalidArgument, "spatial dims {}x{} not divisible by blocksize {}", H, W, b);
  ctx.set_output(0, permute_copy(x, {N, C, H / b, b, W / b, b}, {0, 3, 5, 1, 2, 4}, {N, C * b * b, H / b, W / b}));
}

// ---- NonMaxSuppression ----
void nms_kernel(KernelContext& ctx) {
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  if (boxes.rank() != 3 || boxes.dim(2) != 4)
    ctx.fail(ErrorCode::InvalidArgument, "boxes must be [batch, spatial, 4], got {}", boxes.shape_string());
  if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
    ctx.fail(ErrorCode::InvalidArgument, "scores {} must be [batch, classes, {}]", scores.shape_string(),
             boxes.dim(1));
  int64_t max_out = 0;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) max_out = ctx.input(2).get_int64(0);
  double iou_th = ctx.has_input(3) && ctx.input(3).numel() > 0 ? ctx.input(3).get_double(0) : 0.0;
  bool has_score_th = ctx.has_input(4) && ctx.input(4).numel() > 0;
  double score_th = has_score_th ? ctx.input(4).get_double(0) : 0.0;
  int64_t cpb = ctx.node.get_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1) ctx.fail(ErrorCode::InvalidArgument, "center_point_box must be 0 or 1");
  int64_t B = boxes.dim(0), S = boxes.dim(1), K = scores.dim(1);
  auto bx = boxes.to_doubles();
  auto sc = scores.to_doubles();
  std::vector<int64_t> sel;
  if (max_out > 0) {
    for (int64_t b = 0; b < B; ++b) {
      // Corner form (y1, x1, y2, x2) with min/max ordered.
      std::vector<std::array<double, 4>> bb(static_cast<size_t>(S));
      for (int64_t i = 0; i < S; ++i) {
        const double* p = &bx[(b * S + i) * 4];
        if (cpb == 0) {
          bb[i] = {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
        } else {
          double xc = p[0], yc = p[1], w = p[2], h = p[3];
          bb[i] = {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
        }
      }
      auto suppress = [&](int64_t i, int64_t j) {
        const auto &a = bb[i], &c = bb[j];
        double ymin = std::max(a[0], c[0]), xmin = std::max(a[1], c[1]);
        double ymax = std::min(a[2], c[2]), xmax = std::min(a[3], c[3]);
        double inter = std::max(0.0, ymax - ymin) * std::max(0.0, xmax - xmin);
        if (inter <= 0) return false;
        double area_a = (a[2] - a[0]) * (a[3] - a[1]), area_c = (c[2] - c[0]) * (c[3] - c[1]);
        double uni = area_a + area_c - inter;
        if (area_a <= 0 || area_c <= 0 || uni <= 0) return false;
        return inter / uni > iou_th;
      };
      for (int64_t k = 0; k < K; ++k) {
        const double* s = &sc[(b * K + k) * S];
        std::vector<int64_t> cand;
        for (int64_t i = 0; i < S; ++i)
          if (!has_score_th || s[i] > score_th) cand.push_back(i);
        std::stable_sort(cand.begin(), cand.end(), [&](int64_t i, int64_t j) { return s[i] > s[j]; });
        std::vector<int64_t> kept;
        for (int64_t i : cand) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          bool ok = true;
          for (int64_t j : kept)
            if (suppress(i, j)) { ok = false; break; }
          if (ok) kept.push_back(i);
        }
        for (int64_t i : kept) {
          sel.push_back(b);
          sel.push_back(k);
          sel.push_back(i);
        }
      }
    }
  }
  int64_t n = static_cast<int64_t>(sel.size() / 3);
  ctx.set_output(0, Tensor::from_vector(DType::I64, {n, 3}, sel));
}

}  // namespace

void register_nn_misc_ops(OpTable& t) {
  t.add("", "Pad", pad_kernel);
  t.add("", "CenterCropPad", center_crop_pad_kernel);
  t.add("", "DepthToSpace", depth_to_space_kernel);
  t.add("", "SpaceToDepth", space_to_depth_kernel);
  t.add("", "NonMaxSuppression", nms_kernel);
}

}  // namespace hodu::interp
