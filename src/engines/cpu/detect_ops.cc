// The postprocess ops of object detectors: NonMaxSuppression and RoiAlign (f32), in ONNX
// Runtime's arithmetic (float, the same sample positions and comparisons) so that the boxes a
// detector keeps are the ones ORT keeps. The interpreter's kernels (nn_misc.cc, nn_pool.cc)
// are the reference; these differ in precomputing each batch's box corners and areas once,
// running the (batch, class) pairs of NMS and the regions of RoiAlign on the engine's threads,
// and reading the thresholds at run time (constants or computed scalars alike).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engines/cpu/tensor_step.h"

namespace hodu::cpu {
namespace {

// ---- NonMaxSuppression ----
// Output rows [batch, class, box]: per batch, per class, the kept boxes by score descending
// (ties: the lower index first), a box kept when its IoU with every box kept before it is at
// most iou_threshold. A box with a zero-area or empty intersection never suppresses.
class NmsStep : public TensorStep {
 public:
  explicit NmsStep(bool center) : center_(center) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor &boxes = *in[0], &scores = *in[1];
    if (boxes.rank() != 3 || boxes.dim(2) != 4)
      fail(ErrorCode::InvalidArgument, "{}: boxes must be [batch, spatial, 4], got {}", label, boxes.shape_string());
    if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
      fail(ErrorCode::InvalidArgument, "{}: scores {} must be [batch, classes, {}]", label, scores.shape_string(),
           boxes.dim(1));
    auto scalar = [&](size_t i) { return in.size() > i && in[i] && in[i]->numel() > 0 ? in[i] : nullptr; };
    const Tensor *max_t = scalar(2), *iou_t = scalar(3), *score_t = scalar(4);
    const int64_t B = boxes.dim(0), S = boxes.dim(1), K = scores.dim(1);
    const int64_t max_out = max_t ? std::min<int64_t>(max_t->get_int64(0), S) : 0;
    const float iou_th = iou_t ? static_cast<float>(iou_t->get_double(0)) : 0.0f;
    const float score_th = score_t ? static_cast<float>(score_t->get_double(0)) : 0.0f;
    std::vector<std::vector<int64_t>> kept(static_cast<size_t>(B * K));
    if (max_out > 0 && S > 0) {
      // Corners (y1, x1, y2, x2), min/max ordered, and areas of every box of every batch.
      corners_.resize(static_cast<size_t>(B * S));
      area_.resize(static_cast<size_t>(B * S));
      const float* bx = boxes.data<float>();
      for (int64_t i = 0; i < B * S; ++i) {
        const float* p = bx + i * 4;
        Corners& c = corners_[static_cast<size_t>(i)];
        if (center_) {
          const float hw = p[2] / 2, hh = p[3] / 2;
          c = {p[1] - hh, p[0] - hw, p[1] + hh, p[0] + hw};
        } else {
          c = {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
        }
        area_[static_cast<size_t>(i)] = (c.y2 - c.y1) * (c.x2 - c.x1);
      }
      // A kept box c can overlap a only if c.x1 lies in (a.x1 - widest, a.x2). Kept boxes go
      // into cells of x1 at least `reach` wide, so a candidate is tested against the kept boxes
      // of the cells that window spans only (torchvision's batched NMS offsets each class by the
      // largest coordinate: a window then holds about one class). NaN or infinite coordinates
      // take the plain scan.
      bool finite = true;
      float widest = 0, xmin = INFINITY, xmax = -INFINITY;
      for (int64_t i = 0; i < B * S; ++i) {
        const Corners& c = corners_[static_cast<size_t>(i)];
        finite &= std::isfinite(c.x1) && std::isfinite(c.x2) && std::isfinite(c.y1) && std::isfinite(c.y2);
        widest = std::max(widest, c.x2 - c.x1);
        xmin = std::min(xmin, c.x1);
        xmax = std::max(xmax, c.x1);
      }
      const double reach = static_cast<double>(widest) * (1 + 1e-6) + 1e-30;
      const double cell_w = finite ? std::max(reach, (static_cast<double>(xmax) - xmin) / static_cast<double>(S)) : 1;
      const int64_t cells = finite ? static_cast<int64_t>((static_cast<double>(xmax) - xmin) / cell_w) + 1 : 1;
      auto cell_of = [&](double x) {
        return std::clamp<int64_t>(static_cast<int64_t>(std::floor((x - xmin) / cell_w)), 0, cells - 1);
      };
      const float* sc = scores.data<float>();
      const int64_t work = B * K * S;
      parallel_for(B * K, work >= 4096 ? rs.threads : 1, [&](int64_t bk) {
        const int64_t b = bk / K;
        const float* s = sc + bk * S;
        const Corners* cb = corners_.data() + b * S;
        const float* ab = area_.data() + b * S;
        std::vector<int64_t> cand;
        cand.reserve(static_cast<size_t>(S));
        for (int64_t i = 0; i < S; ++i)
          if (!score_t || s[i] > score_th) cand.push_back(i);
        std::stable_sort(cand.begin(), cand.end(), [&](int64_t i, int64_t j) { return s[i] > s[j]; });
        std::vector<int64_t>& k = kept[static_cast<size_t>(bk)];
        std::vector<int64_t> head, next;  // per cell, the kept boxes as a linked list
        if (finite) {
          head.assign(static_cast<size_t>(cells), -1);
          next.resize(static_cast<size_t>(S));
        }
        auto suppressed_by = [&](int64_t i, int64_t j) {
          const Corners &a = cb[i], &c = cb[j];
          const float ix1 = std::max(a.x1, c.x1), ix2 = std::min(a.x2, c.x2);
          if (ix2 <= ix1) return false;
          const float iy1 = std::max(a.y1, c.y1), iy2 = std::min(a.y2, c.y2);
          if (iy2 <= iy1) return false;
          const float inter = (ix2 - ix1) * (iy2 - iy1);
          const float uni = ab[i] + ab[j] - inter;
          if (inter <= 0 || ab[i] <= 0 || ab[j] <= 0 || uni <= 0) return false;
          return inter / uni > iou_th;
        };
        for (int64_t i : cand) {
          if (static_cast<int64_t>(k.size()) >= max_out) break;
          bool ok = true;
          if (finite) {
            const Corners& a = cb[i];
            const int64_t c1 = cell_of(a.x2);
            for (int64_t c = cell_of(a.x1 - reach); ok && c <= c1; ++c)
              for (int64_t j = head[static_cast<size_t>(c)]; j >= 0; j = next[static_cast<size_t>(j)])
                if (suppressed_by(i, j)) {
                  ok = false;
                  break;
                }
            if (ok) {
              const size_t c = static_cast<size_t>(cell_of(a.x1));
              next[static_cast<size_t>(i)] = head[c];
              head[c] = i;
            }
          } else {
            for (int64_t j : k)
              if (suppressed_by(i, j)) {
                ok = false;
                break;
              }
          }
          if (ok) k.push_back(i);
        }
      });
    }
    int64_t n = 0;
    for (const auto& k : kept) n += static_cast<int64_t>(k.size());
    Tensor& y = out(rs, 0, DType::I64, {n, 3});
    int64_t* o = y.data<int64_t>();
    for (int64_t bk = 0; bk < B * K; ++bk)
      for (int64_t i : kept[static_cast<size_t>(bk)]) {
        *o++ = bk / K;
        *o++ = bk % K;
        *o++ = i;
      }
  }

 private:
  struct Corners {
    float y1, x1, y2, x2;
  };
  bool center_;
  std::vector<Corners> corners_;
  std::vector<float> area_;
};

// ---- RoiAlign ----
// Y[r, c, ph, pw]: the average (or ORT's max of weighted taps) of gh x gw bilinear samples of
// bin (ph, pw) of region r in X[batch_indices[r], c]. Work is split into (region, channel
// range) tasks; each computes its region's sample taps once for its channels.
class RoiAlignStep : public TensorStep {
 public:
  RoiAlignStep(bool half_pixel, bool is_max, int64_t oh, int64_t ow, int64_t sr, float scale)
      : half_(half_pixel), max_(is_max), oh_(oh), ow_(ow), sr_(sr), scale_(scale) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor &X = *in[0], &R0 = *in[1], &BI = *in[2];
    if (X.rank() != 4) fail(ErrorCode::InvalidArgument, "{}: X must be 4-D, got {}", label, X.shape_string());
    if (R0.rank() != 2 || R0.dim(1) != 4)
      fail(ErrorCode::InvalidArgument, "{}: rois must be [num_rois, 4], got {}", label, R0.shape_string());
    if (BI.rank() != 1 || BI.dim(0) != R0.dim(0))
      fail(ErrorCode::InvalidArgument, "{}: batch_indices {} must be [{}]", label, BI.shape_string(), R0.dim(0));
    const int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3), R = R0.dim(0);
    const auto bidx = BI.to_int64s();
    for (int64_t r = 0; r < R; ++r)
      if (bidx[r] < 0 || bidx[r] >= N)
        fail(ErrorCode::InvalidArgument, "{}: batch index {} of roi {} is out of range [0, {})", label, bidx[r], r, N);
    Tensor& Yt = out(rs, 0, DType::F32, {R, C, oh_, ow_});
    if (Yt.numel() == 0) return;
    const float* x = X.data<float>();
    const float* rois = R0.data<float>();
    float* y = Yt.data<float>();
    const int threads = rs.threads;
    // Channel chunks per region: enough tasks for the threads when regions are few.
    const int64_t chunks = std::min<int64_t>(C, std::max<int64_t>(1, (4 * threads + R - 1) / R));
    const int64_t bins = oh_ * ow_;
    parallel_for(R * chunks, threads, [&](int64_t task) {
      const int64_t r = task / chunks, q = task % chunks;
      const int64_t c0 = C * q / chunks, c1 = C * (q + 1) / chunks;
      thread_local std::vector<Sample> samples;
      const float off = half_ ? 0.5f : 0.0f;
      const float* roi = rois + r * 4;
      const float sw = roi[0] * scale_ - off, sh = roi[1] * scale_ - off;
      const float ew = roi[2] * scale_ - off, eh = roi[3] * scale_ - off;
      float rw = ew - sw, rh = eh - sh;
      if (!half_) {
        rw = std::max(rw, 1.0f);
        rh = std::max(rh, 1.0f);
      }
      const float bh = rh / static_cast<float>(oh_), bw = rw / static_cast<float>(ow_);
      const int64_t gh = std::max<int64_t>(0, sr_ > 0 ? sr_ : static_cast<int64_t>(std::ceil(rh / oh_)));
      const int64_t gw = std::max<int64_t>(0, sr_ > 0 ? sr_ : static_cast<int64_t>(std::ceil(rw / ow_)));
      const int64_t per = gh * gw;
      const float count = static_cast<float>(std::max<int64_t>(per, 1));
      samples.clear();
      samples.reserve(static_cast<size_t>(bins * per));
      for (int64_t ph = 0; ph < oh_; ++ph)
        for (int64_t pw = 0; pw < ow_; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy) {
            const float yy = sh + ph * bh + static_cast<float>(iy + 0.5f) * bh / static_cast<float>(gh);
            for (int64_t ix = 0; ix < gw; ++ix) {
              const float xx = sw + pw * bw + static_cast<float>(ix + 0.5f) * bw / static_cast<float>(gw);
              samples.push_back(tap(yy, xx, H, W));
            }
          }
      float* yr = y + r * C * bins;
      for (int64_t c = c0; c < c1; ++c) {
        const float* xp = x + (bidx[r] * C + c) * H * W;
        float* yc = yr + c * bins;
        const Sample* sm = samples.data();
        for (int64_t b = 0; b < bins; ++b, sm += per) {
          float acc = 0;
          if (max_) {
            for (int64_t s = 0; s < per; ++s) {
              const Sample& t = sm[s];
              const float v = std::max(std::max(std::max(t.w[0] * xp[t.p[0]], t.w[1] * xp[t.p[1]]), t.w[2] * xp[t.p[2]]),
                                       t.w[3] * xp[t.p[3]]);
              acc = s == 0 ? v : std::max(acc, v);
            }
            yc[b] = acc;
          } else {
            for (int64_t s = 0; s < per; ++s) {
              const Sample& t = sm[s];
              acc += t.w[0] * xp[t.p[0]] + t.w[1] * xp[t.p[1]] + t.w[2] * xp[t.p[2]] + t.w[3] * xp[t.p[3]];
            }
            yc[b] = acc / count;
          }
        }
      }
    });
  }

 private:
  struct Sample {
    int64_t p[4];
    float w[4];
  };
  // The bilinear taps of (yy, xx): zero weights outside [-1, H] x [-1, W], edges clamped.
  static Sample tap(float yy, float xx, int64_t H, int64_t W) {
    if (yy < -1.0f || yy > static_cast<float>(H) || xx < -1.0f || xx > static_cast<float>(W)) return {{0, 0, 0, 0}, {0, 0, 0, 0}};
    float yv = std::max(yy, 0.0f), xv = std::max(xx, 0.0f);
    int64_t yl = static_cast<int64_t>(yv), xl = static_cast<int64_t>(xv), yh, xh;
    if (yl >= H - 1) {
      yh = yl = H - 1;
      yv = static_cast<float>(yl);
    } else {
      yh = yl + 1;
    }
    if (xl >= W - 1) {
      xh = xl = W - 1;
      xv = static_cast<float>(xl);
    } else {
      xh = xl + 1;
    }
    const float ly = yv - static_cast<float>(yl), lx = xv - static_cast<float>(xl), hy = 1 - ly, hx = 1 - lx;
    return {{yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh}, {hy * hx, hy * lx, ly * hx, ly * lx}};
  }
  bool half_, max_;
  int64_t oh_, ow_, sr_;
  float scale_;
};

}  // namespace

bool make_detect_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  if (n.op_type == "NonMaxSuppression") {
    const int64_t cpb = n.get_int("center_point_box", 0);
    // Other dtypes and center_point_box values get the interpreter's kernel (and its error).
    if (n.inputs.size() < 2 || (cpb != 0 && cpb != 1) || dtype_of(b, n.inputs[0]) != DType::F32 ||
        dtype_of(b, n.inputs[1]) != DType::F32)
      return false;
    add_tensor_step(b, n, std::make_unique<NmsStep>(cpb == 1), {DType::I64}, "non-max suppression");
    return true;
  }
  if (n.op_type == "RoiAlign") {
    const std::string ctm = n.get_string("coordinate_transformation_mode", "half_pixel");
    const std::string mode = n.get_string("mode", "avg");
    const int64_t oh = n.get_int("output_height", 1), ow = n.get_int("output_width", 1);
    const int64_t sr = n.get_int("sampling_ratio", 0);
    if ((ctm != "half_pixel" && ctm != "output_half_pixel") || (mode != "avg" && mode != "max") || oh <= 0 ||
        ow <= 0 || sr < 0 || n.inputs.size() != 3 || dtype_of(b, n.inputs[0]) != DType::F32 ||
        dtype_of(b, n.inputs[1]) != DType::F32 || !dtype_is_integer(dtype_of(b, n.inputs[2])))
      return false;
    add_tensor_step(b, n,
                    std::make_unique<RoiAlignStep>(ctm == "half_pixel", mode == "max", oh, ow, sr,
                                                   n.get_float("spatial_scale", 1.0f)),
                    {DType::F32}, "roi align");
    return true;
  }
  return false;
}

}  // namespace hodu::cpu
