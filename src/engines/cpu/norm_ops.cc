// InstanceNormalization, GroupNormalization (opset 21: scale and bias per channel) and LRN on
// f32, plain layout. Statistics in double as the interpreter computes them
// (normalization.cc); the normalization itself is (x - mean) · a_c + bias_c per element with
// a_c = scale_c / std folded once per channel, rows split over the threads. LRN sums the
// squares of a sliding window of channels once per pixel instead of once per output.
#include <cmath>

#include "engines/cpu/tensor_step.h"

namespace hodu::cpu {
namespace {

class GroupNormStep : public TensorStep {
 public:
  GroupNormStep(int64_t groups, float eps, bool instance) : groups_(groups), eps_(eps), instance_(instance) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    if (x.rank() < 2) fail(ErrorCode::InvalidArgument, "{}: X must have rank >= 2, got {}", label, x.shape_string());
    const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
    const int64_t G = instance_ ? C : groups_;
    if (G <= 0 || C % G != 0)
      fail(ErrorCode::InvalidArgument, "{}: num_groups = {} must be positive and divide the {} channels", label, G, C);
    for (size_t i : {1, 2})
      if (in[i]->numel() != C)
        fail(ErrorCode::InvalidArgument, "{}: {} has {} values, expected {} (one per channel)", label,
             i == 1 ? "scale" : "bias", in[i]->numel(), C);
    const float* scale = in[1]->data<float>();
    const float* bias = in[2]->data<float>();
    const float* src = x.data<float>();
    Tensor& y = out(rs, 0, DType::F32, x.shape());
    float* dst = y.data<float>();
    const int64_t cg = C / G, gsize = cg * S;
    const double eps = eps_;
    parallel_for(N * G, x.numel() >= (1 << 14) ? rs.threads : 1, [&](int64_t t) {
      const float* p = src + t * gsize;
      double s = 0;
      for (int64_t k = 0; k < gsize; ++k) s += p[k];
      const double mu = s / static_cast<double>(gsize);
      double q = 0;
      for (int64_t k = 0; k < gsize; ++k) q += (p[k] - mu) * (p[k] - mu);
      const double inv = 1.0 / std::sqrt(q / static_cast<double>(gsize) + eps);
      const int64_t g = t % G;
      for (int64_t cc = 0; cc < cg; ++cc) {
        const int64_t c = g * cg + cc;
        // (x - mean) first: folding the mean into the bias cancels badly when inv is large.
        const float a = static_cast<float>(inv * scale[c]), b = bias[c], m = static_cast<float>(mu);
        const float* pc = p + cc * S;
        float* d = dst + t * gsize + cc * S;
        for (int64_t k = 0; k < S; ++k) d[k] = (pc[k] - m) * a + b;
      }
    });
  }

 private:
  int64_t groups_;
  float eps_;
  bool instance_;
};

class LrnStep : public TensorStep {
 public:
  LrnStep(int64_t size, double alpha, double beta, double bias) : size_(size), alpha_(alpha), beta_(beta), bias_(bias) {}
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    if (x.rank() < 2) fail(ErrorCode::InvalidArgument, "{}: X must have rank >= 2, got {}", label, x.shape_string());
    const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
    const int64_t lo = (size_ - 1) / 2, hi = (size_ - 1) - lo;
    const float* src = x.data<float>();
    Tensor& y = out(rs, 0, DType::F32, x.shape());
    float* dst = y.data<float>();
    const double k = alpha_ / static_cast<double>(size_);
    // Per image and block of pixels: the window's sum of squares slides over the channels.
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (S + kBlock - 1) / kBlock;
    parallel_for(N * blocks, x.numel() >= (1 << 14) ? rs.threads : 1, [&](int64_t t) {
      const int64_t n = t / blocks, s0 = t % blocks * kBlock, len = std::min(kBlock, S - s0);
      double win[kBlock];
      for (int64_t j = 0; j < len; ++j) win[j] = 0;
      const float* img = src + n * C * S + s0;
      auto sq = [&](int64_t c, int64_t j) {
        const double v = img[c * S + j];
        return v * v;
      };
      for (int64_t c = 0; c < std::min<int64_t>(hi, C - 1) + 1 && c < C; ++c)  // window of channel 0: [0, hi]
        for (int64_t j = 0; j < len; ++j) win[j] += sq(c, j);
      for (int64_t c = 0; c < C; ++c) {
        if (c > 0) {
          const int64_t add = c + hi, drop = c - lo - 1;
          for (int64_t j = 0; j < len; ++j) {
            if (add < C) win[j] += sq(add, j);
            if (drop >= 0) win[j] -= sq(drop, j);
          }
        }
        float* d = dst + (n * C + c) * S + s0;
        const float* p = img + c * S;
        for (int64_t j = 0; j < len; ++j)
          d[j] = static_cast<float>(p[j] / std::pow(bias_ + k * std::max(win[j], 0.0), beta_));
      }
    });
  }

 private:
  int64_t size_;
  double alpha_, beta_, bias_;
};

}  // namespace

bool make_norm_ops(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty()) return false;
  const std::string& op = n.op_type;
  if (dtype_of(b, n.inputs[0]) != DType::F32) return false;
  if (op == "InstanceNormalization" || op == "GroupNormalization") {
    if (n.inputs.size() != 3 || dtype_of(b, n.inputs[1]) != DType::F32 || dtype_of(b, n.inputs[2]) != DType::F32)
      return false;
    if (n.get_int("stash_type", 1) != 1) return false;  // statistics in another type: the interpreter's
    const bool instance = op == "InstanceNormalization";
    add_tensor_step(b, n,
                    std::make_unique<GroupNormStep>(n.get_int("num_groups", 0), n.get_float("epsilon", 1e-5f), instance),
                    {DType::F32}, instance ? "instance norm" : "group norm");
    return true;
  }
  if (op == "LRN") {
    const int64_t size = n.get_int("size", 0);
    if (size <= 0) return false;
    add_tensor_step(b, n,
                    std::make_unique<LrnStep>(size, n.get_float("alpha", 1e-4f), n.get_float("beta", 0.75f),
                                              n.get_float("bias", 1.0f)),
                    {DType::F32}, "lrn");
    return true;
  }
  return false;
}

}  // namespace hodu::cpu
