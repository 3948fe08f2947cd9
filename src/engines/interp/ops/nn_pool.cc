// Pooling: AveragePool, MaxPool (+Indices), LpPool, Global*Pool, MaxRoiPool,
// RoiAlign, MaxUnpool.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engines/interp/ops/nn_common.h"

namespace hodu::interp {
namespace {

enum class PoolKind { Avg, Max, Lp };

std::vector<int64_t> spatial_of(const Tensor& x) { return {x.shape().begin() + 2, x.shape().end()}; }

void check_pool_input(const KernelContext& ctx, const Tensor& x) {
  if (x.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3 (N, C, spatial...), got {}",
                             x.shape_string());
}

// Generic N-D window pooling over a contiguous T tensor.
template <typename T>
void pool_nd(const KernelContext& ctx, PoolKind kind, const Tensor& X, const WindowGeom& g, Tensor& Y, int64_t* ind,
             bool count_include_pad, double p, bool col_major) {
  const int64_t planes = X.dim(0) * X.dim(1), ins = g.in_size(), outs = g.out_size(), nd = g.nd;
  const int64_t kk = g.kernel_size();
  const T* x = X.data<T>();
  T* y = Y.data<T>();
  std::vector<int64_t> in_strides(nd, 1), cm_strides(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * g.in[d + 1];
  for (int64_t d = 1; d < nd; ++d) cm_strides[d] = cm_strides[d - 1] * g.in[d - 1];
  parallel_for(ctx.threads, planes, 1, [&](int64_t q0, int64_t q1) {
    std::vector<int64_t> o(nd), k(nd), pos(nd);
    for (int64_t q = q0; q < q1; ++q) {
      const T* xp = x + q * ins;
      for (int64_t op = 0; op < outs; ++op) {
        int64_t rem = op;
        for (int64_t d = nd - 1; d >= 0; --d) { o[d] = rem % g.out[d]; rem /= g.out[d]; }
        double acc = 0;
        T best{};
        bool found = false;
        int64_t best_idx = -1, count = 0, pad_count = 0;
        for (int64_t kf = 0; kf < kk; ++kf) {
          int64_t r2 = kf;
          for (int64_t d = nd - 1; d >= 0; --d) { k[d] = r2 % g.kernel[d]; r2 /= g.kernel[d]; }
          bool inside = true, in_padded = true;
          int64_t off = 0;
          for (int64_t d = 0; d < nd; ++d) {
            int64_t i = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
            pos[d] = i;
            if (i < 0 || i >= g.in[d]) inside = false;
            if (i < -g.pad_begin[d] || i >= g.in[d] + g.pad_end[d]) in_padded = false;
            off += i * in_strides[d];
          }
          if (in_padded) ++pad_count;
          if (!inside) continue;
          T v = xp[off];
          if (kind == PoolKind::Max) {
            if constexpr (std::is_floating_point_v<T>) {
              if (std::isnan(v)) continue;
            }
            if (!found || v > best) {
              best = v;
              found = true;
              if (ind) {
                int64_t flat = 0;
                if (col_major) for (int64_t d = 0; d < nd; ++d) flat += pos[d] * cm_strides[d];
                else flat = off;
                best_idx = q * ins + flat;
              }
            }
          } else if (kind == PoolKind::Avg) {
            acc += static_cast<double>(v);
            ++count;
          } else {
            acc += std::pow(std::fabs(static_cast<double>(v)), p);
          }
        }
        T out;
        if (kind == PoolKind::Max) {
          if (found) out = best;
          else if constexpr (std::is_floating_point_v<T>) out = std::numeric_limits<T>::quiet_NaN();
          else out = std::numeric_limits<T>::lowest();
        } else if (kind == PoolKind::Avg) {
          int64_t div = count_include_pad ? pad_count : count;
          out = static_cast<T>(div > 0 ? acc / static_cast<double>(div) : std::numeric_limits<double>::quiet_NaN());
        } else {
          out = static_cast<T>(std::pow(acc, 1.0 / p));
        }
        y[q * outs + op] = out;
        if (ind) ind[q * outs + op] = best_idx;
      }
    }
  });
}

void pool_kernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& X0 = ctx.input(0);
  check_pool_input(ctx, X0);
  auto in = spatial_of(X0);
  auto ks = ctx.node.get_ints("kernel_shape");
  if (ks.size() != in.size())
    ctx.fail(ErrorCode::InvalidArgument, "kernel_shape {} must have {} values", shape_to_string(ks), in.size());
  bool ceil_mode = ctx.node.get_int("ceil_mode", 0) != 0;
  WindowGeom g = make_window_geom(ctx, in, ks, ceil_mode);
  for (auto o : g.out)
    if (o <= 0) ctx.fail(ErrorCode::InvalidArgument, "computed output size is not positive");
  std::vector<int64_t> yshape{X0.dim(0), X0.dim(1)};
  yshape.insert(yshape.end(), g.out.begin(), g.out.end());
  bool cip = ctx.node.get_int("count_include_pad", 0) != 0;
  double p = static_cast<double>(ctx.node.get_int("p", 2));
  bool col_major = ctx.node.get_int("storage_order", 0) != 0;
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  Tensor I;
  bool want_ind = kind == PoolKind::Max && ctx.wants_output(1);
  if (want_ind) I = Tensor::empty(DType::I64, yshape);
  auto run = [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), yshape);
    pool_nd<T>(ctx, kind, X, g, Y, want_ind ? I.data<int64_t>() : nullptr, cip, p, col_major);
    ctx.set_output(0, narrow_to(Y, dt));
  };
  if (kind == PoolKind::Max) {
    switch (X.dtype()) {
      case DType::F32: run.template operator()<float>(); break;
      case DType::F64: run.template operator()<double>(); break;
      case DType::I8: run.template operator()<int8_t>(); break;
      case DType::U8: run.template operator()<uint8_t>(); break;
      default: ctx.fail(ErrorCode::Unsupported, "MaxPool does not support dtype {}", dtype_name(dt));
    }
  } else {
    dispatch_float(ctx, X.dtype(), run);
  }
  if (want_ind) ctx.set_output(1, I);
}

void average_pool_kernel(KernelContext& ctx) { pool_kernel(ctx, PoolKind::Avg); }
void max_pool_kernel(KernelContext& ctx) { pool_kernel(ctx, PoolKind::Max); }
void lp_pool_kernel(KernelContext& ctx) { pool_kernel(ctx, PoolKind::Lp); }

void global_pool(KernelContext& ctx, PoolKind kind) {
  const Tensor& X0 = ctx.input(0);
  check_pool_input(ctx, X0);
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  std::vector<int64_t> yshape{X0.dim(0), X0.dim(1)};
  for (int64_t d = 2; d < X0.rank(); ++d) yshape.push_back(1);
  int64_t planes = X0.dim(0) * X0.dim(1), ins = X0.numel() / std::max<int64_t>(planes, 1);
  double p = static_cast<double>(ctx.node.get_int("p", 2));
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), yshape);
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    parallel_for(ctx.threads, planes, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const T* xp = x + q * ins;
        if (kind == PoolKind::Max) {
          T best = -std::numeric_limits<T>::infinity();
          bool any = false;
          for (int64_t i = 0; i < ins; ++i) {
            if (std::isnan(xp[i])) { best = xp[i]; any = true; break; }
            if (!any || xp[i] > best) { best = xp[i]; any = true; }
          }
          y[q] = best;
        } else if (kind == PoolKind::Avg) {
          double s = 0;
          for (int64_t i = 0; i < ins; ++i) s += static_cast<double>(xp[i]);
          y[q] = static_cast<T>(s / static_cast<double>(ins));
        } else {
          double s = 0;
          for (int64_t i = 0; i < ins; ++i) s += std::pow(std::fabs(static_cast<double>(xp[i])), p);
          y[q] = static_cast<T>(std::pow(s, 1.0 / p));
        }
      }
    });
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

void global_average_pool_kernel(KernelContext& ctx) { global_pool(ctx, PoolKind::Avg); }
void global_max_pool_kernel(KernelContext& ctx) { global_pool(ctx, PoolKind::Max); }
void global_lp_pool_kernel(KernelContext& ctx) { global_pool(ctx, PoolKind::Lp); }

// ---- MaxRoiPool ----
void max_roi_pool_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& R0 = ctx.input(1);
  if (X0.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "X must be 4-D, got {}", X0.shape_string());
  if (R0.rank() != 2 || R0.dim(1) != 5) ctx.fail(ErrorCode::InvalidArgument, "rois must be [num_rois, 5], got {}",
                                                 R0.shape_string());
  auto pooled = ctx.node.get_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] <= 0 || pooled[1] <= 0)
    ctx.fail(ErrorCode::InvalidArgument, "pooled_shape must be 2 positive values");
  double scale = ctx.node.get_float("spatial_scale", 1.0f);
  int64_t N = X0.dim(0), C = X0.dim(1), H = X0.dim(2), W = X0.dim(3), R = R0.dim(0), PH = pooled[0], PW = pooled[1];
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  auto rois = R0.to_doubles();
  for (int64_t r = 0; r < R; ++r) {
    int64_t b = static_cast<int64_t>(rois[r * 5]);
    if (b < 0 || b >= N) ctx.fail(ErrorCode::InvalidArgument, "roi {} has batch index {} out of range", r, b);
  }
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), {R, C, PH, PW});
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    parallel_for(ctx.threads, R * C, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        int64_t r = t / C, c = t % C;
        const double* roi = &rois[r * 5];
        int64_t b = static_cast<int64_t>(roi[0]);
        int64_t x1 = static_cast<int64_t>(std::round(roi[1] * scale)), y1 = static_cast<int64_t>(std::round(roi[2] * scale));
        int64_t x2 = static_cast<int64_t>(std::round(roi[3] * scale)), y2 = static_cast<int64_t>(std::round(roi[4] * scale));
        int64_t rh = std::max<int64_t>(y2 - y1 + 1, 1), rw = std::max<int64_t>(x2 - x1 + 1, 1);
        double bh = static_cast<double>(rh) / static_cast<double>(PH), bw = static_cast<double>(rw) / static_cast<double>(PW);
        const T* xp = x + (b * C + c) * H * W;
        for (int64_t ph = 0; ph < PH; ++ph)
          for (int64_t pw = 0; pw < PW; ++pw) {
            int64_t hs = std::clamp<int64_t>(static_cast<int64_t>(std::floor(ph * bh)) + y1, 0, H);
            int64_t he = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((ph + 1) * bh)) + y1, 0, H);
            int64_t ws = std::clamp<int64_t>(static_cast<int64_t>(std::floor(pw * bw)) + x1, 0, W);
            int64_t we = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((pw + 1) * bw)) + x1, 0, W);
            bool empty = he <= hs || we <= ws;
            T m = empty ? T(0) : -std::numeric_limits<T>::infinity();
            for (int64_t h = hs; h < he; ++h)
              for (int64_t w = ws; w < we; ++w) m = std::max(m, xp[h * W + w]);
            y[((r * C + c) * PH + ph) * PW + pw] = m;
          }
      }
    });
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// ---- RoiAlign ----
void roi_align_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& R0 = ctx.input(1);
  const Tensor& BI = ctx.input(2);
  if (X0.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "X must be 4-D, got {}", X0.shape_string());
  if (R0.rank() != 2 || R0.dim(1) != 4) ctx.fail(ErrorCode::InvalidArgument, "rois must be [num_rois, 4], got {}",
                                                 R0.shape_string());
  if (BI.rank() != 1 || BI.dim(0) != R0.dim(0))
    ctx.fail(ErrorCode::InvalidArgument, "batch_indices {} must be [{}]", BI.shape_string(), R0.dim(0));
  std::string ctm = ctx.node.get_string("coordinate_transformation_mode", "half_pixel");
  std::string mode = ctx.node.get_string("mode", "avg");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    ctx.fail(ErrorCode::InvalidArgument, "unknown coordinate_transformation_mode '{}'", ctm);
  if (mode != "avg" && mode != "max") ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
  int64_t OH = ctx.node.get_int("output_height", 1), OW = ctx.node.get_int("output_width", 1);
  int64_t sr = ctx.node.get_int("sampling_ratio", 0);
  double scale = ctx.node.get_float("spatial_scale", 1.0f);
  if (OH <= 0 || OW <= 0 || sr < 0) ctx.fail(ErrorCode::InvalidArgument, "invalid output size or sampling_ratio");
  int64_t N = X0.dim(0), C = X0.dim(1), H = X0.dim(2), W = X0.dim(3), R = R0.dim(0);
  auto rois = R0.to_doubles();
  auto bidx = BI.to_int64s();
  for (int64_t r = 0; r < R; ++r)
    if (bidx[r] < 0 || bidx[r] >= N)
      ctx.fail(ErrorCode::InvalidArgument, "batch index {} of roi {} is out of range [0, {})", bidx[r], r, N);
  bool half = ctm == "half_pixel", is_max = mode == "max";
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), {R, C, OH, OW});
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    parallel_for(ctx.threads, R, 1, [&](int64_t r0, int64_t r1) {
      struct Sample { int64_t p1, p2, p3, p4; T w1, w2, w3, w4; };
      std::vector<Sample> samples;
      for (int64_t r = r0; r < r1; ++r) {
        double off = half ? 0.5 : 0.0;
        T sw = static_cast<T>(rois[r * 4] * scale - off), sh = static_cast<T>(rois[r * 4 + 1] * scale - off);
        T ew = static_cast<T>(rois[r * 4 + 2] * scale - off), eh = static_cast<T>(rois[r * 4 + 3] * scale - off);
        T rw = ew - sw, rh = eh - sh;
        if (!half) { rw = std::max(rw, T(1)); rh = std::max(rh, T(1)); }
        T bh = rh / static_cast<T>(OH), bw = rw / static_cast<T>(OW);
        int64_t gh = sr > 0 ? sr : static_cast<int64_t>(std::ceil(rh / static_cast<T>(OH)));
        int64_t gw = sr > 0 ? sr : static_cast<int64_t>(std::ceil(rw / static_cast<T>(OW)));
        gh = std::max<int64_t>(gh, 0);
        gw = std::max<int64_t>(gw, 0);
        T count = static_cast<T>(std::max<int64_t>(gh * gw, 1));
        // Precompute bilinear taps for every (ph, pw, iy, ix).
        samples.clear();
        for (int64_t ph = 0; ph < OH; ++ph)
          for (int64_t pw = 0; pw < OW; ++pw)
            for (int64_t iy = 0; iy < gh; ++iy) {
              T yy = sh + static_cast<T>(ph) * bh + (static_cast<T>(iy) + T(0.5)) * bh / static_cast<T>(gh);
              for (int64_t ix = 0; ix < gw; ++ix) {
                T xx = sw + static_cast<T>(pw) * bw + (static_cast<T>(ix) + T(0.5)) * bw / static_cast<T>(gw);
                if (yy < T(-1) || yy > static_cast<T>(H) || xx < T(-1) || xx > static_cast<T>(W)) {
                  samples.push_back({0, 0, 0, 0, 0, 0, 0, 0});
                  continue;
                }
                T yv = std::max(yy, T(0)), xv = std::max(xx, T(0));
                int64_t yl = static_cast<int64_t>(yv), xl = static_cast<int64_t>(xv), yh, xh;
                if (yl >= H - 1) { yh = yl = H - 1; yv = static_cast<T>(yl); } else yh = yl + 1;
                if (xl >= W - 1) { xh = xl = W - 1; xv = static_cast<T>(xl); } else xh = xl + 1;
                T ly = yv - static_cast<T>(yl), lx = xv - static_cast<T>(xl), hy = 1 - ly, hx = 1 - lx;
                samples.push_back({yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh, hy * hx, hy * lx, ly * hx,
                                   ly * lx});
              }
            }
        const int64_t per = gh * gw;
        for (int64_t c = 0; c < C; ++c) {
          const T* xp = x + (bidx[r] * C + c) * H * W;
          for (int64_t b = 0; b < OH * OW; ++b) {
            T acc = 0;
            for (int64_t s = 0; s < per; ++s) {
              const Sample& sm = samples[b * per + s];
              if (is_max) {
                T v = std::max(std::max(std::max(sm.w1 * xp[sm.p1], sm.w2 * xp[sm.p2]), sm.w3 * xp[sm.p3]),
                               sm.w4 * xp[sm.p4]);
                acc = s == 0 ? v : std::max(acc, v);
              } else {
                acc += sm.w1 * xp[sm.p1] + sm.w2 * xp[sm.p2] + sm.w3 * xp[sm.p3] + sm.w4 * xp[sm.p4];
              }
            }
            y[(r * C + c) * OH * OW + b] = is_max ? acc : acc / count;
          }
        }
      }
    });
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// ---- MaxUnpool ----
void max_unpool_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& I0 = ctx.input(1);
  check_pool_input(ctx, X0);
  if (I0.shape() != X0.shape())
    ctx.fail(ErrorCode::InvalidArgument, "I {} must have the shape of X {}", I0.shape_string(), X0.shape_string());
  size_t nd = static_cast<size_t>(X0.rank() - 2);
  auto ks = ctx.node.get_ints("kernel_shape");
  if (ks.size() != nd) ctx.fail(ErrorCode::InvalidArgument, "kernel_shape must have {} values", nd);
  auto strides = ints_attr(ctx, "strides", nd, 1);
  auto pads = ints_attr(ctx, "pads", 2 * nd, 0);
  std::vector<int64_t> yshape{X0.dim(0), X0.dim(1)};
  for (size_t i = 0; i < nd; ++i)
    yshape.push_back((X0.dim(static_cast<int64_t>(i) + 2) - 1) * strides[i] + ks[i] - pads[i] - pads[i + nd]);
  // Indices address the default output shape; an explicit output_shape keeps each
  // element at the same spatial coordinates (as ONNX's reference does).
  std::vector<int64_t> def_shape = yshape;
  if (ctx.has_input(2)) {
    auto os = ctx.input(2).to_int64s();
    if (os.size() != yshape.size())
      ctx.fail(ErrorCode::InvalidArgument, "output_shape has {} values, expected {}", os.size(), yshape.size());
    if (os[0] != yshape[0] || os[1] != yshape[1])
      ctx.fail(ErrorCode::InvalidArgument, "output_shape {} must keep N and C of X", shape_to_string(os));
    yshape = os;
  }
  for (auto v : def_shape)
    if (v < 0) ctx.fail(ErrorCode::InvalidArgument, "output shape {} is invalid", shape_to_string(def_shape));
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  auto idx = I0.to_int64s();
  Tensor Y = Tensor::empty(X.dtype(), yshape);
  int64_t def_total = 1, def_ins = 1, out_ins = 1;
  for (auto v : def_shape) def_total *= v;
  for (size_t d = 2; d < def_shape.size(); ++d) { def_ins *= def_shape[d]; out_ins *= yshape[d]; }
  auto out_st = contiguous_strides(yshape);
  std::vector<int64_t> dest(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t v = idx[i];
    if (v < 0 || v >= def_total)
      ctx.fail(ErrorCode::InvalidArgument, "index {} is out of range for output {}", v, shape_to_string(def_shape));
    int64_t plane = v / def_ins, rem = v % def_ins, off = plane * out_ins;
    for (size_t d = def_shape.size(); d-- > 2;) {
      int64_t c = rem % def_shape[d];
      rem /= def_shape[d];
      if (c >= yshape[d])
        ctx.fail(ErrorCode::InvalidArgument, "index {} falls outside output_shape {}", v, shape_to_string(yshape));
      off += c * out_st[d];
    }
    dest[i] = off;
  }
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    for (size_t i = 0; i < idx.size(); ++i) y[dest[i]] = x[i];
  });
  ctx.set_output(0, narrow_to(Y, dt));
}

}  // namespace

void register_nn_pool_ops(OpTable& t) {
  t.add("", "AveragePool", average_pool_kernel);
  t.add("", "MaxPool", max_pool_kernel);
  t.add("", "LpPool", lp_pool_kernel);
  t.add("", "GlobalAveragePool", global_average_pool_kernel);
  t.add("", "GlobalMaxPool", global_max_pool_kernel);
  t.add("", "GlobalLpPool", global_lp_pool_kernel);
  t.add("", "MaxRoiPool", max_roi_pool_kernel);
  t.add("", "RoiAlign", roi_align_kernel);
  t.add("", "MaxUnpool", max_unpool_kernel);
}

}  // namespace hodu::interp
