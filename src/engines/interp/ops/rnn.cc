// Recurrent ops: RNN, GRU, LSTM (newest ONNX semantics: layout attribute,
// sequence_lens, bidirectional, activations with alpha/beta, clip, peepholes,
// input_forget, linear_before_reset). Computed in f32 (f16/bf16 widened) or f64.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

enum class Cell { Rnn, Gru, Lstm };

struct Act {
  std::string name;
  double alpha = 0, beta = 0;
  template <typename T>
  T operator()(T x) const {
    double v = static_cast<double>(x), r;
    if (name == "sigmoid") r = 1.0 / (1.0 + std::exp(-v));
    else if (name == "tanh") r = std::tanh(v);
    else if (name == "relu") r = std::max(0.0, v);
    else if (name == "affine") r = alpha * v + beta;
    else if (name == "leakyrelu") r = v < 0 ? alpha * v : v;
    else if (name == "thresholdedrelu") r = v > alpha ? v : 0.0;
    else if (name == "scaledtanh") r = alpha * std::tanh(beta * v);
    else if (name == "hardsigmoid") r = std::clamp(alpha * v + beta, 0.0, 1.0);
    else if (name == "elu") r = v < 0 ? alpha * (std::exp(v) - 1) : v;
    else if (name == "softsign") r = v / (1 + std::fabs(v));
    else r = std::log1p(std::exp(v));  // softplus
    return static_cast<T>(r);
  }
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<Act> read_activations(const KernelContext& ctx, Cell cell, int64_t dirs) {
  std::vector<std::string> def;
  if (cell == Cell::Rnn) def = {"Tanh"};
  else if (cell == Cell::Gru) def = {"Sigmoid", "Tanh"};
  else def = {"Sigmoid", "Tanh", "Tanh"};
  const size_t per = def.size();
  auto names = ctx.node.get_strings("activations");
  if (names.empty())
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  else if (names.size() == per && dirs == 2)
  {
    auto first = names;  // one direction's list given for both directions
    names.insert(names.end(), first.begin(), first.end());
  }
  if (names.size() != per * static_cast<size_t>(dirs))
    ctx.fail(ErrorCode::InvalidArgument, "activations has {} names, expected {}", names.size(),
             per * static_cast<size_t>(dirs));
  auto alphas = ctx.node.get_floats("activation_alpha");
  auto betas = ctx.node.get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<Act> acts;
  for (auto& n : names) {
    Act a;
    a.name = lower(n);
    bool ua = false, ub = false;
    if (a.name == "affine") { a.alpha = 1; a.beta = 0; ua = ub = true; }
    else if (a.name == "leakyrelu") { a.alpha = 0.01; ua = true; }
    else if (a.name == "thresholdedrelu") { a.alpha = 1.0; ua = true; }
    else if (a.name == "scaledtanh") { a.alpha = 1; a.beta = 1; ua = ub = true; }
    else if (a.name == "hardsigmoid") { a.alpha = 0.2; a.beta = 0.5; ua = ub = true; }
    else if (a.name == "elu") { a.alpha = 1.0; ua = true; }
    else if (a.name != "sigmoid" && a.name != "tanh" && a.name != "relu" && a.name != "softsign" &&
             a.name != "softplus")
      ctx.fail(ErrorCode::InvalidArgument, "unknown activation '{}'", n);
    if (ua && ai < alphas.size()) a.alpha = alphas[ai++];
    if (ub && bi < betas.size()) a.beta = betas[bi++];
    acts.push_back(a);
  }
  return acts;
}

// [d0, d1, rest] → [d1, d0, rest]
Tensor swap01(const Tensor& t) {
  std::vector<int64_t> perm(static_cast<size_t>(t.rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[0], perm[1]);
  return t.permute(perm).contiguous();
}

void rnn_common(KernelContext& ctx, Cell cell) {
  const int G = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  const Tensor& X0 = ctx.input(0);
  const Tensor& W0 = ctx.input(1);
  const Tensor& R0 = ctx.input(2);
  int64_t layout = ctx.node.get_int("layout", 0);
  std::string direction = ctx.node.get_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    ctx.fail(ErrorCode::InvalidArgument, "unknown direction '{}'", direction);
  if (layout != 0 && layout != 1) ctx.fail(ErrorCode::InvalidArgument, "layout must be 0 or 1");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (X0.rank() != 3) ctx.fail(ErrorCode::InvalidArgument, "X must be 3-D, got {}", X0.shape_string());
  DType dt = X0.dtype();
  Tensor X = widen(X0).contiguous();
  if (layout == 1) X = swap01(X);
  const int64_t S = X.dim(0), Bn = X.dim(1), I = X.dim(2);
  if (W0.rank() != 3 || W0.dim(0) != dirs || W0.dim(2) != I || W0.dim(1) % G != 0)
    ctx.fail(ErrorCode::InvalidArgument, "W {} must be [{}, {}*hidden, {}]", W0.shape_string(), dirs, G, I);
  const int64_t H = W0.dim(1) / G;
  int64_t hs = ctx.node.get_int("hidden_size", H);
  if (hs != H) ctx.fail(ErrorCode::InvalidArgument, "hidden_size {} does not match W {}", hs, W0.shape_string());
  if (R0.rank() != 3 || R0.dim(0) != dirs || R0.dim(1) != G * H || R0.dim(2) != H)
    ctx.fail(ErrorCode::InvalidArgument, "R {} must be [{}, {}, {}]", R0.shape_string(), dirs, G * H, H);
  auto acts = read_activations(ctx, cell, dirs);
  const size_t per = acts.size() / static_cast<size_t>(dirs);
  float clip = ctx.node.get_float("clip", 0.0f);
  bool has_clip = ctx.node.has_attr("clip");
  if (has_clip && !(clip > 0)) ctx.fail(ErrorCode::InvalidArgument, "clip must be positive");
  bool lbr = cell == Cell::Gru && ctx.node.get_int("linear_before_reset", 0) != 0;
  bool input_forget = cell == Cell::Lstm && ctx.node.get_int("input_forget", 0) != 0;
  std::vector<int64_t> lens(static_cast<size_t>(Bn), S);
  if (ctx.has_input(4)) {
    auto l = ctx.input(4).to_int64s();
    if (static_cast<int64_t>(l.size()) != Bn)
      ctx.fail(ErrorCode::InvalidArgument, "sequence_lens has {} values, expected {}", l.size(), Bn);
    for (int64_t b = 0; b < Bn; ++b) {
      if (l[b] < 0 || l[b] > S) ctx.fail(ErrorCode::InvalidArgument, "sequence_lens[{}] = {} out of [0, {}]", b, l[b], S);
      lens[b] = l[b];
    }
  }
  auto state_in = [&](size_t idx, const char* what) -> Tensor {
    if (!ctx.has_input(idx)) return Tensor();
    Tensor t = widen(ctx.input(idx)).contiguous();
    if (layout == 1) t = swap01(t);
    if (t.rank() != 3 || t.dim(0) != dirs || t.dim(1) != Bn || t.dim(2) != H)
      ctx.fail(ErrorCode::InvalidArgument, "{} {} has the wrong shape", what, ctx.input(idx).shape_string());
    return t;
  };
  Tensor h0 = state_in(5, "initial_h");
  Tensor c0 = cell == Cell::Lstm ? state_in(6, "initial_c") : Tensor();
  Tensor W = widen(W0).contiguous(), R = widen(R0).contiguous();
  Tensor Bt, P;
  if (ctx.has_input(3)) {
    Bt = widen(ctx.input(3)).contiguous();
    if (Bt.rank() != 2 || Bt.dim(0) != dirs || Bt.dim(1) != 2 * G * H)
      ctx.fail(ErrorCode::InvalidArgument, "B {} must be [{}, {}]", Bt.shape_string(), dirs, 2 * G * H);
  }
  if (cell == Cell::Lstm && ctx.has_input(7)) {
    P = widen(ctx.input(7)).contiguous();
    if (P.rank() != 2 || P.dim(0) != dirs || P.dim(1) != 3 * H)
      ctx.fail(ErrorCode::InvalidArgument, "P {} must be [{}, {}]", P.shape_string(), dirs, 3 * H);
  }
  dispatch_float(ctx, X.dtype(), [&]<typename T>() {
    const DType ct = X.dtype();
    Tensor Y = Tensor::empty(ct, {S, dirs, Bn, H});
    Tensor Yh = Tensor::empty(ct, {dirs, Bn, H});
    Tensor Yc = Tensor::empty(ct, {dirs, Bn, H});
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    auto clipv = [&](T v) -> T {
      if (!has_clip) return v;
      return std::clamp(v, static_cast<T>(-clip), static_cast<T>(clip));
    };
    for (int64_t d = 0; d < dirs; ++d) {
      bool reverse = direction == "reverse" || d == 1;
      const T* w = W.data<T>() + d * G * H * I;
      const T* r = R.data<T>() + d * G * H * H;
      std::vector<T> wb(static_cast<size_t>(G * H), T(0)), rb(static_cast<size_t>(G * H), T(0));
      if (Bt.defined()) {
        const T* bp = Bt.data<T>() + d * 2 * G * H;
        std::copy(bp, bp + G * H, wb.begin());
        std::copy(bp + G * H, bp + 2 * G * H, rb.begin());
      }
      std::vector<T> peep(static_cast<size_t>(3 * H), T(0));
      if (P.defined()) std::copy(P.data<T>() + d * 3 * H, P.data<T>() + (d + 1) * 3 * H, peep.begin());
      const Act* act = &acts[static_cast<size_t>(d) * per];
      std::vector<T> h(static_cast<size_t>(Bn * H), T(0)), c(static_cast<size_t>(Bn * H), T(0));
      if (h0.defined()) std::copy(h0.data<T>() + d * Bn * H, h0.data<T>() + (d + 1) * Bn * H, h.begin());
      if (c0.defined()) std::copy(c0.data<T>() + d * Bn * H, c0.data<T>() + (d + 1) * Bn * H, c.begin());
      std::vector<T> gx(static_cast<size_t>(G * H)), gh(static_cast<size_t>(G * H));
      for (int64_t step = 0; step < S; ++step) {
        int64_t t = reverse ? S - 1 - step : step;
        for (int64_t b = 0; b < Bn; ++b) {
          T* yo = y + ((t * dirs + d) * Bn + b) * H;
          int64_t len = lens[b];
          if (t >= len) {
            std::fill(yo, yo + H, T(0));
            continue;
          }
          const T* xt = x + (t * Bn + b) * I;
          T* hb = h.data() + b * H;
          T* cb = c.data() + b * H;
          for (int64_t g = 0; g < G * H; ++g) {
            T sx = 0, sh = 0;
            const T* wr = w + g * I;
            for (int64_t k = 0; k < I; ++k) sx += xt[k] * wr[k];
            const T* rr = r + g * H;
            for (int64_t k = 0; k < H; ++k) sh += hb[k] * rr[k];
            gx[g] = sx + wb[g];
            gh[g] = sh + rb[g];
          }
          if (cell == Cell::Rnn) {
            for (int64_t j = 0; j < H; ++j) hb[j] = act[0](clipv(gx[j] + gh[j]));
          } else if (cell == Cell::Gru) {
            std::vector<T> z(static_cast<size_t>(H)), rh(static_cast<size_t>(H)), hn(static_cast<size_t>(H));
            for (int64_t j = 0; j < H; ++j) {
              z[j] = act[0](clipv(gx[j] + gh[j]));
              T rt = act[0](clipv(gx[H + j] + gh[H + j]));
              if (lbr) hn[j] = act[1](clipv(gx[2 * H + j] + rt * gh[2 * H + j]));
              else rh[j] = rt * hb[j];
            }
            if (!lbr)
              for (int64_t j = 0; j < H; ++j) {
                // (r ⊙ h) · Rh^T + Rbh
                T s = 0;
                const T* rrow = r + (2 * H + j) * H;
                for (int64_t k = 0; k < H; ++k) s += rh[k] * rrow[k];
                hn[j] = act[1](clipv(gx[2 * H + j] + s + rb[2 * H + j]));
              }
            for (int64_t j = 0; j < H; ++j) hb[j] = (1 - z[j]) * hn[j] + z[j] * hb[j];
          } else {
            for (int64_t j = 0; j < H; ++j) {
              T it = act[0](clipv(gx[j] + gh[j] + peep[j] * cb[j]));
              T ft = input_forget ? T(1) - it : act[0](clipv(gx[2 * H + j] + gh[2 * H + j] + peep[2 * H + j] * cb[j]));
              T ctil = act[1](clipv(gx[3 * H + j] + gh[3 * H + j]));
              T cn = ft * cb[j] + it * ctil;
              T ot = act[0](clipv(gx[H + j] + gh[H + j] + peep[H + j] * cn));
              cb[j] = cn;
              hb[j] = ot * act[2](cn);
            }
          }
          std::copy(hb, hb + H, yo);
        }
      }
      std::copy(h.begin(), h.end(), Yh.data<T>() + d * Bn * H);
      std::copy(c.begin(), c.end(), Yc.data<T>() + d * Bn * H);
    }
    if (layout == 1) {
      // Y: [S, dirs, B, H] → [B, S, dirs, H]; states: [dirs, B, H] → [B, dirs, H].
      Y = Y.permute({2, 0, 1, 3}).contiguous();
      Yh = swap01(Yh);
      Yc = swap01(Yc);
    }
    if (ctx.wants_output(0)) ctx.set_output(0, narrow_to(Y, dt));
    if (ctx.wants_output(1)) ctx.set_output(1, narrow_to(Yh, dt));
    if (cell == Cell::Lstm && ctx.wants_output(2)) ctx.set_output(2, narrow_to(Yc, dt));
  });
}

void rnn_kernel(KernelContext& ctx) { rnn_common(ctx, Cell::Rnn); }
void gru_kernel(KernelContext& ctx) { rnn_common(ctx, Cell::Gru); }
void lstm_kernel(KernelContext& ctx) { rnn_common(ctx, Cell::Lstm); }

}  // namespace

void register_rnn_ops(OpTable& t) {
  t.add("", "RNN", rnn_kernel);
  t.add("", "GRU", gru_kernel);
  t.add("", "LSTM", lstm_kernel);
}

}  // namespace hodu::interp
