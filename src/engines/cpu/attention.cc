// hodu.Attention on [batch, heads, seq, dim] tensors (or [batch, seq, heads·dim] ones, read
// and written through strides): scores = scale * Q Kᵀ
// (oneDNN batched matmul, Kᵀ read through strides), softmax with the mask
// added (row kernel), Y = P V (oneDNN matmul). The scores live in the arena.
#include <cmath>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"

namespace hodu::cpu {
namespace {

class AttentionStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(q_, rs, reads[0]);
    bind(k_, rs, reads[1]);
    bind(v_, rs, reads[2]);
    bind(s_, rs, scores_);
    bind(y_, rs, writes[0]);
    qk_.execute(rs.stream, {{DNNL_ARG_SRC, q_}, {DNNL_ARG_WEIGHTS, k_}, {DNNL_ARG_DST, s_}});
    rs.stream.wait();
    float* s = static_cast<float*>(rs.slots[scores_].data());
    const float* mask = mask_ >= 0 ? rs.slots[mask_].tensor().data<float>() : nullptr;
    const int64_t sq = sq_, skv = skv_, heads = heads_;
    parallel_for(batch_ * heads * sq, rs.threads, [&](int64_t row) {
      int64_t i = row % sq, h = (row / sq) % heads, bb = row / (sq * heads);
      const float* m = nullptr;
      if (mask) {
        // Broadcast each of the mask's leading dims (size 1 or full).
        int64_t off = (mdims_[0] == 1 ? 0 : bb) * mstr_[0] + (mdims_[1] == 1 ? 0 : h) * mstr_[1] +
                      (mdims_[2] == 1 ? 0 : i) * mstr_[2];
        m = mask + off;
      }
      float* r = s + row * skv;
      softmax_row(r, m, mdims_[3] == 1 ? 0 : 1, r, skv, causal_ ? i + 1 : skv);
    });
    pv_.execute(rs.stream, {{DNNL_ARG_SRC, s_}, {DNNL_ARG_WEIGHTS, v_}, {DNNL_ARG_DST, y_}});
  }

  dnnl::matmul qk_, pv_;
  dnnl::memory q_, k_, v_, s_, y_;
  int scores_ = -1, mask_ = -1;
  int64_t batch_ = 0, heads_ = 0, sq_ = 0, skv_ = 0;
  std::vector<int64_t> mdims_ = {1, 1, 1, 1}, mstr_ = {0, 0, 0, 0};
  bool causal_ = false;
};

}  // namespace

bool make_attention(PlanBuilder& b, const Node& n) {
  if (n.domain != "hodu" || n.op_type != "Attention" || n.has_input(4)) return false;
  auto q = b.static_type(n.inputs[0]), k = b.static_type(n.inputs[1]), v = b.static_type(n.inputs[2]);
  auto y = b.static_type(n.outputs[0]);
  if (!q || !k || !v || !y) return false;
  const size_t rank = q->second.size();
  if (rank != 3 && rank != 4) return false;
  for (const auto* t : {&*q, &*k, &*v})
    if (t->first != DType::F32 || t->second.size() != rank) return false;
  // Rank 3: [batch, seq, heads·dim] with the heads side by side, read (and Y written) through
  // strides as [batch, heads, seq, dim]. Grouped-query attention goes to the interpreter.
  std::vector<int64_t> qs = q->second, ks = k->second, vs = v->second;
  if (rank == 3) {
    const int64_t h = n.get_int("num_heads", 0);
    if (h <= 0 || n.get_int("kv_num_heads", h) != h) return false;
    for (auto* s : {&qs, &ks, &vs}) {
      if ((*s)[2] % h != 0) return false;
      *s = {(*s)[0], h, (*s)[1], (*s)[2] / h};
    }
  }
  // Same heads for Q, K and V (grouped-query attention goes to the interpreter).
  if (qs[0] != ks[0] || qs[0] != vs[0] || qs[1] != ks[1] || qs[1] != vs[1] || qs[3] != ks[3] || ks[2] != vs[2])
    return false;
  int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Skv = ks[2], Dv = vs[3];
  bool causal = n.get_int("is_causal", 0) != 0;
  if (causal && Sq != Skv) return false;
  float scale = n.has_attr("scale") ? n.get_float("scale", 1.0f) : 1.0f / std::sqrt(static_cast<float>(D));
  auto step = std::make_unique<AttentionStep>();
  if (n.has_input(3)) {
    auto m = b.static_type(n.inputs[3]);
    if (!m || m->first != DType::F32 || m->second.size() > 4) return false;
    std::vector<int64_t> md = m->second;
    md.insert(md.begin(), 4 - md.size(), 1);
    std::vector<int64_t> full = {B, H, Sq, Skv};
    for (int i = 0; i < 4; ++i)
      if (md[i] != 1 && md[i] != full[i]) return false;
    step->mdims_ = md;
    step->mstr_ = contiguous_strides(md);
  }
  // [B, H, S, d] over its bytes: row-major (rank 4), or [B, S, H, d] row-major (rank 3).
  auto heads_md = [&](int64_t S, int64_t d) {
    return rank == 4 ? plain_md({B, H, S, d})
                     : dnnl::memory::desc({B, H, S, d}, dt::f32, dnnl::memory::dims{S * H * d, d, H * d, 1});
  };
  try {
    dnnl::memory::desc q_md = heads_md(Sq, D);
    // Kᵀ: logical [B, H, D, Skv], K's strides with the last two dims swapped.
    dnnl::memory::desc k_md = heads_md(Skv, D);
    auto kst = k_md.data.format_desc.blocking.strides;
    dnnl::memory::desc kt_md({B, H, D, Skv}, dt::f32, dnnl::memory::dims{kst[0], kst[1], kst[3], kst[2]});
    dnnl::memory::desc s_md = plain_md({B, H, Sq, Skv});
    dnnl::memory::desc v_md = heads_md(Skv, Dv);
    dnnl::memory::desc y_md = heads_md(Sq, Dv);
    dnnl::primitive_attr attr;
    attr.set_output_scales(0, {scale});
    step->qk_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md, kt_md, s_md), attr, b.engine()));
    step->pv_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(s_md, v_md, y_md), b.engine()));
    step->q_ = dnnl::memory(q_md, b.engine(), nullptr);
    step->k_ = dnnl::memory(kt_md, b.engine(), nullptr);
    step->v_ = dnnl::memory(v_md, b.engine(), nullptr);
    step->s_ = dnnl::memory(s_md, b.engine(), nullptr);
    step->y_ = dnnl::memory(y_md, b.engine(), nullptr);
  } catch (const dnnl::error&) {
    return false;
  }
  if (y->second != (rank == 4 ? std::vector<int64_t>{B, H, Sq, Dv} : std::vector<int64_t>{B, Sq, H * Dv})) return false;
  step->batch_ = B;
  step->heads_ = H;
  step->sq_ = Sq;
  step->skv_ = Skv;
  step->causal_ = causal;
  step->reads = {b.plain(n.inputs[0]), b.plain(n.inputs[1]), b.plain(n.inputs[2])};
  if (n.has_input(3)) {
    step->mask_ = b.plain(n.inputs[3]);
    step->reads.push_back(step->mask_);
  }
  // The scores: an arena slot with no name, written and read by this step only.
  step->scores_ = b.define("", DType::F32, {B, H, Sq, Skv});
  step->writes = {step->scores_, b.define(n.outputs[0], DType::F32, y->second)};
  std::swap(step->writes[0], step->writes[1]);  // writes[0] is the output
  step->label = n.describe() + ": onednn matmul + cpu softmax";
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
