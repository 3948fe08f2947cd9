// Conv and hodu.FusedConv on oneDNN: the primitive is created and the weights
// reordered into its preferred layout once per plan; bias, the residual (sum
// post-op) and the activation (eltwise post-ops) run inside the convolution.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "engines/cpu/depthwise_conv1d.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/grouped_conv_merge.h"
#include "engines/cpu/hand_conv_step.h"
#include "engines/cpu/post_op_chain.h"
#include "engines/cpu/row_kernels.h"
#include "engines/cpu/tap_conv.h"
#include "engines/cpu/winograd_conv.h"
#include "kernels/cpu/blocked_layout.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/winograd.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// A convolution whose window covers its whole (small) input once, e.g. squeeze-excite's
// 1x1 convs over [1, C, 1, 1]: a matrix-vector product. oneDNN's per-call cost is tens of
// microseconds here, the product itself one or two.
class GemvConvStep : public HandConvStep {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* z = has_z_ ? static_cast<const float*>(rs.slots[reads[1]].data()) : nullptr;
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    const int64_t rows = rows_, cols = cols_;
    const int64_t chunk = 64, chunks = (rows + chunk - 1) / chunk;
    const int threads = batch_ * rows * cols >= (1 << 16) ? rs.threads : 1;
    parallel_for(batch_ * chunks, threads, [&](int64_t c) {  // one product per image
      const int64_t i = c / chunks, begin = c % chunks * chunk, end = std::min(rows, begin + chunk);
      float* yi = y + i * rows;
      const float* zi = z ? z + i * rows : nullptr;
      gemv_rows(weights_.data(), x + i * cols, bias_.empty() ? nullptr : bias_.data(), yi, begin, end, cols);
      for (int64_t o = begin; o < end; ++o) yi[o] = act_(zi ? yi[o] + zi[o] : yi[o]);
    });
  }
  // weights_ [rows, cols]
  int64_t rows_ = 0, cols_ = 0, batch_ = 1;
};

bool read_by_concat(const PlanBuilder& b, const std::string& value) {
  for (size_t r : b.readers(value))
    if (b.graph().nodes[r].op_type == "Concat") return true;
  return false;
}

// The GEMV form of a conv when its window is its whole input: a few images (kMaxGemvBatch), one
// group, no padding, every output spatial dim 1 and every kernel dim its input dim.
constexpr int64_t kMaxGemvBatch = 8;  // more images: oneDNN's product reuses the weights better

bool make_gemv_conv(PlanBuilder& b, const Node& n, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys,
                    const Tensor& w, const Tensor* bias, const std::string& act, const std::vector<float>& act_params,
                    bool has_z) {
  if (xs[0] < 1 || xs[0] > kMaxGemvBatch || n.get_int("group", 1) != 1 ||
      n.get_string("auto_pad", "NOTSET") != "NOTSET")
    return false;
  for (int64_t p : n.get_ints("pads", {}))
    if (p != 0) return false;
  for (int64_t d : n.get_ints("dilations", {}))
    if (d != 1) return false;
  for (size_t i = 2; i < xs.size(); ++i)
    if (ys[i] != 1 || w.dim(static_cast<int64_t>(i)) != xs[i]) return false;
  auto sa = ScalarActivation::of(act, act_params);
  if (!sa || !w.is_contiguous() || (bias && !bias->is_contiguous())) return false;
  auto step = std::make_unique<GemvConvStep>();
  step->rows_ = ys[1];
  step->cols_ = shape_numel(xs) / xs[0];
  step->batch_ = xs[0];
  if (w.numel() != step->rows_ * step->cols_ || (bias && bias->numel() != step->rows_)) return false;
  add_hand_conv(b, n, std::move(step), w, bias, *sa, has_z, ys, "cpu gemv");
  return true;
}

class ConvStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    if (has_z_) {
      bind(z_, rs, reads[1]);
      z_copy_.execute(rs.stream, z_, dst_);
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_.mem}, {DNNL_ARG_DST, dst_}};
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_.mem;
    for (const auto& [arg, mem] : operands_) args[arg] = mem;
    if (w_read_ >= 0) {  // weights fed at run time (a training step's params): reordered every run
      bind(w_user_, rs, reads[w_read_]);
      if (w_reorder_) w_reorder_.execute(rs.stream, w_user_, w_);
      args[DNNL_ARG_WEIGHTS] = w_reorder_ ? w_ : w_user_;
    }
    if (b_read_ >= 0) {
      bind(b_user_, rs, reads[b_read_]);
      args[DNNL_ARG_BIAS] = b_user_;
    }
    if (scratch_write_ >= 0) {
      bind(scratch_, rs, writes[scratch_write_]);
      args[DNNL_ARG_SCRATCHPAD] = scratch_;
    }
    prim_.execute(rs.stream, args);
    if (silu_) {
      // Over every byte of dst, padding included: silu(0) = 0 keeps a blocked layout's zero channels.
      float* y = static_cast<float*>(dst_.get_data_handle());
      const int64_t n = static_cast<int64_t>(dst_.get_desc().get_size() / sizeof(float));
      // Chunks of about 16384 values, as many as a multiple of the threads from two chunks' worth
      // on (at 2 threads, 7x7x672's three chunks of 16384 ran two on one thread while the other
      // waited), each whole 16-value vectors.
      int64_t chunks = std::max<int64_t>(1, (n + 8191) / 16384);
      if (rs.threads > 1 && n >= 32768) chunks = (chunks + rs.threads - 1) / rs.threads * rs.threads;
      const int64_t chunk = ((n + chunks - 1) / chunks + 15) / 16 * 16;
      parallel_for((n + chunk - 1) / chunk, rs.threads, [&](int64_t c) {
        silu_in_place(y + c * chunk, std::min(chunk, n - c * chunk));
      });
    }
    if (after_.act != packed_gemm::Act::None) {
      // act(0) = 0 (GELU's; others checked at plan time): a blocked layout's zero channels stay zero.
      float* y = static_cast<float*>(dst_.get_data_handle());
      const int64_t n = static_cast<int64_t>(dst_.get_desc().get_size() / sizeof(float));
      constexpr int64_t kChunk = 16384;
      parallel_for((n + kChunk - 1) / kChunk, n >= kChunk ? rs.threads : 1, [&](int64_t c) {
        packed_gemm::activate(y + c * kChunk, std::min(kChunk, n - c * kChunk), after_);
      });
    }
  }

  dnnl::convolution_forward prim_;
  std::vector<std::pair<int, dnnl::memory>> operands_;  // binary post-ops' one-element tensors
  dnnl::memory src_, dst_, z_;
  dnnl::reorder z_copy_;
  PackedConstant weights_, bias_;
  // Weights and bias that are not constants: read from their slots (plain) every run.
  int w_read_ = -1, b_read_ = -1;
  dnnl::memory w_user_, w_, b_user_;
  int scratch_write_ = -1;  // the primitive's scratchpad: writes[scratch_write_], any contents
  dnnl::memory scratch_;
  dnnl::reorder w_reorder_;
  bool has_bias_ = false, has_z_ = false;
  bool silu_ = false;  // SiLU by hodu's loop after the primitive, not oneDNN's post-op
  packed_gemm::Epilogue after_;  // the activation after the primitive (GELU after a gemm conv; Winograd's non-ReLU)
};

// "LeakyRelu" -> "leakyrelu", for step labels.
std::string lower_case(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool make_conv(PlanBuilder& b, const Node& n) {
  bool fused = n.domain == "hodu" && n.op_type == "FusedConv";
  if (!fused && !(n.domain.empty() && n.op_type == "Conv")) return false;
  auto x = b.static_type(n.inputs[0]);
  auto y = b.static_type(n.outputs[0]);
  // Weights and bias are constants (packed once) or values fed at run time (a training step).
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[1]);
  auto wt = b.static_type(n.inputs[1]);
  if (!x || !y || !wt || x->first != DType::F32 || wt->first != DType::F32) return false;
  const Tensor* bias = n.has_input(2) ? passes::constant_of(b.graph(), n.inputs[2]) : nullptr;
  const bool runtime_bias = n.has_input(2) && !bias;
  if (runtime_bias) {
    auto bt = b.static_type(n.inputs[2]);
    if (!bt || bt->first != DType::F32) return false;
  }
  const std::vector<int64_t>& ws = wt->second;
  const auto& xs = x->second;
  const auto& ys = y->second;
  int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 3 || static_cast<int64_t>(ws.size()) != spatial + 2 || ys.size() != xs.size()) return false;
  std::string act = fused ? n.get_string("activation", "") : "";
  auto act_params = fused ? n.get_floats("activation_params") : std::vector<float>{};
  bool has_z = fused && n.has_input(3);
  if (has_z) {
    auto z = b.static_type(n.inputs[3]);
    if (!z || z->first != DType::F32 || z->second != ys) return false;
  }

  if (w && !runtime_bias && make_gemv_conv(b, n, xs, ys, *w, bias, act, act_params, has_z)) return true;
  if (w && !runtime_bias && spatial == 1 && depthwise_conv1d_policy() == DepthwiseConv1dPolicy::Auto &&
      make_depthwise_conv1d(b, n, xs, ys, *w, bias, act, act_params, has_z))
    return true;

  auto win = conv_window(n, xs, ys, ws);
  if (!win) return false;
  dnnl::memory::desc w_user(win->weight_dims, dt::f32, win->weight_tag);
  bool blocked = b.blocked_layouts();
  // A plain input with few channels (the image into the first conv) is read as it is: oneDNN
  // has direct kernels for it, and reordering it to a channel-blocked layout costs more than the conv.
  const Slot& xslot = b.at(b.slot(n.inputs[0]));
  bool plain_src = !blocked || (!xslot.blocked && xs[1] <= 4);
  dnnl::memory::desc src_md = plain_src ? plain_md(xs) : dnnl::memory::desc(to_dims(xs), dt::f32, tag::any);
  dnnl::memory::desc dst_md = blocked ? dnnl::memory::desc(to_dims(ys), dt::f32, tag::any) : plain_md(ys);
  dnnl::memory::desc w_md(win->weight_dims, dt::f32, tag::any);
  dnnl::memory::desc b_md({ys[1]}, dt::f32, tag::x);
  // On AVX-512 oneDNN 2.6 gives a conv whose channels are not whole 16-blocks its brgemm kernel
  // on nhwc, slow on the channel tails at small counts (BlazeFace's 24 -> 28 1x1 conv at 64x64:
  // 242 us, 91 on nChw8c). In a model that appends zero channels before its residual Adds
  // (tf2onnx's BlazeFace-style blocks), such convs take nChw16c, where those zero channels are a
  // view (channel_zero_pad.cc): BlazeFace at 1 thread 1.46 -> 1.0 ms. Not elsewhere: ShuffleNet's
  // 58/116-channel convs ran 7 % slower on nChw16c, MnasNet's 3 %.
  if (blocked && !plain_src && spatial == 2 && vector_math::cpu_isa() == vector_math::Isa::Avx512 &&
      (xs[1] % 16 || ys[1] % 16) && std::max(xs[1], ys[1]) <= 128 && has_channel_zero_pads(b)) {
    src_md = onednn::channel_blocked_md(to_dims(xs), 16);
    dst_md = onednn::channel_blocked_md(to_dims(ys), 16);
  }

  // The residual's sum and, unless hodu's loop runs it after the primitive, the activation.
  dnnl::post_ops act_po;
  auto build_act_po = [&](bool with_activation) {
    act_po = dnnl::post_ops();
    if (has_z) act_po.append_sum(1.0f);
    return !with_activation || append_activation(act_po, act, act_params);
  };
  // SiLU runs after the primitive (silu_in_place: about 4x faster than oneDNN's swish post-op).
  if (!build_act_po(act != "Silu")) return false;
  // The elementwise nodes after the conv (PaddleOCR's scale, shift, hardswish, ...) as eltwise
  // post-ops: its step writes the chain's last output (post_op_chain.h). Not after the SiLU loop.
  PostOpChain chain = act == "Silu" ? PostOpChain{} : post_op_chain(b, n.outputs[0], eltwise_ops_of(act_po));
  dnnl::primitive_attr attr;
  std::vector<std::pair<int, float>> operands;  // the binary post-ops' one-element operands
  // A fresh attr and list each time: copies of a dnnl::post_ops share one list (appending the
  // chain to a copy appended it to act_po, so a retry without the chain kept it, the chain's nodes
  // then also running as steps), and oneDNN 2.6's set_post_ops keeps an attr's old post-ops when
  // given an empty list.
  auto set_post_ops = [&] {
    dnnl::post_ops po;
    for (int i = 0; i < act_po.len(); ++i) {
      float scale = 1.0f, alpha = 0.0f, beta = 0.0f;
      if (act_po.kind(i) == dnnl::primitive::kind::sum) {
        act_po.get_params_sum(i, scale);
        po.append_sum(scale);
      } else {
        dnnl::algorithm alg;
        act_po.get_params_eltwise(i, scale, alg, alpha, beta);
        po.append_eltwise(scale, alg, alpha, beta);
      }
    }
    operands.clear();
    append_post_ops(po, chain.ops, static_cast<int>(ys.size()), operands);
    attr = dnnl::primitive_attr();
    // The primitive's scratch in the plan's arena, alive during its step only (below). oneDNN's
    // own (library mode) is one process-wide buffer the size of the largest any primitive asked
    // for, held to the end: RetinaNet's 256 -> 819 class conv at 100x134 on oneDNN's Winograd,
    // 170 MB.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(po);
  };
  const bool silu = act == "Silu";
  set_post_ops();
  auto make_pd = [&](const dnnl::memory::desc& src, dnnl::algorithm alg = dnnl::algorithm::convolution_direct)
      -> std::optional<dnnl::convolution_forward::primitive_desc> {
    auto desc = win->desc(alg, src, w_md, n.has_input(2) ? &b_md : nullptr, dst_md);
    try {
      return dnnl::convolution_forward::primitive_desc(desc, attr, b.engine());
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  };
  std::optional<dnnl::convolution_forward::primitive_desc> pd;
  const bool concat_part = read_by_concat(b, chain.nodes.empty() ? n.outputs[0] : chain.output);
  const bool wino_shape = w && blocked && spatial == 2 && win->group == 1 && ws[2] == 3 && ws[3] == 3 &&
                          win->strides == dnnl::memory::dims{1, 1} && win->dilations == dnnl::memory::dims{0, 0} &&
                          !b.options().per_shape_node && winograd_within_memory_budget(b, n);
  const WinogradPolicy wino_policy = winograd_policy();
  const bool depthwise = win->group > 1 && win->group == xs[1] && ws[1] == 1 && ys[1] == xs[1];
  const bool unit_strides = std::all_of(win->strides.begin(), win->strides.end(), [](int64_t s) { return s == 1; });
  const bool wide_groups = win->group > 1 && ws[1] >= 16 && ys[1] / win->group >= 16 && unit_strides;
  auto nhwc_md = [&](const std::vector<int64_t>& d) {
    return spatial == 2 ? dnnl::memory::desc(to_dims(d), dt::f32, tag::nhwc) : dnnl::memory::desc();
  };
  // An activation run by hodu's loop after the primitive (packed_gemm::activate) instead of as
  // its post-op: GELU after a gemm conv, any activation oneDNN's Winograd refuses.
  packed_gemm::Epilogue after;
  // The kernel for the post-ops set now: a oneDNN primitive in `pd`, or true when hodu's own
  // Winograd conv took the node (it does the conv's activation, not the chain after it).
  auto choose = [&]() -> bool {
    pd.reset();
    after = {};
    // The image into the first conv, reordered to nhwc (cheap: few channels), lets oneDNN's brgemm
    // kernel write nhwc, the layout the convs after it use: measured faster than the direct
    // nchw kernel writing a 16-channel-blocked output that is then reordered.
    if (blocked && plain_src && spatial == 2 && !xslot.blocked) {
      pd = make_pd(dnnl::memory::desc(to_dims(xs), dt::f32, tag::nhwc));
      if (pd && std::string(pd->impl_info_str()).find("brg") == std::string::npos) pd.reset();
    }
    // Below AVX-512: hodu's own F(2x2,3x3)/F(4x4,3x3) (winograd_conv.h), bias, residual and activation fused.
    // (make_winograd_conv declines under HODU_CPU_WINOGRAD=onednn/off: winograd::tile_for.)
    if (!pd && wino_shape && !runtime_bias) {
      WinogradConv wc;
      wc.xs = xs;
      wc.ys = ys;
      wc.pad_top = win->pad_l[0];
      wc.pad_left = win->pad_l[1];
      wc.weights = w->data<float>();
      wc.bias = bias ? bias->data<float>() : nullptr;
      wc.has_z = has_z;
      wc.concat_part = concat_part;
      if (w->is_contiguous() && (!bias || bias->is_contiguous()) &&
          packed_gemm::activation_of(act.c_str(), act_params.data(), static_cast<int64_t>(act_params.size()),
                                     &wc.ep.act, &wc.ep.p0, &wc.ep.p1) &&
          make_winograd_conv(b, n, wc))
        return true;
    }
    // 3x3 stride-1 convolutions on Winograd's F(2x3)/F(4x3) kernels: 1.5-2x fewer cycles than the
    // direct kernel at 1 thread (ResNet-50 41 → 37 ms), same accuracy on the zoo (rel-L2 7e-7 vs ORT).
    // Not for a Concat's parts: they write one layout, and Winograd's differs from the other convs'.
    // Not for small outputs (onednn::kWinogradMinPixels).
    if (!pd && wino_shape && wino_policy != WinogradPolicy::Off && xs[1] >= 16 &&
        ys[2] * ys[3] >= onednn::kWinogradMinPixels && !concat_part) {
      // A weight another conv packed already (a head over pyramid levels) takes Winograd only in
      // that conv's form: oneDNN lays its Winograd weights out per size, 4x the weights each
      // (RetinaNet held three forms of each head weight).
      auto usable = [&](const std::optional<dnnl::convolution_forward::primitive_desc>& p) {
        return p && std::string(p->impl_info_str()).find("wino") != std::string::npos &&
               !b.packed_only_otherwise(n.inputs[1], p->weights_desc());
      };
      // Under HODU_CPU_WINOGRAD=auto not oneDNN 2.6's F(2x3) kernel for 32 output channels or
      // fewer, or 3x the input channels or more: it ran EfficientNetV2-S's 24 -> 24 at 192x192 and
      // 48 -> 192 at 96x96 and Inception-v3's 32 -> 32 at 147x147 1.3-1.8x slower than the direct
      // kernel, and Inception's 32 -> 64 at 147x147, 64 -> 96 at 35x35 and ResNet-50's 64 -> 64 at
      // 56x56 1.1-1.4x faster. A rule, not a timing: a model gives the same bits in every process.
      auto pays = [&] {
        return wino_policy != WinogradPolicy::Auto || (ys[1] > 32 && ys[1] < 3 * xs[1]) ||
               std::string(pd->impl_info_str()).find("wino_2x3") == std::string::npos;
      };
      pd = make_pd(src_md, dnnl::algorithm::convolution_winograd);
      if (!usable(pd) || !pays()) pd.reset();
      // oneDNN 2.6's Winograd takes ReLU as its only activation: any other (YOLOv3's and ESRGAN's
      // LeakyRelu, Clip, Tanh, ...) runs after it, on hodu's loop, where it keeps 0 at 0 (a
      // blocked layout's padding channels). ESRGAN-style 32 -> 32 conv at 384x384 with
      // LeakyRelu: 26 ms on the direct kernel, 11 on Winograd and the loop.
      packed_gemm::Epilogue loop;
      if (!pd && chain.nodes.empty() && !act.empty() && !silu && packed_gemm::available() &&
          packed_gemm::activation_of(act.c_str(), act_params.data(), static_cast<int64_t>(act_params.size()),
                                     &loop.act, &loop.p0, &loop.p1)) {
        float zero = 0.0f;
        packed_gemm::activate(&zero, 1, loop);
        if (zero == 0.0f) {
          build_act_po(false);
          set_post_ops();
          pd = make_pd(src_md, dnnl::algorithm::convolution_winograd);
          if (usable(pd) && pays()) {
            after = loop;
          } else {
            pd.reset();
            build_act_po(true);
            set_post_ops();
          }
        }
      }
    }
    // A depthwise conv of an nhwc input (ConvNeXt's, after channels-last products viewed back
    // as NCHW: data_movement.cc) reads and writes nhwc where oneDNN has a jit kernel for it,
    // sparing the reorders to and from its channel-blocked pick (AVX2). So does a stride-1
    // grouped conv of 16 channels a group or more between nhwc 1x1 convs (RegNet's, AVX-512:
    // its nhwc kernel within 3 % of the blocked one; narrower groups and stride 2 measured
    // slower than the blocked kernel and its two reorders).
    if (!pd && (depthwise || wide_groups) && blocked && layout_md(xslot) == nhwc_md(xs)) {
      const dnnl::memory::desc any_dst = dst_md;
      dst_md = nhwc_md(ys);
      pd = make_pd(nhwc_md(xs));
      const std::string impl = pd ? pd->impl_info_str() : "";
      if (!pd || impl.find("jit") == std::string::npos || impl.find("gemm") != std::string::npos) {
        pd.reset();
        dst_md = any_dst;
      }
    }
    if (!pd) pd = make_pd(src_md);
    return false;
  };
  if (choose()) return true;
  if (!pd && !chain.nodes.empty()) {  // no kernel with those post-ops: the chain runs as its own steps
    chain = {};
    set_post_ops();
    if (choose()) return true;
  }
  if (!pd) return false;
  // Below AVX-512 oneDNN 2.6 runs dilated convs past dilation 2 as im2col + sgemm over every
  // tap; hodu's tap-by-tap kernel computes only the taps' products that reach inside the image
  // (tap_conv.h). DeepLabV3-ResNet50's ASPP convs at 28x28 (rates 12, 24, 36): 51, 18 and 11 %
  // of the dense products.
  if (w && !runtime_bias && !has_z && chain.nodes.empty() && win->group == 1 && w->is_contiguous() &&
      (!bias || bias->is_contiguous())) {
    TapConv tc;
    tc.xs = xs;
    tc.ys = ys;
    for (int64_t i = 0; i < spatial; ++i) {
      tc.kernel.push_back(ws[2 + i]);
      tc.strides.push_back(win->strides[i]);
      tc.dilations.push_back(win->dilations[i] + 1);
      tc.pads_begin.push_back(win->pad_l[i]);
    }
    tc.weights = w->data<float>();
    tc.bias = bias ? bias->data<float>() : nullptr;
    tc.onednn_impl = pd->impl_info_str();
    if (packed_gemm::activation_of(act.c_str(), act_params.data(), static_cast<int64_t>(act_params.size()), &tc.act.act,
                                   &tc.act.p0, &tc.act.p1) &&
        make_tap_conv(b, n, tc))
      return true;
  }
  // Groups too narrow for oneDNN's direct kernels (its pick is im2col + sgemm): k of them as one
  // group with block-diagonal weights, where that gets a direct kernel (grouped_conv_merge.h).
  Tensor merged_w;
  int64_t merged_by = 0;
  if (w && win->group > 1 && w->is_contiguous() && std::string(pd->impl_info_str()).find("gemm") != std::string::npos) {
    const int64_t k = group_merge_factor(win->group, ws[1], ys[1] / win->group, 8);
    if (k > 0) {
      ConvWindow wide = *win;
      wide.group = win->group / k;
      wide.weight_dims[0] = wide.group;
      wide.weight_dims[2] *= k;
      wide.weight_dims[1] = ys[1] / wide.group;
      const ConvWindow narrow = *win;
      const dnnl::memory::desc narrow_w = w_md;
      *win = wide;
      w_md = dnnl::memory::desc(wide.weight_dims, dt::f32, tag::any);
      auto wide_pd = make_pd(src_md);
      if (wide_pd && std::string(wide_pd->impl_info_str()).find("gemm") == std::string::npos) {
        pd = wide_pd;
        merged_by = k;
        merged_w = merge_group_weights(*w, narrow.group, k);
        w_user = dnnl::memory::desc(wide.weight_dims, dt::f32, wide.weight_tag);
      } else {
        *win = narrow;
        w_md = narrow_w;
      }
    }
  }
  // oneDNN's gemm convolution (a 1-D conv of one input channel below AVX-512: audio1d's first,
  // kernel 11, stride 4) computes an erf GELU post-op with libm's erff one element at a time:
  // 1.8 ms for 128k outputs, the conv itself 0.07 ms. The GELU runs after it on packed_gemm's
  // AVX2 loop instead (0.21 ms both).
  if (after.act == packed_gemm::Act::None && chain.nodes.empty() && (act == "Gelu" || act == "GeluTanh") &&
      packed_gemm::available() &&
      std::string(pd->impl_info_str()).find("gemm") != std::string::npos &&
      packed_gemm::activation_of(act.c_str(), act_params.data(), static_cast<int64_t>(act_params.size()), &after.act,
                                 &after.p0, &after.p1)) {
    build_act_po(false);
    set_post_ops();
    pd = make_pd(src_md);
    if (!pd) return false;
  }
  const std::string out = chain.nodes.empty() ? n.outputs[0] : chain.output;
  for (const Node* c : chain.nodes) b.claim(*c);
  auto step = std::make_unique<ConvStep>();
  step->prim_ = dnnl::convolution_forward(*pd);
  for (const auto& [arg, value] : operands) {
    dnnl::memory m(dnnl::memory::desc(dnnl::memory::dims(ys.size(), 1), dt::f32, dnnl::memory::dims(ys.size(), 1)),
                   b.engine());
    *static_cast<float*>(m.get_data_handle()) = value;
    step->operands_.emplace_back(arg, m);
  }
  step->silu_ = silu;
  step->after_ = after;
  if (merged_by) step->weights_ = b.pack("", merged_w, w_user, pd->weights_desc());
  else if (w) step->weights_ = b.pack(n.inputs[1], *w, w_user, pd->weights_desc());
  if (bias) {
    step->has_bias_ = true;
    step->bias_ = b.pack(n.inputs[2], *bias, b_md, pd->bias_desc());
  }
  int src = b.as_layout(n.inputs[0], pd->src_desc());
  step->src_ = dnnl::memory(pd->src_desc(), b.engine(), nullptr);
  step->reads = {src};
  // Runtime weights and bias come after the residual in `reads` (ConvStep::run reads them by index).
  auto runtime_reads = [&] {
    if (!w) {
      step->w_read_ = static_cast<int>(step->reads.size());
      step->reads.push_back(b.plain(n.inputs[1]));
      step->w_user_ = dnnl::memory(w_user, b.engine(), nullptr);
      if (!(w_user == pd->weights_desc())) {
        step->w_ = dnnl::memory(pd->weights_desc(), b.engine());
        step->w_reorder_ = dnnl::reorder(step->w_user_, step->w_);
      }
    }
    if (runtime_bias) {
      step->has_bias_ = true;
      step->b_read_ = static_cast<int>(step->reads.size());
      step->reads.push_back(b.plain(n.inputs[2]));
      step->b_user_ = dnnl::memory(b_md, b.engine(), nullptr);
    }
  };
  int dst = -1;
  if (has_z) {
    int z = b.slot(n.inputs[3]);
    step->reads.push_back(z);
    // The residual read nowhere after this conv, in the conv's own output layout, is the
    // output's buffer: the sum post-op accumulates onto it, nothing is copied.
    if (layout_md(b.at(z)) == pd->dst_desc() && b.bytes_die_here(n.inputs[3], {src})) {
      dst = b.define_part(out, z, ys, pd->dst_desc(), 0);
    } else {
      step->z_ = dnnl::memory(layout_md(b.at(z)), b.engine(), nullptr);
      step->has_z_ = true;
    }
  }
  runtime_reads();
  if (dst < 0) dst = b.define(out, DType::F32, ys, pd->dst_desc());
  step->dst_ = dnnl::memory(pd->dst_desc(), b.engine(), nullptr);
  if (step->has_z_) step->z_copy_ = dnnl::reorder(step->z_, step->dst_);
  step->writes = {dst};
  if (const size_t scratch = pd->scratchpad_desc().get_size()) {
    step->scratch_ = dnnl::memory(pd->scratchpad_desc(), b.engine(), nullptr);
    step->scratch_write_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define("", DType::U8, {static_cast<int64_t>(scratch)}));
  }
  step->label = n.describe() + ": onednn " + std::string(pd->impl_info_str()) +
                (merged_by ? ", groups merged by " + std::to_string(merged_by) : "") + (silu ? ", silu loop" : "") +
                (after.act != packed_gemm::Act::None ? ", " + lower_case(act) + " loop" : "") +
                (chain.nodes.empty() ? "" : ", " + std::to_string(chain.nodes.size()) + " nodes as post-ops");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
