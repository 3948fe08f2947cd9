// 1-D depthwise convolutions (Silero VAD's and Conformer-style speech models' Conv1d with
// groups = channels): one row kernel call per output channel (row_kernels.h:
// depthwise_conv_row: short rows from a zero-padded copy 8 outputs at a time, long ones tap by
// tap over the outputs each tap reaches). oneDNN 2.6 runs these as im2col + an sgemm per
// channel: Silero VAD v4's 258-channel, 5-tap conv over 8 steps took 100-170 us for 10K
// multiply-adds.
#include "engines/cpu/depthwise_conv1d.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/hand_conv_step.h"
#include "engines/cpu/row_kernels.h"

namespace hodu::cpu {
namespace {

class DepthwiseConv1dStep : public HandConvStep {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* z = has_z_ ? static_cast<const float*>(rs.slots[reads[1]].data()) : nullptr;
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    const int64_t rows = batch_ * cout_, per_chunk = 16, chunks = (rows + per_chunk - 1) / per_chunk;
    const int64_t n_taps = static_cast<int64_t>(row_.taps.size()), in_len = row_.in_len, out_len = row_.out_len;
    // A few thousand multiply-adds take less than waking the other threads.
    const int threads = rows * out_len * n_taps >= (1 << 16) ? rs.threads : 1;
    parallel_for(chunks, threads, [&](int64_t c) {
      for (int64_t r = c * per_chunk; r < std::min(rows, (c + 1) * per_chunk); ++r) {
        const int64_t image = r / cout_, o = r % cout_, channel = o / multiplier_;
        float* yr = y + r * out_len;
        depthwise_conv_row(x + (image * cin_ + channel) * in_len, weights_.data() + o * n_taps,
                           bias_.empty() ? 0.0f : bias_[static_cast<size_t>(o)], yr, row_);
        if (z)
          for (int64_t t = 0; t < out_len; ++t) yr[t] += z[r * out_len + t];
        if (act_.kind == ScalarActivation::Kind::Silu)
          silu_in_place(yr, out_len);
        else if (act_.kind != ScalarActivation::Kind::None)
          for (int64_t t = 0; t < out_len; ++t) yr[t] = act_(yr[t]);
      }
    });
  }
  DepthwiseRow row_;  // weights_ [cout, taps]
  int64_t batch_ = 1, cin_ = 0, cout_ = 0, multiplier_ = 1;
};

}  // namespace

DepthwiseConv1dPolicy depthwise_conv1d_policy() {
  const char* v = std::getenv("HODU_CPU_DEPTHWISE_CONV1D");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return DepthwiseConv1dPolicy::Auto;
  if (s == "off") return DepthwiseConv1dPolicy::Off;
  throw Error(ErrorCode::InvalidArgument, "HODU_CPU_DEPTHWISE_CONV1D=" + s +
                                              ": expected auto (1-D depthwise convs on hodu's row kernel) or off "
                                              "(oneDNN's kernels)");
}

bool make_depthwise_conv1d(PlanBuilder& b, const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                           const Tensor& w, const Tensor* bias, const std::string& act,
                           const std::vector<float>& act_params, bool has_z) {
  if (xs.size() != 3 || ys.size() != 3 || w.rank() != 3) return false;
  const int64_t cin = xs[1], cout = ys[1];
  if (n.get_int("group", 1) != cin || cin < 2 || w.dim(0) != cout || w.dim(1) != 1 || cout % cin != 0) return false;
  auto win = conv_window(n, xs, ys, {w.dim(0), w.dim(1), w.dim(2)});
  auto sa = ScalarActivation::of(act, act_params);
  if (!win || !sa || !w.is_contiguous() || (bias && (!bias->is_contiguous() || bias->numel() != cout))) return false;
  auto step = std::make_unique<DepthwiseConv1dStep>();
  step->batch_ = xs[0];
  step->cin_ = cin;
  step->cout_ = cout;
  step->multiplier_ = cout / cin;
  // oneDNN's dilation: 0 = none.
  step->row_ = depthwise_row(w.dim(2), xs[2], ys[2], win->strides[0], win->dilations[0] + 1, win->pad_l[0]);
  add_hand_conv(b, n, std::move(step), w, bias, *sa, has_z, ys, "cpu depthwise conv1d");
  return true;
}

}  // namespace hodu::cpu
