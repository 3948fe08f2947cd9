// Softmax over the last axis and hodu.LayerNorm / LayerNormalization over the
// last axis: hand-written row kernels, rows split over the threads.
#include "core/error.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"

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

int64_t last_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

}  // namespace

bool make_normalization(PlanBuilder& b, const Node& n) {
  bool softmax = n.domain.empty() && n.op_type == "Softmax";
  bool ln = (n.domain == "hodu" && n.op_type == "LayerNorm") ||
            (n.domain.empty() && n.op_type == "LayerNormalization" && !n.has_output(1) && !n.has_output(2));
  if (!softmax && !ln) return false;
  auto x = b.static_type(n.inputs[0]);
  if (!x || x->first != DType::F32 || x->second.empty()) return false;
  const auto& xs = x->second;
  if (last_axis(n.get_int("axis", -1), xs.size()) != static_cast<int64_t>(xs.size()) - 1) return false;
  int64_t cols = xs.back(), rows = cols ? shape_numel(xs) / cols : 0;
  if (softmax) {
    auto step = std::make_unique<SoftmaxStep>();
    step->rows_ = rows;
    step->n_ = cols;
    step->reads = {b.plain(n.inputs[0])};
    step->writes = {b.define(n.outputs[0], DType::F32, xs)};
    step->label = n.describe() + ": cpu";
    b.add(std::move(step));
    return true;
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
