// Resize (opset 19 semantics: every mode, nearest_mode, coordinate_transformation_mode,
// antialias, exclude_outside, keep_aspect_ratio_policy, axes; scales or sizes), N-D.
// The per-dim source taps are the interpreter's (nn_resize.cc), built when the input shape or
// the scales/sizes/roi values change. nearest is an index gather of any dtype, where a row of
// the output whose source row is the previous one's is a copy of it (integer upsampling, the
// FPN necks of detection models). linear and cubic (f32) run separably, one pass per resized
// dim, the last dim first, each pass a weighted sum of whole rows, so the work is the taps times
// the output size instead of the interpreter's product of the taps of every dim. GridSample
// (f32) runs the interpreter's sampling loop (grid_sample.h) split over the engine's threads.
#include <cmath>
#include <cstring>

#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "engines/cpu/tensor_step.h"
#include "engines/interp/ops/grid_sample.h"
#include "kernels/cpu/blocked_layout.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

double cubic_w(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

struct Attrs {
  std::string mode, ctm, nearest_mode, policy;
  double A = -0.75, extrapolation = 0;
  bool exclude_outside = false, antialias = false;
  std::vector<int64_t> axes;
};

// One dim's taps: for output index o, taps [begin[o], begin[o+1]) of (idx, w); extrap[o] when the
// coordinate falls outside the roi (tf_crop_and_resize).
struct DimTaps {
  std::vector<int64_t> begin, idx;
  std::vector<float> w;
  std::vector<uint8_t> extrap;
  bool identity = false;
};

class ResizeStep : public TensorStep {
 public:
  ResizeStep(DType dt, Attrs a) : dt_(dt), a_(std::move(a)) {
    fill_ = Tensor::scalar<float>(DType::F32, static_cast<float>(a_.extrapolation));
    if (dt_ != DType::F32 && dtype_is_float(dt_)) fill_ = fill_.cast(dt_);
  }

  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    std::vector<double> roi, scales;
    std::vector<int64_t> sizes;
    if (in.size() > 1 && in[1]) roi = in[1]->to_doubles();
    if (in.size() > 2 && in[2]) scales = in[2]->to_doubles();
    if (in.size() > 3 && in[3]) sizes = in[3]->to_int64s();
    if (!ready_ || x.shape() != x_shape_ || roi != roi_ || scales != scales_ || sizes != sizes_) {
      plan(x.shape(), roi, scales, sizes);
      x_shape_ = x.shape();
      roi_ = roi;
      scales_ = scales;
      sizes_ = sizes;
      ready_ = true;
    }
    Tensor& y = out(rs, 0, dt_, out_shape_);
    if (y.numel() == 0) return;
    if (a_.mode == "nearest") {
      gather_by_tables(rs.threads, x, y, nearest_, dtype_is_float(dt_) ? fill_.raw_data() : nullptr);
      return;
    }
    run_separable(rs, x.data<float>(), y.data<float>());
  }

  // The output shape and per-dim nearest source tables (-1: extrapolated) for input shape `xs`
  // and these roi/scales/sizes values: what a nearest run would use.
  std::pair<std::vector<int64_t>, std::vector<std::vector<int64_t>>> nearest_tables(
      const std::vector<int64_t>& xs, const std::vector<double>& roi, const std::vector<double>& scales,
      const std::vector<int64_t>& sizes) {
    plan(xs, roi, scales, sizes);
    return {out_shape_, nearest_};
  }

 private:
  void plan(const std::vector<int64_t>& xs, const std::vector<double>& roi_in, const std::vector<double>& sc,
            const std::vector<int64_t>& sz) {
    const int64_t r = static_cast<int64_t>(xs.size());
    std::vector<int64_t> axes = a_.axes;
    if (axes.empty())
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (auto& ax : axes) {
      auto na = norm_axis(ax, r);
      if (!na || seen[static_cast<size_t>(*na)])
        fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range or repeated", label, ax);
      ax = *na;
      seen[static_cast<size_t>(ax)] = true;
    }
    const size_t na = axes.size();
    std::vector<double> scale(static_cast<size_t>(r), 1.0);
    out_shape_ = xs;
    const bool has_scales = !sc.empty(), has_sizes = !sz.empty();
    if (has_scales == has_sizes)
      fail(ErrorCode::InvalidArgument, "{}: exactly one of 'scales' and 'sizes' must be given", label);
    if (has_scales) {
      if (sc.size() != na) fail(ErrorCode::InvalidArgument, "{}: scales has {} values, expected {}", label, sc.size(), na);
      for (size_t i = 0; i < na; ++i) {
        if (!(sc[i] > 0)) fail(ErrorCode::InvalidArgument, "{}: scales must be positive, got {}", label, sc[i]);
        const size_t d = static_cast<size_t>(axes[i]);
        scale[d] = static_cast<double>(static_cast<float>(sc[i]));
        out_shape_[d] = static_cast<int64_t>(std::floor(scale[d] * static_cast<double>(xs[d])));
      }
    } else {
      if (sz.size() != na) fail(ErrorCode::InvalidArgument, "{}: sizes has {} values, expected {}", label, sz.size(), na);
      for (size_t i = 0; i < na; ++i) {
        const size_t d = static_cast<size_t>(axes[i]);
        if (sz[i] < 0) fail(ErrorCode::InvalidArgument, "{}: sizes must be non-negative", label);
        if (xs[d] == 0) fail(ErrorCode::InvalidArgument, "{}: cannot resize an empty dimension", label);
        out_shape_[d] = sz[i];
        scale[d] = static_cast<double>(sz[i]) / static_cast<double>(xs[d]);
      }
      if (a_.policy != "stretch") {
        double s = scale[static_cast<size_t>(axes[0])];
        for (auto ax : axes) s = a_.policy == "not_larger" ? std::min(s, scale[ax]) : std::max(s, scale[ax]);
        for (auto ax : axes) {
          scale[ax] = s;
          out_shape_[ax] = static_cast<int64_t>(s * static_cast<double>(xs[ax]) + 0.5);
        }
      }
    }
    std::vector<double> roi_s(static_cast<size_t>(r), 0.0), roi_e(static_cast<size_t>(r), 1.0);
    if (a_.ctm == "tf_crop_and_resize") {
      if (roi_in.size() != 2 * na)
        fail(ErrorCode::InvalidArgument, "{}: roi has {} values, expected {}", label, roi_in.size(), 2 * na);
      for (size_t i = 0; i < na; ++i) {
        roi_s[static_cast<size_t>(axes[i])] = roi_in[i];
        roi_e[static_cast<size_t>(axes[i])] = roi_in[na + i];
      }
    }
    taps_.assign(static_cast<size_t>(r), {});
    nearest_.assign(static_cast<size_t>(r), {});
    for (int64_t d = 0; d < r; ++d) plan_dim(taps_[static_cast<size_t>(d)], nearest_[static_cast<size_t>(d)], xs[d],
                                              out_shape_[d], scale[d], roi_s[d], roi_e[d]);
    if (a_.mode != "nearest") plan_passes(xs);
  }

  // The interpreter's taps for one dim (nn_resize.cc), and the nearest table (-1: extrapolate).
  void plan_dim(DimTaps& t, std::vector<int64_t>& nearest, int64_t in, int64_t on, double s, double roi_s,
                double roi_e) {
    const double ow = s * static_cast<double>(in);
    const std::string& ctm = a_.ctm;
    t.begin.assign(1, 0);
    t.idx.clear();
    t.w.clear();
    t.extrap.assign(static_cast<size_t>(on), 0);
    nearest.assign(static_cast<size_t>(on), 0);
    std::vector<std::pair<int64_t, double>> tv;
    bool identity = in == on;
    for (int64_t x = 0; x < on; ++x) {
      const double xd = static_cast<double>(x);
      double xo;
      bool ex = false;
      // align_corners, pytorch_half_pixel: the integer output length, as the interpreter (nn_resize.cc).
      if (ctm == "align_corners") xo = on == 1 ? 0.0 : xd * static_cast<double>(in - 1) / static_cast<double>(on - 1);
      else if (ctm == "asymmetric") xo = xd / s;
      else if (ctm == "tf_crop_and_resize") {
        xo = ow == 1 ? (roi_e - roi_s) * static_cast<double>(in - 1) / 2
                     : xd * (roi_e - roi_s) * static_cast<double>(in - 1) / (ow - 1);
        xo += roi_s * static_cast<double>(in - 1);
        ex = xo < 0 || xo > static_cast<double>(in - 1);
      } else if (ctm == "pytorch_half_pixel") xo = on == 1 ? 0.0 : (xd + 0.5) / s - 0.5;
      else if (ctm == "half_pixel") xo = (xd + 0.5) / s - 0.5;
      else {
        const double adj = static_cast<double>(on) / ow, center = static_cast<double>(in) / 2;
        xo = center * (1 - adj) + (xd + 0.5) / s - 0.5;
      }
      tv.clear();
      if (ex) {
        t.extrap[static_cast<size_t>(x)] = 1;
        nearest[static_cast<size_t>(x)] = -1;
        identity = false;
        t.begin.push_back(static_cast<int64_t>(t.idx.size()));
        continue;
      }
      const double fl = std::floor(xo);
      const bool integral = xo == fl;
      const int64_t base = integral ? static_cast<int64_t>(fl) - 1 : static_cast<int64_t>(fl);
      const double ratio = integral ? 1.0 : xo - fl;
      if (a_.mode == "nearest") {
        bool up;
        if (integral) up = true;
        else if (a_.nearest_mode == "round_prefer_floor") up = ratio > 0.5;
        else if (a_.nearest_mode == "round_prefer_ceil") up = ratio >= 0.5;
        else if (a_.nearest_mode == "floor") up = false;
        else up = true;
        tv.push_back({up ? base + 1 : base, 1.0});
      } else if (!a_.antialias) {
        if (a_.mode == "linear") {
          tv.push_back({base, 1 - ratio});
          tv.push_back({base + 1, ratio});
        } else {
          for (int k = -1; k <= 2; ++k) tv.push_back({base + k, cubic_w(ratio - k, a_.A)});
        }
      } else {
        const double sc = std::min(s, 1.0);
        if (a_.mode == "linear") {
          const int64_t start = static_cast<int64_t>(std::floor(-1 / sc)) + 1, fp = 2 - 2 * start;
          for (int64_t i = start; i < start + fp; ++i)
            tv.push_back({base + i, std::clamp(1 - std::fabs((static_cast<double>(i) - ratio) * sc), 0.0, 1.0)});
        } else {
          const int64_t start = static_cast<int64_t>(std::floor(-2 / sc)) + 1, end = 2 - start;
          for (int64_t i = start; i < end; ++i)
            tv.push_back({base + i, cubic_w(sc * (static_cast<double>(i) - ratio), a_.A)});
        }
        double sum = 0;
        for (auto& p : tv) sum += p.second;
        for (auto& p : tv) p.second /= sum;
      }
      if (a_.exclude_outside && a_.mode != "nearest") {
        double sum = 0;
        for (auto& p : tv) {
          if (p.first < 0 || p.first >= in) p.second = 0;
          sum += p.second;
        }
        for (auto& p : tv) p.second /= sum;
      }
      int64_t kept = 0;
      for (auto& p : tv) {
        if (p.second == 0) continue;
        const int64_t i = std::clamp<int64_t>(p.first, 0, in - 1);
        t.idx.push_back(i);
        t.w.push_back(static_cast<float>(p.second));
        if (a_.mode == "nearest") nearest[static_cast<size_t>(x)] = i;
        identity &= i == x && p.second == 1.0;
        ++kept;
      }
      identity &= kept == 1;
      t.begin.push_back(static_cast<int64_t>(t.idx.size()));
    }
    t.identity = identity;
  }

  // The dims to resize, last first, and the buffers between passes.
  void plan_passes(const std::vector<int64_t>& xs) {
    passes_.clear();
    std::vector<int64_t> cur = xs;
    for (size_t d = xs.size(); d-- > 0;) {
      if (taps_[d].identity) continue;
      Pass p;
      p.dim = d;
      p.in_shape = cur;
      cur[d] = out_shape_[d];
      p.out_shape = cur;
      passes_.push_back(std::move(p));
    }
    size_t biggest = 0;
    for (size_t i = 0; i + 1 < passes_.size(); ++i)
      biggest = std::max<size_t>(biggest, static_cast<size_t>(shape_numel(passes_[i].out_shape)));
    buf_[0].resize(biggest);
    buf_[1].resize(passes_.size() > 2 ? biggest : 0);
  }

  struct Pass {
    size_t dim = 0;
    std::vector<int64_t> in_shape, out_shape;
  };

  void run_separable(RunState& rs, const float* x, float* y) {
    if (passes_.empty()) {
      std::memcpy(y, x, static_cast<size_t>(shape_numel(out_shape_)) * sizeof(float));
      return;
    }
    const float* src = x;
    for (size_t i = 0; i < passes_.size(); ++i) {
      float* dst = i + 1 == passes_.size() ? y : buf_[i % 2].data();
      run_pass(rs, passes_[i], src, dst);
      src = dst;
    }
  }

  // dst[outer, o, inner] = Σ_k w[o][k] · src[outer, idx[o][k], inner].
  void run_pass(RunState& rs, const Pass& p, const float* src, float* dst) {
    const DimTaps& t = taps_[p.dim];
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < p.dim; ++d) outer *= p.in_shape[d];
    for (size_t d = p.dim + 1; d < p.in_shape.size(); ++d) inner *= p.in_shape[d];
    const int64_t in_n = p.in_shape[p.dim], out_n = p.out_shape[p.dim];
    const float ev = static_cast<float>(a_.extrapolation);
    const int64_t* begin = t.begin.data();
    const int64_t* idx = t.idx.data();
    const float* w = t.w.data();
    const uint8_t* ex = t.extrap.data();
    const int threads = outer * out_n * inner >= (1 << 15) ? rs.threads : 1;
    if (inner == 1) {  // along the last dim: taps gathered per element
      parallel_for(outer, threads, [&](int64_t o) {
        const float* s = src + o * in_n;
        float* d = dst + o * out_n;
        for (int64_t j = 0; j < out_n; ++j) {
          if (ex[j]) {
            d[j] = ev;
            continue;
          }
          float acc = 0;
          for (int64_t k = begin[j]; k < begin[j + 1]; ++k) acc += w[k] * s[idx[k]];
          d[j] = acc;
        }
      });
      return;
    }
    parallel_for(outer * out_n, threads, [&](int64_t q) {
      const int64_t o = q / out_n, j = q % out_n;
      float* d = dst + q * inner;
      if (ex[j]) {
        for (int64_t i = 0; i < inner; ++i) d[i] = ev;
        return;
      }
      const float* s = src + o * in_n * inner;
      int64_t k = begin[j];
      const float w0 = w[k];
      const float* r0 = s + idx[k] * inner;
      for (int64_t i = 0; i < inner; ++i) d[i] = w0 * r0[i];
      for (++k; k < begin[j + 1]; ++k) {
        const float wk = w[k];
        const float* rk = s + idx[k] * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] += wk * rk[i];
      }
    });
  }

  DType dt_;
  Attrs a_;
  Tensor fill_;  // extrapolation_value in the input's dtype (floats; tf_crop_and_resize)
  bool ready_ = false;
  std::vector<int64_t> x_shape_, sizes_, out_shape_;
  std::vector<double> roi_, scales_;
  std::vector<DimTaps> taps_;
  std::vector<std::vector<int64_t>> nearest_;
  std::vector<Pass> passes_;
  std::vector<float> buf_[2];
};

// Nearest resize of H and W over a channel-blocked (nChw8c/16c) or nhwc f32 tensor, read and
// written in that layout: each output pixel's vector of channels (a block's, or all of them) is
// its source pixel's, and an output row whose source row is the previous one's is a copy of it.
// FPN necks, YOLO's and super-resolution decoders upsample between convs that use these layouts;
// the plain-layout gather put a reorder on each side (an ESRGAN-style x4 decoder: 10 of 62 ms).
class BlockedNearestResizeStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    const int64_t oh = static_cast<int64_t>(rows_.size()), ow = static_cast<int64_t>(cols_.size());
    const int64_t planes = planes_, v = vec_;
    const size_t row_bytes = static_cast<size_t>(ow * v) * sizeof(float);
    // A task: the output rows of one plane that share a source row (integer upsampling: the
    // first is gathered, the others copy it).
    const int64_t runs = static_cast<int64_t>(run_start_.size()) - 1;
    parallel_for(planes * runs, planes * oh * ow * v >= (1 << 15) ? rs.threads : 1, [&](int64_t t) {
      const int64_t p = t / runs, k = t % runs;
      const int64_t first = run_start_[static_cast<size_t>(k)], last = run_start_[static_cast<size_t>(k + 1)];
      float* yr = y + (p * oh + first) * ow * v;
      const float* xr = x + (p * ih_ + rows_[static_cast<size_t>(first)]) * iw_ * v;
      for (int64_t c = 0; c < ow; ++c) std::memcpy(yr + c * v, xr + cols_[static_cast<size_t>(c)] * v, v * sizeof(float));
      for (int64_t o = first + 1; o < last; ++o) std::memcpy(y + (p * oh + o) * ow * v, yr, row_bytes);
    });
  }
  void set_rows(std::vector<int64_t> rows) {
    rows_ = std::move(rows);
    run_start_.clear();
    for (size_t o = 0; o < rows_.size(); ++o)
      if (o == 0 || rows_[o] != rows_[o - 1]) run_start_.push_back(static_cast<int64_t>(o));
    run_start_.push_back(static_cast<int64_t>(rows_.size()));
  }
  std::vector<int64_t> cols_;
  int64_t planes_ = 0, vec_ = 0, ih_ = 0, iw_ = 0;

 private:
  std::vector<int64_t> rows_, run_start_;  // run_start_: each run of equal source rows, then the end
};

// Resize as BlockedNearestResizeStep where its input is in a blocked layout and its output shape
// is known at plan time (constant scales or sizes).
bool make_blocked_nearest_resize(PlanBuilder& b, const Node& n, const Attrs& a) {
  if (a.mode != "nearest" || a.ctm == "tf_crop_and_resize" || !b.has_slot(n.inputs[0])) return false;
  const int xslot = b.slot(n.inputs[0]);
  const Slot& xs_slot = b.at(xslot);
  if (!xs_slot.blocked || xs_slot.dtype != DType::F32 || !xs_slot.is_static || xs_slot.shape.size() != 4) return false;
  const std::vector<int64_t> xs = xs_slot.shape;
  const auto dims = to_dims(xs);
  const int64_t block = onednn::channel_block(xs_slot.md, dims);
  const bool nhwc = xs_slot.md == dnnl::memory::desc(dims, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
  if (block == 0 && !nhwc) return false;
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
  for (size_t i = 1; i < n.inputs.size() && i < 4; ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor* t = passes::constant_of(b.graph(), n.inputs[i]);
    if (!t) return false;
    if (i == 1) roi = t->to_doubles();
    else if (i == 2) scales = t->to_doubles();
    else sizes = t->to_int64s();
  }
  std::vector<int64_t> ys;
  std::vector<std::vector<int64_t>> tables;
  try {
    ResizeStep probe(DType::F32, a);
    std::tie(ys, tables) = probe.nearest_tables(xs, roi, scales, sizes);
  } catch (const Error&) {
    return false;  // the generic step reports it when it runs
  }
  if (ys.size() != 4 || ys[0] != xs[0] || ys[1] != xs[1] || ys[2] <= 0 || ys[3] <= 0) return false;
  for (size_t d = 2; d < 4; ++d)
    for (int64_t i : tables[d])
      if (i < 0) return false;
  auto step = std::make_unique<BlockedNearestResizeStep>();
  step->set_rows(tables[2]);
  step->cols_ = tables[3];
  step->ih_ = xs[2];
  step->iw_ = xs[3];
  step->vec_ = nhwc ? xs[1] : block;
  step->planes_ = nhwc ? xs[0] : xs[0] * ((xs[1] + block - 1) / block);
  const auto y_md = nhwc ? dnnl::memory::desc(to_dims(ys), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc)
                         : onednn::channel_blocked_md(to_dims(ys), block);
  step->reads = {xslot};
  step->writes = {b.define(n.outputs[0], DType::F32, ys, y_md)};
  step->label = n.describe() + (nhwc ? ": cpu nhwc nearest resize" : ": cpu blocked nearest resize");
  b.add(std::move(step));
  return true;
}

class GridSampleStep : public TensorStep {
 public:
  explicit GridSampleStep(interp::GridSampleMode m) : m_(m) {}
  void configure(const std::vector<const Tensor*>& in) override {
    const Tensor &x = *in[0], &g = *in[1];
    const int64_t nd = x.rank() - 2;
    if (nd < 1 || g.rank() != nd + 2 || g.dim(0) != x.dim(0) || g.dim(-1) != nd)
      fail(ErrorCode::InvalidArgument, "{}: X {} and grid {} are inconsistent (grid must be [N, out..., {}])", label,
           x.shape_string(), g.shape_string(), nd);
    dims_.assign(x.shape().begin() + 2, x.shape().end());
    outd_.assign(g.shape().begin() + 1, g.shape().end() - 1);
    for (auto v : dims_)
      if (v == 0) fail(ErrorCode::InvalidArgument, "{}: X has an empty spatial dimension", label);
    yshape_ = {x.dim(0), x.dim(1)};
    yshape_.insert(yshape_.end(), outd_.begin(), outd_.end());
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    Tensor& y = out(rs, 0, DType::F32, yshape_);
    if (y.numel() == 0) return;
    const int threads = rs.threads;
    interp::grid_sample_points<float>(in[0]->data<float>(), in[1]->data<float>(), y.data<float>(), yshape_[0],
                                      yshape_[1], dims_, outd_, m_, [&](int64_t count, auto&& range) {
                                        const int64_t chunks = std::min<int64_t>(count, 4 * std::max(threads, 1));
                                        parallel_for(chunks, threads, [&](int64_t k) {
                                          range(count * k / chunks, count * (k + 1) / chunks);
                                        });
                                      });
  }

 private:
  interp::GridSampleMode m_;
  std::vector<int64_t> dims_, outd_, yshape_;
};

bool make_grid_sample(PlanBuilder& b, const Node& n) {
  if (n.inputs.size() < 2 || dtype_of(b, n.inputs[0]) != DType::F32 || dtype_of(b, n.inputs[1]) != DType::F32)
    return false;
  std::string mode = n.get_string("mode", "linear"), pad = n.get_string("padding_mode", "zeros");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  // Unknown attribute values get the interpreter's error.
  if ((mode != "nearest" && mode != "linear" && mode != "cubic") ||
      (pad != "zeros" && pad != "border" && pad != "reflection"))
    return false;
  const interp::GridSampleMode m{mode == "nearest" ? 0 : mode == "linear" ? 1 : 2,
                                 pad == "zeros" ? 0 : pad == "border" ? 1 : 2, n.get_int("align_corners", 0) != 0};
  add_tensor_step(b, n, std::make_unique<GridSampleStep>(m), {DType::F32}, "grid sample");
  return true;
}

}  // namespace

bool make_resize(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty()) return false;
  if (n.op_type == "GridSample") return make_grid_sample(b, n);
  if (n.op_type != "Resize") return false;
  Attrs a;
  a.mode = n.get_string("mode", "nearest");
  a.ctm = n.get_string("coordinate_transformation_mode", "half_pixel");
  a.nearest_mode = n.get_string("nearest_mode", "round_prefer_floor");
  a.policy = n.get_string("keep_aspect_ratio_policy", "stretch");
  a.A = n.get_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = n.get_int("exclude_outside", 0) != 0;
  a.extrapolation = n.get_float("extrapolation_value", 0.0f);
  a.antialias = n.get_int("antialias", 0) != 0 && a.mode != "nearest";
  a.axes = n.get_ints("axes");
  // Unknown attribute values get the interpreter's error.
  if (a.mode != "nearest" && a.mode != "linear" && a.mode != "cubic") return false;
  if (a.ctm != "half_pixel" && a.ctm != "half_pixel_symmetric" && a.ctm != "pytorch_half_pixel" &&
      a.ctm != "align_corners" && a.ctm != "asymmetric" && a.ctm != "tf_crop_and_resize")
    return false;
  if (a.nearest_mode != "round_prefer_floor" && a.nearest_mode != "round_prefer_ceil" && a.nearest_mode != "floor" &&
      a.nearest_mode != "ceil")
    return false;
  if (a.policy != "stretch" && a.policy != "not_larger" && a.policy != "not_smaller") return false;
  const DType dt = dtype_of(b, n.inputs[0]);
  auto x = b.static_type(n.inputs[0]);
  if (x && x->second.empty()) return false;
  // nearest moves elements of any dtype; linear/cubic compute in f32 (integer images keep the
  // interpreter's double accumulation and truncation).
  if (a.mode == "nearest" ? !movable_dtype(dt) || (a.ctm == "tf_crop_and_resize" && !dtype_is_float(dt))
                          : dt != DType::F32)
    return false;
  if (dt == DType::F32 && make_blocked_nearest_resize(b, n, a)) return true;
  add_tensor_step(b, n, std::make_unique<ResizeStep>(dt, std::move(a)), {dt}, "resize");
  return true;
}

}  // namespace hodu::cpu
