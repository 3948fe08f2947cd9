// The backward kernels of hodu's gradient ops (passes/autodiff.h) on oneDNN's
// backward primitives: ConvGrad (convolution backward data and backward
// weights with the bias), MaxPoolGrad / AveragePoolGrad (pooling backward; max
// pooling reruns the forward in training mode for its workspace),
// BatchNormGrad (batch normalization forward training for the statistics, then
// backward), ActivationGrad (eltwise backward); and the forward half a training
// graph has beside them: BatchNormalization in training mode (batch statistics,
// the running mean/var updated). Each primitive is created for
// layouts of its choice (`any`); the plan reorders inputs to them and later
// readers of the results.
#include <cmath>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"

namespace hodu::cpu {
namespace {

using Args = std::unordered_map<int, dnnl::memory>;

// ---- ConvGrad ---------------------------------------------------------------------

class ConvGradStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(diff_dst_, rs, reads[0]);
    bind(w_user_, rs, reads[2]);
    if (data_) {
      if (w_reorder_) w_reorder_.execute(rs.stream, w_user_, w_);
      if (dy_bd_read_ >= 0) bind(diff_dst_bd_, rs, reads[dy_bd_read_]);
      bind(diff_src_, rs, writes[dx_]);
      data_.execute(rs.stream, Args{{DNNL_ARG_DIFF_DST, diff_dst_bd_ ? diff_dst_bd_ : diff_dst_},
                                    {DNNL_ARG_WEIGHTS, w_reorder_ ? w_ : w_user_},
                                    {DNNL_ARG_DIFF_SRC, diff_src_}});
    }
    if (weights_) {
      bind(src_, rs, reads[1]);
      Args args = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, diff_dst_}, {DNNL_ARG_DIFF_WEIGHTS, dw_}};
      if (dw_reorder_) bind(dw_user_, rs, writes[dw_out_]);
      else bind(dw_, rs, writes[dw_out_]);
      if (db_out_ >= 0) {
        bind(db_, rs, writes[db_out_]);
        args[DNNL_ARG_DIFF_BIAS] = db_;
      }
      weights_.execute(rs.stream, args);
      if (dw_reorder_) dw_reorder_.execute(rs.stream, dw_, dw_user_);
    }
  }
  dnnl::convolution_backward_data data_;
  dnnl::convolution_backward_weights weights_;
  dnnl::memory diff_dst_, diff_dst_bd_, src_, w_user_, w_, diff_src_, dw_, dw_user_, db_;
  dnnl::reorder w_reorder_, dw_reorder_;
  int dx_ = -1, dw_out_ = -1, db_out_ = -1;  // indices into writes
  int dy_bd_read_ = -1;                       // index into reads: dY in backward data's layout
};

bool make_conv_grad(PlanBuilder& b, const Node& n) {
  auto dy = b.static_type(n.inputs[0]), x = b.static_type(n.inputs[1]), w = b.static_type(n.inputs[2]);
  if (!dy || !x || !w || dy->first != DType::F32 || x->first != DType::F32 || w->first != DType::F32) return false;
  const auto &ys = dy->second, &xs = x->second, &ws = w->second;
  auto win = conv_window(n, xs, ys, ws);
  if (!win) return false;
  const bool want_dx = n.has_output(0), want_dw = n.has_output(1), want_db = n.has_output(2);
  if (want_db && !want_dw) return false;  // the bias gradient comes with backward weights
  const auto alg = dnnl::algorithm::convolution_direct;
  dnnl::memory::desc any_src(to_dims(xs), dt::f32, tag::any), any_dst(to_dims(ys), dt::f32, tag::any);
  dnnl::memory::desc any_w(win->weight_dims, dt::f32, tag::any), b_md({ys[1]}, dt::f32, tag::x);
  const dnnl::memory::desc w_user(win->weight_dims, dt::f32, win->weight_tag);
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_data::primitive_desc bd;
  dnnl::convolution_backward_weights::primitive_desc bw;
  try {
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, alg, any_src, any_w, b_md, any_dst,
                                       win->strides, win->dilations, win->pad_l, win->pad_r);
    fwd = dnnl::convolution_forward::primitive_desc(fd, b.engine());
    if (want_dx) {
      dnnl::convolution_backward_data::desc d(alg, any_src, any_w, any_dst, win->strides, win->dilations, win->pad_l,
                                              win->pad_r);
      bd = dnnl::convolution_backward_data::primitive_desc(d, b.engine(), fwd);
    }
    if (want_dw) {
      auto d = want_db ? dnnl::convolution_backward_weights::desc(alg, any_src, any_w, b_md, any_dst, win->strides,
                                                                 win->dilations, win->pad_l, win->pad_r)
                       : dnnl::convolution_backward_weights::desc(alg, any_src, any_w, any_dst, win->strides,
                                                                 win->dilations, win->pad_l, win->pad_r);
      bw = dnnl::convolution_backward_weights::primitive_desc(d, b.engine(), fwd);
    }
  } catch (const dnnl::error&) {
    return false;
  }
  if ((want_dx && reference_impl(bd.impl_info_str())) || (want_dw && reference_impl(bw.impl_info_str()))) return false;
  auto step = std::make_unique<ConvGradStep>();
  // dY in the layout backward weights wants (or backward data's when that is all there is).
  const dnnl::memory::desc dy_md = want_dw ? bw.diff_dst_desc() : bd.diff_dst_desc();
  step->reads = {b.as_layout(n.inputs[0], dy_md), want_dw ? b.as_layout(n.inputs[1], bw.src_desc()) : b.slot(n.inputs[1]),
                 b.plain(n.inputs[2])};
  step->diff_dst_ = dnnl::memory(dy_md, b.engine(), nullptr);
  step->w_user_ = dnnl::memory(w_user, b.engine(), nullptr);
  std::string impl;
  if (want_dx) {
    step->data_ = dnnl::convolution_backward_data(bd);
    if (!(bd.diff_dst_desc() == dy_md)) {
      // Backward data wants another dY layout than backward weights: a reordered copy of its own.
      step->dy_bd_read_ = static_cast<int>(step->reads.size());
      step->reads.push_back(b.as_layout(n.inputs[0], bd.diff_dst_desc()));
      step->diff_dst_bd_ = dnnl::memory(bd.diff_dst_desc(), b.engine(), nullptr);
    }
    if (!(bd.weights_desc() == w_user)) {
      step->w_ = dnnl::memory(bd.weights_desc(), b.engine());
      step->w_reorder_ = dnnl::reorder(step->w_user_, step->w_);
    }
    step->diff_src_ = dnnl::memory(bd.diff_src_desc(), b.engine(), nullptr);
    step->dx_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define(n.outputs[0], DType::F32, xs, bd.diff_src_desc()));
    impl += std::string(bd.impl_info_str());
  }
  if (want_dw) {
    step->weights_ = dnnl::convolution_backward_weights(bw);
    step->src_ = dnnl::memory(bw.src_desc(), b.engine(), nullptr);
    step->dw_out_ = static_cast<int>(step->writes.size());
    step->writes.push_back(b.define(n.outputs[1], DType::F32, ws));  // plain, as the param it updates
    if (bw.diff_weights_desc() == w_user) {
      step->dw_ = dnnl::memory(w_user, b.engine(), nullptr);
    } else {
      step->dw_ = dnnl::memory(bw.diff_weights_desc(), b.engine());
      step->dw_user_ = dnnl::memory(w_user, b.engine(), nullptr);
      step->dw_reorder_ = dnnl::reorder(step->dw_, step->dw_user_);
    }
    if (want_db) {
      step->db_out_ = static_cast<int>(step->writes.size());
      step->writes.push_back(b.define(n.outputs[2], DType::F32, {ys[1]}));
      step->db_ = dnnl::memory(b_md, b.engine(), nullptr);
    }
    impl += (impl.empty() ? "" : " + ") + std::string(bw.impl_info_str());
  }
  step->label = n.describe() + ": onednn " + impl;
  b.add(std::move(step));
  return true;
}

// ---- pooling ------------------------------------------------------------------------

class PoolGradStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(diff_dst_, rs, reads[0]);
    bind(diff_src_, rs, writes[0]);
    Args args = {{DNNL_ARG_DIFF_DST, diff_dst_}, {DNNL_ARG_DIFF_SRC, diff_src_}};
    if (forward_) {
      bind(src_, rs, reads[1]);
      forward_.execute(rs.stream, Args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_WORKSPACE, ws_}});
      args[DNNL_ARG_WORKSPACE] = ws_;
    }
    backward_.execute(rs.stream, args);
  }
  dnnl::pooling_v2_forward forward_;  // max pooling: the windows' argmax (workspace), recomputed
  dnnl::pooling_v2_backward backward_;
  dnnl::memory diff_dst_, diff_src_, src_, dst_, ws_;
};

bool make_pool_grad(PlanBuilder& b, const Node& n) {
  auto dy = b.static_type(n.inputs[0]), x = b.static_type(n.inputs[1]);
  if (!dy || !x || dy->first != DType::F32 || x->first != DType::F32) return false;
  const auto &ys = dy->second, &xs = x->second;
  auto win = pool_window(n, xs, ys);
  if (!win) return false;
  const bool max = win->alg == dnnl::algorithm::pooling_max;
  dnnl::memory::desc src_md = layout_md(b.at(b.slot(n.inputs[1])));
  dnnl::memory::desc any_src(to_dims(xs), dt::f32, tag::any), any_dst(to_dims(ys), dt::f32, tag::any);
  dnnl::pooling_v2_forward::primitive_desc fwd;
  dnnl::pooling_v2_backward::primitive_desc bwd;
  try {
    dnnl::pooling_v2_forward::desc fd(dnnl::prop_kind::forward_training, win->alg, src_md, any_dst,
                                      to_dims(win->strides), to_dims(win->kernel), win->dilations, win->pad_l,
                                      win->pad_r);
    fwd = dnnl::pooling_v2_forward::primitive_desc(fd, b.engine());
    dnnl::pooling_v2_backward::desc bd(win->alg, src_md, fwd.dst_desc(), to_dims(win->strides), to_dims(win->kernel),
                                       win->dilations, win->pad_l, win->pad_r);
    bwd = dnnl::pooling_v2_backward::primitive_desc(bd, b.engine(), fwd);
  } catch (const dnnl::error&) {
    return false;
  }
  if (reference_impl(bwd.impl_info_str())) return false;
  auto step = std::make_unique<PoolGradStep>();
  step->backward_ = dnnl::pooling_v2_backward(bwd);
  step->reads = {b.as_layout(n.inputs[0], bwd.diff_dst_desc())};
  step->diff_dst_ = dnnl::memory(bwd.diff_dst_desc(), b.engine(), nullptr);
  if (max) {
    step->forward_ = dnnl::pooling_v2_forward(fwd);
    step->reads.push_back(b.slot(n.inputs[1]));
    step->src_ = dnnl::memory(src_md, b.engine(), nullptr);
    step->dst_ = dnnl::memory(fwd.dst_desc(), b.engine());
    step->ws_ = dnnl::memory(fwd.workspace_desc(), b.engine());
  }
  step->writes = {b.define(n.outputs[0], DType::F32, xs, bwd.diff_src_desc())};
  step->diff_src_ = dnnl::memory(bwd.diff_src_desc(), b.engine(), nullptr);
  step->label = n.describe() + ": onednn " + std::string(bwd.impl_info_str());
  b.add(std::move(step));
  return true;
}

// ---- BatchNormGrad ------------------------------------------------------------------

class BatchNormGradStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[1]);
    bind(diff_dst_, rs, reads[0]);
    bind(scale_, rs, reads[2]);
    bind(diff_src_, rs, writes[0]);
    bind(diff_scale_, rs, writes[1]);
    bind(diff_shift_, rs, writes[2]);
    forward_.execute(rs.stream, Args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCALE, scale_},
                                     {DNNL_ARG_SHIFT, shift_}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}});
    backward_.execute(rs.stream, Args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, diff_dst_}, {DNNL_ARG_SCALE, scale_},
                                      {DNNL_ARG_SHIFT, shift_}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}, {DNNL_ARG_DIFF_SRC, diff_src_},
                                      {DNNL_ARG_DIFF_SCALE, diff_scale_}, {DNNL_ARG_DIFF_SHIFT, diff_shift_}});
  }
  dnnl::batch_normalization_forward forward_;  // the batch statistics
  dnnl::batch_normalization_backward backward_;
  dnnl::memory src_, dst_, diff_dst_, scale_, shift_, mean_, var_, diff_src_, diff_scale_, diff_shift_;
};

bool make_batch_norm_grad(PlanBuilder& b, const Node& n) {
  auto dy = b.static_type(n.inputs[0]), x = b.static_type(n.inputs[1]), sc = b.static_type(n.inputs[2]);
  if (!dy || !x || !sc || x->first != DType::F32 || dy->first != DType::F32 || sc->first != DType::F32) return false;
  const auto& xs = x->second;
  if (xs.size() < 2 || xs.size() > 5 || sc->second != std::vector<int64_t>{xs[1]}) return false;
  // Every output is written by the primitive: all three must be named.
  if (!n.has_output(0) || !n.has_output(1) || !n.has_output(2)) return false;
  const float eps = n.get_float("epsilon", 1e-5f);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::memory::desc src_md = layout_md(b.at(b.slot(n.inputs[1])));
  dnnl::batch_normalization_forward::primitive_desc fwd;
  dnnl::batch_normalization_backward::primitive_desc bwd;
  try {
    dnnl::batch_normalization_forward::desc fd(dnnl::prop_kind::forward_training, src_md, eps, flags);
    fwd = dnnl::batch_normalization_forward::primitive_desc(fd, b.engine());
    dnnl::batch_normalization_backward::desc bd(dnnl::prop_kind::backward, src_md, src_md, eps, flags);
    bwd = dnnl::batch_normalization_backward::primitive_desc(bd, b.engine(), fwd);
  } catch (const dnnl::error&) {
    return false;
  }
  auto step = std::make_unique<BatchNormGradStep>();
  step->forward_ = dnnl::batch_normalization_forward(fwd);
  step->backward_ = dnnl::batch_normalization_backward(bwd);
  dnnl::memory::desc c_md({xs[1]}, dt::f32, tag::x);
  step->reads = {b.as_layout(n.inputs[0], src_md), b.slot(n.inputs[1]), b.plain(n.inputs[2])};
  step->src_ = dnnl::memory(src_md, b.engine(), nullptr);
  step->diff_dst_ = dnnl::memory(src_md, b.engine(), nullptr);
  step->scale_ = dnnl::memory(c_md, b.engine(), nullptr);
  step->shift_ = dnnl::memory(c_md, b.engine());
  std::fill_n(static_cast<float*>(step->shift_.get_data_handle()), xs[1], 0.0f);
  step->dst_ = dnnl::memory(fwd.dst_desc(), b.engine());
  step->mean_ = dnnl::memory(fwd.mean_desc(), b.engine());
  step->var_ = dnnl::memory(fwd.variance_desc(), b.engine());
  step->writes = {b.define(n.outputs[0], DType::F32, xs, src_md), b.define(n.outputs[1], DType::F32, {xs[1]}),
                  b.define(n.outputs[2], DType::F32, {xs[1]})};
  step->diff_src_ = dnnl::memory(src_md, b.engine(), nullptr);
  step->diff_scale_ = dnnl::memory(c_md, b.engine(), nullptr);
  step->diff_shift_ = dnnl::memory(c_md, b.engine(), nullptr);
  step->label = n.describe() + ": onednn " + std::string(bwd.impl_info_str());
  b.add(std::move(step));
  return true;
}

// ---- BatchNormalization in training mode ---------------------------------------------

class BatchNormTrainingStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(scale_, rs, reads[1]);
    bind(shift_, rs, reads[2]);
    bind(dst_, rs, writes[0]);
    prim_.execute(rs.stream, Args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCALE, scale_},
                                  {DNNL_ARG_SHIFT, shift_}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}});
    rs.stream.wait();
    // running = input · momentum + batch · (1 − momentum), the batch variance biased (ONNX's).
    for (size_t o = 0; o < 2; ++o) {
      if (run_out_[o] < 0) continue;
      const float* in = static_cast<const float*>(rs.slots[reads[3 + o]].data());
      const float* batch = static_cast<const float*>((o ? var_ : mean_).get_data_handle());
      float* out = static_cast<float*>(rs.slots[writes[run_out_[o]]].data());
      for (int64_t c = 0; c < channels_; ++c) out[c] = in[c] * momentum_ + batch[c] * (1 - momentum_);
    }
  }
  dnnl::batch_normalization_forward prim_;
  dnnl::memory src_, dst_, scale_, shift_, mean_, var_;
  int run_out_[2] = {-1, -1};  // indices into writes of running_mean, running_var
  int64_t channels_ = 0;
  float momentum_ = 0.9f;
};

bool make_batch_norm_training(PlanBuilder& b, const Node& n) {
  if (n.inputs.size() != 5 || n.get_int("training_mode", 0) == 0) return false;
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32 || x->second.size() < 2 || x->second.size() > 5) return false;
  const auto& xs = x->second;
  for (size_t i = 1; i < 5; ++i) {
    auto t = b.static_type(n.inputs[i]);
    if (!t || t->first != DType::F32 || t->second != std::vector<int64_t>{xs[1]}) return false;
  }
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::memory::desc src_md = layout_md(b.at(b.slot(n.inputs[0])));
  dnnl::batch_normalization_forward::primitive_desc pd;
  try {
    pd = dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, src_md, n.get_float("epsilon", 1e-5f),
                                                flags),
        b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  auto step = std::make_unique<BatchNormTrainingStep>();
  step->prim_ = dnnl::batch_normalization_forward(pd);
  dnnl::memory::desc c_md({xs[1]}, dt::f32, tag::x);
  step->reads = {b.slot(n.inputs[0]), b.plain(n.inputs[1]), b.plain(n.inputs[2]), b.plain(n.inputs[3]),
                 b.plain(n.inputs[4])};
  step->src_ = dnnl::memory(src_md, b.engine(), nullptr);
  step->scale_ = dnnl::memory(c_md, b.engine(), nullptr);
  step->shift_ = dnnl::memory(c_md, b.engine(), nullptr);
  step->mean_ = dnnl::memory(pd.mean_desc(), b.engine());
  step->var_ = dnnl::memory(pd.variance_desc(), b.engine());
  step->writes = {b.define(n.outputs[0], DType::F32, xs, pd.dst_desc())};
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  for (size_t o = 0; o < 2; ++o)
    if (n.has_output(o + 1)) {
      step->run_out_[o] = static_cast<int>(step->writes.size());
      step->writes.push_back(b.define(n.outputs[o + 1], DType::F32, {xs[1]}));
    }
  step->channels_ = xs[1];
  step->momentum_ = n.get_float("momentum", 0.9f);
  step->label = n.describe() + ": onednn batch normalization training " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

// ---- ActivationGrad -----------------------------------------------------------------

class EltwiseGradStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(diff_dst_, rs, reads[0]);
    bind(src_, rs, reads[1]);
    bind(diff_src_, rs, writes[0]);
    prim_.execute(rs.stream, Args{{DNNL_ARG_DIFF_DST, diff_dst_}, {DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_SRC, diff_src_}});
  }
  dnnl::eltwise_backward prim_;
  dnnl::memory diff_dst_, src_, diff_src_;
};

// The kinks oneDNN places differently from PyTorch (HardSwish at ±3, Clip at its lower bound) and
// HardSigmoid (not in oneDNN 2.6): a loop over the bytes of any layout (padding: dY = 0 there).
class ActivationGradLoopStep : public Step {
 public:
  enum class Kind { HardSigmoid, HardSwish, Clip } kind = Kind::Clip;
  float a = 0, c = 0;
  int64_t count = 0;
  void run(RunState& rs) override {
    const float* dy = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* x = static_cast<const float*>(rs.slots[reads[1]].data());
    float* dx = static_cast<float*>(rs.slots[writes[0]].data());
    constexpr int64_t kChunk = 16384;
    parallel_for((count + kChunk - 1) / kChunk, rs.threads, [&](int64_t ch) {
      const int64_t lo = ch * kChunk, hi = std::min(count, lo + kChunk);
      switch (kind) {
        case Kind::HardSigmoid:
          for (int64_t i = lo; i < hi; ++i) {
            float v = a * x[i] + c;
            dx[i] = v > 0.0f && v < 1.0f ? dy[i] * a : 0.0f;
          }
          break;
        case Kind::HardSwish:
          for (int64_t i = lo; i < hi; ++i)
            dx[i] = x[i] < -3.0f ? 0.0f : x[i] <= 3.0f ? dy[i] * (x[i] / 3.0f + 0.5f) : dy[i];
          break;
        case Kind::Clip:
          for (int64_t i = lo; i < hi; ++i) dx[i] = x[i] >= a && x[i] <= c ? dy[i] : 0.0f;
          break;
      }
    });
  }
};

bool make_activation_grad(PlanBuilder& b, const Node& n) {
  auto dy = b.static_type(n.inputs[0]), x = b.static_type(n.inputs[1]);
  if (!dy || !x || dy->first != DType::F32 || x->first != DType::F32 || dy->second != x->second) return false;
  const std::string act = n.get_string("activation", "");
  const std::vector<float> p = n.get_floats("activation_params");
  auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
  // Both in X's layout (blocked after a conv, as the forward left it).
  const int xs = b.slot(n.inputs[1]);
  const dnnl::memory::desc md = layout_md(b.at(xs));
  std::optional<std::pair<dnnl::algorithm, std::pair<float, float>>> alg;
  using A = dnnl::algorithm;
  if (act == "Relu") alg = {{A::eltwise_relu, {0.f, 0.f}}};
  else if (act == "LeakyRelu") alg = {{A::eltwise_relu, {param(0, 0.01f), 0.f}}};
  else if (act == "Elu") alg = {{A::eltwise_elu, {param(0, 1.f), 0.f}}};
  else if (act == "Sigmoid") alg = {{A::eltwise_logistic, {0.f, 0.f}}};
  else if (act == "Tanh") alg = {{A::eltwise_tanh, {0.f, 0.f}}};
  else if (act == "Gelu") alg = {{A::eltwise_gelu_erf, {0.f, 0.f}}};
  else if (act == "GeluTanh") alg = {{A::eltwise_gelu_tanh, {0.f, 0.f}}};
  else if (act == "Silu") alg = {{A::eltwise_swish, {1.f, 0.f}}};
  else if (act == "Softplus") alg = {{A::eltwise_soft_relu, {0.f, 0.f}}};
  if (alg) {
    dnnl::eltwise_backward::primitive_desc pd;
    try {
      dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training, alg->first, md, alg->second.first,
                                     alg->second.second);
      dnnl::eltwise_forward::primitive_desc fwd(fd, b.engine());
      dnnl::eltwise_backward::desc bd(alg->first, md, md, alg->second.first, alg->second.second);
      pd = dnnl::eltwise_backward::primitive_desc(bd, b.engine(), fwd);
    } catch (const dnnl::error&) {
      return false;
    }
    auto step = std::make_unique<EltwiseGradStep>();
    step->prim_ = dnnl::eltwise_backward(pd);
    step->reads = {b.as_layout(n.inputs[0], md), xs};
    step->diff_dst_ = dnnl::memory(md, b.engine(), nullptr);
    step->src_ = dnnl::memory(md, b.engine(), nullptr);
    step->writes = {b.define(n.outputs[0], DType::F32, x->second, md)};
    step->diff_src_ = dnnl::memory(md, b.engine(), nullptr);
    step->label = n.describe() + ": onednn " + std::string(pd.impl_info_str());
    b.add(std::move(step));
    return true;
  }
  using K = ActivationGradLoopStep::Kind;
  auto step = std::make_unique<ActivationGradLoopStep>();
  if (act == "HardSigmoid") {
    step->kind = K::HardSigmoid;
    step->a = param(0, 0.2f);
    step->c = param(1, 0.5f);
  } else if (act == "HardSwish") {
    step->kind = K::HardSwish;
  } else if (act == "Clip") {
    step->kind = K::Clip;
    step->a = param(0, -INFINITY);
    step->c = param(1, INFINITY);
  } else {
    return false;
  }
  step->count = static_cast<int64_t>(md.get_size() / sizeof(float));
  step->reads = {b.as_layout(n.inputs[0], md), xs};
  step->writes = {b.define(n.outputs[0], DType::F32, x->second, md)};
  step->label = n.describe() + ": cpu loop";
  b.add(std::move(step));
  return true;
}

}  // namespace

namespace {

bool make_backward_step(PlanBuilder& b, const Node& n) {
  if (n.domain.empty() && n.op_type == "BatchNormalization") return make_batch_norm_training(b, n);
  if (n.domain != "hodu") return false;
  if (n.op_type == "ConvGrad") return make_conv_grad(b, n);
  if (n.op_type == "MaxPoolGrad" || n.op_type == "AveragePoolGrad") return make_pool_grad(b, n);
  if (n.op_type == "BatchNormGrad") return make_batch_norm_grad(b, n);
  if (n.op_type == "ActivationGrad") return make_activation_grad(b, n);
  return false;
}

}  // namespace

bool make_backward(PlanBuilder& b, const Node& n) {
  if (!make_backward_step(b, n)) return false;
  // oneDNN's backward primitives split their work (and size their barriers) for the team they
  // were created for: a run on fewer threads waits at a barrier forever.
  b.keep_all_threads();
  return true;
}

}  // namespace hodu::cpu
