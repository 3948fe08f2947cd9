// Hand-written backward kernels over rows (plain layout): hodu.SoftmaxGrad,
// hodu.LayerNormGrad and the losses' gradients (SoftmaxCrossEntropyLossGrad,
// NegativeLogLikelihoodLossGrad). Rows split over the threads; LayerNorm's
// dscale/dbias are summed per thread, then added up in thread order, so every
// run gives the same bits.
#include <cmath>

#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"

namespace hodu::cpu {
namespace {

const float* in_f32(RunState& rs, int slot) { return static_cast<const float*>(rs.slots[slot].data()); }
float* out_f32(RunState& rs, int slot) { return static_cast<float*>(rs.slots[slot].data()); }

// dX = Y·(dY − Σ dY·Y) (log: dX = dY − exp(Y)·Σ dY) over an axis of `len`, `inner` apart.
class SoftmaxGradStep : public Step {
 public:
  int64_t outer = 0, len = 0, inner = 0;
  bool log = false;
  void run(RunState& rs) override {
    const float *dy = in_f32(rs, reads[0]), *y = in_f32(rs, reads[1]);
    float* dx = out_f32(rs, writes[0]);
    const int64_t rows = outer * inner;
    parallel_for(rows, rows * len >= 4096 ? rs.threads : 1, [&](int64_t r) {
      const int64_t o = r / inner, i = r % inner, base = o * len * inner + i;
      double s = 0;
      for (int64_t a = 0; a < len; ++a) {
        const int64_t k = base + a * inner;
        s += log ? dy[k] : static_cast<double>(dy[k]) * y[k];
      }
      const float sf = static_cast<float>(s);
      for (int64_t a = 0; a < len; ++a) {
        const int64_t k = base + a * inner;
        dx[k] = log ? dy[k] - std::exp(y[k]) * sf : y[k] * (dy[k] - sf);
      }
    });
  }
};

bool make_softmax_grad(PlanBuilder& b, const Node& n) {
  auto y = b.static_type(n.inputs[1]), dy = b.static_type(n.inputs[0]);
  if (!y || !dy || y->first != DType::F32 || dy->first != DType::F32 || y->second != dy->second) return false;
  const auto& s = y->second;
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t axis = n.get_int("axis", -1);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return false;
  auto step = std::make_unique<SoftmaxGradStep>();
  step->outer = 1;
  step->inner = 1;
  for (int64_t d = 0; d < axis; ++d) step->outer *= s[d];
  for (int64_t d = axis + 1; d < r; ++d) step->inner *= s[d];
  step->len = s[axis];
  step->log = n.get_int("log", 0) != 0;
  step->reads = {b.plain(n.inputs[0]), b.plain(n.inputs[1])};
  step->writes = {b.define(n.outputs[0], DType::F32, s)};
  step->label = n.describe() + ": cpu rows";
  b.add(std::move(step));
  return true;
}

// LayerNormalization's backward over rows of `cols` (rms: no mean):
// dX = σ⁻¹·(g − mean(g) − x̂·mean(g·x̂)), g = dY·scale; dscale = Σ dY·x̂, dbias = Σ dY.
class LayerNormGradStep : public Step {
 public:
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
  bool rms = false, scalar_scale = false;
  int dx = -1, dscale = -1, dbias = -1;  // indices into writes
  std::vector<double> partial;           // per thread: dscale then dbias sums
  void run(RunState& rs) override {
    const float *dy = in_f32(rs, reads[0]), *x = in_f32(rs, reads[1]), *scale = in_f32(rs, reads[2]);
    float* out = dx >= 0 ? out_f32(rs, writes[dx]) : nullptr;
    const int threads = rows * cols >= 8192 ? rs.threads : 1;
    const bool sums = dscale >= 0 || dbias >= 0;
    const size_t per = static_cast<size_t>(2 * cols);
    if (sums) std::fill(partial.begin(), partial.begin() + static_cast<long>(per) * threads, 0.0);
    const int64_t chunk = (rows + threads - 1) / threads;
    parallel_for(threads, threads, [&](int64_t t) {
      double* ps = partial.data() + static_cast<size_t>(t) * per;
      for (int64_t r = t * chunk; r < std::min(rows, (t + 1) * chunk); ++r) {
        const float *xr = x + r * cols, *gr = dy + r * cols;
        double mu = 0, var = 0;
        if (!rms) {
          for (int64_t j = 0; j < cols; ++j) mu += xr[j];
          mu /= static_cast<double>(cols);
        }
        for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        const double inv = 1 / std::sqrt(var / static_cast<double>(cols) + eps);
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < cols; ++j) {
          const double xh = (xr[j] - mu) * inv, g = static_cast<double>(gr[j]) * scale[scalar_scale ? 0 : j];
          mg += g;
          mgx += g * xh;
          if (sums) {
            ps[j] += gr[j] * xh;
            ps[cols + j] += gr[j];
          }
        }
        if (!out) continue;
        mg = rms ? 0 : mg / static_cast<double>(cols);
        mgx /= static_cast<double>(cols);
        float* o = out + r * cols;
        for (int64_t j = 0; j < cols; ++j) {
          const double xh = (xr[j] - mu) * inv;
          o[j] = static_cast<float>(inv * (static_cast<double>(gr[j]) * scale[scalar_scale ? 0 : j] - mg - xh * mgx));
        }
      }
    });
    if (!sums) return;
    float* ds = dscale >= 0 ? out_f32(rs, writes[dscale]) : nullptr;
    float* db = dbias >= 0 ? out_f32(rs, writes[dbias]) : nullptr;
    if (scalar_scale) {
      double a = 0, c = 0;
      for (int t = 0; t < threads; ++t)
        for (int64_t j = 0; j < cols; ++j) {
          a += partial[t * per + j];
          c += partial[t * per + cols + j];
        }
      if (ds) ds[0] = static_cast<float>(a);
      if (db) db[0] = static_cast<float>(c);
      return;
    }
    for (int64_t j = 0; j < cols; ++j) {
      double a = 0, c = 0;
      for (int t = 0; t < threads; ++t) {
        a += partial[t * per + j];
        c += partial[t * per + cols + j];
      }
      if (ds) ds[j] = static_cast<float>(a);
      if (db) db[j] = static_cast<float>(c);
    }
  }
};

bool make_layer_norm_grad(PlanBuilder& b, const Node& n) {
  auto dy = b.static_type(n.inputs[0]), x = b.static_type(n.inputs[1]), sc = b.static_type(n.inputs[2]);
  if (!dy || !x || !sc || dy->first != DType::F32 || x->first != DType::F32 || sc->first != DType::F32 ||
      dy->second != x->second)
    return false;
  const auto& xs = x->second;
  const int64_t r = static_cast<int64_t>(xs.size());
  int64_t axis = n.get_int("axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return false;
  auto step = std::make_unique<LayerNormGradStep>();
  step->rows = shape_numel(std::vector<int64_t>(xs.begin(), xs.begin() + axis));
  step->cols = shape_numel(std::vector<int64_t>(xs.begin() + axis, xs.end()));
  const int64_t sn = shape_numel(sc->second);
  if (sn != step->cols && sn != 1) return false;
  step->scalar_scale = sn == 1 && step->cols != 1;
  step->eps = n.get_float("epsilon", 1e-5f);
  step->rms = n.get_int("rms", 0) != 0;
  step->reads = {b.plain(n.inputs[0]), b.plain(n.inputs[1]), b.plain(n.inputs[2])};
  if (n.has_output(0)) {
    step->dx = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define(n.outputs[0], DType::F32, xs));
  }
  for (size_t o : {size_t{1}, size_t{2}}) {
    if (!n.has_output(o)) continue;
    (o == 1 ? step->dscale : step->dbias) = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define(n.outputs[o], DType::F32, sc->second));
  }
  step->partial.resize(static_cast<size_t>(2 * step->cols * std::max(b.threads(), 1)));
  step->label = n.describe() + ": cpu rows";
  b.add(std::move(step));
  return true;
}

// The losses' gradients: share_i = dY·w[t_i] (÷ Σw for "mean"; dY_i·w[t_i] for "none"), 0 where
// t_i is ignore_index; SoftmaxCrossEntropyLossGrad: dX = share·(exp(log_prob) − onehot(t)),
// NegativeLogLikelihoodLossGrad: dX = −share at t.
class LossGradStep : public Step {
 public:
  bool softmax = true, none = false, mean = false, has_ignore = false, has_weight = false;
  int64_t ignore = 0, N = 0, C = 0, Dn = 0;
  DType target_dtype = DType::I64;
  std::string what;
  std::vector<float> share;
  void run(RunState& rs) override {
    const float *dy = in_f32(rs, reads[0]), *x = in_f32(rs, reads[1]);
    const float* w = has_weight ? in_f32(rs, reads[3]) : nullptr;
    const void* tv = rs.slots[reads[2]].data();
    float* dx = out_f32(rs, writes[0]);
    auto target = [&](int64_t i) {
      return target_dtype == DType::I64 ? static_cast<const int64_t*>(tv)[i] : static_cast<const int32_t*>(tv)[i];
    };
    double wsum = 0;
    for (int64_t i = 0; i < N * Dn; ++i) {
      const int64_t t = target(i);
      if (has_ignore && t == ignore) {
        share[i] = 0;
        continue;
      }
      if (t < 0 || t >= C) fail(ErrorCode::InvalidArgument, "{}: target value {} is out of range [0, {})", what, t, C);
      const float wt = w ? w[t] : 1.0f;
      share[i] = wt * (none ? dy[i] : dy[0]);
      wsum += wt;
    }
    if (mean)
      for (auto& s : share) s = static_cast<float>(s / wsum);
    parallel_for(N, N * C * Dn >= 16384 ? rs.threads : 1, [&](int64_t n) {
      for (int64_t d = 0; d < Dn; ++d) {
        const int64_t i = n * Dn + d, t = target(i);
        for (int64_t c = 0; c < C; ++c) {
          const int64_t k = (n * C + c) * Dn + d;
          dx[k] = softmax ? share[i] * (std::exp(x[k]) - (c == t ? 1.0f : 0.0f)) : (c == t ? -share[i] : 0.0f);
        }
      }
    });
  }
};

bool make_loss_grad(PlanBuilder& b, const Node& n, bool softmax) {
  auto dy = b.static_type(n.inputs[0]), x = b.static_type(n.inputs[1]), t = b.static_type(n.inputs[2]);
  if (!dy || !x || !t || dy->first != DType::F32 || x->first != DType::F32 || x->second.size() < 2) return false;
  if (t->first != DType::I64 && t->first != DType::I32) return false;
  const std::string reduction = n.get_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none") return false;
  auto step = std::make_unique<LossGradStep>();
  const auto& xs = x->second;
  step->N = xs[0];
  step->C = xs[1];
  step->Dn = shape_numel(std::vector<int64_t>(xs.begin() + 2, xs.end()));
  std::vector<int64_t> ts = {xs[0]};
  ts.insert(ts.end(), xs.begin() + 2, xs.end());
  if (t->second != ts || (reduction == "none" ? dy->second != ts : shape_numel(dy->second) != 1)) return false;
  if (n.has_input(3)) {
    auto w = b.static_type(n.inputs[3]);
    if (!w || w->first != DType::F32 || w->second != std::vector<int64_t>{step->C}) return false;
    step->has_weight = true;
  }
  step->softmax = softmax;
  step->none = reduction == "none";
  step->mean = reduction == "mean";
  step->has_ignore = n.has_attr("ignore_index");
  step->ignore = n.get_int("ignore_index", 0);
  step->target_dtype = t->first;
  step->what = n.describe();
  step->share.resize(static_cast<size_t>(step->N * step->Dn));
  step->reads = {b.plain(n.inputs[0]), b.plain(n.inputs[1]), b.plain(n.inputs[2])};
  if (step->has_weight) step->reads.push_back(b.plain(n.inputs[3]));
  step->writes = {b.define(n.outputs[0], DType::F32, xs)};
  step->label = n.describe() + ": cpu loop";
  b.add(std::move(step));
  return true;
}

}  // namespace

bool make_backward_rows(PlanBuilder& b, const Node& n) {
  if (n.domain != "hodu") return false;
  if (n.op_type == "SoftmaxGrad") return make_softmax_grad(b, n);
  if (n.op_type == "LayerNormGrad") return make_layer_norm_grad(b, n);
  if (n.op_type == "SoftmaxCrossEntropyLossGrad") return make_loss_grad(b, n, true);
  if (n.op_type == "NegativeLogLikelihoodLossGrad") return make_loss_grad(b, n, false);
  return false;
}

}  // namespace hodu::cpu
