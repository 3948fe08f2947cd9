// Sequence-model ops of the newest ONNX: LinearAttention and CausalConvWithState
// (ai.onnx, opset 27) and FlexAttention (ai.onnx.preview, version 1).
// Semantics follow ONNX's numpy reference (onnx/reference/ops/op_linear_attention.py,
// op_causal_conv_with_state.py, aionnx_preview/op_flex_attention.py) and the
// function bodies of the schemas (FlexAttention: softmax in f32 for f16/bf16,
// in f64 for double; GQA by contiguous groups of query heads).
// Narrow floats are computed in f32 and rounded at the end; double in double.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

bool is_supported_float(DType t) {
  return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
}

// The accumulation type of a float dtype: f64 for double, f32 otherwise.
DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// Input i as a contiguous tensor of dtype `acc`; Unsupported unless a float type.
Tensor float_input(const KernelContext& ctx, size_t i, DType acc, const char* what) {
  const Tensor& t = ctx.input(i);
  if (!is_supported_float(t.dtype()))
    ctx.fail(ErrorCode::Unsupported, "{} has dtype {}; needs float16, bfloat16, float or double", what,
             dtype_name(t.dtype()));
  return t.cast(acc).contiguous();
}

// Result (f32 or f64) → dtype `to` (rounding to nearest even for narrow floats).
Tensor finish(const Tensor& r, DType to) {
  if (r.dtype() == to) return r;
  if (r.dtype() == DType::F32) return narrow_to(r, to);
  return r.cast(to);
}

// ---------------------------------------------------------------------------
// CausalConvWithState(input[B,C,L], weight[C,1,K], bias[C]?, past_state[B,C,K-1]?)
//   → output[B,C,L], present_state[B,C,K-1]
template <typename A>
void causal_conv_impl(KernelContext& ctx, DType dt, const std::string& activation) {
  DType acc = acc_dtype(dt);
  Tensor x = float_input(ctx, 0, acc, "input");
  Tensor w = float_input(ctx, 1, acc, "weight");
  if (x.rank() != 3)
    ctx.fail(ErrorCode::InvalidArgument, "input must be rank 3 (batch, channels, length), got {}", x.shape_string());
  if (w.rank() != 3)
    ctx.fail(ErrorCode::InvalidArgument, "weight must be rank 3 (channels, 1, k), got {}", w.shape_string());
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), K = w.dim(2);
  if (w.dim(0) != C || w.dim(1) != 1 || K < 1)
    ctx.fail(ErrorCode::InvalidArgument, "weight shape {} does not match ({}, 1, k >= 1) for input {}",
             w.shape_string(), C, x.shape_string());
  if (ctx.input(1).dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "weight dtype differs from input dtype");
  Tensor bias;
  if (ctx.has_input(2)) {
    bias = float_input(ctx, 2, acc, "bias");
    if (ctx.input(2).dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "bias dtype differs from input dtype");
    if (bias.rank() != 1 || bias.dim(0) != C)
      ctx.fail(ErrorCode::InvalidArgument, "bias must have shape ({}), got {}", C, bias.shape_string());
  }
  const int64_t P = K - 1;
  Tensor past;
  if (ctx.has_input(3)) {
    past = ctx.input(3);
    if (past.dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "past_state dtype differs from input dtype");
    if (past.rank() != 3 || past.dim(0) != B || past.dim(1) != C || past.dim(2) != P)
      ctx.fail(ErrorCode::InvalidArgument, "past_state must have shape ({}, {}, {}), got {}", B, C, P,
               past.shape_string());
    past = past.contiguous();
  }
  // Padded input in the original dtype (present_state is a slice of it, no rounding).
  Tensor padded = Tensor::empty(dt, {B, C, P + L});
  {
    Tensor xin = ctx.input(0).contiguous();
    size_t es = dtype_bits(dt) / 8;
    auto* dst = static_cast<uint8_t*>(padded.raw_data());
    const auto* src = static_cast<const uint8_t*>(xin.raw_data());
    const uint8_t* ps = past.defined() ? static_cast<const uint8_t*>(past.raw_data()) : nullptr;
    for (int64_t bc = 0; bc < B * C; ++bc) {
      uint8_t* row = dst + bc * (P + L) * es;
      if (ps) std::memcpy(row, ps + bc * P * es, P * es);  // else stays zero
      std::memcpy(row + P * es, src + bc * L * es, L * es);
    }
  }
  Tensor pa = padded.cast(acc).contiguous();
  Tensor out = Tensor::empty(acc, {B, C, L});
  const A* pp = pa.data<A>();
  const A* wp = w.data<A>();
  const A* bp = bias.defined() ? bias.data<A>() : nullptr;
  A* op = out.data<A>();
  const bool silu = activation != "none";
  parallel_for(ctx.threads, B * C, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bc = b0; bc < b1; ++bc) {
      int64_t c = bc % C;
      const A* row = pp + bc * (P + L);
      const A* wr = wp + c * K;
      for (int64_t t = 0; t < L; ++t) {
        A s = 0;
        for (int64_t j = 0; j < K; ++j) s += row[t + j] * wr[j];
        if (bp) s += bp[c];
        op[bc * L + t] = s;
      }
    }
  });
  if (silu) {
    // The reference rounds the convolution to the input dtype, then applies
    // SiLU in float32 and rounds again.
    Tensor conv = finish(out, dt).cast(DType::F32).contiguous();
    float* cp = conv.data<float>();
    int64_t n = conv.numel();
    for (int64_t i = 0; i < n; ++i) {
      float v = cp[i];
      float sig = 1.0f / (1.0f + std::exp(-v));
      cp[i] = v * sig;
    }
    ctx.set_output(0, dt == DType::F64 ? conv.cast(DType::F64) : narrow_to(conv, dt));
  } else {
    ctx.set_output(0, finish(out, dt));
  }
  if (ctx.wants_output(1)) ctx.set_output(1, padded.slice(2, L, P + L).contiguous());
}

void causal_conv_with_state_kernel(KernelContext& ctx) {
  std::string activation = ctx.node.get_string("activation", "none");
  if (activation != "none" && activation != "silu" && activation != "swish")
    ctx.fail(ErrorCode::InvalidArgument, "unsupported activation '{}' (expected none, silu or swish)", activation);
  DType dt = ctx.input(0).dtype();
  if (!is_supported_float(dt))
    ctx.fail(ErrorCode::Unsupported, "input has dtype {}; needs float16, bfloat16, float or double", dtype_name(dt));
  if (dt == DType::F64)
    causal_conv_impl<double>(ctx, dt, activation);
  else
    causal_conv_impl<float>(ctx, dt, activation);
}

// ---------------------------------------------------------------------------
// LinearAttention(query[B,T,Hq*dk], key[B,T,Hkv*dk], value[B,T,Hkv*dv],
//                 past_state[B,Hkv,dk,dv]?, decay?, beta?, erase_gate?)
//   → output[B,T,Hq*dv], present_state[B,Hkv,dk,dv]
template <typename A>
void linear_attention_impl(KernelContext& ctx, DType dt) {
  DType acc = acc_dtype(dt);
  const std::string rule = ctx.node.get_string("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    ctx.fail(ErrorCode::InvalidArgument,
             "unsupported update_rule '{}' (expected linear, gated, delta or gated_delta)", rule);
  const int64_t Hq = ctx.node.get_int("q_num_heads", 0), Hkv = ctx.node.get_int("kv_num_heads", 0);
  if (!ctx.node.has_attr("q_num_heads") || !ctx.node.has_attr("kv_num_heads"))
    ctx.fail(ErrorCode::InvalidArgument, "q_num_heads and kv_num_heads are required attributes");
  if (Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
    ctx.fail(ErrorCode::InvalidArgument, "q_num_heads ({}) must be a positive multiple of kv_num_heads ({})", Hq,
             Hkv);
  const bool gating = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  const bool has_decay = ctx.has_input(4), has_beta = ctx.has_input(5), has_erase = ctx.has_input(6);
  if (gating != has_decay)
    ctx.fail(ErrorCode::InvalidArgument, "update_rule '{}' {} the decay input", rule, gating ? "requires" : "forbids");
  if (delta != has_beta)
    ctx.fail(ErrorCode::InvalidArgument, "update_rule '{}' {} the beta input", rule, delta ? "requires" : "forbids");
  if (has_erase && !delta)
    ctx.fail(ErrorCode::InvalidArgument, "update_rule '{}' forbids the erase_gate input", rule);

  Tensor q = float_input(ctx, 0, acc, "query"), k = float_input(ctx, 1, acc, "key"),
         v = float_input(ctx, 2, acc, "value");
  if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3)
    ctx.fail(ErrorCode::InvalidArgument, "query, key and value must be rank 3 (B, T, H*D), got {}, {}, {}",
             q.shape_string(), k.shape_string(), v.shape_string());
  const int64_t B = q.dim(0), T = q.dim(1);
  if (k.dim(0) != B || v.dim(0) != B || k.dim(1) != T || v.dim(1) != T)
    ctx.fail(ErrorCode::InvalidArgument, "query {}, key {} and value {} differ in batch or sequence length",
             q.shape_string(), k.shape_string(), v.shape_string());
  if (q.dim(2) % Hq != 0 || k.dim(2) % Hkv != 0 || v.dim(2) % Hkv != 0)
    ctx.fail(ErrorCode::InvalidArgument,
             "hidden sizes (query {}, key {}, value {}) are not divisible by the head counts ({}, {})", q.dim(2),
             k.dim(2), v.dim(2), Hq, Hkv);
  const int64_t dk = q.dim(2) / Hq, dv = v.dim(2) / Hkv, G = Hq / Hkv;
  if (k.dim(2) / Hkv != dk)
    ctx.fail(ErrorCode::InvalidArgument, "key head size {} differs from query head size {}", k.dim(2) / Hkv, dk);

  Tensor decay, beta, erase;
  int64_t decay_last = 0, beta_last = 0;
  if (has_decay) {
    decay = float_input(ctx, 4, acc, "decay");
    decay_last = decay.rank() == 3 ? decay.dim(2) : -1;
    if (decay.rank() != 3 || decay.dim(0) != B || decay.dim(1) != T ||
        (decay_last != Hkv && decay_last != Hkv * dk))
      ctx.fail(ErrorCode::InvalidArgument, "decay must have shape ({}, {}, {} or {}), got {}", B, T, Hkv, Hkv * dk,
               decay.shape_string());
  }
  if (has_beta) {
    beta = float_input(ctx, 5, acc, "beta");
    beta_last = beta.rank() == 3 ? beta.dim(2) : -1;
    if (beta.rank() != 3 || beta.dim(0) != B || beta.dim(1) != T || (beta_last != Hkv && beta_last != 1))
      ctx.fail(ErrorCode::InvalidArgument, "beta must have shape ({}, {}, {} or 1), got {}", B, T, Hkv,
               beta.shape_string());
  }
  if (has_erase) {
    erase = float_input(ctx, 6, acc, "erase_gate");
    if (erase.rank() != 3 || erase.dim(0) != B || erase.dim(1) != T || erase.dim(2) != Hkv * dk)
      ctx.fail(ErrorCode::InvalidArgument, "erase_gate must have shape ({}, {}, {}), got {}", B, T, Hkv * dk,
               erase.shape_string());
  }
  DType state_dtype = dt;
  Tensor state = Tensor::empty(acc, {B, Hkv, dk, dv});
  if (ctx.has_input(3)) {
    const Tensor& ps = ctx.input(3);
    if (!is_supported_float(ps.dtype()))
      ctx.fail(ErrorCode::Unsupported, "past_state has dtype {}; needs a float type", dtype_name(ps.dtype()));
    if (ps.rank() != 4 || ps.dim(0) != B || ps.dim(1) != Hkv || ps.dim(2) != dk || ps.dim(3) != dv)
      ctx.fail(ErrorCode::InvalidArgument, "past_state must have shape ({}, {}, {}, {}), got {}", B, Hkv, dk, dv,
               ps.shape_string());
    state_dtype = ps.dtype();
    state = ps.cast(acc).clone();
  }
  double scale_attr = ctx.node.get_float("scale", 0.0f);
  const A scale = scale_attr == 0.0 ? static_cast<A>(1.0 / std::sqrt(static_cast<double>(dk)))
                                    : static_cast<A>(scale_attr);

  Tensor out = Tensor::empty(acc, {B, T, Hq * dv});
  const A* qp = q.data<A>();
  const A* kp = k.data<A>();
  const A* vp = v.data<A>();
  const A* dp = has_decay ? decay.data<A>() : nullptr;
  const A* bp = has_beta ? beta.data<A>() : nullptr;
  const A* ep = has_erase ? erase.data<A>() : nullptr;
  A* sp = state.data<A>();
  A* op = out.data<A>();
  // Each (batch, kv head) recurrence is independent.
  parallel_for(ctx.threads, B * Hkv, 1, [&](int64_t i0, int64_t i1) {
    std::vector<A> vt(dv), ke(dk), gexp(dk);
    for (int64_t bh = i0; bh < i1; ++bh) {
      const int64_t b = bh / Hkv, h = bh % Hkv;
      A* S = sp + bh * dk * dv;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = b * T + t;
        const A* kt = kp + row * Hkv * dk + h * dk;
        const A* vsrc = vp + row * Hkv * dv + h * dv;
        for (int64_t m = 0; m < dv; ++m) vt[m] = vsrc[m];
        if (gating) {
          if (decay_last == Hkv) {
            A g = std::exp(dp[row * Hkv + h]);
            for (int64_t d = 0; d < dk; ++d) gexp[d] = g;
          } else {
            for (int64_t d = 0; d < dk; ++d) gexp[d] = std::exp(dp[row * Hkv * dk + h * dk + d]);
          }
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= gexp[d];
        }
        if (delta) {
          for (int64_t d = 0; d < dk; ++d) ke[d] = ep ? ep[row * Hkv * dk + h * dk + d] * kt[d] : kt[d];
          const A bt = bp[row * beta_last + (beta_last == 1 ? 0 : h)];
          for (int64_t m = 0; m < dv; ++m) {
            A r = 0;
            for (int64_t d = 0; d < dk; ++d) r += S[d * dv + m] * ke[d];
            vt[m] = bt * (vt[m] - r);
          }
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += kt[d] * vt[m];
        // Read: query heads h*G .. h*G+G-1 use this state.
        for (int64_t g = 0; g < G; ++g) {
          const int64_t hq = h * G + g;
          const A* qt = qp + row * Hq * dk + hq * dk;
          A* o = op + row * Hq * dv + hq * dv;
          for (int64_t m = 0; m < dv; ++m) {
            A s = 0;
            for (int64_t d = 0; d < dk; ++d) s += qt[d] * S[d * dv + m];
            o[m] = scale * s;
          }
        }
      }
    }
  });
  ctx.set_output(0, finish(out, dt));
  if (ctx.wants_output(1)) ctx.set_output(1, finish(state, state_dtype));
}

void linear_attention_kernel(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  if (!is_supported_float(dt))
    ctx.fail(ErrorCode::Unsupported, "query has dtype {}; needs float16, bfloat16, float or double", dtype_name(dt));
  for (size_t i = 1; i < 3; ++i)
    if (ctx.input(i).dtype() != dt)
      ctx.fail(ErrorCode::InvalidArgument, "input {} has dtype {}, query has {}", i, dtype_name(ctx.input(i).dtype()),
               dtype_name(dt));
  if (dt == DType::F64)
    linear_attention_impl<double>(ctx, dt);
  else
    linear_attention_impl<float>(ctx, dt);
}

// ---------------------------------------------------------------------------
// FlexAttention(Q[B,Hq,L,E], K[B,Hkv,S,E], V[B,Hkv,S,Ev]) → Y[B,Hq,L,Ev]
// Scores = (Q @ K^T) * scale; score_mod; (mask_mod); softmax; prob_mod; Y = P @ V.
// The mod subgraphs take and return the whole [B,Hq,L,S] tensor in the softmax
// precision (f64 for double inputs, f32 otherwise).
Tensor run_mod(KernelContext& ctx, const char* name, const Tensor& x) {
  const Graph* g = ctx.node.get_graph(name);
  if (!g) return x;
  if (g->inputs.size() != 1)
    ctx.fail(ErrorCode::InvalidModel, "{} subgraph must take exactly one input, it takes {}", name, g->inputs.size());
  std::vector<RuntimeValue> outs = ctx.run_subgraph(*g, {RuntimeValue(x)});
  if (outs.size() != 1 || !outs[0].is_tensor())
    ctx.fail(ErrorCode::InvalidModel, "{} subgraph must produce exactly one tensor", name);
  Tensor r = outs[0].tensor;
  if (r.shape() != x.shape())
    ctx.fail(ErrorCode::InvalidArgument, "{} subgraph returned shape {}, expected {}", name, r.shape_string(),
             x.shape_string());
  if (r.dtype() != x.dtype()) {
    if (!dtype_is_float(r.dtype()) || dtype_is_complex(r.dtype()))
      ctx.fail(ErrorCode::InvalidArgument, "{} subgraph returned dtype {}, expected {}", name, dtype_name(r.dtype()),
               dtype_name(x.dtype()));
    r = r.cast(x.dtype());
  }
  return r.contiguous();
}

template <typename A>
void flex_attention_impl(KernelContext& ctx, DType dt, DType acc) {
  Tensor q = float_input(ctx, 0, acc, "Q"), k = float_input(ctx, 1, acc, "K"), v = float_input(ctx, 2, acc, "V");
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    ctx.fail(ErrorCode::InvalidArgument, "Q, K and V must be rank 4, got {}, {}, {}", q.shape_string(),
             k.shape_string(), v.shape_string());
  const int64_t B = q.dim(0), Hq = q.dim(1), L = q.dim(2), E = q.dim(3);
  const int64_t Hkv = k.dim(1), S = k.dim(2), Ev = v.dim(3);
  if (k.dim(0) != B || v.dim(0) != B) ctx.fail(ErrorCode::InvalidArgument, "Q, K and V batch sizes differ");
  if (k.dim(3) != E) ctx.fail(ErrorCode::InvalidArgument, "Q and K head sizes differ ({} vs {})", E, k.dim(3));
  if (v.dim(1) != Hkv || v.dim(2) != S)
    ctx.fail(ErrorCode::InvalidArgument, "K {} and V {} do not match", k.shape_string(), v.shape_string());
  if (Hkv <= 0 || Hq % Hkv != 0)
    ctx.fail(ErrorCode::InvalidArgument, "query heads ({}) must be a multiple of key/value heads ({})", Hq, Hkv);
  const int64_t G = Hq / Hkv;
  double scale = ctx.node.has_attr("scale") ? static_cast<double>(ctx.node.get_float("scale", 1.0f))
                                            : static_cast<double>(1.0f / std::sqrt(static_cast<float>(E)));
  const A sc = static_cast<A>(scale);

  Tensor scores = Tensor::empty(acc, {B, Hq, L, S});
  {
    const A* qp = q.data<A>();
    const A* kp = k.data<A>();
    A* sp = scores.data<A>();
    parallel_for(ctx.threads, B * Hq, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t bh = i0; bh < i1; ++bh) {
        const int64_t b = bh / Hq, h = bh % Hq, hk = h / G;
        const A* Q = qp + bh * L * E;
        const A* K = kp + (b * Hkv + hk) * S * E;
        A* out = sp + bh * L * S;
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < S; ++j) {
            A s = 0;
            for (int64_t e = 0; e < E; ++e) s += Q[i * E + e] * K[j * E + e];
            out[i * S + j] = s * sc;
          }
      }
    });
  }
  scores = run_mod(ctx, "score_mod", scores);
  scores = run_mod(ctx, "mask_mod", scores);
  Tensor probs = Tensor::empty(acc, {B, Hq, L, S});
  {
    const A* sp = scores.data<A>();
    A* pp = probs.data<A>();
    parallel_for(ctx.threads, B * Hq * L, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const A* x = sp + r * S;
        A* y = pp + r * S;
        A mx = -std::numeric_limits<A>::infinity();
        for (int64_t j = 0; j < S; ++j) mx = std::isnan(x[j]) || x[j] > mx ? x[j] : mx;
        A sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          y[j] = std::exp(x[j] - mx);
          sum += y[j];
        }
        for (int64_t j = 0; j < S; ++j) y[j] /= sum;
      }
    });
  }
  probs = run_mod(ctx, "prob_mod", probs);
  Tensor y = Tensor::empty(acc, {B, Hq, L, Ev});
  {
    const A* pp = probs.data<A>();
    const A* vp = v.data<A>();
    A* yp = y.data<A>();
    parallel_for(ctx.threads, B * Hq, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t bh = i0; bh < i1; ++bh) {
        const int64_t b = bh / Hq, h = bh % Hq, hk = h / G;
        const A* P = pp + bh * L * S;
        const A* V = vp + (b * Hkv + hk) * S * Ev;
        A* out = yp + bh * L * Ev;
        for (int64_t i = 0; i < L; ++i)
          for (int64_t m = 0; m < Ev; ++m) {
            A s = 0;
            for (int64_t j = 0; j < S; ++j) s += P[i * S + j] * V[j * Ev + m];
            out[i * Ev + m] = s;
          }
      }
    });
  }
  ctx.set_output(0, finish(y, dt));
}

void flex_attention_kernel(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  if (!is_supported_float(dt))
    ctx.fail(ErrorCode::Unsupported, "Q has dtype {}; needs float16, bfloat16, float or double", dtype_name(dt));
  for (size_t i = 1; i < 3; ++i)
    if (ctx.input(i).dtype() != dt)
      ctx.fail(ErrorCode::InvalidArgument, "input {} has dtype {}, Q has {}", i, dtype_name(ctx.input(i).dtype()),
               dtype_name(dt));
  DType acc = acc_dtype(dt);
  if (ctx.node.has_attr("softmax_precision")) {
    auto p = dtype_from_onnx(static_cast<int>(ctx.node.get_int("softmax_precision", 1)));
    if (p == DType::F32 || p == DType::F16 || p == DType::BF16)
      acc = DType::F32;
    else if (p == DType::F64)
      acc = DType::F64;
    else
      ctx.fail(ErrorCode::InvalidArgument, "softmax_precision {} is not a float type",
               ctx.node.get_int("softmax_precision", 1));
  }
  if (acc == DType::F64)
    flex_attention_impl<double>(ctx, dt, acc);
  else
    flex_attention_impl<float>(ctx, dt, acc);
}

}  // namespace

void register_sequence_model_ops(OpTable& t) {
  t.add("", "LinearAttention", linear_attention_kernel);
  t.add("", "CausalConvWithState", causal_conv_with_state_kernel);
  t.add("ai.onnx.preview", "FlexAttention", flex_attention_kernel);
}

}  // namespace hodu::interp
