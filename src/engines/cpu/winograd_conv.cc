// 3x3 stride-1 convolutions on hodu's AVX2 Winograd F(2x2,3x3)/F(4x4,3x3) kernels (kernels/cpu/winograd_avx2.h)
// where oneDNN 2.6 has no Winograd: CPUs (or HODU_MAX_ISA caps) at AVX2, and on AVX-512 a Concat's
// nhwc parts, which oneDNN's Winograd cannot write. HODU_CPU_WINOGRAD picks.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/winograd_conv.h"
#include "kernels/cpu/blocked_layout.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/winograd_avx2.h"
#include "kernels/cpu/winograd.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class WinogradConvStep : public Step {
 public:
  explicit WinogradConvStep(std::unique_ptr<winograd::Conv> conv) : conv_(std::move(conv)) {}
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* z = z_read_ ? static_cast<const float*>(rs.slots[reads[1]].data()) : nullptr;
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    float* scratch = static_cast<float*>(rs.slots[writes[1]].data());
    conv_->run(x, in_place_ ? y : z, y, scratch, rs.threads);
  }
  std::unique_ptr<winograd::Conv> conv_;
  bool z_read_ = false, in_place_ = false;
};

}  // namespace

WinogradPolicy winograd_policy() {
  const WinogradPolicy p = winograd::policy_from_env();
  if (p != WinogradPolicy::Invalid) return p;
  throw Error(ErrorCode::InvalidArgument,
              "HODU_CPU_WINOGRAD=" + std::string(std::getenv("HODU_CPU_WINOGRAD")) +
              ": expected auto, hodu (hodu's AVX2 kernel wherever it fits), hodu-f2 or "
              "hodu-f4 (the same with F(2x2,3x3) or F(4x4,3x3) tiles), onednn (oneDNN's Winograd only) or off "
              "(direct convolutions only)");
}

bool winograd_within_memory_budget(PlanBuilder& b, const Node& n) {
  if (!b.winograd_over_budget) {
    struct Candidate {
      int64_t pixels;
      size_t bytes;
      std::string weight, output;
    };
    std::vector<Candidate> candidates;
    size_t weights = 0;
    for (const auto& [name, t] : b.graph().initializers)
      if (t.dtype() == DType::F32) weights += t.nbytes();
    for (const Node& c : b.graph().nodes) {
      const bool conv = (c.op_type == "Conv" && c.domain.empty()) || (c.op_type == "FusedConv" && c.domain == "hodu");
      if (!conv || c.inputs.size() < 2 || c.outputs.empty()) continue;
      const Tensor* w = passes::constant_of(b.graph(), c.inputs[1]);
      auto y = b.static_type(c.outputs[0]);
      if (!w || w->dtype() != DType::F32 || w->rank() != 4 || w->dim(2) != 3 || w->dim(3) != 3 || !y ||
          y->second.size() != 4 || w->dim(1) < 16 || c.get_int("group", 1) != 1)
        continue;
      bool unit = true;
      for (int64_t v : c.get_ints("strides", {1, 1})) unit &= v == 1;
      for (int64_t v : c.get_ints("dilations", {1, 1})) unit &= v == 1;
      const int64_t pixels = y->second[2] * y->second[3];
      if (!unit || pixels < onednn::kWinogradMinPixels) continue;
      candidates.push_back({pixels, w->nbytes(), c.inputs[1], c.outputs[0]});
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& c) { return a.pixels > c.pixels; });
    // Half the model's weights: FCN-ResNet50's 2048 -> 512 head (38 MB of weights, 113 MB more as
    // Winograd's by this count) took its peak from 220 to 538 MB at the whole weights (ORT: 510).
    const size_t budget = std::max<size_t>(size_t{64} << 20, weights / 2);
    size_t extra = 0;
    std::set<std::string> counted;  // a shared weight (a detector's head) counted once
    for (const auto& c : candidates)
      if (!counted.count(c.weight) && extra + 3 * c.bytes <= budget) {
        extra += 3 * c.bytes;
        counted.insert(c.weight);
      }
    std::set<std::string> refused;
    for (const auto& c : candidates)
      if (!counted.count(c.weight)) refused.insert(c.output);
    b.winograd_over_budget = std::move(refused);
  }
  return n.outputs.empty() || !b.winograd_over_budget->count(n.outputs[0]);
}

bool make_winograd_conv(PlanBuilder& b, const Node& n, const WinogradConv& c) {
  const auto& xs = c.xs;
  const auto& ys = c.ys;
  winograd::ConvShape s;
  s.batch = xs[0];
  s.cin = xs[1];
  s.cout = ys[1];
  s.h = xs[2];
  s.w = xs[3];
  s.oh = ys[2];
  s.ow = ys[3];
  s.pad_top = c.pad_top;
  s.pad_left = c.pad_left;
  // An input in nhwc (AVX-512's brgemm convs write it) is read and written as it lies where the
  // channels are whole vectors of 8.
  const auto nhwc_x = dnnl::memory::desc(to_dims(xs), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
  s.nhwc = layout_md(b.at(b.slot(n.inputs[0]))) == nhwc_x && s.cin % 8 == 0 && s.cout % 8 == 0;
  WinogradPolicy policy = winograd_policy();
  // On AVX-512 oneDNN's Winograd takes the 3x3 convs, except a Concat's parts (they share one
  // layout, and its Winograd's is its own), which ran its direct brgemm kernel: DenseNet-121's
  // 128 -> 32 convs at 56x56 ... 14x14 (23.0 ms of its 53.9 at 1 thread, nhwc, against 16.6 on
  // this kernel capped at AVX2). There hodu's kernel takes them in nhwc from 20x20 outputs (F(4,3)'s
  // size) and 16 input channels: smaller maps split poorly over 2 threads (SqueezeNet's 13x13
  // fire convs ran slower there than on oneDNN's kernel).
  if (policy == WinogradPolicy::Auto && c.concat_part && s.nhwc && vector_math::cpu_isa() == vector_math::Isa::Avx512 &&
      s.oh * s.ow >= 400 && s.cin >= 16)
    policy = WinogradPolicy::Hodu;
  s.tile = winograd::tile_for(policy, s);
  if (!s.tile) return false;
  // A weight another conv transformed already (a detector's head over pyramid levels) is read in
  // that form, whatever tile this size would take: one copy, about 4x the weight, not one a level.
  auto& shared = b.winograd_weights[n.inputs[1]];
  if (shared && shared->tile != s.tile && (policy == WinogradPolicy::Auto || policy == WinogradPolicy::Hodu))
    s.tile = shared->tile;
  if (!shared || shared->tile != s.tile) {
    shared = winograd::transform_weights(c.weights, s.cin, s.cout, s.tile);
    b.add_packed_bytes(shared->data.size() * sizeof(float));
  }
  const int64_t scratch = winograd::scratch_floats(s);
  auto conv = std::make_unique<winograd::Conv>(s, shared, c.bias, c.ep);
  // The transformed weights are the conv's own copy: the original may go (PlanOptions::single_plan).
  b.consumed_at_plan_time(n.inputs[1]);
  const auto md_x = s.nhwc ? nhwc_x : onednn::channel_blocked_md(to_dims(xs), 8);
  const auto md_y = s.nhwc ? dnnl::memory::desc(to_dims(ys), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc)
                           : onednn::channel_blocked_md(to_dims(ys), 8);
  auto step = std::make_unique<WinogradConvStep>(std::move(conv));
  const int src = b.as_layout(n.inputs[0], md_x);
  step->reads = {src};
  int dst = -1;
  if (c.has_z) {
    const int z = b.slot(n.inputs[3]);
    // The residual read nowhere after this conv, already in nChw8c, is the output's buffer.
    if (layout_md(b.at(z)) == md_y && b.bytes_die_here(n.inputs[3], {src})) {
      step->reads.push_back(z);
      dst = b.define_part(n.outputs[0], z, ys, md_y, 0);
      step->in_place_ = true;
    } else {
      step->reads.push_back(b.as_layout(n.inputs[3], md_y));
      step->z_read_ = true;
    }
  }
  if (dst < 0) dst = b.define(n.outputs[0], DType::F32, ys, md_y);
  // Scratch in the arena, alive during this step only: shared with every other step's values.
  step->writes = {dst, b.define("", DType::F32, {scratch})};
  step->label = n.describe() + (s.tile == 4 ? ": cpu winograd F(4x4,3x3) avx2" : ": cpu winograd F(2x2,3x3) avx2") +
                (s.nhwc ? " nhwc" : "");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
