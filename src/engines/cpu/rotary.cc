// RotaryEmbedding (opset 23) on f32 (f16 models reach it widened): each (batch, position)
// row's heads rotated pairwise by the cache's cos/sin, read and written in the input's own
// layout ([B, H, S, D] or [B, S, H·D]) with no transposes, rows split over the threads. The
// interpreter's arithmetic (attention.cc), so results agree with it.
#include "engines/cpu/tensor_step.h"

namespace hodu::cpu {
namespace {

class RotaryStep : public TensorStep {
 public:
  RotaryStep(bool interleaved, int64_t rot, int64_t heads) : interleaved_(interleaved), rot_attr_(rot), heads_(heads) {}
  void configure(const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    if (x.rank() == 4) {
      B_ = x.dim(0), H_ = x.dim(1), S_ = x.dim(2), D_ = x.dim(3);
      four_d_ = true;
    } else if (x.rank() == 3) {
      if (heads_ <= 0 || x.dim(2) % heads_ != 0)
        fail(ErrorCode::InvalidArgument, "{}: a 3-D input needs num_heads dividing the hidden size {}", label, x.dim(2));
      B_ = x.dim(0), S_ = x.dim(1), H_ = heads_, D_ = x.dim(2) / heads_;
      four_d_ = false;
    } else {
      fail(ErrorCode::InvalidArgument, "{}: input must be 3-D or 4-D, got {}", label, x.shape_string());
    }
    rot_ = rot_attr_ == 0 ? D_ : rot_attr_;
    if (rot_ < 0 || rot_ > D_ || rot_ % 2 != 0)
      fail(ErrorCode::InvalidArgument, "{}: rotary_embedding_dim {} must be even and <= head size {}", label, rot_, D_);
    const int64_t half = rot_ / 2;
    const Tensor &c = *in[1], &s = *in[2];
    has_pos_ = in.size() > 3 && in[3];
    if (has_pos_) {
      const Tensor& p = *in[3];
      if (p.rank() != 2 || p.dim(0) != B_ || p.dim(1) != S_)
        fail(ErrorCode::InvalidArgument, "{}: position_ids must be [{}, {}], got {}", label, B_, S_, p.shape_string());
      if (c.rank() != 2 || c.dim(1) != half || s.shape() != c.shape())
        fail(ErrorCode::InvalidArgument, "{}: cos/sin caches must be [max_pos, {}], got {} and {}", label, half,
             c.shape_string(), s.shape_string());
    } else if (c.rank() != 3 || c.dim(0) != B_ || c.dim(1) != S_ || c.dim(2) != half || s.shape() != c.shape()) {
      fail(ErrorCode::InvalidArgument, "{}: cos/sin caches must be [{}, {}, {}] without position_ids, got {} and {}",
           label, B_, S_, half, c.shape_string(), s.shape_string());
    }
  }
  void execute(RunState& rs, const std::vector<const Tensor*>& in) override {
    const Tensor& x = *in[0];
    for (size_t i : {1, 2})
      if (in[i]->dtype() != DType::F32)
        fail(ErrorCode::InvalidArgument, "{}: the {} cache is {}, X is f32", label, i == 1 ? "cos" : "sin",
             dtype_name(in[i]->dtype()));
    Tensor& y = out(rs, 0, DType::F32, x.shape());
    std::vector<int64_t> pos;
    if (has_pos_) {
      pos = in[3]->to_int64s();
      for (int64_t p : pos)
        if (p < 0 || p >= in[1]->dim(0))
          fail(ErrorCode::InvalidArgument, "{}: position id {} is out of range for a cache of {} positions", label, p,
               in[1]->dim(0));
    }
    const float* src = x.data<float>();
    const float* cd = in[1]->data<float>();
    const float* sd = in[2]->data<float>();
    float* dst = y.data<float>();
    const int64_t S = S_, H = H_, D = D_, half = rot_ / 2, rot = rot_;
    const bool inter = interleaved_, four_d = four_d_;
    parallel_for(B_ * S, x.numel() >= (1 << 14) ? rs.threads : 1, [&](int64_t bs) {
      const int64_t b = bs / S, s = bs % S;
      const int64_t row = has_pos_ ? pos[static_cast<size_t>(bs)] : bs;
      const float* c = cd + row * half;
      const float* sn = sd + row * half;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = four_d ? ((b * H + h) * S + s) * D : (bs * H + h) * D;
        const float* p = src + off;
        float* q = dst + off;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + half;
          const float cc = c[i], ss = sn[i], x1 = p[i1], x2 = p[i2];
          q[i1] = cc * x1 - ss * x2;
          q[i2] = ss * x1 + cc * x2;
        }
        for (int64_t i = rot; i < D; ++i) q[i] = p[i];
      }
    });
  }

 private:
  bool interleaved_;
  int64_t rot_attr_, heads_;
  bool four_d_ = true, has_pos_ = false;
  int64_t B_ = 0, S_ = 0, H_ = 0, D_ = 0, rot_ = 0;
};

}  // namespace

bool make_rotary(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "RotaryEmbedding" || n.inputs.size() < 3) return false;
  for (size_t i = 0; i < 3; ++i)
    if (dtype_of(b, n.inputs[i]) != DType::F32) return false;
  auto step = std::make_unique<RotaryStep>(n.get_int("interleaved", 0) != 0, n.get_int("rotary_embedding_dim", 0),
                                           n.get_int("num_heads", 0));
  add_tensor_step(b, n, std::move(step), {DType::F32}, "rotary embedding loop");
  return true;
}

}  // namespace hodu::cpu
