// Convolutions as one product per kernel tap (kernels/cpu/tap_conv_avx2.h) where oneDNN 2.6 would
// run im2col + sgemm: below AVX-512, its jit kernels take dilation 1 and 2 only, so DeepLab's
// dilated backbones (dilation 4) and ASPP heads (rates 12, 24, 36), dilated TCNs and the like
// computed every tap, the padding's zeros included, and copied the input once per tap.
#include "engines/cpu/tap_conv.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "kernels/cpu/blocked_layout.h"
#include "kernels/cpu/tap_conv_avx2.h"

namespace hodu::cpu {
namespace {

class TapConvStep : public Step {
 public:
  explicit TapConvStep(std::unique_ptr<tap_conv::Conv> conv) : conv_(std::move(conv)) {}
  void run(RunState& rs) override {
    conv_->run(static_cast<const float*>(rs.slots[reads[0]].data()), static_cast<float*>(rs.slots[writes[0]].data()),
               rs.threads);
  }
  std::unique_ptr<tap_conv::Conv> conv_;
};

// Fewer input channels keep oneDNN's kernel under auto: each tap's product would be a few
// multiply-adds per output for a read and write of it (im2col's one product has all taps' depth).
constexpr int64_t kMinInputChannels = 32;
constexpr double kMaxValidFraction = 0.9;

}  // namespace

TapConvPolicy tap_conv_policy() {
  const char* v = std::getenv("HODU_CPU_TAP_CONV");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return TapConvPolicy::Auto;
  if (s == "on") return TapConvPolicy::On;
  if (s == "off") return TapConvPolicy::Off;
  throw Error(ErrorCode::InvalidArgument, "HODU_CPU_TAP_CONV=" + s +
                                              ": expected auto (where oneDNN would run im2col + sgemm), on (every "
                                              "ungrouped 1-D/2-D conv that fits) or off (oneDNN's kernels only)");
}

bool make_tap_conv(PlanBuilder& b, const Node& n, const TapConv& c) {
  const TapConvPolicy policy = tap_conv_policy();
  if (policy == TapConvPolicy::Off || !packed_gemm::available() || !b.blocked_layouts()) return false;
  const size_t spatial = c.xs.size() - 2;
  if ((spatial != 1 && spatial != 2) || c.ys[1] % 8 != 0) return false;
  if (policy == TapConvPolicy::Auto && (c.onednn_impl.find("gemm") == std::string::npos || c.xs[1] < kMinInputChannels))
    return false;
  tap_conv::ConvShape s;
  s.batch = c.xs[0];
  s.cin = c.xs[1];
  s.cout = c.ys[1];
  const size_t w_axis = spatial - 1;  // the last spatial axis; a 1-D conv is a 2-D one of height 1
  if (spatial == 2) {
    s.h = c.xs[2], s.oh = c.ys[2], s.kh = c.kernel[0];
    s.stride_h = c.strides[0], s.dilation_h = c.dilations[0], s.pad_top = c.pads_begin[0];
  } else {
    s.h = s.oh = 1;
  }
  s.w = c.xs[2 + w_axis], s.ow = c.ys[2 + w_axis], s.kw = c.kernel[w_axis];
  s.stride_w = c.strides[w_axis], s.dilation_w = c.dilations[w_axis], s.pad_left = c.pads_begin[w_axis];
  // Under auto, a 2-D conv only where the taps skip a tenth of the products or more: on whole
  // taps this kernel's products ran about 10 % slower than oneDNN's im2col + sgemm (AVX2,
  // 512 -> 512 at 28x28: dilation 4 reaches 82 % and took 53 ms at 1 thread against 58). A 1-D
  // conv always: oneDNN's gemm conv took 5.0 ms for a 256 -> 256 TCN layer over 400 steps whose
  // taps all but reach every output (dilation 4 to 32), this kernel 3.1.
  const double reached = tap_conv::valid_fraction(s);
  if (policy == TapConvPolicy::Auto && spatial == 2 && reached > kMaxValidFraction) return false;
  auto conv = std::make_unique<tap_conv::Conv>(s, c.weights, c.bias, c.act);
  b.add_packed_bytes(conv->packed_bytes());
  b.consumed_at_plan_time(n.inputs[1]);  // the packed taps are the conv's own copy
  // nChw8c, or nCw8c for a 1-D conv: the same bytes as an image of height 1.
  auto blocked = [&](const std::vector<int64_t>& d) {
    return spatial == 2 ? onednn::channel_blocked_md(to_dims(d), 8)
                        : dnnl::memory::desc(to_dims(d), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nCw8c);
  };
  const auto md_x = blocked(c.xs);
  const auto md_y = blocked(c.ys);
  auto step = std::make_unique<TapConvStep>(std::move(conv));
  step->reads = {b.as_layout(n.inputs[0], md_x)};
  step->writes = {b.define(n.outputs[0], DType::F32, c.ys, md_y)};
  step->label = n.describe() + ": cpu tap conv avx2, " + std::to_string(step->conv_->taps().size()) + " of " +
                std::to_string(s.kh * s.kw) + " taps, " + std::to_string(static_cast<int>(reached * 100 + 0.5)) +
                " % of the dense products";
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
