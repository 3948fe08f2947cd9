// LSTM, GRU and RNN on oneDNN's RNN primitives, where they compute ONNX's cell exactly:
//   LSTM  sigmoid/tanh/tanh, no clip, no input_forget; peepholes (oneDNN's order i, f, o)
//   GRU   sigmoid/tanh, no clip: gru_forward (one bias per gate, Wb + Rb, as ONNX's (r ⊙ h)·Rnᵀ
//         + Rbn), linear_before_reset: lbr_gru_forward (Rbn its fourth bias, inside r ⊙ (...))
//   RNN   tanh, relu or sigmoid, no clip
// and every sequence is full (no sequence_lens input, or a constant one of S everywhere).
// ONNX's gates [i, o, f, c] are reordered to oneDNN's [i, f, c, o] once, when the weights are
// packed. One primitive per direction (a bidirectional node runs left-to-right, then
// right-to-left) over the time-major [S, B, I] input; outputs copied into ONNX's layout.
//
// oneDNN runs the whole sequence in its own kernels (input GEMM over all steps, fused gates).
// rnn.cc's make_rnn asks for it where it is faster than the engine's loop (AVX-512, batches
// above 4), or always with HODU_CPU_RNN=onednn.
#include <cstring>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/rnn.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// Source gate of each oneDNN gate (ONNX W rows are gate-major).
std::vector<int64_t> gate_order(RnnSpec::Cell cell) {
  if (cell == RnnSpec::Lstm) return {0, 2, 3, 1};  // oneDNN i, f, c, o ← ONNX i, o, f, c
  if (cell == RnnSpec::Gru) return {0, 1, 2};       // u(z), r, o(h): the same order
  return {0};
}

// W or R of direction d ([G·H, K] rows, ONNX gate order) as ldgoi [1, 1, G, H, K] in oneDNN's order.
Tensor reorder_gates(const Tensor& w, int64_t d, const std::vector<int64_t>& order, int64_t H, int64_t K) {
  const int64_t G = static_cast<int64_t>(order.size());
  Tensor c = w.contiguous();
  const float* src = c.data<float>() + d * G * H * K;
  Tensor out = Tensor::empty(DType::F32, {1, 1, G, H, K});
  float* dst = out.data<float>();
  for (int64_t g = 0; g < G; ++g) std::memcpy(dst + g * H * K, src + order[g] * H * K, H * K * sizeof(float));
  return out;
}

class OneDnnRnnStep : public Step {
 public:
  void run(RunState& rs) override {
    const int64_t S = spec_.seq, Bn = spec_.batch, H = spec_.hidden, I = spec_.input, D = spec_.dirs;
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* src = x;
    if (spec_.layout == 1) {
      // [B, S, I] → time-major.
      for (int64_t t = 0; t < S; ++t)
        for (int64_t b = 0; b < Bn; ++b) std::memcpy(&xt_[(t * Bn + b) * I], x + (b * S + t) * I, I * sizeof(float));
      src = xt_.data();
    }
    const float* h0 = h0_in_ >= 0 ? static_cast<const float*>(rs.slots[reads[h0_in_]].data()) : nullptr;
    const float* c0 = c0_in_ >= 0 ? static_cast<const float*>(rs.slots[reads[c0_in_]].data()) : nullptr;
    float* y = y_out_ >= 0 ? static_cast<float*>(rs.slots[writes[y_out_]].data()) : nullptr;
    float* yh = yh_out_ >= 0 ? static_cast<float*>(rs.slots[writes[yh_out_]].data()) : nullptr;
    float* yc = yc_out_ >= 0 ? static_cast<float*>(rs.slots[writes[yc_out_]].data()) : nullptr;
    auto state_at = [&](int64_t d, int64_t b) { return spec_.layout == 0 ? (d * Bn + b) * H : (b * D + d) * H; };
    // Y straight from oneDNN when its [S, B, H] is Y's layout (one direction, time-major).
    const bool direct = y && D == 1 && spec_.layout == 0;
    for (int64_t d = 0; d < D; ++d) {
      Dir& dir = dirs_[d];
      for (int64_t b = 0; b < Bn; ++b) {
        if (h0) std::memcpy(&hs_[b * H], h0 + state_at(d, b), H * sizeof(float));
        else std::fill_n(&hs_[b * H], H, 0.0f);
        if (c0) std::memcpy(&cs_[b * H], c0 + state_at(d, b), H * sizeof(float));
        else std::fill_n(&cs_[b * H], H, 0.0f);
      }
      src_layer_.set_data_handle(const_cast<float*>(src));
      dst_layer_.set_data_handle(direct ? y : ys_.data());
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC_LAYER, src_layer_},     {DNNL_ARG_SRC_ITER, src_iter_},
          {DNNL_ARG_WEIGHTS_LAYER, dir.wl.mem}, {DNNL_ARG_WEIGHTS_ITER, dir.wi.mem},
          {DNNL_ARG_BIAS, dir.bias.mem},        {DNNL_ARG_DST_LAYER, dst_layer_},
          {DNNL_ARG_DST_ITER, dst_iter_}};
      if (spec_.cell == RnnSpec::Lstm) {
        args[DNNL_ARG_SRC_ITER_C] = src_iter_c_;
        args[DNNL_ARG_DST_ITER_C] = dst_iter_c_;
        if (spec_.peepholes) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = dir.peep.mem;
      }
      dir.prim.execute(rs.stream, args);
      rs.stream.wait();
      if (y && !direct)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t b = 0; b < Bn; ++b) {
            int64_t at = spec_.layout == 0 ? ((t * D + d) * Bn + b) * H : ((b * S + t) * D + d) * H;
            std::memcpy(y + at, &ys_[(t * Bn + b) * H], H * sizeof(float));
          }
      for (int64_t b = 0; b < Bn; ++b) {
        if (yh) std::memcpy(yh + state_at(d, b), &hd_[b * H], H * sizeof(float));
        if (yc) std::memcpy(yc + state_at(d, b), &cd_[b * H], H * sizeof(float));
      }
    }
  }

  struct Dir {
    dnnl::primitive prim;
    PackedConstant wl, wi, bias, peep;
  };
  RnnSpec spec_;
  std::vector<Dir> dirs_;
  dnnl::memory src_layer_, dst_layer_, src_iter_, dst_iter_, src_iter_c_, dst_iter_c_;
  std::vector<float> xt_, ys_, hs_, cs_, hd_, cd_;
  std::string impl_;
  int h0_in_ = -1, c0_in_ = -1, y_out_ = -1, yh_out_ = -1, yc_out_ = -1;
};

bool matches(const PlanBuilder& b, const Node& n, const RnnSpec& s) {
  if (s.clip > 0 || s.input_forget) return false;
  for (size_t i = 0; i < s.acts.size(); ++i) {
    RnnAct::Kind k = s.acts[i].kind;
    size_t slot = i % s.acts_per_dir;
    if (s.cell == RnnSpec::Rnn) {
      if (k != RnnAct::Tanh && k != RnnAct::Relu && k != RnnAct::Sigmoid) return false;
      if (s.acts[i].kind != s.acts[0].kind) return false;  // one primitive kind for both directions
    } else if (k != (slot == 0 ? RnnAct::Sigmoid : RnnAct::Tanh)) {
      return false;
    }
  }
  if (n.has_input(4)) {
    const Tensor* lens = passes::constant_of(b.graph(), n.inputs[4]);
    if (!lens) return false;
    for (int64_t l : lens->to_int64s())
      if (l != s.seq) return false;
  }
  return true;
}

}  // namespace

bool make_onednn_rnn(PlanBuilder& b, const Node& n, const RnnSpec& spec) {
  if (!matches(b, n, spec)) return false;
  const int64_t S = spec.seq, Bn = spec.batch, H = spec.hidden, I = spec.input, G = spec.gates;
  const auto order = gate_order(spec.cell);
  const bool lbr = spec.linear_before_reset;
  const int64_t bias_gates = lbr ? 4 : G;
  auto any = [](dnnl::memory::dims d) { return dnnl::memory::desc(d, dt::f32, tag::any); };
  dnnl::memory::desc src_layer({S, Bn, I}, dt::f32, tag::tnc), dst_layer({S, Bn, H}, dt::f32, tag::tnc);
  dnnl::memory::desc iter({1, 1, Bn, H}, dt::f32, tag::ldnc);
  dnnl::memory::desc wl = any({1, 1, I, G, H}), wi = any({1, 1, H, G, H});
  dnnl::memory::desc bias({1, 1, bias_gates, H}, dt::f32, tag::ldgo);
  dnnl::memory::desc peep({1, 1, 3, H}, dt::f32, tag::ldgo);
  auto step = std::make_unique<OneDnnRnnStep>();
  const Tensor* W = passes::constant_of(b.graph(), n.inputs[1]);
  const Tensor* R = passes::constant_of(b.graph(), n.inputs[2]);
  const Tensor* Bt = n.has_input(3) ? passes::constant_of(b.graph(), n.inputs[3]) : nullptr;
  const Tensor* P = spec.peepholes ? passes::constant_of(b.graph(), n.inputs[7]) : nullptr;
  std::vector<double> bv = Bt ? Bt->to_doubles() : std::vector<double>(static_cast<size_t>(spec.dirs * 2 * G * H), 0.0);
  std::vector<double> pv = P ? P->to_doubles() : std::vector<double>();
  try {
    for (int64_t d = 0; d < spec.dirs; ++d) {
      auto dir = (spec.reverse || d == 1) ? dnnl::rnn_direction::unidirectional_right2left
                                          : dnnl::rnn_direction::unidirectional_left2right;
      const auto inf = dnnl::prop_kind::forward_inference;
      dnnl::primitive prim;
      // oneDNN 2.6 names its RNN "ref:any" though it runs jit GEMMs and a jit gate kernel.
      std::string impl;
      dnnl::memory::desc wl_pd, wi_pd, bias_pd, peep_pd;
      if (spec.cell == RnnSpec::Lstm) {
        auto desc = spec.peepholes ? dnnl::lstm_forward::desc(inf, dir, src_layer, iter, iter, wl, wi, peep, bias,
                                                              dst_layer, iter, iter)
                                   : dnnl::lstm_forward::desc(inf, dir, src_layer, iter, iter, wl, wi, bias,
                                                              dst_layer, iter, iter);
        dnnl::lstm_forward::primitive_desc pd(desc, b.engine());
        impl = pd.impl_info_str();
        prim = dnnl::lstm_forward(pd);
        wl_pd = pd.weights_layer_desc(), wi_pd = pd.weights_iter_desc(), bias_pd = pd.bias_desc();
        if (spec.peepholes) peep_pd = pd.weights_peephole_desc();
      } else if (spec.cell == RnnSpec::Gru && lbr) {
        dnnl::lbr_gru_forward::desc desc(inf, dir, src_layer, iter, wl, wi, bias, dst_layer, iter);
        dnnl::lbr_gru_forward::primitive_desc pd(desc, b.engine());
        impl = pd.impl_info_str();
        prim = dnnl::lbr_gru_forward(pd);
        wl_pd = pd.weights_layer_desc(), wi_pd = pd.weights_iter_desc(), bias_pd = pd.bias_desc();
      } else if (spec.cell == RnnSpec::Gru) {
        dnnl::gru_forward::desc desc(inf, dir, src_layer, iter, wl, wi, bias, dst_layer, iter);
        dnnl::gru_forward::primitive_desc pd(desc, b.engine());
        impl = pd.impl_info_str();
        prim = dnnl::gru_forward(pd);
        wl_pd = pd.weights_layer_desc(), wi_pd = pd.weights_iter_desc(), bias_pd = pd.bias_desc();
      } else {
        RnnAct::Kind k = spec.acts[0].kind;
        auto alg = k == RnnAct::Tanh   ? dnnl::algorithm::eltwise_tanh
                   : k == RnnAct::Relu ? dnnl::algorithm::eltwise_relu
                                       : dnnl::algorithm::eltwise_logistic;
        dnnl::vanilla_rnn_forward::desc desc(inf, alg, dir, src_layer, iter, wl, wi, bias, dst_layer, iter);
        dnnl::vanilla_rnn_forward::primitive_desc pd(desc, b.engine());
        impl = pd.impl_info_str();
        prim = dnnl::vanilla_rnn_forward(pd);
        wl_pd = pd.weights_layer_desc(), wi_pd = pd.weights_iter_desc(), bias_pd = pd.bias_desc();
      }
      OneDnnRnnStep::Dir out;
      out.prim = prim;
      // ONNX W [G·H, I] per direction is ldgoi; oneDNN reorders it into its own layout.
      out.wl = pack_constant(b.engine(), reorder_gates(*W, d, order, H, I),
                             dnnl::memory::desc({1, 1, I, G, H}, dt::f32, tag::ldgoi), wl_pd);
      out.wi = pack_constant(b.engine(), reorder_gates(*R, d, order, H, H),
                             dnnl::memory::desc({1, 1, H, G, H}, dt::f32, tag::ldgoi), wi_pd);
      // Biases: Wb + Rb per oneDNN gate; lbr GRU keeps Rb of the candidate as its fourth.
      Tensor bt = Tensor::empty(DType::F32, {1, 1, bias_gates, H});
      float* bp = bt.data<float>();
      const double* wb = bv.data() + d * 2 * G * H;
      const double* rb = wb + G * H;
      for (int64_t g = 0; g < G; ++g)
        for (int64_t j = 0; j < H; ++j) {
          int64_t k = order[g] * H + j;
          bool split = lbr && g == 2;
          bp[g * H + j] = static_cast<float>(wb[k] + (split ? 0.0 : rb[k]));
        }
      if (lbr)
        for (int64_t j = 0; j < H; ++j) bp[3 * H + j] = static_cast<float>(rb[2 * H + j]);
      out.bias = pack_constant(b.engine(), bt, bias, bias_pd);
      if (spec.peepholes) {
        // ONNX P [i, o, f], oneDNN [i, f, o].
        Tensor pt = Tensor::empty(DType::F32, {1, 1, 3, H});
        float* pp = pt.data<float>();
        const int64_t src_of[3] = {0, 2, 1};
        for (int64_t g = 0; g < 3; ++g)
          for (int64_t j = 0; j < H; ++j) pp[g * H + j] = static_cast<float>(pv[d * 3 * H + src_of[g] * H + j]);
        out.peep = pack_constant(b.engine(), pt, peep, peep_pd);
      }
      step->dirs_.push_back(std::move(out));
      step->impl_ = impl;
    }
  } catch (const dnnl::error&) {
    return false;
  }
  step->spec_ = spec;
  if (spec.layout == 1) step->xt_.resize(static_cast<size_t>(S * Bn * I));
  step->ys_.resize(static_cast<size_t>(S * Bn * H));
  for (auto* v : {&step->hs_, &step->cs_, &step->hd_, &step->cd_}) v->resize(static_cast<size_t>(Bn * H));
  step->src_layer_ = dnnl::memory(src_layer, b.engine(), nullptr);
  step->dst_layer_ = dnnl::memory(dst_layer, b.engine(), nullptr);
  step->src_iter_ = dnnl::memory(iter, b.engine(), step->hs_.data());
  step->src_iter_c_ = dnnl::memory(iter, b.engine(), step->cs_.data());
  step->dst_iter_ = dnnl::memory(iter, b.engine(), step->hd_.data());
  step->dst_iter_c_ = dnnl::memory(iter, b.engine(), step->cd_.data());
  step->reads.push_back(b.plain(n.inputs[0]));
  if (n.has_input(5)) {
    step->h0_in_ = static_cast<int>(step->reads.size());
    step->reads.push_back(b.plain(n.inputs[5]));
  }
  if (spec.cell == RnnSpec::Lstm && n.has_input(6)) {
    step->c0_in_ = static_cast<int>(step->reads.size());
    step->reads.push_back(b.plain(n.inputs[6]));
  }
  const int64_t D = spec.dirs;
  std::vector<int64_t> yshape = spec.layout == 0 ? std::vector<int64_t>{S, D, Bn, H} : std::vector<int64_t>{Bn, S, D, H};
  std::vector<int64_t> sshape = spec.layout == 0 ? std::vector<int64_t>{D, Bn, H} : std::vector<int64_t>{Bn, D, H};
  int* outs[3] = {&step->y_out_, &step->yh_out_, &step->yc_out_};
  for (size_t i = 0; i < 3 && i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty() || (i == 2 && spec.cell != RnnSpec::Lstm)) continue;
    *outs[i] = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define(n.outputs[i], DType::F32, i == 0 ? yshape : sshape));
  }
  step->label = n.describe() + ": onednn rnn " + step->impl_;
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
