// Emitters for the attention family of the newest ONNX: Attention (with past key/value,
// masks, GQA, softcap, causal and padded-kv rules), RotaryEmbedding, CausalConvWithState
// and LinearAttention. Computed in double by the generic kernels (kernels/hk_ops.c).
#include <fmt/format.h>

#include <cmath>

#include "compilers/c/ops_generic.h"
#include "core/error.h"

namespace hodu::compilers::c {
namespace {

// "{a, b, c, d}" of four sizes.
std::string four(const SymShape& v) { return fmt::format("{{{}, {}, {}, {}}}", v[0], v[1], v[2], v[3]); }

// Element strides (b, h, s, d) of a [B, S, H * D] tensor read as heads, or of a [B, H, S, D] one.
SymShape head_strides(const SymShape& s, const SymInt& heads) {
  if (s.size() == 4) {
    auto st = row_major_strides(s);
    return {st[0], st[1], st[2], st[3]};
  }
  SymInt d = floordiv(s[2], heads);
  return {s[1] * s[2], d, s[2], 1};
}

void emit_attention(Codegen& cg, const Node& n) {
  auto qs = cg.shape_of(n.inputs[0]), ks = cg.shape_of(n.inputs[1]), vs = cg.shape_of(n.inputs[2]);
  const size_t r = qs.size();
  HODU_CHECK((r == 3 || r == 4) && ks.size() == r && vs.size() == r, ErrorCode::InvalidModel,
             "{}: Q, K, V must all be 3-D or all 4-D", n.describe());
  SymInt B = qs[0], Hq, Hkv, Sq, S, D, Dv;
  if (r == 3) {
    Hq = n.get_int("q_num_heads", 0);
    Hkv = n.get_int("kv_num_heads", 0);
    HODU_CHECK(Hq.value() > 0 && Hkv.value() > 0, ErrorCode::InvalidModel,
               "{}: 3-D inputs need q_num_heads and kv_num_heads", n.describe());
    Sq = qs[1];
    S = ks[1];
    D = floordiv(qs[2], Hq);
    Dv = floordiv(vs[2], Hkv);
  } else {
    Hq = qs[1];
    Hkv = ks[1];
    Sq = qs[2];
    S = ks[2];
    D = qs[3];
    Dv = vs[3];
  }
  bool has_past = n.has_input(4) && n.has_input(5);
  SymInt P = has_past ? cg.shape_of(n.inputs[4])[2] : SymInt(0);
  double scale = n.has_attr("scale") ? n.get_float("scale", 0.f) : 0;
  std::string scale_c = n.has_attr("scale") ? c_float(scale) : fmt::format("1.0 / sqrt((double){})", D);
  std::string q = f64_in(cg, n.inputs[0]), k = f64_in(cg, n.inputs[1]), v = f64_in(cg, n.inputs[2]);
  std::string pk = has_past ? f64_in(cg, n.inputs[4]) : "NULL", pv = has_past ? f64_in(cg, n.inputs[5]) : "NULL";
  // The mask: bool bytes as they are, other dtypes as doubles; right-aligned to [B, Hq, Sq, Skv].
  std::string mask = "NULL", ms = "{0, 0, 0, 0}", mlen = "0";
  bool mask_bool = false;
  if (n.has_input(3)) {
    auto m = cg.shape_of(n.inputs[3]);
    mask_bool = cg.dtype_of(n.inputs[3]) == DType::Bool;
    mask = mask_bool ? cg.ptr(n.inputs[3]) : f64_in(cg, n.inputs[3]);
    SymShape full(4 - m.size(), 1);
    full.insert(full.end(), m.begin(), m.end());
    auto st = row_major_strides(full);
    for (int d = 0; d < 4; ++d)
      if (full[d].is(1)) st[d] = 0;
    ms = four(st);
    mlen = full[3].c();
  }
  std::string nonpad = n.has_input(6) ? i64_in(cg, n.inputs[6]) : "NULL";
  SymInt Skv = P + S;
  auto ys = cg.shape_of(n.outputs[0]);
  WideOut y = wide_out(cg, n.outputs[0], ys);
  SymShape yst = r == 3 ? SymShape{Sq * Hq * Dv, Dv, Hq * Dv, 1}
                        : SymShape{Hq * Sq * Dv, Sq * Dv, Dv, 1};
  std::string present_k = "NULL", present_v = "NULL", qk = "NULL";
  WideOut pko, pvo, qko;
  if (n.has_output(1)) {
    pko = wide_out(cg, n.outputs[1], cg.shape_of(n.outputs[1]));
    present_k = pko.buffer;
  }
  if (n.has_output(2)) {
    pvo = wide_out(cg, n.outputs[2], cg.shape_of(n.outputs[2]));
    present_v = pvo.buffer;
  }
  if (n.has_output(3)) {
    qko = wide_out(cg, n.outputs[3], cg.shape_of(n.outputs[3]));
    qk = qko.buffer;
  }
  std::string work = fmt::format("((double*){})", cg.scratch((Skv * 2 + Dv + 1) * 8));
  std::string args = fmt::format("att{}", cg.table_count++);
  // hk_attention_args, field by field.
  const std::vector<std::string> fields = {
      B.c(), Hq.c(), Hkv.c(), Sq.c(), S.c(), P.c(), D.c(), Dv.c(), q, k, v, pk, pv,
      four(head_strides(qs, Hq)), four(head_strides(ks, Hkv)), four(head_strides(vs, Hkv)), mask,
      mask_bool ? "1" : "0", ms, mlen, nonpad, scale_c, c_float(n.get_float("softcap", 0.f)),
      n.get_int("is_causal", 0) ? "1" : "0", std::to_string(n.get_int("qk_matmul_output_mode", 0)),
      has_past ? "1" : "0", y.buffer, four(yst), present_k, present_v, qk};
  std::string init;
  for (const auto& f : fields) init += (init.empty() ? "" : ", ") + f;
  cg.emit(fmt::format("hk_attention_args {} = {{{}}};", args, init));
  cg.emit(fmt::format("hk_attention(&{}, {});", args, work));
  y.finish(cg);
  if (present_k != "NULL") pko.finish(cg);
  if (present_v != "NULL") pvo.finish(cg);
  if (qk != "NULL") qko.finish(cg);
}

void emit_rotary(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]);
  SymInt B = xs[0], S, H, D;
  SymShape st;
  if (xs.size() == 4) {  // [B, H, S, D]
    H = xs[1];
    S = xs[2];
    D = xs[3];
    auto c = row_major_strides(xs);
    st = {c[0], c[2], c[1], c[3]};
  } else {
    HODU_CHECK(xs.size() == 3, ErrorCode::InvalidModel, "{}: input must be 3-D or 4-D", n.describe());
    H = n.get_int("num_heads", 0);
    HODU_CHECK(H.value() > 0, ErrorCode::InvalidModel, "{}: 3-D input needs num_heads", n.describe());
    S = xs[1];
    D = floordiv(xs[2], H);
    st = {S * xs[2], xs[2], D, 1};
  }
  SymInt rot = n.get_int("rotary_embedding_dim", 0);
  if (rot.is(0)) rot = D;
  auto cs = cg.shape_of(n.inputs[1]);
  std::string x = f64_in(cg, n.inputs[0]), c = f64_in(cg, n.inputs[1]), s = f64_in(cg, n.inputs[2]);
  std::string pos = n.has_input(3) ? i64_in(cg, n.inputs[3]) : "NULL";
  WideOut y = wide_out(cg, n.outputs[0], xs);
  std::string strides = cg.table(st);
  cg.emit_checked(fmt::format("hk_rotary({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x, y.buffer, c, s, pos, B,
                              S, H, D, strides, rot, n.get_int("interleaved", 0) ? 1 : 0, cs[0]),
                  n, "a position id is out of range");
  y.finish(cg);
}

void emit_causal_conv(Codegen& cg, const Node& n) {
  auto xs = cg.shape_of(n.inputs[0]), ws = cg.shape_of(n.inputs[1]);
  HODU_CHECK(xs.size() == 3 && ws.size() == 3, ErrorCode::InvalidModel, "{}: input and weight must be 3-D",
             n.describe());
  HODU_CHECK(ws[0] == xs[1] && ws[1].is(1) && ws[2].known() && ws[2].value() >= 1, ErrorCode::InvalidModel,
             "{}: weight {} does not match (channels {}, 1, k >= 1)", n.describe(), to_string(ws), xs[1].c());
  std::string act = n.get_string("activation", "none");
  HODU_CHECK(act == "none" || act == "silu" || act == "swish", ErrorCode::InvalidModel, "{}: activation '{}'",
             n.describe(), act);
  std::string x = f64_in(cg, n.inputs[0]), w = f64_in(cg, n.inputs[1]);
  std::string b = n.has_input(2) ? f64_in(cg, n.inputs[2]) : "NULL", past = n.has_input(3) ? f64_in(cg, n.inputs[3]) : "NULL";
  WideOut y = wide_out(cg, n.outputs[0], xs);
  std::string present = "NULL";
  WideOut po;
  if (n.has_output(1)) {
    po = wide_out(cg, n.outputs[1], cg.shape_of(n.outputs[1]));
    present = po.buffer;
  }
  cg.emit(fmt::format("hk_causal_conv({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", x, past, w, b, y.buffer, present,
                      xs[0], xs[1], xs[2], ws[2], act == "none" ? 0 : 1));
  y.finish(cg);
  if (present != "NULL") po.finish(cg);
}

void emit_linear_attention(Codegen& cg, const Node& n) {
  auto qs = cg.shape_of(n.inputs[0]), vs = cg.shape_of(n.inputs[2]);
  int64_t Hq = n.get_int("q_num_heads", 0), Hkv = n.get_int("kv_num_heads", 0);
  HODU_CHECK(Hq > 0 && Hkv > 0 && Hq % Hkv == 0, ErrorCode::InvalidModel, "{}: head counts {} and {}", n.describe(),
             Hq, Hkv);
  const std::string rule = n.get_string("update_rule", "gated_delta");
  const bool gating = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  HODU_CHECK(gating || delta || rule == "linear", ErrorCode::InvalidModel, "{}: update_rule '{}'", n.describe(), rule);
  HODU_CHECK(gating == n.has_input(4) && delta == n.has_input(5) && (delta || !n.has_input(6)), ErrorCode::InvalidModel,
             "{}: update_rule '{}' takes {}decay, {}beta and {}erase_gate", n.describe(), rule, gating ? "" : "no ",
             delta ? "" : "no ", delta ? "an optional " : "no ");
  SymInt B = qs[0], T = qs[1], dk = floordiv(qs[2], Hq), dv = floordiv(vs[2], Hkv);
  double scale = n.get_float("scale", 0.f);
  std::string scale_c = scale == 0 ? fmt::format("1.0 / sqrt((double){})", dk) : c_float(scale);
  std::string q = f64_in(cg, n.inputs[0]), k = f64_in(cg, n.inputs[1]), v = f64_in(cg, n.inputs[2]);
  std::string decay = n.has_input(4) ? f64_in(cg, n.inputs[4]) : "NULL",
              beta = n.has_input(5) ? f64_in(cg, n.inputs[5]) : "NULL",
              erase = n.has_input(6) ? f64_in(cg, n.inputs[6]) : "NULL";
  SymInt decay_last = n.has_input(4) ? cg.shape_of(n.inputs[4]).back() : SymInt(0);
  SymInt beta_last = n.has_input(5) ? cg.shape_of(n.inputs[5]).back() : SymInt(0);
  // The state: the past one (or zeros), updated in place, then the present output.
  SymShape state_shape{B, SymInt(Hkv), dk, dv};
  std::string state = fmt::format("((double*){})", cg.scratch(numel(state_shape) * 8));
  if (n.has_input(3)) {
    std::string past = f64_in(cg, n.inputs[3]);
    cg.emit(fmt::format("memcpy({}, {}, {} * 8);", state, past, numel(state_shape)));
  } else {
    cg.emit(fmt::format("memset({}, 0, {} * 8);", state, numel(state_shape)));
  }
  WideOut y = wide_out(cg, n.outputs[0], cg.shape_of(n.outputs[0]));
  std::string work = fmt::format("((double*){})", cg.scratch((dk + dv) * 8));
  cg.emit(fmt::format("hk_linear_attention({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});", q,
                      k, v, state, decay, decay_last, beta, beta_last, erase, y.buffer, B, T, Hq, Hkv, dk, dv, scale_c,
                      work));
  y.finish(cg);
  if (n.has_output(1)) {
    WideOut s = wide_out(cg, n.outputs[1], cg.shape_of(n.outputs[1]));
    cg.emit(fmt::format("memcpy({}, {}, {} * 8);", s.buffer, state, numel(state_shape)));
    s.finish(cg);
  }
}

}  // namespace

std::vector<std::string> attention_op_names() {
  return {"Attention", "RotaryEmbedding", "CausalConvWithState", "LinearAttention"};
}

bool emit_attention_op(Codegen& cg, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return false;
  if (op == "Attention") emit_attention(cg, n);
  else if (op == "RotaryEmbedding") emit_rotary(cg, n);
  else if (op == "CausalConvWithState") emit_causal_conv(cg, n);
  else if (op == "LinearAttention") emit_linear_attention(cg, n);
  else return false;
  need_generic_kernels(cg);
  return true;
}

}  // namespace hodu::compilers::c
