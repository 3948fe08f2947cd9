// The layers, initialized as PyTorch 1.13's reset_parameters do.
#include <cmath>

#include "core/error.h"
#include "core/shape.h"
#include "frontend/capture/tracer.h"
#include "hodu/autograd.h"
#include "hodu/nn.h"

namespace hodu::eager::nn {
namespace {

// Linear/Conv's reset_parameters: kaiming_uniform_(a = sqrt 5) for the weight, U(-1/sqrt(fan_in), ..)
// for the bias.
void reset_linear_like(Tensor& weight, Tensor& bias, Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (bias.defined()) {
    const int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound, gen);
  }
}

void check_positive(int64_t v, const char* what, const char* layer) {
  HODU_CHECK(v > 0, ErrorCode::InvalidArgument, "{}: {} must be positive, not {}", layer, what, v);
}

Dims two(Dims v, const char* what, const char* layer) {
  HODU_CHECK(v.size() == 1 || v.size() == 2, ErrorCode::InvalidArgument, "{}: {} {} (give 1 or 2 values)", layer, what,
             shape_to_string(v));
  return v.size() == 1 ? Dims{v[0], v[0]} : v;
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator* gen)
    : Module("Linear"), in_features(in), out_features(out) {
  check_positive(in, "in_features", "Linear");
  check_positive(out, "out_features", "Linear");
  weight = register_parameter("weight", empty({out, in}));
  if (has_bias) bias = register_parameter("bias", empty({out}));
  reset_linear_like(weight, bias, gen);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv2d::Conv2d(int64_t in, int64_t out, Dims k, Dims s, Dims p, Dims d, int64_t g, bool has_bias, Generator* gen)
    : Module("Conv2d"), stride(two(s, "stride", "Conv2d")), padding(two(p, "padding", "Conv2d")),
      dilation(two(d, "dilation", "Conv2d")), groups(g) {
  check_positive(in, "in_channels", "Conv2d");
  check_positive(out, "out_channels", "Conv2d");
  check_positive(g, "groups", "Conv2d");
  HODU_CHECK(in % g == 0 && out % g == 0, ErrorCode::InvalidArgument,
             "Conv2d: in_channels {} and out_channels {} must be divisible by groups {}", in, out, g);
  Dims ks = two(k, "kernel_size", "Conv2d");
  weight = register_parameter("weight", empty({out, in / g, ks[0], ks[1]}));
  if (has_bias) bias = register_parameter("bias", empty({out}));
  reset_linear_like(weight, bias, gen);
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding, dilation, groups); }

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d, int64_t g, bool has_bias,
               Generator* gen)
    : Module("Conv1d"), stride(s), padding(p), dilation(d), groups(g) {
  check_positive(in, "in_channels", "Conv1d");
  check_positive(out, "out_channels", "Conv1d");
  check_positive(k, "kernel_size", "Conv1d");
  check_positive(g, "groups", "Conv1d");
  HODU_CHECK(in % g == 0 && out % g == 0, ErrorCode::InvalidArgument,
             "Conv1d: in_channels {} and out_channels {} must be divisible by groups {}", in, out, g);
  weight = register_parameter("weight", empty({out, in / g, k}));
  if (has_bias) bias = register_parameter("bias", empty({out}));
  reset_linear_like(weight, bias, gen);
}

Tensor Conv1d::forward(const Tensor& x) { return conv1d(x, weight, bias, stride, padding, dilation, groups); }

BatchNorm2d::BatchNorm2d(int64_t n, double eps_, double momentum_, bool affine, bool track)
    : Module("BatchNorm2d"), num_features(n), eps(eps_), momentum(momentum_) {
  check_positive(n, "num_features", "BatchNorm2d");
  if (affine) {
    weight = register_parameter("weight", ones({n}));
    bias = register_parameter("bias", zeros({n}));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({n}));
    running_var = register_buffer("running_var", ones({n}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  HODU_CHECK(x.dim() == 4, ErrorCode::InvalidArgument, "BatchNorm2d: expected a 4-d input [N, C, H, W], got {}",
             x.type_string());
  HODU_CHECK(x.size(1) == num_features, ErrorCode::InvalidArgument, "BatchNorm2d({}): input {} has {} channels",
             num_features, x.type_string(), x.size(1));
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard guard;
    trace::Pause pause;  // a count, not part of a captured graph
    num_batches_tracked.add_(1.0);
  }
  // Batch statistics when training (running ones updated) or when none are tracked.
  return batch_norm(x, running_mean, running_var, weight, bias, is_training() || !running_mean.defined(), momentum,
                    eps);
}

LayerNorm::LayerNorm(Dims shape, double eps_, bool affine) : Module("LayerNorm"), normalized_shape(shape), eps(eps_) {
  HODU_CHECK(!shape.empty(), ErrorCode::InvalidArgument, "LayerNorm: an empty normalized shape");
  if (affine) {
    weight = register_parameter("weight", ones(shape));
    bias = register_parameter("bias", zeros(shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

Dropout::Dropout(double p_, Generator* g) : Module("Dropout"), p(p_), gen(g) {
  HODU_CHECK(p >= 0.0 && p <= 1.0, ErrorCode::InvalidArgument, "Dropout: probability {} is not in [0, 1]", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training(), gen); }

Embedding::Embedding(int64_t n, int64_t d, int64_t pad, Generator* gen)
    : Module("Embedding"), num_embeddings(n), embedding_dim(d), padding_idx(pad) {
  check_positive(n, "num_embeddings", "Embedding");
  check_positive(d, "embedding_dim", "Embedding");
  HODU_CHECK(pad >= -1 && pad < n, ErrorCode::InvalidArgument, "Embedding: padding_idx {} is not in [0, {})", pad, n);
  weight = register_parameter("weight", empty({n, d}));
  init::normal_(weight, 0.0, 1.0, gen);
  if (pad >= 0) {
    NoGradGuard guard;
    weight.select(0, pad).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx); }

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }

Sequential::Sequential() : Module("Sequential") {}
Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Sequential() {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  HODU_CHECK(module != nullptr, ErrorCode::InvalidArgument, "Sequential: a null module");
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : modules_) h = m->forward(h);
  return h;
}

// ---- MultiheadAttention ---------------------------------------------------------

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, double p, bool has_bias, bool bf, Generator* g)
    : Module("MultiheadAttention"), embed_dim(e), num_heads(h), dropout(p), batch_first(bf), gen(g) {
  check_positive(e, "embed_dim", "MultiheadAttention");
  check_positive(h, "num_heads", "MultiheadAttention");
  HODU_CHECK(e % h == 0, ErrorCode::InvalidArgument, "MultiheadAttention: embed_dim {} must be divisible by num_heads {}",
             e, h);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  if (has_bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, has_bias, g));
  // _reset_parameters.
  init::xavier_uniform_(in_proj_weight, 1.0, g);
  if (has_bias) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x, Tensor(), Tensor(), false).first; }

std::vector<Tensor> MultiheadAttention::forward_all(const std::vector<Tensor>& in) {
  HODU_CHECK(in.size() >= 1 && in.size() <= 3, ErrorCode::InvalidArgument,
             "MultiheadAttention: {} inputs (give {{x}}, {{query, key_value}} or {{query, key, value}})", in.size());
  const Tensor& kv = in.size() >= 2 ? in[1] : in[0];
  return {forward(in[0], kv, in.size() == 3 ? in[2] : kv, Tensor(), Tensor(), false).first};
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& attn_mask, const Tensor& key_padding_mask,
                                                      bool need_weights) {
  const char* op = "MultiheadAttention";
  HODU_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, ErrorCode::InvalidArgument,
             "{}: query {}, key {}, value {} must be 3-d ({})", op, query.type_string(), key.type_string(),
             value.type_string(), batch_first ? "[N, L, E]" : "[L, N, E]");
  Tensor q = batch_first ? query.transpose(0, 1) : query;
  Tensor k = batch_first ? key.transpose(0, 1) : key;
  Tensor v = batch_first ? value.transpose(0, 1) : value;
  const int64_t L = q.size(0), N = q.size(1), E = q.size(2), S = k.size(0);
  HODU_CHECK(E == embed_dim && k.size(2) == E && v.size(2) == E && k.size(1) == N && v.size(1) == N && v.size(0) == S,
             ErrorCode::InvalidArgument, "{}(embed_dim {}): query {}, key {}, value {} do not agree", op, embed_dim,
             query.type_string(), key.type_string(), value.type_string());
  const int64_t H = num_heads, hd = E / H;
  // The packed projection, split in three (F.multi_head_attention_forward's _in_projection_packed).
  auto w = in_proj_weight.chunk(3, 0);
  std::vector<Tensor> b(3);
  if (in_proj_bias.defined()) b = in_proj_bias.chunk(3, 0);
  q = linear(q, w[0], b[0]);
  k = linear(k, w[1], b[1]);
  v = linear(v, w[2], b[2]);
  // [L, N, E] -> [N * H, L, hd]
  q = q.reshape({L, N * H, hd}).transpose(0, 1);
  k = k.reshape({S, N * H, hd}).transpose(0, 1);
  v = v.reshape({S, N * H, hd}).transpose(0, 1);
  // Masks as an additive float tensor [N * H or 1, L, S].
  Tensor mask;
  if (attn_mask.defined()) {
    HODU_CHECK((attn_mask.dim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S) ||
                   (attn_mask.dim() == 3 && attn_mask.size(0) == N * H && attn_mask.size(1) == L &&
                    attn_mask.size(2) == S),
               ErrorCode::InvalidArgument, "{}: attn_mask {} is not [L={}, S={}] or [N*heads={}, L, S]", op,
               attn_mask.type_string(), L, S, N * H);
    mask = attn_mask.dtype() == kBool
               ? where(attn_mask, full({}, -std::numeric_limits<double>::infinity(), q.dtype()), zeros({}, q.dtype()))
               : attn_mask.to(q.dtype());
    if (mask.dim() == 2) mask = mask.unsqueeze(0);
  }
  if (key_padding_mask.defined()) {
    HODU_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == N && key_padding_mask.size(1) == S,
               ErrorCode::InvalidArgument, "{}: key_padding_mask {} is not [N={}, S={}]", op,
               key_padding_mask.type_string(), N, S);
    Tensor kpm = key_padding_mask.dtype() == kBool
                     ? where(key_padding_mask, full({}, -std::numeric_limits<double>::infinity(), q.dtype()),
                             zeros({}, q.dtype()))
                     : key_padding_mask.to(q.dtype());
    kpm = kpm.reshape({N, 1, 1, S}).expand({N, H, 1, S}).reshape({N * H, 1, S});
    mask = mask.defined() ? mask + kpm : kpm;
  }
  q = q * (1.0 / std::sqrt(static_cast<double>(hd)));
  Tensor scores = matmul(q, k.transpose(-2, -1));
  if (mask.defined()) scores = scores + mask;
  Tensor attn = softmax(scores, -1);
  if (dropout > 0.0 && is_training()) attn = eager::dropout(attn, dropout, true, gen);
  Tensor out = matmul(attn, v);                                   // [N * H, L, hd]
  out = out.transpose(0, 1).contiguous().reshape({L * N, E});
  out = out_proj->forward(out).reshape({L, N, E});
  if (batch_first) out = out.transpose(0, 1);
  Tensor weights;
  if (need_weights) weights = attn.reshape({N, H, L, S}).mean({1});
  return {out, weights};
}

}  // namespace hodu::eager::nn
