// Attention (opset 24), RotaryEmbedding (opset 23) and the losses
// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss. Semantics follow ONNX's
// numpy reference (onnx/reference/ops/op_attention.py and friends).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

Tensor float_tensor(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  if (!dtype_is_float(t.dtype()) || dtype_is_complex(t.dtype()))
    ctx.fail(ErrorCode::Unsupported, "input {} has dtype {}, a float type is needed", i, dtype_name(t.dtype()));
  return widen(t).contiguous();
}

// [B, S, H*D] → [B, H, S, D] (the reference's reshape + transpose).
Tensor to_heads(const KernelContext& ctx, const Tensor& t, int64_t heads, const char* what) {
  if (heads <= 0 || t.dim(2) % heads != 0)
    ctx.fail(ErrorCode::InvalidArgument, "{} hidden size {} is not divisible by the number of heads {}", what, t.dim(2),
             heads);
  return t.reshape({t.dim(0), t.dim(1), heads, t.dim(2) / heads}).permute({0, 2, 1, 3}).contiguous();
}

Tensor concat_seq(const Tensor& past, const Tensor& cur) {
  // Both [B, H, S, D]; concatenates along S.
  int64_t B = cur.dim(0), H = cur.dim(1), P = past.dim(2), S = cur.dim(2), D = cur.dim(3);
  Tensor out = Tensor::empty(cur.dtype(), {B, H, P + S, D});
  size_t es = dtype_bits(cur.dtype()) / 8;
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  const auto* a = static_cast<const uint8_t*>(past.raw_data());
  const auto* b = static_cast<const uint8_t*>(cur.raw_data());
  for (int64_t bh = 0; bh < B * H; ++bh) {
    std::memcpy(dst + bh * (P + S) * D * es, a + bh * P * D * es, P * D * es);
    std::memcpy(dst + (bh * (P + S) + P) * D * es, b + bh * S * D * es, S * D * es);
  }
  return out;
}

void attention_kernel(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  Tensor q = float_tensor(ctx, 0), k = float_tensor(ctx, 1), v = float_tensor(ctx, 2);
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "Q, K and V must share one dtype");
  int64_t rank = q.rank();
  if ((rank != 3 && rank != 4) || k.rank() != rank || v.rank() != rank)
    ctx.fail(ErrorCode::InvalidArgument, "Q, K, V must all be 3-D or all 4-D, got {}, {}, {}", q.shape_string(),
             k.shape_string(), v.shape_string());
  int64_t qh_attr = ctx.node.get_int("q_num_heads", 0), kvh_attr = ctx.node.get_int("kv_num_heads", 0);
  if (rank == 3) {
    if (qh_attr <= 0 || kvh_attr <= 0)
      ctx.fail(ErrorCode::InvalidArgument, "3-D inputs need the q_num_heads and kv_num_heads attributes");
    q = to_heads(ctx, q, qh_attr, "Q");
    k = to_heads(ctx, k, kvh_attr, "K");
    v = to_heads(ctx, v, kvh_attr, "V");
  }
  int64_t B = q.dim(0), Hq = q.dim(1), Sq = q.dim(2), D = q.dim(3);
  if (k.dim(0) != B || v.dim(0) != B) ctx.fail(ErrorCode::InvalidArgument, "Q, K, V batch sizes differ");
  if (k.dim(3) != D) ctx.fail(ErrorCode::InvalidArgument, "Q and K head sizes differ ({} vs {})", D, k.dim(3));
  if (v.dim(1) != k.dim(1) || v.dim(2) != k.dim(2))
    ctx.fail(ErrorCode::InvalidArgument, "K {} and V {} do not match", k.shape_string(), v.shape_string());
  int64_t Hkv = k.dim(1), Dv = v.dim(3);
  // Past caches.
  int64_t past_len = 0;
  bool has_past = ctx.has_input(4);
  if (has_past != ctx.has_input(5)) ctx.fail(ErrorCode::InvalidArgument, "past_key and past_value must be given together");
  if (has_past) {
    Tensor pk = float_tensor(ctx, 4), pv = float_tensor(ctx, 5);
    if (pk.rank() != 4 || pk.dim(0) != B || pk.dim(1) != Hkv || pk.dim(3) != D || pv.rank() != 4 || pv.dim(0) != B ||
        pv.dim(1) != Hkv || pv.dim(3) != Dv || pv.dim(2) != pk.dim(2))
      ctx.fail(ErrorCode::InvalidArgument, "past_key {} / past_value {} do not match K {} / V {}", pk.shape_string(),
               pv.shape_string(), k.shape_string(), v.shape_string());
    past_len = pk.dim(2);
    k = concat_seq(pk, k);
    v = concat_seq(pv, v);
  }
  int64_t Skv = k.dim(2);
  if (Hq != Hkv && (Hkv == 0 || Hq % Hkv != 0))
    ctx.fail(ErrorCode::InvalidArgument, "q_num_heads {} is not a multiple of kv_num_heads {}", Hq, Hkv);
  int64_t reps = Hq / Hkv;
  double scale = ctx.node.has_attr("scale") ? ctx.node.get_float("scale", 0.f) : 1.0 / std::sqrt(static_cast<double>(D));
  double sqrt_scale = std::sqrt(scale);
  bool causal = ctx.node.get_int("is_causal", 0) != 0;
  double softcap = ctx.node.get_float("softcap", 0.f);
  int64_t mode = ctx.node.get_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) ctx.fail(ErrorCode::InvalidArgument, "qk_matmul_output_mode {} is not 0..3", mode);
  // Mask: right-aligned broadcast to [B, Hq, Sq, Skv]; a shorter last dim is padded with -inf / false.
  Tensor mask;
  std::vector<int64_t> mstr(4, 0);
  int64_t mlen = 0;
  bool mask_bool = false;
  if (ctx.has_input(3)) {
    const Tensor& m0 = ctx.input(3);
    mask_bool = m0.dtype() == DType::Bool;
    mask = mask_bool ? m0.contiguous() : float_tensor(ctx, 3).cast(DType::F64);
    if (mask.rank() < 1 || mask.rank() > 4) ctx.fail(ErrorCode::InvalidArgument, "attn_mask must have rank 1..4");
    std::vector<int64_t> ms(4 - mask.rank(), 1);
    for (int64_t d : mask.shape()) ms.push_back(d);
    std::vector<int64_t> target{B, Hq, Sq, Skv};
    mlen = ms[3];
    if (mlen > Skv) ctx.fail(ErrorCode::InvalidArgument, "attn_mask's last dim {} exceeds the kv length {}", mlen, Skv);
    for (int d = 0; d < 3; ++d)
      if (ms[d] != 1 && ms[d] != target[d])
        ctx.fail(ErrorCode::InvalidArgument, "attn_mask of shape {} cannot be broadcast to [{}, {}, {}, {}]",
                 mask.shape_string(), B, Hq, Sq, Skv);
    auto cs = contiguous_strides(ms);
    for (int d = 0; d < 4; ++d) mstr[d] = ms[d] == 1 ? 0 : cs[d];
  }
  std::vector<int64_t> nonpad;
  if (ctx.has_input(6)) {
    nonpad = tensor_to_int64_vector(ctx.input(6));
    if (static_cast<int64_t>(nonpad.size()) != B)
      ctx.fail(ErrorCode::InvalidArgument, "nonpad_kv_seqlen has {} elements, expected batch size {}", nonpad.size(), B);
  }
  const double ninf = -std::numeric_limits<double>::infinity();
  auto bias_at = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> double {
    double m = 0;
    if (mask.defined()) {
      if (j >= mlen) {
        m = ninf;
      } else {
        int64_t off = b * mstr[0] + h * mstr[1] + i * mstr[2] + j * mstr[3];
        if (mask_bool) m = mask.data<bool>()[off] ? 0.0 : ninf;
        else m = mask.data<double>()[off];
      }
    }
    if (causal) {
      int64_t offset = (!has_past && !nonpad.empty()) ? nonpad[b] - Sq : past_len;
      if (j > i + offset) m += ninf;
    }
    if (!nonpad.empty() && j >= nonpad[b]) m += ninf;
    return m;
  };
  Tensor y = Tensor::empty(q.dtype(), {B, Hq, Sq, Dv});
  Tensor qk_out = Tensor::empty(q.dtype(), {B, Hq, Sq, Skv});
  dispatch_float(ctx, q.dtype(), [&]<typename T>() {
    const T* qd = q.data<T>();
    const T* kd = k.data<T>();
    const T* vd = v.data<T>();
    T* yd = y.data<T>();
    T* qkd = qk_out.data<T>();
    const T ss = static_cast<T>(sqrt_scale);
    parallel_for(ctx.threads, B * Hq, 1, [&](int64_t tb, int64_t te) {
      std::vector<T> qs(static_cast<size_t>(Sq * D)), ks(static_cast<size_t>(Skv * D));
      std::vector<T> row(static_cast<size_t>(Skv)), p(static_cast<size_t>(Skv));
      std::vector<double> acc(static_cast<size_t>(Dv));
      for (int64_t t = tb; t < te; ++t) {
        int64_t b = t / Hq, h = t % Hq, hk = h / reps;
        const T* qm = qd + (b * Hq + h) * Sq * D;
        const T* km = kd + (b * Hkv + hk) * Skv * D;
        const T* vm = vd + (b * Hkv + hk) * Skv * Dv;
        for (int64_t i = 0; i < Sq * D; ++i) qs[i] = qm[i] * ss;
        for (int64_t i = 0; i < Skv * D; ++i) ks[i] = km[i] * ss;
        for (int64_t i = 0; i < Sq; ++i) {
          T* qkr = qkd + ((b * Hq + h) * Sq + i) * Skv;
          for (int64_t j = 0; j < Skv; ++j) {
            T s = 0;
            for (int64_t d = 0; d < D; ++d) s += qs[i * D + d] * ks[j * D + d];
            if (softcap > 0) s = static_cast<T>(std::tanh(s / static_cast<T>(softcap)) * static_cast<T>(softcap));
            T wb = static_cast<T>(s + static_cast<T>(bias_at(b, h, i, j)));
            qkr[j] = mode == 2 ? wb : s;
            row[j] = wb;
          }
          T mx = -std::numeric_limits<T>::infinity();
          bool nan = false;
          for (int64_t j = 0; j < Skv; ++j) {
            if (std::isnan(row[j])) nan = true;
            mx = std::max(mx, row[j]);
          }
          if (nan) mx = std::numeric_limits<T>::quiet_NaN();
          T sum = 0;
          for (int64_t j = 0; j < Skv; ++j) {
            p[j] = std::exp(row[j] - mx);
            sum += p[j];
          }
          for (int64_t j = 0; j < Skv; ++j) {
            p[j] = p[j] / sum;
            if (mode == 3) qkr[j] = p[j];
          }
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j < Skv; ++j) {
            double pj = p[j];
            const T* vr = vm + j * Dv;
            for (int64_t d = 0; d < Dv; ++d) acc[d] += pj * static_cast<double>(vr[d]);
          }
          T* yr = yd + ((b * Hq + h) * Sq + i) * Dv;
          for (int64_t d = 0; d < Dv; ++d) yr[d] = static_cast<T>(acc[d]);
        }
      }
    });
  });
  if (rank == 3) y = y.permute({0, 2, 1, 3}).contiguous().reshape({B, Sq, Hq * Dv});
  ctx.set_output(0, narrow_to(y, dt));
  if (ctx.wants_output(1)) ctx.set_output(1, narrow_to(k, dt));
  if (ctx.wants_output(2)) ctx.set_output(2, narrow_to(v, dt));
  if (ctx.wants_output(3)) ctx.set_output(3, narrow_to(qk_out, dt));
}

// ---- RotaryEmbedding ---------------------------------------------------------------

void rotary_kernel(KernelContext& ctx) {
  DType dt = ctx.input(0).dtype();
  Tensor x = float_tensor(ctx, 0);
  Tensor cosc = float_tensor(ctx, 1).cast(DType::F64), sinc = float_tensor(ctx, 2).cast(DType::F64);
  bool interleaved = ctx.node.get_int("interleaved", 0) != 0;
  int64_t rot = ctx.node.get_int("rotary_embedding_dim", 0);
  int64_t nheads = ctx.node.get_int("num_heads", 0);
  int64_t r = x.rank();
  std::vector<int64_t> orig = x.shape();
  Tensor xs;  // [B, S, H, D]
  if (r == 4) {
    xs = x.permute({0, 2, 1, 3}).contiguous();
  } else if (r == 3) {
    if (nheads <= 0 || x.dim(2) % nheads != 0)
      ctx.fail(ErrorCode::InvalidArgument, "3-D input needs num_heads dividing the hidden size {}", x.dim(2));
    xs = x.reshape({x.dim(0), x.dim(1), nheads, x.dim(2) / nheads});
  } else {
    ctx.fail(ErrorCode::InvalidArgument, "input must be 3-D or 4-D, got {}", x.shape_string());
  }
  int64_t B = xs.dim(0), S = xs.dim(1), H = xs.dim(2), D = xs.dim(3);
  if (rot == 0) rot = D;
  if (rot < 0 || rot > D || rot % 2 != 0)
    ctx.fail(ErrorCode::InvalidArgument, "rotary_embedding_dim {} must be even and <= head size {}", rot, D);
  int64_t half = rot / 2;
  std::vector<int64_t> pos;
  bool has_pos = ctx.has_input(3);
  if (has_pos) {
    const Tensor& pt = ctx.input(3);
    if (pt.rank() != 2 || pt.dim(0) != B || pt.dim(1) != S)
      ctx.fail(ErrorCode::InvalidArgument, "position_ids must be [{}, {}], got {}", B, S, pt.shape_string());
    pos = pt.to_int64s();
    if (cosc.rank() != 2 || cosc.dim(1) != half || sinc.shape() != cosc.shape())
      ctx.fail(ErrorCode::InvalidArgument, "cos/sin caches must be [max_pos, {}], got {} and {}", half,
               cosc.shape_string(), sinc.shape_string());
    for (int64_t p : pos)
      if (p < 0 || p >= cosc.dim(0))
        ctx.fail(ErrorCode::InvalidArgument, "position id {} is out of range for a cache of {} positions", p, cosc.dim(0));
  } else {
    if (cosc.rank() != 3 || cosc.dim(0) != B || cosc.dim(1) != S || cosc.dim(2) != half || sinc.shape() != cosc.shape())
      ctx.fail(ErrorCode::InvalidArgument, "cos/sin caches must be [{}, {}, {}] without position_ids, got {} and {}",
               B, S, half, cosc.shape_string(), sinc.shape_string());
  }
  const double* cd = cosc.data<double>();
  const double* sd = sinc.data<double>();
  Tensor out = Tensor::empty(xs.dtype(), xs.shape());
  dispatch_float(ctx, xs.dtype(), [&]<typename T>() {
    const T* src = xs.data<T>();
    T* dst = out.data<T>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        int64_t row = has_pos ? pos[b * S + s] : b * S + s;
        const double* c = cd + row * half;
        const double* sn = sd + row * half;
        for (int64_t h = 0; h < H; ++h) {
          const T* p = src + ((b * S + s) * H + h) * D;
          T* q = dst + ((b * S + s) * H + h) * D;
          for (int64_t i = 0; i < half; ++i) {
            int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
            T cc = static_cast<T>(c[i]), ssn = static_cast<T>(sn[i]);
            T x1 = p[i1], x2 = p[i2];
            q[i1] = cc * x1 - ssn * x2;
            q[i2] = ssn * x1 + cc * x2;
          }
          for (int64_t i = rot; i < D; ++i) q[i] = p[i];
        }
      }
  });
  Tensor res = r == 4 ? out.permute({0, 2, 1, 3}).contiguous() : out.reshape(orig);
  ctx.set_output(0, narrow_to(res, dt));
}

// ---- Losses ---------------------------------------------------------------------------

// loss[n, d] = -w * logp[n, target, d]; reductions per the numpy reference.
void loss_kernel(KernelContext& ctx, bool softmax) {
  DType dt = ctx.input(0).dtype();
  Tensor x = float_tensor(ctx, 0);
  const Tensor& target = ctx.input(1);
  if (!dtype_is_integer(target.dtype())) ctx.fail(ErrorCode::InvalidArgument, "target must be an integer tensor");
  if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got {}", x.shape_string());
  int64_t N = x.dim(0), C = x.dim(1);
  std::vector<int64_t> tshape{N};
  for (int64_t d = 2; d < x.rank(); ++d) tshape.push_back(x.dim(d));
  if (target.shape() != tshape)
    ctx.fail(ErrorCode::InvalidArgument, "target shape {} does not match input {} (expected {})", target.shape_string(),
             x.shape_string(), shape_to_string(tshape));
  int64_t Dn = shape_numel(tshape) / std::max<int64_t>(N, 1);
  if (N == 0) Dn = 0;
  std::string reduction = ctx.node.get_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    ctx.fail(ErrorCode::InvalidArgument, "reduction '{}' is not one of none, sum, mean", reduction);
  bool has_ii = ctx.node.has_attr("ignore_index");
  int64_t ii = ctx.node.get_int("ignore_index", 0);
  std::vector<double> weight;
  if (ctx.has_input(2)) {
    weight = ctx.input(2).to_doubles();
    if (static_cast<int64_t>(weight.size()) != C || ctx.input(2).rank() != 1)
      ctx.fail(ErrorCode::InvalidArgument, "weight must be 1-D of size C = {}", C);
  }
  auto tv = target.to_int64s();
  for (int64_t t : tv)
    if (!(has_ii && t == ii) && (t < 0 || t >= C))
      ctx.fail(ErrorCode::InvalidArgument, "target value {} is out of range [0, {})", t, C);
  Tensor logp = Tensor::empty(x.dtype(), x.shape());
  Tensor loss = Tensor::empty(x.dtype(), tshape);
  double total = 0, wsum = 0;
  dispatch_float(ctx, x.dtype(), [&]<typename T>() {
    const T* xd = x.data<T>();
    T* lp = logp.data<T>();
    // log_softmax over axis 1 (numpy reference: log(exp(x - max) / sum)).
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < Dn; ++d) {
        if (!softmax) {
          for (int64_t c = 0; c < C; ++c) lp[(n * C + c) * Dn + d] = xd[(n * C + c) * Dn + d];
          continue;
        }
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, xd[(n * C + c) * Dn + d]);
        T s = 0;
        for (int64_t c = 0; c < C; ++c) s += std::exp(xd[(n * C + c) * Dn + d] - mx);
        for (int64_t c = 0; c < C; ++c)
          lp[(n * C + c) * Dn + d] = std::log(std::exp(xd[(n * C + c) * Dn + d] - mx) / s);
      }
    T* ld = loss.data<T>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < Dn; ++d) {
        int64_t t = tv[n * Dn + d];
        bool ign = has_ii && t == ii;
        double w = ign ? 0.0 : weight.empty() ? 1.0 : static_cast<double>(static_cast<T>(weight[t]));
        double l = ign ? 0.0 : -static_cast<double>(lp[(n * C + t) * Dn + d]);
        ld[n * Dn + d] = static_cast<T>(w * l);
        total += static_cast<double>(static_cast<T>(w * l));
        wsum += w;
      }
  });
  Tensor out;
  if (reduction == "none") {
    out = loss;
  } else {
    double r = reduction == "sum" ? total : total / wsum;
    out = Tensor::empty(x.dtype(), {});
    out.set_double(0, r);
  }
  ctx.set_output(0, narrow_to(out, dt));
  if (softmax && ctx.wants_output(1)) ctx.set_output(1, narrow_to(logp, dt));
}

}  // namespace

void register_attention_ops(OpTable& t) {
  t.add("", "Attention", attention_kernel);
  t.add("", "RotaryEmbedding", rotary_kernel);
  t.add("", "SoftmaxCrossEntropyLoss", [](KernelContext& c) { loss_kernel(c, true); });
  t.add("", "NegativeLogLikelihoodLoss", [](KernelContext& c) { loss_kernel(c, false); });
}

}  // namespace hodu::interp
