// Softmax and LogSoftmax over the last axis and hodu.LayerNorm / LayerNormalization over the
// last axis: hand-written row kernels, rows split over the threads. BatchNormalization at
// inference that no conv absorbed (DenseNet's, on concatenated features): oneDNN's, on
// its input's layout.
#include <algorithm>
#include <cmath>
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class SoftmaxStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = rs.slots[reads[0]].tensor().data<float>();
    float* y = rs.slots[writes[0]].value.tensor.data<float>();
    int64_t n = n_;
    parallel_for(rows_, rs.threads, [&](int64_t r) { softmax_row(x + r * n, nullptr, 0, y + r * n, n, n); });
  }
  int64_t rows_ = 0, n_ = 0;
};

// log(softmax(x)) = x - max - log(sum(exp(x - max))): the sum in double, so rows of
// thousands of classes keep the interpreter's accuracy.
class LogSoftmaxStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = rs.slots[reads[0]].tensor().data<float>();
    float* y = rs.slots[writes[0]].value.tensor.data<float>();
    const int64_t n = n_;
    parallel_for(rows_, rs.threads, [&](int64_t r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      float mx = -INFINITY;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xr[i]);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(xr[i] - mx));
      const float shift = mx + static_cast<float>(std::log(sum));
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - shift;
    });
  }
  int64_t rows_ = 0, n_ = 0;
};

class LayerNormStep : public Step {
 public:
  void run(RunState& rs) override {
    const float* x = rs.slots[reads[0]].tensor().data<float>();
    const float* scale = rs.slots[reads[1]].tensor().data<float>();
    const float* bias = reads.size() > 2 ? rs.slots[reads[2]].tensor().data<float>() : nullptr;
    float* y = rs.slots[writes[0]].value.tensor.data<float>();
    int64_t n = n_;
    parallel_for(rows_, rs.threads,
                 [&](int64_t r) { layer_norm_row(x + r * n, scale, bias, y + r * n, n, eps_, rms_); });
  }
  int64_t rows_ = 0, n_ = 0;
  float eps_ = 1e-5f;
  bool rms_ = false;
};

class BatchNormStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    prim_.execute(rs.stream, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_MEAN, mean_},
                              {DNNL_ARG_VARIANCE, var_}, {DNNL_ARG_SCALE, scale_}, {DNNL_ARG_SHIFT, shift_}});
  }
  dnnl::batch_normalization_forward prim_;
  dnnl::memory src_, dst_, mean_, var_, scale_, shift_;
  std::vector<float> mean_v_, var_v_, scale_v_, shift_v_;  // the memories above point into these
};

int64_t last_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// BatchNormalization at inference with constant statistics and parameters: a per-channel
// affine, run where no conv folded it in (the interpreter took 7.4 of DenseNet-121's 40 ms).
bool make_batch_norm(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.inputs.size() < 5 || n.get_int("training_mode", 0))
    return false;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.has_output(i)) return false;
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32 || x->second.size() < 2 || x->second.size() > 5) return false;
  const int64_t channels = x->second[1];
  std::vector<std::vector<float>> params;
  for (size_t i = 1; i < 5; ++i) {
    const Tensor* t = passes::constant_of(b.graph(), n.inputs[i]);
    if (!t || t->numel() != channels) return false;
    std::vector<float> v;
    for (double d : t->to_doubles()) v.push_back(static_cast<float>(d));
    params.push_back(std::move(v));
  }
  int slot = b.slot(n.inputs[0]);
  dnnl::memory::desc md = layout_md(b.at(slot));
  // A Relu that alone reads the result (DenseNet's norm → relu before each layer's first conv)
  // runs in the same pass: oneDNN's fused ReLU, its node claimed.
  const Node* relu = nullptr;
  const auto& readers = b.readers(n.outputs[0]);
  if (readers.size() == 1 && !b.graph().output(n.outputs[0])) {
    const Node& r = b.graph().nodes[readers[0]];
    if (r.domain.empty() && r.op_type == "Relu" && r.inputs.size() == 1 && r.outputs.size() == 1)
      relu = &r;
  }
  auto step = std::make_unique<BatchNormStep>();
  try {
    using flags = dnnl::normalization_flags;
    const flags f = flags::use_global_stats | flags::use_scale | flags::use_shift;
    dnnl::batch_normalization_forward::primitive_desc pd(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, md, n.get_float("epsilon", 1e-5f),
                                                relu ? f | flags::fuse_norm_relu : f),
        b.engine());
    if (reference_impl(pd.impl_info_str())) return false;
    step->prim_ = dnnl::batch_normalization_forward(pd);
    step->scale_v_ = std::move(params[0]);
    step->shift_v_ = std::move(params[1]);
    step->mean_v_ = std::move(params[2]);
    step->var_v_ = std::move(params[3]);
    dnnl::memory::desc c_md({channels}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    step->scale_ = dnnl::memory(c_md, b.engine(), step->scale_v_.data());
    step->shift_ = dnnl::memory(c_md, b.engine(), step->shift_v_.data());
    step->mean_ = dnnl::memory(c_md, b.engine(), step->mean_v_.data());
    step->var_ = dnnl::memory(c_md, b.engine(), step->var_v_.data());
    step->src_ = dnnl::memory(md, b.engine(), nullptr);
    step->dst_ = dnnl::memory(md, b.engine(), nullptr);
  } catch (const dnnl::error&) {
    return false;
  }
  step->reads = {slot};
  if (relu) b.claim(*relu);
  step->writes = {b.define(relu ? relu->outputs[0] : n.outputs[0], DType::F32, x->second, md)};
  step->label = n.describe() + ": onednn batch normalization" + (relu ? ", relu fused" : "");
  b.add(std::move(step));
  return true;
}

}  // namespace

bool make_normalization(PlanBuilder& b, const Node& n) {
  if (make_batch_norm(b, n)) return true;
  bool softmax = n.domain.empty() && n.op_type == "Softmax";
  bool log_softmax = n.domain.empty() && n.op_type == "LogSoftmax";
  bool ln = (n.domain == "hodu" && n.op_type == "LayerNorm") ||
            (n.domain.empty() && n.op_type == "LayerNormalization" && !n.has_output(1) && !n.has_output(2));
  if (!softmax && !log_softmax && !ln) return false;
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32 || x->second.empty()) return false;
  const auto& xs = x->second;
  if (last_axis(n.get_int("axis", -1), xs.size()) != static_cast<int64_t>(xs.size()) - 1) return false;
  int64_t cols = xs.back(), rows = cols ? shape_numel(xs) / cols : 0;
  if (softmax || log_softmax) {
    auto add_rows = [&](auto step) {
      step->rows_ = rows;
      step->n_ = cols;
      step->reads = {b.plain(n.inputs[0])};
      step->writes = {b.define(n.outputs[0], DType::F32, xs)};
      step->label = n.describe() + ": cpu";
      b.add(std::move(step));
      return true;
    };
    return softmax ? add_rows(std::make_unique<SoftmaxStep>()) : add_rows(std::make_unique<LogSoftmaxStep>());
  }
  for (size_t i = 1; i < 3 && i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    auto t = b.static_type(n.inputs[i]);
    if (!t || t->first != DType::F32 || shape_numel(t->second) != cols) return false;
  }
  auto step = std::make_unique<LayerNormStep>();
  step->rows_ = rows;
  step->n_ = cols;
  step->eps_ = n.get_float("epsilon", 1e-5f);
  step->rms_ = n.domain == "hodu" && n.get_int("rms", 0) != 0;
  step->reads = {b.plain(n.inputs[0]), b.plain(n.inputs[1])};
  if (n.has_input(2)) step->reads.push_back(b.plain(n.inputs[2]));
  step->writes = {b.define(n.outputs[0], DType::F32, xs)};
  step->label = n.describe() + ": cpu";
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
