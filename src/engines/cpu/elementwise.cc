// Elementwise ops on oneDNN's eltwise and binary primitives. Both read and
// write any layout, so a chain of convs with activations, residual adds and
// squeeze-excite multiplies stays in the blocked layout of the convs.
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// x[N, C, spatial...] * s[N or 1, C, 1, ...] (squeeze-excite) on x's own layout, in place when
// x dies here: oneDNN's binary primitive broadcasting over a blocked or nhwc tensor runs
// several times slower than this memory-bound loop (at AVX2 it has only its reference kernel).
class ScaleChannelsStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* s = static_cast<const float*>(rs.slots[reads[1]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    if (!padded_.empty()) {
      // One vector of `stride_` per image: the blocked layout's channels rounded up (the pad
      // scales by 0), s repeated where it is shared by the batch.
      for (int64_t n = 0; n < batch_; ++n) {
        const float* sn = s + (s_batched_ ? n * channels_ : 0);
        std::copy(sn, sn + channels_, padded_.begin() + n * stride_);
      }
      s = padded_.data();
    }
    const int64_t rows = rows_, len = len_, per = rows_per_v_;
    const bool scalar = scalar_per_row_;
    const int64_t grain = std::max<int64_t>(1, 16384 / len);
    const int threads = rows * len >= 65536 ? rs.threads : 1;
    parallel_for((rows + grain - 1) / grain, threads, [&](int64_t c) {
      scale_rows(x, s, y, len, per, scalar, c * grain, std::min(rows, (c + 1) * grain));
    });
  }
  int64_t rows_ = 0, len_ = 0, rows_per_v_ = 1, channels_ = 0, batch_ = 1, stride_ = 0;
  bool scalar_per_row_ = false, s_batched_ = true;
  std::vector<float> padded_;
};

bool make_scale_channels(PlanBuilder& b, const Node& n, const std::string& x_name, const std::string& s_name,
                         const std::vector<int64_t>& ys, const std::vector<int64_t>& s1) {
  if (n.op_type != "Mul" || ys.size() < 3 || ys.size() > 5 || s1[1] != ys[1] || (s1[0] != 1 && s1[0] != ys[0]))
    return false;
  for (size_t i = 2; i < ys.size(); ++i)
    if (s1[i] != 1) return false;
  int x = b.slot(x_name);
  const Slot& xs = b.at(x);
  if (!xs.is_static || xs.dtype != DType::F32) return false;
  const dnnl::memory::desc x_md = layout_md(xs);
  const int64_t batch = ys[0], channels = ys[1], pixels = shape_numel(ys) / std::max<int64_t>(1, batch * channels);
  const bool r3 = ys.size() == 3, r4 = ys.size() == 4;
  auto step = std::make_unique<ScaleChannelsStep>();
  step->channels_ = channels;
  step->batch_ = batch;
  step->stride_ = channels;
  step->s_batched_ = s1[0] == ys[0];
  if (x_md == plain_md(ys)) {
    step->rows_ = batch * channels;
    step->len_ = pixels;
    step->scalar_per_row_ = true;
  } else if (x_md == dnnl::memory::desc(to_dims(ys), dt::f32, r3 ? tag::nwc : r4 ? tag::nhwc : tag::ndhwc)) {
    step->rows_ = batch * pixels;
    step->len_ = channels;
    step->rows_per_v_ = pixels;
  } else {
    int64_t block = 0;
    for (int64_t blk : {16, 8})
      if (x_md == dnnl::memory::desc(to_dims(ys), dt::f32,
                                     blk == 16 ? (r3 ? tag::nCw16c : r4 ? tag::nChw16c : tag::nCdhw16c)
                                               : (r3 ? tag::nCw8c : r4 ? tag::nChw8c : tag::nCdhw8c)))
        block = blk;
    if (!block) return false;
    int64_t blocks = (channels + block - 1) / block;
    step->rows_ = batch * blocks * pixels;
    step->len_ = block;
    step->rows_per_v_ = pixels;
    step->stride_ = blocks * block;
  }
  if (step->stride_ != channels || (batch > 1 && !step->s_batched_))
    step->padded_.assign(static_cast<size_t>(batch * step->stride_), 0.0f);
  step->reads = {x, b.plain(s_name)};
  // In place when nothing after this node reads x: the result takes x's bytes.
  step->writes = {b.dies_here(x_name) ? b.define_part(n.outputs[0], x, ys, x_md, 0)
                                      : b.define(n.outputs[0], DType::F32, ys, x_md)};
  step->label = n.describe() + (b.at(step->writes[0]).kind == Slot::Kind::Part ? ": cpu channel scale, in place"
                                                                                : ": cpu channel scale");
  b.add(std::move(step));
  return true;
}

class EltwiseStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    if (args_.empty()) args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};  // handles: built once
    prim_.execute(rs.stream, args_);
  }
  dnnl::eltwise_forward prim_;
  dnnl::memory src_, dst_;
  std::unordered_map<int, dnnl::memory> args_;
};

class BinaryStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(a_, rs, reads[0]);
    bind(b_, rs, reads[1]);
    bind(dst_, rs, writes[0]);
    if (args_.empty()) args_ = {{DNNL_ARG_SRC_0, a_}, {DNNL_ARG_SRC_1, b_}, {DNNL_ARG_DST, dst_}};  // built once
    prim_.execute(rs.stream, args_);
  }
  dnnl::binary prim_;
  dnnl::memory a_, b_, dst_;
  std::unordered_map<int, dnnl::memory> args_;
};

// y = a op b[broadcast] over plain tensors where oneDNN 2.6 has only its reference binary
// (a broadcast in a middle dim: Swin-T's attention mask, [1, 64, 3, 49, 49] + [1, 64, 1, 49,
// 49], took 9.6 ms a run there): dims merged where both strides allow, rows of the last
// dim split over the threads.
class BroadcastBinaryStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* a = static_cast<const float*>(rs.slots[reads[0]].data());
    const float* b = static_cast<const float*>(rs.slots[reads[1]].data());
    float* y = static_cast<float*>(rs.slots[writes[0]].data());
    switch (alg_) {
      case dnnl::algorithm::binary_add: return rows(rs, a, b, y, [](float u, float v) { return u + v; });
      case dnnl::algorithm::binary_sub: return rows(rs, a, b, y, [](float u, float v) { return u - v; });
      case dnnl::algorithm::binary_mul: return rows(rs, a, b, y, [](float u, float v) { return u * v; });
      case dnnl::algorithm::binary_div: return rows(rs, a, b, y, [](float u, float v) { return u / v; });
      case dnnl::algorithm::binary_max: return rows(rs, a, b, y, [](float u, float v) { return u > v ? u : v; });
      default: return rows(rs, a, b, y, [](float u, float v) { return u < v ? u : v; });
    }
  }

  template <class F>
  void rows(RunState& rs, const float* a, const float* b, float* y, F f) {
    const int64_t len = dims_.back(), nrows = total_ / std::max<int64_t>(len, 1), inner = b_strides_.back();
    const size_t r = dims_.size();
    const int threads = total_ >= 65536 ? rs.threads : 1;
    parallel_for(nrows, threads, [&](int64_t row) {
      int64_t off = 0, rest = row;
      for (size_t d = r - 1; d-- > 0;) {
        off += rest % dims_[d] * b_strides_[d];
        rest /= dims_[d];
      }
      const float* ar = a + row * len;
      const float* br = b + off;
      float* yr = y + row * len;
      if (inner == 0) {
        const float v = br[0];
        for (int64_t j = 0; j < len; ++j) yr[j] = f(ar[j], v);
      } else {
        for (int64_t j = 0; j < len; ++j) yr[j] = f(ar[j], br[j]);
      }
    });
  }

  dnnl::algorithm alg_;
  std::vector<int64_t> dims_, b_strides_;  // merged output dims; b's strides in them (0: broadcast)
  int64_t total_ = 0;
};

// The output dims and b's strides in them (0 where b broadcasts), adjacent dims merged where
// a row-major a and b both read them as one.
void merge_broadcast_dims(const std::vector<int64_t>& ys, const std::vector<int64_t>& s1, std::vector<int64_t>& dims,
                          std::vector<int64_t>& strides) {
  auto cs = contiguous_strides(s1);
  dims.clear();
  strides.clear();
  for (size_t i = 0; i < ys.size(); ++i) {
    if (ys[i] == 1) continue;
    int64_t st = s1[i] == 1 ? 0 : cs[i];
    if (!dims.empty() && ((st == 0 && strides.back() == 0) || (st != 0 && strides.back() == st * ys[i]))) {
      dims.back() *= ys[i];
      strides.back() = st;
      continue;
    }
    dims.push_back(ys[i]);
    strides.push_back(st);
  }
  if (dims.empty()) {
    dims = {1};
    strides = {0};
  }
}

// Unary op → eltwise algorithm and parameters.
bool eltwise_of(const Graph& g, const Node& n, dnnl::algorithm& alg, float& alpha, float& beta) {
  using a = dnnl::algorithm;
  const std::string& op = n.op_type;
  alpha = 0;
  beta = 0;
  if (n.domain == "hodu") {
    if (op != "Gelu" || n.has_input(1)) return false;
    alg = n.get_string("approximate", "none") == "tanh" ? a::eltwise_gelu_tanh : a::eltwise_gelu_erf;
    return true;
  }
  if (!n.domain.empty()) return false;
  if (op == "Relu") alg = a::eltwise_relu;
  else if (op == "LeakyRelu") { alg = a::eltwise_relu; alpha = n.get_float("alpha", 0.01f); }
  else if (op == "Sigmoid") alg = a::eltwise_logistic;
  else if (op == "Tanh") alg = a::eltwise_tanh;
  else if (op == "Exp") alg = a::eltwise_exp;
  else if (op == "Sqrt") alg = a::eltwise_sqrt;
  else if (op == "Abs") alg = a::eltwise_abs;
  else if (op == "Neg") { alg = a::eltwise_linear; alpha = -1; }
  else if (op == "Elu") { alg = a::eltwise_elu; alpha = n.get_float("alpha", 1.0f); }
  else if (op == "HardSwish") { alg = a::eltwise_hardswish; }
  else if (op == "Gelu") alg = n.get_string("approximate", "none") == "tanh" ? a::eltwise_gelu_tanh : a::eltwise_gelu_erf;
  else if (op == "Clip") {
    auto bounds = passes::as_activation(g, n);  // constant bounds, ±inf when absent
    if (!bounds) return false;
    alg = a::eltwise_clip_v2;
    alpha = bounds->params[0];
    beta = bounds->params[1];
  } else {
    return false;
  }
  return true;
}

bool binary_of(const std::string& op, dnnl::algorithm& alg, bool& commutative) {
  using a = dnnl::algorithm;
  commutative = op == "Add" || op == "Sum" || op == "Mul" || op == "Max" || op == "Min";
  if (op == "Add" || op == "Sum") alg = a::binary_add;
  else if (op == "Sub") alg = a::binary_sub;
  else if (op == "Mul") alg = a::binary_mul;
  else if (op == "Div") alg = a::binary_div;
  else if (op == "Max") alg = a::binary_max;
  else if (op == "Min") alg = a::binary_min;
  else return false;
  return true;
}

bool make_unary(PlanBuilder& b, const Node& n) {
  dnnl::algorithm alg;
  float alpha, beta;
  if (!eltwise_of(b.graph(), n, alg, alpha, beta)) return false;
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32) return false;
  int src = b.slot(n.inputs[0]);
  dnnl::memory::desc md = layout_md(b.at(src));
  dnnl::eltwise_forward::primitive_desc pd;
  try {
    pd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, md, alpha, beta), b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  auto step = std::make_unique<EltwiseStep>();
  step->prim_ = dnnl::eltwise_forward(pd);
  step->src_ = dnnl::memory(md, b.engine(), nullptr);
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  step->reads = {src};
  step->writes = {b.define(n.outputs[0], DType::F32, x->second, pd.dst_desc())};
  step->label = n.describe() + ": onednn eltwise";
  b.add(std::move(step));
  return true;
}

bool make_binary(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.inputs.size() != 2) return false;
  dnnl::algorithm alg;
  bool commutative;
  if (!binary_of(n.op_type, alg, commutative)) return false;
  auto at = b.static_type(n.inputs[0]), bt = b.static_type(n.inputs[1]), yt = b.static_type(n.outputs[0]);
  if (!at || !bt || !yt || at->first != DType::F32 || bt->first != DType::F32) return false;
  std::string first = n.inputs[0], second = n.inputs[1];
  auto ys = yt->second;
  // src0 must have the output's shape; src1 broadcasts into it.
  if (at->second != ys) {
    if (!commutative || bt->second != ys) return false;
    std::swap(first, second);
    std::swap(at, bt);
  }
  std::vector<int64_t> s1 = bt->second;
  if (s1.size() > ys.size()) return false;
  s1.insert(s1.begin(), ys.size() - s1.size(), 1);
  for (size_t i = 0; i < ys.size(); ++i)
    if (s1[i] != ys[i] && s1[i] != 1) return false;
  if (ys.empty()) return false;
  if (make_scale_channels(b, n, first, second, ys, s1)) return true;
  int a = b.slot(first);
  dnnl::memory::desc a_md = layout_md(b.at(a));
  int c;
  dnnl::memory::desc c_md;
  if (bt->second == ys) {
    c = b.as_layout(second, a_md);
    c_md = a_md;
  } else {
    c = b.plain(second);
    c_md = plain_md(s1);
  }
  dnnl::binary::primitive_desc pd;
  try {
    pd = dnnl::binary::primitive_desc(dnnl::binary::desc(alg, a_md, c_md, a_md), b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  // oneDNN's reference binary on a blocked layout (a per-channel bias Add after PaddleOCR's
  // ConvTranspose: 190 ms a run for 614k elements) loses to reordering to plain and the broadcast
  // loop of broadcast_ops.cc, which the plan tries next.
  if (reference_impl(pd.impl_info_str()) && a_md != plain_md(ys)) return false;
  if (reference_impl(pd.impl_info_str()) && a_md == plain_md(ys)) {
    auto step = std::make_unique<BroadcastBinaryStep>();
    step->alg_ = alg;
    merge_broadcast_dims(ys, s1, step->dims_, step->b_strides_);
    step->total_ = shape_numel(ys);
    step->reads = {a, bt->second == ys ? b.plain(second) : c};
    step->writes = {b.define(n.outputs[0], DType::F32, ys, a_md)};
    step->label = n.describe() + ": broadcast loop (oneDNN has only its reference binary here)";
    b.add(std::move(step));
    return true;
  }
  auto step = std::make_unique<BinaryStep>();
  step->prim_ = dnnl::binary(pd);
  step->a_ = dnnl::memory(a_md, b.engine(), nullptr);
  step->b_ = dnnl::memory(c_md, b.engine(), nullptr);
  step->dst_ = dnnl::memory(a_md, b.engine(), nullptr);
  step->reads = {a, c};
  step->writes = {b.define(n.outputs[0], DType::F32, ys, a_md)};
  step->label = n.describe() + ": onednn binary " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

}  // namespace

bool make_elementwise(PlanBuilder& b, const Node& n) { return make_unary(b, n) || make_binary(b, n); }

}  // namespace hodu::cpu
