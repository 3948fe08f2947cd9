// Resampling: Resize (opset 19+ semantics), GridSample (opset 20, N-D), AffineGrid.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engines/interp/ops/grid_sample.h"
#include "engines/interp/ops/nn_common.h"

namespace hodu::interp {
namespace {

// ---- Resize ----
struct Tap {
  int64_t idx;
  double w;
};

double cubic_w(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

// Output type conversion like numpy's astype: truncation toward zero for
// integers (saturated here instead of wrapping).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    if (std::isnan(v)) return T(0);
    double t = std::trunc(v);
    if (t <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (t >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(t);
  }
}

void resize_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const int64_t r = X0.rank();
  std::string mode = ctx.node.get_string("mode", "nearest");
  std::string ctm = ctx.node.get_string("coordinate_transformation_mode", "half_pixel");
  std::string nearest_mode = ctx.node.get_string("nearest_mode", "round_prefer_floor");
  std::string policy = ctx.node.get_string("keep_aspect_ratio_policy", "stretch");
  double A = ctx.node.get_float("cubic_coeff_a", -0.75f);
  bool exclude_outside = ctx.node.get_int("exclude_outside", 0) != 0;
  double extrapolation = ctx.node.get_float("extrapolation_value", 0.0f);
  bool antialias = ctx.node.get_int("antialias", 0) != 0;
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
  if (ctm != "half_pixel" && ctm != "half_pixel_symmetric" && ctm != "pytorch_half_pixel" && ctm != "align_corners" &&
      ctm != "asymmetric" && ctm != "tf_crop_and_resize")
    ctx.fail(ErrorCode::InvalidArgument, "unknown coordinate_transformation_mode '{}'", ctm);
  if (nearest_mode != "round_prefer_floor" && nearest_mode != "round_prefer_ceil" && nearest_mode != "floor" &&
      nearest_mode != "ceil")
    ctx.fail(ErrorCode::InvalidArgument, "unknown nearest_mode '{}'", nearest_mode);
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    ctx.fail(ErrorCode::InvalidArgument, "unknown keep_aspect_ratio_policy '{}'", policy);
  if (antialias && mode == "nearest") antialias = false;  // antialias only affects linear/cubic
  // Axes.
  std::vector<int64_t> axes = ctx.node.get_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (auto& a : axes) {
    a = normalize_axis(ctx, a, r);
    if (seen[a]) ctx.fail(ErrorCode::InvalidArgument, "axes has a repeated axis {}", a);
    seen[a] = true;
  }
  const size_t na = axes.size();
  std::vector<double> scale(static_cast<size_t>(r), 1.0);
  std::vector<int64_t> out(X0.shape());
  bool has_scales = ctx.has_input(2) && ctx.input(2).numel() > 0;
  bool has_sizes = ctx.has_input(3) && ctx.input(3).numel() > 0;
  if (has_scales == has_sizes)
    ctx.fail(ErrorCode::InvalidArgument, "exactly one of 'scales' and 'sizes' must be given");
  if (has_scales) {
    auto sc = ctx.input(2).to_doubles();
    if (sc.size() != na) ctx.fail(ErrorCode::InvalidArgument, "scales has {} values, expected {}", sc.size(), na);
    for (size_t i = 0; i < na; ++i) {
      if (!(sc[i] > 0)) ctx.fail(ErrorCode::InvalidArgument, "scales must be positive, got {}", sc[i]);
      scale[axes[i]] = static_cast<double>(static_cast<float>(sc[i]));
      out[axes[i]] = static_cast<int64_t>(std::floor(scale[axes[i]] * static_cast<double>(X0.dim(axes[i]))));
    }
  } else {
    auto sz = ctx.input(3).to_int64s();
    if (sz.size() != na) ctx.fail(ErrorCode::InvalidArgument, "sizes has {} values, expected {}", sz.size(), na);
    for (size_t i = 0; i < na; ++i) {
      if (sz[i] < 0) ctx.fail(ErrorCode::InvalidArgument, "sizes must be non-negative");
      if (X0.dim(axes[i]) == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot resize an empty dimension");
      out[axes[i]] = sz[i];
      scale[axes[i]] = static_cast<double>(sz[i]) / static_cast<double>(X0.dim(axes[i]));
    }
    if (policy != "stretch") {
      double s = scale[axes[0]];
      for (auto a : axes) s = policy == "not_larger" ? std::min(s, scale[a]) : std::max(s, scale[a]);
      for (auto a : axes) {
        scale[a] = s;
        out[a] = static_cast<int64_t>(s * static_cast<double>(X0.dim(a)) + 0.5);
      }
    }
  }
  // roi: [starts..., ends...] over `axes` (or all dims).
  std::vector<double> roi_s(static_cast<size_t>(r), 0.0), roi_e(static_cast<size_t>(r), 1.0);
  if (ctm == "tf_crop_and_resize") {
    if (!ctx.has_input(1) || ctx.input(1).numel() == 0)
      ctx.fail(ErrorCode::InvalidArgument, "tf_crop_and_resize needs a roi input");
    auto roi = ctx.input(1).to_doubles();
    if (roi.size() != 2 * na)
      ctx.fail(ErrorCode::InvalidArgument, "roi has {} values, expected {}", roi.size(), 2 * na);
    for (size_t i = 0; i < na; ++i) {
      roi_s[axes[i]] = roi[i];
      roi_e[axes[i]] = roi[na + i];
    }
  }
  // Per dim, per output index: taps (clamped source index, weight) or extrapolate.
  std::vector<std::vector<std::vector<Tap>>> taps(static_cast<size_t>(r));
  std::vector<std::vector<char>> extrap(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const int64_t in = X0.dim(d), on = out[d];
    const double s = scale[d];
    const double ow = s * static_cast<double>(in);  // the float output width the spec uses
    // align_corners and pytorch_half_pixel divide by the integer output length, as ONNX Runtime
    // and torch do (x * (in - 1) / (on - 1)): with a scale whose product is not whole (x1.5 of 7)
    // the float width moves every sample. ONNX's two downsample align_corners node cases use the
    // float width (tests/conformance/expected_failures.txt).
    const double onl = static_cast<double>(on);
    taps[d].resize(static_cast<size_t>(on));
    extrap[d].assign(static_cast<size_t>(on), 0);
    for (int64_t x = 0; x < on; ++x) {
      double xd = static_cast<double>(x), xo;
      if (ctm == "align_corners") xo = on == 1 ? 0.0 : xd * static_cast<double>(in - 1) / (onl - 1);
      else if (ctm == "asymmetric") xo = xd / s;
      else if (ctm == "tf_crop_and_resize") {
        double a = roi_s[d], b = roi_e[d];
        xo = ow == 1 ? (b - a) * static_cast<double>(in - 1) / 2 : xd * (b - a) * static_cast<double>(in - 1) / (ow - 1);
        xo += a * static_cast<double>(in - 1);
        if (xo < 0 || xo > static_cast<double>(in - 1)) { extrap[d][x] = 1; continue; }
      } else if (ctm == "pytorch_half_pixel") xo = on == 1 ? 0.0 : (xd + 0.5) / s - 0.5;
      else if (ctm == "half_pixel") xo = (xd + 0.5) / s - 0.5;
      else {  // half_pixel_symmetric
        double adj = static_cast<double>(on) / ow;
        double center = static_cast<double>(in) / 2;
        xo = center * (1 - adj) + (xd + 0.5) / s - 0.5;
      }
      // base = ceil(xo) - 1 so that ratio is in (0, 1].
      double fl = std::floor(xo);
      bool integral = xo == fl;
      int64_t base = integral ? static_cast<int64_t>(fl) - 1 : static_cast<int64_t>(fl);
      double ratio = integral ? 1.0 : xo - fl;
      std::vector<Tap> tv;
      if (mode == "nearest") {
        bool up;
        if (integral) up = true;
        else if (nearest_mode == "round_prefer_floor") up = ratio > 0.5;
        else if (nearest_mode == "round_prefer_ceil") up = ratio >= 0.5;
        else if (nearest_mode == "floor") up = false;
        else up = true;
        tv.push_back({up ? base + 1 : base, 1.0});
      } else if (!antialias) {
        if (mode == "linear") {
          tv.push_back({base, 1 - ratio});
          tv.push_back({base + 1, ratio});
        } else {
          for (int k = -1; k <= 2; ++k) tv.push_back({base + k, cubic_w(ratio - k, A)});
        }
      } else {
        double sc = std::min(s, 1.0);
        if (mode == "linear") {
          int64_t start = static_cast<int64_t>(std::floor(-1 / sc)) + 1, fp = 2 - 2 * start;
          for (int64_t i = start; i < start + fp; ++i)
            tv.push_back({base + i, std::clamp(1 - std::fabs((static_cast<double>(i) - ratio) * sc), 0.0, 1.0)});
        } else {
          int64_t start = static_cast<int64_t>(std::floor(-2 / sc)) + 1, end = 2 - start;
          for (int64_t i = start; i < end; ++i) tv.push_back({base + i, cubic_w(sc * (static_cast<double>(i) - ratio), A)});
        }
        double sum = 0;
        for (auto& t : tv) sum += t.w;
        for (auto& t : tv) t.w /= sum;
      }
      if (exclude_outside && mode != "nearest") {
        double sum = 0;
        for (auto& t : tv) {
          if (t.idx < 0 || t.idx >= in) t.w = 0;
          sum += t.w;
        }
        for (auto& t : tv) t.w /= sum;
      }
      std::vector<Tap> kept;
      for (auto& t : tv) {
        if (t.w == 0) continue;
        kept.push_back({std::clamp<int64_t>(t.idx, 0, in - 1), t.w});
      }
      taps[d][x] = std::move(kept);
    }
  }
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  auto strides = contiguous_strides(X0.shape());
  dispatch_numeric(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), out);
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    int64_t total = Y.numel();
    if (total == 0) { ctx.set_output(0, narrow_to(Y, dt)); return; }
    int64_t inner = out[r - 1], outer = total / std::max<int64_t>(inner, 1);
    parallel_for(ctx.threads, outer, 16, [&](int64_t o0, int64_t o1) {
      std::vector<int64_t> o(static_cast<size_t>(r));
      // Recursive separable sum: innermost dim first, as the reference nests it.
      auto eval = [&](auto&& self, int64_t d, int64_t off) -> double {
        if (d == r) return static_cast<double>(x[off]);
        double acc = 0;
        for (const Tap& t : taps[d][o[d]]) acc += t.w * self(self, d + 1, off + t.idx * strides[d]);
        return acc;
      };
      for (int64_t q = o0; q < o1; ++q) {
        int64_t rem = q;
        for (int64_t d = r - 2; d >= 0; --d) { o[d] = rem % out[d]; rem /= out[d]; }
        bool ex = false;
        for (int64_t d = 0; d < r - 1; ++d) ex = ex || extrap[d][o[d]];
        for (int64_t j = 0; j < inner; ++j) {
          o[r - 1] = j;
          double v = (ex || extrap[r - 1][j]) ? extrapolation : eval(eval, 0, 0);
          y[q * inner + j] = from_double<T>(v);
        }
      }
    });
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// ---- GridSample ----
void grid_sample_kernel(KernelContext& ctx) {
  const Tensor& X0 = ctx.input(0);
  const Tensor& G0 = ctx.input(1);
  std::string mode = ctx.node.get_string("mode", "linear");
  std::string pmode = ctx.node.get_string("padding_mode", "zeros");
  bool ac = ctx.node.get_int("align_corners", 0) != 0;
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "linear" && mode != "nearest" && mode != "cubic")
    ctx.fail(ErrorCode::InvalidArgument, "unknown mode '{}'", mode);
  if (pmode != "zeros" && pmode != "border" && pmode != "reflection")
    ctx.fail(ErrorCode::InvalidArgument, "unknown padding_mode '{}'", pmode);
  const int64_t nd = X0.rank() - 2;
  if (nd < 1 || G0.rank() != nd + 2 || G0.dim(0) != X0.dim(0) || G0.dim(-1) != nd)
    ctx.fail(ErrorCode::InvalidArgument, "X {} and grid {} are inconsistent (grid must be [N, out..., {}])",
             X0.shape_string(), G0.shape_string(), nd);
  int64_t N = X0.dim(0), C = X0.dim(1);
  std::vector<int64_t> dims(X0.shape().begin() + 2, X0.shape().end());
  std::vector<int64_t> outd(G0.shape().begin() + 1, G0.shape().end() - 1);
  std::vector<int64_t> yshape{N, C};
  yshape.insert(yshape.end(), outd.begin(), outd.end());
  for (auto v : dims)
    if (v == 0) ctx.fail(ErrorCode::InvalidArgument, "X has an empty spatial dimension");
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  Tensor Gd = widen(G0).contiguous();
  if (Gd.dtype() != X.dtype()) Gd = Gd.cast(X.dtype());
  const GridSampleMode gm{mode == "nearest" ? 0 : mode == "linear" ? 1 : 2,
                          pmode == "zeros" ? 0 : pmode == "border" ? 1 : 2, ac};
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(X.dtype(), yshape);
    grid_sample_points<T>(X.data<T>(), Gd.data<T>(), Y.data<T>(), N, C, dims, outd, gm,
                          [&](int64_t count, auto&& range) { parallel_for(ctx.threads, count, 16, range); });
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

// ---- AffineGrid ----
void affine_grid_kernel(KernelContext& ctx) {
  const Tensor& T0 = ctx.input(0);
  auto size = ctx.input(1).to_int64s();
  bool ac = ctx.node.get_int("align_corners", 0) != 0;
  if (size.size() != 4 && size.size() != 5)
    ctx.fail(ErrorCode::InvalidArgument, "size must have 4 or 5 values, got {}", size.size());
  int64_t nd = static_cast<int64_t>(size.size()) - 2, N = size[0];
  if (T0.rank() != 3 || T0.dim(0) != N || T0.dim(1) != nd || T0.dim(2) != nd + 1)
    ctx.fail(ErrorCode::InvalidArgument, "theta {} must be [{}, {}, {}]", T0.shape_string(), N, nd, nd + 1);
  std::vector<int64_t> sp(size.begin() + 2, size.end());
  for (auto v : sp)
    if (v <= 0) ctx.fail(ErrorCode::InvalidArgument, "size must be positive");
  std::vector<int64_t> yshape{N};
  yshape.insert(yshape.end(), sp.begin(), sp.end());
  yshape.push_back(nd);
  DType dt = T0.dtype();
  Tensor Th = widen(T0).contiguous();
  dispatch_float(ctx, Th.dtype(), [&]<typename T>() {
    Tensor Y = Tensor::empty(Th.dtype(), yshape);
    const T* th = Th.data<T>();
    T* y = Y.data<T>();
    auto lin = [&](int64_t i, int64_t n) -> T {
      if (ac) return n == 1 ? T(0) : static_cast<T>(-1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1));
      return static_cast<T>((2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0);
    };
    int64_t outs = 1;
    for (auto v : sp) outs *= v;
    std::vector<int64_t> idx(nd);
    std::vector<T> base(nd + 1);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < outs; ++p) {
        int64_t rem = p;
        for (int64_t d = nd - 1; d >= 0; --d) { idx[d] = rem % sp[d]; rem /= sp[d]; }
        // base = (x, y[, z], 1) with x the last spatial dim.
        for (int64_t k = 0; k < nd; ++k) base[k] = lin(idx[nd - 1 - k], sp[nd - 1 - k]);
        base[nd] = T(1);
        const T* tn = th + n * nd * (nd + 1);
        for (int64_t j = 0; j < nd; ++j) {
          T acc = 0;
          for (int64_t k = 0; k <= nd; ++k) acc += base[k] * tn[j * (nd + 1) + k];
          y[(n * outs + p) * nd + j] = acc;
        }
      }
    ctx.set_output(0, narrow_to(Y, dt));
  });
}

}  // namespace

void register_nn_resize_ops(OpTable& t) {
  t.add("", "Resize", resize_kernel);
  t.add("", "GridSample", grid_sample_kernel);
  t.add("", "AffineGrid", affine_grid_kernel);
}

}  // namespace hodu::interp
