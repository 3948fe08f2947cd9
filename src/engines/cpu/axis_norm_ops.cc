// The general forms behind normalization.cc's f32 last-axis row kernels, on plain tensors of f32
// or f64: Softmax / LogSoftmax / Hardmax along any axis (strided over the inner dims), and
// LayerNormalization / RMSNormalization / hodu.LayerNorm over the trailing dims from any axis,
// scale and bias broadcast to those dims, with LayerNormalization's Mean and InvStdDev outputs
// (training graphs and torch exports ask for them). The arithmetic is the interpreter's
// (sums in double, statistics rounded to the stash type), so results agree to the last bits.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engines/cpu/row_kernels.h"
#include "engines/cpu/tensor_step.h"
#include "engines/interp/ops/softmax_norm_row.h"

namespace hodu::cpu {
namespace {

template <typename F>
bool dispatch_float_dtype(DType dt, F&& f) {
  if (dt == DType::F32) f.template operator()<float>();
  else if (dt == DType::F64) f.template operator()<double>();
  else return false;
  return true;
}

using SoftKind = interp::SKind;

class AxisSoftmaxStep : public TensorStep {
 public:
  AxisSoftmaxStep(SoftKind kind, int64_t axis) : kind_(kind), axis_(axis) {}
  void configure(const std::vector<const Tensor*>& in) override {
    const auto& s = in[0]->shape();
    const int64_t r = static_cast<int64_t>(s.size());
    outer_ = n_ = inner_ = 1;
    if (r == 0) return;
    auto ax = norm_axis(axis_, r);
    if (!ax) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for rank {}", label, axis_, r);
    for (int64_t d = 0; d < *ax; ++d) outer_ *= s[d];
    n_ = s[*ax];
    for (int64_t d = *ax + 1; d < r; ++d) inner_ *= s[d];
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    Tensor& y = out(rs, 0, x.dtype(), x.shape());
    dispatch_float_dtype(x.dtype(), [&]<typename T>() { run<T>(rs, x.data<T>(), y.data<T>()); });
  }

 private:
  template <typename T>
  void run(RunState& rs, const T* src, T* dst) const {
    const int64_t n = n_, inner = inner_, lanes = outer_ * inner_;
    if (n == 0) return;
    const int64_t chunk = std::max<int64_t>(1, 8192 / n), chunks = (lanes + chunk - 1) / chunk;
    if constexpr (std::is_same_v<T, float>) {
      if (kind_ == SoftKind::Softmax && inner == 1) {  // rows: the vectorized row kernel
        // (the interpreter's lane loop took 1.6 ns an entry on MViT's [2, 6273, 1569] scores)
        parallel_for(chunks, lanes * n >= (1 << 14) ? rs.threads : 1, [&](int64_t c) {
          for (int64_t t = c * chunk; t < std::min(lanes, (c + 1) * chunk); ++t)
            softmax_row(src + t * n, nullptr, 0, dst + t * n, n, n);
        });
        return;
      }
    }
    parallel_for(chunks, lanes * n >= (1 << 14) ? rs.threads : 1, [&](int64_t c) {
      std::vector<T> tmp(static_cast<size_t>(n));
      for (int64_t t = c * chunk; t < std::min(lanes, (c + 1) * chunk); ++t) {
        const int64_t o = t / inner, i = t % inner;
        interp::softmax_lane(kind_, src + o * n * inner + i, dst + o * n * inner + i, n, inner, tmp.data());
      }
    });
  }

  SoftKind kind_;
  int64_t axis_;
  int64_t outer_ = 1, n_ = 1, inner_ = 1;
};

// Offsets of a parameter of shape `p` broadcast (numpy, right-aligned) to `shape`, one per element
// of `shape`; nullopt when it does not broadcast to it.
std::optional<std::vector<int64_t>> param_offsets(const std::vector<int64_t>& p, const std::vector<int64_t>& shape) {
  if (p.size() > shape.size()) return std::nullopt;
  const size_t lead = shape.size() - p.size();
  std::vector<int64_t> strides(shape.size(), 0);
  int64_t st = 1;
  for (size_t d = p.size(); d-- > 0;) {
    if (p[d] != shape[lead + d] && p[d] != 1) return std::nullopt;
    strides[lead + d] = p[d] == 1 ? 0 : st;
    st *= p[d];
  }
  std::vector<int64_t> off(static_cast<size_t>(shape_numel(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = 0; i < off.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o += idx[d] * strides[d];
    off[i] = o;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return off;
}

class AxisLayerNormStep : public TensorStep {
 public:
  // rms: no mean (RMSNormalization, hodu.LayerNorm rms=1); stash: the statistics' dtype (f32/f64).
  AxisLayerNormStep(int64_t axis, double eps, bool rms, DType stash) : axis_(axis), eps_(eps), rms_(rms), stash_(stash) {}
  void configure(const std::vector<const Tensor*>& in) override {
    const auto& s = in[0]->shape();
    const int64_t r = static_cast<int64_t>(s.size());
    if (r == 0) fail(ErrorCode::InvalidArgument, "{}: X must have rank >= 1", label);
    auto ax = norm_axis(axis_, r);
    if (!ax) fail(ErrorCode::InvalidArgument, "{}: axis {} is out of range for rank {}", label, axis_, r);
    norm_shape_.assign(s.begin() + *ax, s.end());
    cols_ = shape_numel(norm_shape_);
    rows_ = cols_ ? shape_numel(s) / cols_ : shape_numel(std::vector<int64_t>(s.begin(), s.begin() + *ax));
    stat_shape_.assign(s.begin(), s.begin() + *ax);
    stat_shape_.resize(static_cast<size_t>(r), 1);
    for (size_t i : {1, 2}) {
      offsets_[i - 1].clear();
      if (i >= in.size() || !in[i]) continue;
      auto off = param_offsets(in[i]->shape(), norm_shape_);
      if (!off)
        fail(ErrorCode::InvalidArgument, "{}: {} of shape {} cannot be broadcast to {}", label, i == 1 ? "Scale" : "B",
             in[i]->shape_string(), shape_to_string(norm_shape_));
      offsets_[i - 1] = std::move(*off);
    }
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;  // the node may have no third input
    for (const Tensor* p : {in[1], b})
      if (p && p->dtype() != x.dtype())
        fail(ErrorCode::InvalidArgument, "{}: {} is {}, X is {}", label, p == b ? "B" : "Scale",
             dtype_name(p->dtype()), dtype_name(x.dtype()));
    Tensor& y = out(rs, 0, x.dtype(), x.shape());
    Tensor* mean = output_writes_.size() > 1 && output_writes_[1] >= 0 ? &out(rs, 1, stash_, stat_shape_) : nullptr;
    Tensor* inv = output_writes_.size() > 2 && output_writes_[2] >= 0 ? &out(rs, 2, stash_, stat_shape_) : nullptr;
    dispatch_float_dtype(x.dtype(), [&]<typename T>() {
      const T* src = x.data<T>();
      const T* scale = in[1]->data<T>();
      const T* bias = b ? b->data<T>() : nullptr;
      T* dst = y.data<T>();
      const int64_t cols = cols_;
      const double eps = eps_;
      const bool stash_f64 = stash_ == DType::F64;
      const int64_t* soff = offsets_[0].data();
      const int64_t* boff = offsets_[1].data();
      parallel_for(rows_, x.numel() >= (1 << 14) ? rs.threads : 1, [&](int64_t i) {
        const T* p = src + i * cols;
        double mu, iv;
        interp::norm_row_stats(p, cols, eps, rms_, stash_f64, mu, iv);
        for (int64_t k = 0; k < cols; ++k) {
          double v = (p[k] - mu) * iv * scale[soff[k]];
          if (bias) v += bias[boff[k]];
          dst[i * cols + k] = static_cast<T>(v);
        }
        if (stash_f64) {
          if (mean) mean->data<double>()[i] = mu;
          if (inv) inv->data<double>()[i] = iv;
        } else {
          if (mean) mean->data<float>()[i] = static_cast<float>(mu);
          if (inv) inv->data<float>()[i] = static_cast<float>(iv);
        }
      });
    });
  }

 private:
  int64_t axis_;
  double eps_;
  bool rms_;
  DType stash_;
  std::vector<int64_t> norm_shape_, stat_shape_;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<int64_t> offsets_[2];
};

}  // namespace

bool make_axis_norm_ops(PlanBuilder& b, const Node& n) {
  const std::string& op = n.op_type;
  const DType dt = dtype_of(b, n.inputs.empty() ? std::string() : n.inputs[0]);
  if (dt != DType::F32 && dt != DType::F64) return false;
  if (n.domain.empty() && (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax")) {
    const SoftKind kind = op == "Softmax" ? SoftKind::Softmax : op == "LogSoftmax" ? SoftKind::LogSoftmax : SoftKind::Hardmax;
    add_tensor_step(b, n, std::make_unique<AxisSoftmaxStep>(kind, n.get_int("axis", -1)), {dt}, "softmax along an axis");
    return true;
  }
  const bool onnx_ln = n.domain.empty() && op == "LayerNormalization";
  const bool onnx_rms = n.domain.empty() && op == "RMSNormalization";
  const bool hodu_ln = n.domain == "hodu" && op == "LayerNorm";
  if (!onnx_ln && !onnx_rms && !hodu_ln) return false;
  if (n.inputs.size() < 2 || n.inputs[1].empty()) return false;
  // hodu.LayerNorm keeps its statistics in the input's precision; ONNX's in stash_type (f32 by default).
  DType stash = dt;
  if (!hodu_ln) {
    auto s = dtype_from_onnx(static_cast<int>(n.get_int("stash_type", 1)));
    if (!s || (*s != DType::F32 && *s != DType::F64)) return false;  // f16 stash: the interpreter's rounding
    stash = *s;
  }
  const bool rms = onnx_rms || (hodu_ln && n.get_int("rms", 0) != 0);
  // hodu.LayerNorm rms=1 adds its bias to the whole result: the same as over the normalized dims
  // only when the bias has no more dims than those.
  if (hodu_ln && rms && n.has_input(2)) {
    auto x = b.static_type(n.inputs[0]);
    auto bias = b.static_type(n.inputs[2]);
    if (!x || !bias) return false;
    auto ax = norm_axis(n.get_int("axis", -1), static_cast<int64_t>(x->second.size()));
    if (!ax || bias->second.size() > x->second.size() - static_cast<size_t>(*ax)) return false;
  }
  if (onnx_rms && n.inputs.size() > 2) return false;
  std::vector<DType> dtypes = {dt, stash, stash};
  auto step = std::make_unique<AxisLayerNormStep>(n.get_int("axis", -1), n.get_float("epsilon", 1e-5f), rms, stash);
  add_tensor_step(b, n, std::move(step), dtypes, rms ? "rms normalization along axes" : "layer normalization along axes");
  return true;
}

}  // namespace hodu::cpu
