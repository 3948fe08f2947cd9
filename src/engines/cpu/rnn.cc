// LSTM, GRU and RNN (f32, constant weights) on the cpu engine, every ONNX attribute: directions,
// activations with alpha/beta, clip, LSTM peepholes and input_forget, GRU linear_before_reset,
// initial states, sequence_lens, layout 0/1.
//
// A hand loop: the input projection of every step at once (one oneDNN matmul, below AVX-512 its
// 1x1 conv as kernels/cpu/matmul_as_conv.h says, W packed once,
// both biases folded in), then per step the recurrent product h·Rᵀ and one fused loop over the
// gates (activations on vector_math's exp). On AVX2 and up the recurrent product is
// packed_gemm's (Rᵀ packed once; gemm_few_rows for up to 4 batch rows), else a GEMV per batch
// row for small batches, a oneDNN matmul otherwise.
//
// oneDNN's RNN primitives (rnn_onednn.cc) run the nodes whose cell they compute exactly where
// they are faster: AVX-512 at batches above 4 (its brgemm kernels). Below AVX-512 oneDNN 2.6
// calls its sgemm per step, and at a few batch rows its per-step cost is above the loop's; the
// loop measured 10-40 % less CPU time at batch 1-3 on both ISAs, 10-20 % less at AVX2 on
// batches 8-16, and 10-25 % more at AVX-512 on those (docs/performance.md).
#include "engines/cpu/rnn.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/matmul_as_conv.h"
#include "kernels/cpu/packed_gemm.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

using vector_math::fast_exp;

// Batches up to this size run their recurrent product as GEMVs (a matmul primitive's call
// costs more than the product of a few rows).
constexpr int64_t kGemvBatch = 4;

HODU_ISA_BODY void clip_in_place_body(float* x, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] < -c ? -c : (x[i] > c ? c : x[i]);
}
HODU_ISA_VARIANTS(void, clip_in_place, (float* x, int64_t n, float c), (x, n, c))

// f(x) in place over x[0, n): the switch outside the loops so that each one vectorizes.
HODU_ISA_BODY void activate_body(const RnnAct& a, float* x, int64_t n) {
  const float al = a.alpha, be = a.beta;
  switch (a.kind) {
    case RnnAct::Sigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + fast_exp(-x[i]));
      break;
    case RnnAct::Tanh:
      // 1 - 2 / (exp(2x) + 1): exact at the ends (fast_exp clamps), absolute error ~1e-7.
      for (int64_t i = 0; i < n; ++i) x[i] = 1.0f - 2.0f / (fast_exp(2.0f * x[i]) + 1.0f);
      break;
    case RnnAct::Relu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? x[i] : 0.0f;
      break;
    case RnnAct::Affine:
      for (int64_t i = 0; i < n; ++i) x[i] = al * x[i] + be;
      break;
    case RnnAct::LeakyRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? al * x[i] : x[i];
      break;
    case RnnAct::ThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > al ? x[i] : 0.0f;
      break;
    case RnnAct::ScaledTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = al * (1.0f - 2.0f / (fast_exp(2.0f * be * x[i]) + 1.0f));
      break;
    case RnnAct::HardSigmoid:
      for (int64_t i = 0; i < n; ++i) {
        float v = al * x[i] + be;
        x[i] = v < 0 ? 0.0f : (v > 1 ? 1.0f : v);
      }
      break;
    case RnnAct::Elu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? al * (fast_exp(x[i]) - 1.0f) : x[i];
      break;
    case RnnAct::Softsign:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + (x[i] < 0 ? -x[i] : x[i]));
      break;
    case RnnAct::Softplus:
      for (int64_t i = 0; i < n; ++i) x[i] = std::log1p(std::exp(x[i]));
      break;
  }
}
HODU_ISA_VARIANTS(void, activate, (const RnnAct& a, float* x, int64_t n), (a, x, n))

// LSTM cell after the products: g = [i, o, f, c] pre-activations (x part + h part + biases);
// c, h updated in place.
HODU_ISA_BODY void lstm_peep_body(float* g, const float* p, const float* c, int64_t H) {
  for (int64_t j = 0; j < H; ++j) g[j] += p[j] * c[j];
  for (int64_t j = 0; j < H; ++j) g[2 * H + j] += p[2 * H + j] * c[j];
}
HODU_ISA_VARIANTS(void, lstm_peep, (float* g, const float* p, const float* c, int64_t H), (g, p, c, H))

HODU_ISA_BODY void lstm_state_body(const float* g, float* c, float* cand, int64_t H, bool coupled) {
  // cand holds act_g(c~) on entry, the new c on exit (in c too).
  for (int64_t j = 0; j < H; ++j) {
    float f = coupled ? 1.0f - g[j] : g[2 * H + j];
    float cn = f * c[j] + g[j] * cand[j];
    c[j] = cn;
    cand[j] = cn;
  }
}
HODU_ISA_VARIANTS(void, lstm_state, (const float* g, float* c, float* cand, int64_t H, bool coupled),
                  (g, c, cand, H, coupled))

HODU_ISA_BODY void add_rows_body(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + (b ? b[i] : 0.0f);
}
HODU_ISA_VARIANTS(void, add_rows, (float* y, const float* a, const float* b, int64_t n), (y, a, b, n))

HODU_ISA_BODY void mul_rows_body(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}
HODU_ISA_VARIANTS(void, mul_rows, (float* y, const float* a, const float* b, int64_t n), (y, a, b, n))

// GRU: h = (1 - z) ⊙ n + z ⊙ h.
HODU_ISA_BODY void gru_state_body(const float* z, const float* n, float* h, int64_t H) {
  for (int64_t j = 0; j < H; ++j) h[j] = (1.0f - z[j]) * n[j] + z[j] * h[j];
}
HODU_ISA_VARIANTS(void, gru_state, (const float* z, const float* n, float* h, int64_t H), (z, n, h, H))

// y[r] = W[r, :]·x + bias[r] for rows [0, rows), split over threads when large.
void gemv(const float* w, const float* x, const float* bias, float* y, int64_t rows, int64_t cols, int threads) {
  const int64_t macs = rows * cols;
  if (threads <= 1 || macs < (1 << 17)) {
    gemv_rows(w, x, bias, y, 0, rows, cols);
    return;
  }
  const int64_t chunk = 64;
  parallel_for((rows + chunk - 1) / chunk, threads, [&](int64_t c) {
    gemv_rows(w, x, bias, y, c * chunk, std::min(rows, (c + 1) * chunk), cols);
  });
}

// A [M, K] × Wᵀ product with W [N, K] row-major: oneDNN matmul, W packed once when constant
// (else read in place at each run, with the bias).
struct Product {
  dnnl::primitive prim;  // oneDNN's matmul, or below AVX-512 its 1x1 conv (constant weights)
  dnnl::memory src, dst, w_plain, b_plain;
  PackedConstant weights, bias;
  bool has_bias = false, packed = false;
  void make(PlanBuilder& b, int64_t M, int64_t K, int64_t N, const float* w, const float* bias_data, bool constant) {
    dnnl::memory::desc a_md = plain_md({M, K}), d_md = plain_md({M, N});
    dnnl::memory::desc w_user({K, N}, dt::f32, tag::ba), w_any({K, N}, dt::f32, tag::any);
    dnnl::memory::desc b_md({1, N}, dt::f32, tag::ab);
    if (constant && matmul_as_conv_allowed()) {
      // Below AVX-512 oneDNN's matmul is its sgemm: the 1x1 conv reads W packed once
      // (kernels/cpu/matmul_as_conv.h). bilstm2's 200 x 512 x 1024 projections at avx2.
      if (auto cpd = onednn::conv_1x1_pd(b.engine(), M, K, N, bias_data != nullptr, dnnl::primitive_attr())) {
        prim = dnnl::convolution_forward(*cpd);
        packed = true;
        has_bias = bias_data != nullptr;
        Tensor wt = Tensor::from_bytes(DType::F32, {N, K}, w, static_cast<size_t>(N * K) * sizeof(float));
        weights = pack_constant(b.engine(), wt, onednn::conv_1x1_weights(K, N, true), cpd->weights_desc());
        if (bias_data) {
          Tensor bt = Tensor::from_bytes(DType::F32, {N}, bias_data, static_cast<size_t>(N) * sizeof(float));
          bias = pack_constant(b.engine(), bt, dnnl::memory::desc({N}, dt::f32, tag::a), cpd->bias_desc());
        }
        src = dnnl::memory(cpd->src_desc(), b.engine(), nullptr);
        dst = dnnl::memory(cpd->dst_desc(), b.engine(), nullptr);
        return;
      }
    }
    const auto& w_md = constant ? w_any : w_user;
    auto desc = bias_data ? dnnl::matmul::desc(a_md, w_md, b_md, d_md) : dnnl::matmul::desc(a_md, w_md, d_md);
    dnnl::matmul::primitive_desc pd(desc, b.engine());
    prim = dnnl::matmul(pd);
    packed = constant;
    has_bias = bias_data != nullptr;
    if (constant) {
      Tensor wt = Tensor::from_bytes(DType::F32, {N, K}, w, static_cast<size_t>(N * K) * sizeof(float));
      weights = pack_constant(b.engine(), wt, w_user, pd.weights_desc());
      if (bias_data) {
        Tensor bt = Tensor::from_bytes(DType::F32, {1, N}, bias_data, static_cast<size_t>(N) * sizeof(float));
        bias = pack_constant(b.engine(), bt, b_md, pd.bias_desc());
      }
    } else {
      w_plain = dnnl::memory(w_user, b.engine(), nullptr);
      b_plain = dnnl::memory(b_md, b.engine(), nullptr);
    }
    src = dnnl::memory(a_md, b.engine(), nullptr);
    dst = dnnl::memory(d_md, b.engine(), nullptr);
  }
  // `w`, `bias_data`: the current weights when they are not constant.
  void run(dnnl::stream& s, const float* a, float* y, const float* w, const float* bias_data) {
    src.set_data_handle(const_cast<float*>(a));
    dst.set_data_handle(y);
    if (!packed) {
      w_plain.set_data_handle(const_cast<float*>(w));
      b_plain.set_data_handle(const_cast<float*>(bias_data));
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed ? weights.mem : w_plain}, {DNNL_ARG_DST, dst}};
    if (has_bias) args[DNNL_ARG_BIAS] = packed ? bias.mem : b_plain;
    prim.execute(s, args);
  }
};

class RnnStep : public Step {
 public:
  // W, R, B, P: the constants, or null where the value is read at each run.
  RnnStep(PlanBuilder& b, const Node& n, RnnSpec spec, const Tensor* W, const Tensor* R, const Tensor* B,
          const Tensor* P)
      : spec_(std::move(spec)) {
    const int64_t G = spec_.gates, H = spec_.hidden, I = spec_.input, S = spec_.seq, Bn = spec_.batch;
    const int64_t GH = G * H;
    constant_ = W && R && (B || !n.has_input(3)) && (P || !spec_.peepholes);
    packed_ = packed_gemm::available();
    if (constant_) load(W, R, B, P);
    else {
      w_.resize(static_cast<size_t>(spec_.dirs * GH * I));
      r_.resize(static_cast<size_t>(spec_.dirs * GH * H));
      dirs_.resize(static_cast<size_t>(spec_.dirs));
      for (auto& dir : dirs_) {
        dir.xbias.resize(static_cast<size_t>(GH));
        dir.rbn.resize(static_cast<size_t>(H));
      }
    }
    const bool gru = spec_.cell == RnnSpec::Gru;
    for (int64_t d = 0; d < spec_.dirs; ++d) {
      Dir& dir = dirs_[d];
      if (S * Bn > kGemvBatch)
        dir.proj.make(b, S * Bn, I, GH, w_.data() + d * GH * I, dir.xbias.data(), constant_);
      // GRU without linear_before_reset: z and r only (the candidate's product needs r first).
      if (Bn > kGemvBatch && !packed_)
        dir.rec.make(b, Bn, H, gru && !spec_.linear_before_reset ? 2 * H : GH, r_.data() + d * GH * H, nullptr,
                     constant_);
    }
    for (auto& dir : dirs_) {
      dir.gx.resize(static_cast<size_t>(S * Bn * GH));
      dir.gh.resize(static_cast<size_t>(Bn * GH));
      dir.tmp.resize(static_cast<size_t>(Bn * 2 * H));
      dir.h.resize(static_cast<size_t>(Bn * H));
      dir.c.resize(static_cast<size_t>(Bn * H));
      if (spec_.dirs == 2) dir.stream = dnnl::stream(b.engine());
    }
    for (size_t i = 0; i < 3; ++i) {
      in_[i] = -1;
      out_[i] = -1;
    }
    reads.push_back(b.plain(n.inputs[0]));
    if (!constant_) {
      for (size_t i : {size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
        if (i == 7 && !spec_.peepholes) continue;
        weight_at_[i == 7 ? 3 : i - 1] = n.has_input(i) ? static_cast<int>(reads.size()) : -1;
        if (n.has_input(i)) reads.push_back(b.plain(n.inputs[i]));
      }
    }
    auto opt_in = [&](size_t idx, int& at) {
      if (n.has_input(idx)) {
        at = static_cast<int>(reads.size());
        reads.push_back(b.plain(n.inputs[idx]));
      }
    };
    opt_in(4, in_[0]);  // sequence_lens
    opt_in(5, in_[1]);  // initial_h
    if (spec_.cell == RnnSpec::Lstm) opt_in(6, in_[2]);  // initial_c
    const int64_t D = spec_.dirs;
    std::vector<int64_t> yshape = spec_.layout == 0 ? std::vector<int64_t>{S, D, Bn, H} : std::vector<int64_t>{Bn, S, D, H};
    std::vector<int64_t> sshape = spec_.layout == 0 ? std::vector<int64_t>{D, Bn, H} : std::vector<int64_t>{Bn, D, H};
    for (size_t i = 0; i < 3 && i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty() || (i == 2 && spec_.cell != RnnSpec::Lstm)) continue;
      out_[i] = static_cast<int>(writes.size());
      writes.push_back(b.define(n.outputs[i], DType::F32, i == 0 ? yshape : sshape));
    }
    label = n.describe() + ": cpu rnn loop";
  }

  void run(RunState& rs) override {
    const int64_t G = spec_.gates, H = spec_.hidden, I = spec_.input, S = spec_.seq, Bn = spec_.batch;
    const int64_t GH = G * H, D = spec_.dirs;
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    if (!constant_) {
      auto at = [&](int i) { return weight_at_[i] >= 0 ? &rs.slots[reads[weight_at_[i]]].tensor() : nullptr; };
      load(at(0), at(1), at(2), at(3));
    }
    std::vector<int64_t>& lens = lens_;
    lens.assign(static_cast<size_t>(Bn), S);
    if (in_[0] >= 0) {
      const Tensor& l = rs.slots[reads[in_[0]]].tensor();
      if (l.numel() != Bn)
        fail(ErrorCode::InvalidArgument, "{}: sequence_lens has {} values, expected {}", spec_.what, l.numel(), Bn);
      for (int64_t b = 0; b < Bn; ++b) {
        lens[b] = l.get_int64(b);
        if (lens[b] < 0 || lens[b] > S)
          fail(ErrorCode::InvalidArgument, "{}: sequence_lens[{}] = {} out of [0, {}]", spec_.what, b, lens[b], S);
      }
    }
    const bool full = std::all_of(lens.begin(), lens.end(), [&](int64_t l) { return l == S; });
    float* y = out_[0] >= 0 ? static_cast<float*>(rs.slots[writes[out_[0]]].data()) : nullptr;
    // Where step t, batch b, direction d lives in Y and in the state outputs.
    auto y_at = [&](int64_t t, int64_t d, int64_t b) {
      return spec_.layout == 0 ? ((t * D + d) * Bn + b) * H : ((b * S + t) * D + d) * H;
    };
    auto state_at = [&](int64_t d, int64_t b) { return spec_.layout == 0 ? (d * Bn + b) * H : (b * D + d) * H; };
    auto x_row = [&](int64_t t, int64_t b) { return spec_.layout == 0 ? t * Bn + b : b * S + t; };
    const float* h0 = in_[1] >= 0 ? static_cast<const float*>(rs.slots[reads[in_[1]]].data()) : nullptr;
    const float* c0 = in_[2] >= 0 ? static_cast<const float*>(rs.slots[reads[in_[2]]].data()) : nullptr;
    float* yh = out_[1] >= 0 ? static_cast<float*>(rs.slots[writes[out_[1]]].data()) : nullptr;
    float* yc = out_[2] >= 0 ? static_cast<float*>(rs.slots[writes[out_[2]]].data()) : nullptr;
    // One direction on `threads` threads, its oneDNN products on `stream`.
    auto direction = [&](int64_t d, int threads, dnnl::stream& stream) {
      Dir& dir = dirs_[d];
      const bool reverse = spec_.reverse || d == 1;
      // Input projection of every step (rows in X's order).
      if (S * Bn > kGemvBatch) {
        dir.proj.run(stream, x, dir.gx.data(), w_.data() + d * GH * I, dir.xbias.data());
      } else {
        for (int64_t r = 0; r < S * Bn; ++r)
          gemv(w_.data() + d * GH * I, x + r * I, dir.xbias.data(), dir.gx.data() + r * GH, GH, I, threads);
      }
      for (int64_t b = 0; b < Bn; ++b) {
        if (h0) std::memcpy(&dir.h[b * H], h0 + state_at(d, b), H * sizeof(float));
        else std::fill_n(&dir.h[b * H], H, 0.0f);
        if (c0) std::memcpy(&dir.c[b * H], c0 + state_at(d, b), H * sizeof(float));
        else std::fill_n(&dir.c[b * H], H, 0.0f);
      }
      const float* r = r_.data() + d * GH * H;
      for (int64_t step = 0; step < S; ++step) {
        const int64_t t = reverse ? S - 1 - step : step;
        recurrent(stream, threads, dir, r, full, t);
        for (int64_t b = 0; b < Bn; ++b) {
          if (t >= lens[b]) {
            if (y) std::fill_n(y + y_at(t, d, b), H, 0.0f);
            continue;
          }
          cell(dir, d, r, dir.gx.data() + x_row(t, b) * GH, dir.gh.data() + b * GH, &dir.h[b * H], &dir.c[b * H],
               &dir.tmp[b * 2 * H]);
          if (y) std::memcpy(y + y_at(t, d, b), &dir.h[b * H], H * sizeof(float));
        }
      }
      for (int64_t b = 0; b < Bn; ++b) {
        if (yh) std::memcpy(yh + state_at(d, b), &dir.h[b * H], H * sizeof(float));
        if (yc) std::memcpy(yc + state_at(d, b), &dir.c[b * H], H * sizeof(float));
      }
    };
    // Two directions on two threads at once, as ONNX Runtime runs them: a step's recurrent
    // product of a few rows is too small to split, so one thread per direction halves the run.
    if (D == 2 && rs.threads >= 2) {
      parallel_for(2, 2, [&](int64_t d) { direction(d, 1, dirs_[d].stream); });
    } else {
      for (int64_t d = 0; d < D; ++d) direction(d, rs.threads, rs.stream);
    }
  }

 private:
  struct Dir {
    std::vector<float> xbias, rbn;
    Tensor rpk;  // Rᵀ packed for packed_gemm (packed_ only; 64-byte aligned, as its loads need)
    Product proj, rec;
    // The direction's own buffers and stream: two directions may run at once.
    std::vector<float> gx, gh, tmp, h, c, scratch;
    dnnl::stream stream;
  };

  // Copies W, R, P and the folded biases in (B null: zeros). Sizes were checked at plan time for
  // constants; values read at run time are checked here.
  void load(const Tensor* W, const Tensor* R, const Tensor* B, const Tensor* P) {
    const int64_t G = spec_.gates, H = spec_.hidden, I = spec_.input, D = spec_.dirs, GH = G * H;
    auto copy = [&](const Tensor* t, std::vector<float>& to, std::vector<int64_t> shape, const char* what) {
      if (!t) return false;
      if (t->dtype() != DType::F32 || t->shape() != shape)
        fail(ErrorCode::InvalidArgument, "{}: {} is {}, expected f32{}", spec_.what, what, t->type_string(),
             shape_to_string(shape));
      Tensor c = t->contiguous();
      to.assign(c.data<float>(), c.data<float>() + c.numel());
      return true;
    };
    copy(W, w_, {D, GH, I}, "W");
    copy(R, r_, {D, GH, H}, "R");
    if (!copy(B, bias_, {D, 2 * GH}, "B")) bias_.assign(static_cast<size_t>(D * 2 * GH), 0.0f);
    if (spec_.peepholes) copy(P, p_, {D, 3 * H}, "P");
    dirs_.resize(static_cast<size_t>(D));
    const bool gru = spec_.cell == RnnSpec::Gru;
    for (int64_t d = 0; d < D; ++d) {
      Dir& dir = dirs_[d];
      const float* wb = bias_.data() + d * 2 * GH;
      const float* rb = wb + GH;
      // Both biases folded into the projection, except GRU's Rb of the candidate gate (it sits
      // inside r ⊙ (...) with linear_before_reset, after the r ⊙ h product without).
      dir.xbias.resize(static_cast<size_t>(GH));
      for (int64_t i = 0; i < GH; ++i) dir.xbias[i] = wb[i] + (gru && i >= 2 * H ? 0.0f : rb[i]);
      if (gru) dir.rbn.assign(rb + 2 * H, rb + 3 * H);
      if (packed_) {
        // Rᵀ (H x rows, element (k, j) = R[j, k]) in packed_gemm's panels.
        const int64_t rows = rec_rows();
        if (!dir.rpk.defined()) dir.rpk = Tensor::empty(DType::F32, {packed_gemm::packed_size(H, rows)});
        packed_gemm::pack_b(r_.data() + d * GH * H, 1, H, H, rows, dir.rpk.data<float>());
      }
    }
  }

  // Columns of the recurrent product: GRU without linear_before_reset has z and r only (the
  // candidate's product needs r first).
  int64_t rec_rows() const {
    const bool split = spec_.cell == RnnSpec::Gru && !spec_.linear_before_reset;
    return split ? 2 * spec_.hidden : spec_.gates * spec_.hidden;
  }

  // gh = h·Rᵀ for the batch rows active at step t (GRU without linear_before_reset: the z and r
  // gates only; the candidate's product needs r first).
  void recurrent(dnnl::stream& stream, int threads_here, Dir& dir, const float* r, bool full, int64_t t) {
    const int64_t G = spec_.gates, H = spec_.hidden, Bn = spec_.batch, GH = G * H;
    const bool split = spec_.cell == RnnSpec::Gru && !spec_.linear_before_reset;
    const int64_t rows = rec_rows();
    if (packed_) {
      // Every batch row at once, gh rows GH wide (rows past their sequence_lens are computed and
      // ignored). Threads only for a product worth a parallel region.
      const int threads = Bn * rows * H >= (1 << 17) ? threads_here : 1;
      if (Bn <= kGemvBatch) {
        // Columns split over the threads in blocks of two panels (gemm_few_rows' tile).
        const int64_t block = 2 * packed_gemm::kPanel;
        const int64_t blocks = (rows + block - 1) / block;
        const float* pb = dir.rpk.data<float>();
        auto run = [&](int64_t c0, int64_t c1) {
          packed_gemm::gemm_few_rows(Bn, c1 - c0, H, dir.h.data(), H, pb + c0 * H, dir.gh.data() + c0, GH);
        };
        if (threads <= 1 || blocks < 2) {
          run(0, rows);
        } else {
          const int64_t per = (blocks + threads - 1) / threads;
          parallel_for((blocks + per - 1) / per, threads,
                       [&](int64_t i) { run(i * per * block, std::min(rows, (i + 1) * per * block)); });
        }
      } else {
        packed_gemm::gemm(Bn, rows, H, {dir.h.data(), H, 8}, dir.rpk.data<float>(), {dir.gh.data(), GH, 8}, {},
                          threads);
      }
      return;
    }
    if (Bn > kGemvBatch) {
      if (split) {
        // rec writes [Bn, 2H] rows; gh rows are GH wide.
        dir.rec.run(stream, dir.h.data(), tmp2(dir, Bn * 2 * H), r, nullptr);
        for (int64_t b = 0; b < Bn; ++b) std::memcpy(&dir.gh[b * GH], &dir.scratch[b * 2 * H], 2 * H * sizeof(float));
      } else {
        dir.rec.run(stream, dir.h.data(), dir.gh.data(), r, nullptr);
      }
      return;
    }
    for (int64_t b = 0; b < Bn; ++b)
      if (full || t < lens_[b]) gemv(r, &dir.h[b * H], nullptr, &dir.gh[b * GH], rows, H, threads_here);
  }

  float* tmp2(Dir& dir, int64_t n) {
    if (static_cast<int64_t>(dir.scratch.size()) < n) dir.scratch.resize(static_cast<size_t>(n));
    return dir.scratch.data();
  }

  // One batch row's cell: gx its projected input (biases in), gh its recurrent product; h, c updated.
  void cell(Dir& dir, int64_t d, const float* r, const float* gx, float* gh, float* h, float* c, float* tmp) {
    const int64_t H = spec_.hidden, G = spec_.gates;
    const RnnAct* act = &spec_.acts[static_cast<size_t>(d) * spec_.acts_per_dir];
    const float clip = spec_.clip;
    float* g = gh;  // pre-activations overwrite the recurrent product
    if (spec_.cell == RnnSpec::Rnn) {
      add_rows(g, gx, gh, H);
      if (clip > 0) clip_in_place(g, H, clip);
      activate(act[0], g, H);
      std::memcpy(h, g, H * sizeof(float));
      return;
    }
    if (spec_.cell == RnnSpec::Lstm) {
      add_rows(g, gx, gh, G * H);
      if (!p_.empty()) lstm_peep(g, p_.data() + d * 3 * H, c, H);
      if (clip > 0) {
        clip_in_place(g, H, clip);
        clip_in_place(g + 2 * H, 2 * H, clip);
      }
      activate(act[0], g, H);                                    // i
      if (!spec_.input_forget) activate(act[0], g + 2 * H, H);  // f
      float* cand = tmp;
      std::memcpy(cand, g + 3 * H, H * sizeof(float));
      activate(act[1], cand, H);
      lstm_state(g, c, cand, H, spec_.input_forget);  // cand = c = f c + i c~
      // o sees the new c through its peephole.
      float* o = g + H;
      if (!p_.empty()) {
        const float* po = p_.data() + d * 3 * H + H;
        for (int64_t j = 0; j < H; ++j) o[j] += po[j] * c[j];
      }
      if (clip > 0) clip_in_place(o, H, clip);
      activate(act[0], o, H);
      activate(act[2], cand, H);
      mul_rows(h, o, cand, H);
      return;
    }
    // GRU: z, r, n.
    add_rows(g, gx, gh, 2 * H);
    if (clip > 0) clip_in_place(g, 2 * H, clip);
    activate(act[0], g, 2 * H);
    const float* z = g;
    const float* rt = g + H;
    float* nn = g + 2 * H;
    if (spec_.linear_before_reset) {
      // n = g(x Wnᵀ + Wbn + r ⊙ (h Rnᵀ + Rbn))
      for (int64_t j = 0; j < H; ++j) nn[j] = gx[2 * H + j] + rt[j] * (gh[2 * H + j] + dir.rbn[j]);
    } else {
      // n = g(x Wnᵀ + Wbn + (r ⊙ h) Rnᵀ + Rbn)
      float* rh = tmp;
      mul_rows(rh, rt, h, H);
      gemv_rows(r + 2 * H * H, rh, dir.rbn.data(), nn, 0, H, H);
      add_rows(nn, nn, gx + 2 * H, H);
    }
    if (clip > 0) clip_in_place(nn, H, clip);
    activate(act[1], nn, H);
    gru_state(z, nn, h, H);
  }

  RnnSpec spec_;
  bool constant_ = true;
  // The recurrent product on packed_gemm (AVX2 and up, HODU_MAX_ISA permitting): one call for
  // every batch row, Rᵀ packed once; else GEMVs or a oneDNN matmul.
  bool packed_ = false;
  int weight_at_[4] = {-1, -1, -1, -1};  // W, R, B, P read at run time: index into reads
  std::vector<float> w_, r_, p_, bias_;
  std::vector<Dir> dirs_;
  std::vector<int64_t> lens_;
  int in_[3], out_[3];  // sequence_lens, initial_h, initial_c: index into reads; Y, Y_h, Y_c: into writes
};

}  // namespace

std::optional<RnnSpec> rnn_spec(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return std::nullopt;
  RnnSpec s;
  if (n.op_type == "LSTM") s.cell = RnnSpec::Lstm, s.gates = 4;
  else if (n.op_type == "GRU") s.cell = RnnSpec::Gru, s.gates = 3;
  else if (n.op_type == "RNN") s.cell = RnnSpec::Rnn, s.gates = 1;
  else return std::nullopt;
  s.what = n.describe();
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32 || x->second.size() != 3) return std::nullopt;
  s.layout = n.get_int("layout", 0);
  if (s.layout != 0 && s.layout != 1) return std::nullopt;
  std::string direction = n.get_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") return std::nullopt;
  s.dirs = direction == "bidirectional" ? 2 : 1;
  s.reverse = direction == "reverse";
  s.seq = s.layout == 0 ? x->second[0] : x->second[1];
  s.batch = s.layout == 0 ? x->second[1] : x->second[0];
  s.input = x->second[2];
  // W, R, B, P: constants or values of a static type (read at each run).
  auto typed = [&](size_t i) { return n.has_input(i) ? b.static_type(n.inputs[i]) : std::nullopt; };
  auto W = typed(1), R = typed(2);
  if (!W || !R || W->first != DType::F32 || R->first != DType::F32 || W->second.size() != 3 || R->second.size() != 3)
    return std::nullopt;
  const auto& ws = W->second;
  const auto& rs = R->second;
  if (ws[0] != s.dirs || ws[2] != s.input || ws[1] % s.gates != 0) return std::nullopt;
  s.hidden = ws[1] / s.gates;
  if (n.get_int("hidden_size", s.hidden) != s.hidden) return std::nullopt;
  if (rs[0] != s.dirs || rs[1] != s.gates * s.hidden || rs[2] != s.hidden) return std::nullopt;
  if (s.seq < 1 || s.batch < 1 || s.hidden < 1) return std::nullopt;
  if (n.has_attr("clip")) {
    s.clip = n.get_float("clip", 0);
    if (!(s.clip > 0)) return std::nullopt;  // the interpreter reports it
  }
  s.linear_before_reset = s.cell == RnnSpec::Gru && n.get_int("linear_before_reset", 0) != 0;
  s.input_forget = s.cell == RnnSpec::Lstm && n.get_int("input_forget", 0) != 0;
  // Activations as the interpreter reads them: per direction, defaults by cell.
  std::vector<std::string> def = s.cell == RnnSpec::Rnn   ? std::vector<std::string>{"tanh"}
                                 : s.cell == RnnSpec::Gru ? std::vector<std::string>{"sigmoid", "tanh"}
                                                          : std::vector<std::string>{"sigmoid", "tanh", "tanh"};
  s.acts_per_dir = def.size();
  auto names = n.get_strings("activations");
  if (names.empty())
    for (int64_t d = 0; d < s.dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  else if (names.size() == def.size() && s.dirs == 2) {
    auto first = names;
    names.insert(names.end(), first.begin(), first.end());
  }
  if (names.size() != def.size() * static_cast<size_t>(s.dirs)) return std::nullopt;
  auto alphas = n.get_floats("activation_alpha"), betas = n.get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (auto name : names) {
    for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    RnnAct a;
    bool ua = false, ub = false;
    if (name == "sigmoid") a.kind = RnnAct::Sigmoid;
    else if (name == "tanh") a.kind = RnnAct::Tanh;
    else if (name == "relu") a.kind = RnnAct::Relu;
    else if (name == "affine") a = {RnnAct::Affine, 1, 0}, ua = ub = true;
    else if (name == "leakyrelu") a = {RnnAct::LeakyRelu, 0.01f, 0}, ua = true;
    else if (name == "thresholdedrelu") a = {RnnAct::ThresholdedRelu, 1, 0}, ua = true;
    else if (name == "scaledtanh") a = {RnnAct::ScaledTanh, 1, 1}, ua = ub = true;
    else if (name == "hardsigmoid") a = {RnnAct::HardSigmoid, 0.2f, 0.5f}, ua = ub = true;
    else if (name == "elu") a = {RnnAct::Elu, 1, 0}, ua = true;
    else if (name == "softsign") a.kind = RnnAct::Softsign;
    else if (name == "softplus") a.kind = RnnAct::Softplus;
    else return std::nullopt;
    if (ua && ai < alphas.size()) a.alpha = alphas[ai++];
    if (ub && bi < betas.size()) a.beta = betas[bi++];
    s.acts.push_back(a);
  }
  // Optional inputs: B, sequence_lens, initial states, P.
  const int64_t GH = s.gates * s.hidden;
  if (n.has_input(3)) {
    auto B = typed(3);
    if (!B || B->first != DType::F32 || B->second != std::vector<int64_t>{s.dirs, 2 * GH}) return std::nullopt;
  }
  if (n.has_input(4)) {
    auto l = b.static_type(n.inputs[4]);
    if (!l || l->first != DType::I32 || shape_numel(l->second) != s.batch) return std::nullopt;
  }
  std::vector<int64_t> state = s.layout == 0 ? std::vector<int64_t>{s.dirs, s.batch, s.hidden}
                                             : std::vector<int64_t>{s.batch, s.dirs, s.hidden};
  for (size_t i : {size_t{5}, size_t{6}}) {
    if (i == 6 && s.cell != RnnSpec::Lstm) continue;
    if (!n.has_input(i)) continue;
    auto t = b.static_type(n.inputs[i]);
    if (!t || t->first != DType::F32 || t->second != state) return std::nullopt;
  }
  if (s.cell == RnnSpec::Lstm && n.has_input(7)) {
    auto P = typed(7);
    if (!P || P->first != DType::F32 || P->second != std::vector<int64_t>{s.dirs, 3 * s.hidden}) return std::nullopt;
    s.peepholes = true;
  }
  return s;
}

bool loop_preferred(const RnnSpec& spec) {
  return packed_gemm::available() && (spec.batch <= kGemvBatch || vector_math::cpu_isa() != vector_math::Isa::Avx512);
}

bool make_rnn(PlanBuilder& b, const Node& n) {
  auto spec = rnn_spec(b, n);
  if (!spec) return false;
  auto c = [&](size_t i) { return n.has_input(i) ? passes::constant_of(b.graph(), n.inputs[i]) : nullptr; };
  const Tensor *W = c(1), *R = c(2), *B = c(3), *P = spec->peepholes ? c(7) : nullptr;
  const char* force = std::getenv("HODU_CPU_RNN");
  const std::string mode = force ? force : "";
  const bool try_onednn = mode == "onednn" || (mode != "loop" && !loop_preferred(*spec));
  if (try_onednn && W && R && (B || !n.has_input(3)) && (P || !spec->peepholes) && make_onednn_rnn(b, n, *spec))
    return true;
  b.add(std::make_unique<RnnStep>(b, n, std::move(*spec), W, R, B, P));
  return true;
}

}  // namespace hodu::cpu
