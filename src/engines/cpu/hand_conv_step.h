// What the hand-written conv steps share (GEMV convs in dnnl_conv.cc, 1-D depthwise convs in
// depthwise_conv1d.cc): weights and bias copied once, the fused activation, the residual Z.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engines/cpu/plan.h"
#include "engines/cpu/scalar_activation.h"

namespace hodu::cpu {

// A conv step of hodu's own over plain tensors: reads[0] the input, reads[1] the residual Z
// (has_z_), writes[0] the output.
struct HandConvStep : Step {
  std::vector<float> weights_, bias_;  // as the node's weights, [cout] or empty
  ScalarActivation act_;
  bool has_z_ = false;
};

// Fills the shared part of `step` for conv node `n` (output shape ys) and adds it to the plan,
// labelled with `kernel`.
template <class S>
void add_hand_conv(PlanBuilder& b, const Node& n, std::unique_ptr<S> step, const Tensor& w, const Tensor* bias,
                   const ScalarActivation& act, bool has_z, const std::vector<int64_t>& ys, const std::string& kernel) {
  const float* wd = w.data<float>();
  step->weights_.assign(wd, wd + w.numel());
  if (bias) step->bias_.assign(bias->data<float>(), bias->data<float>() + bias->numel());
  step->act_ = act;
  step->reads = {b.plain(n.inputs[0])};
  if (has_z) {
    step->has_z_ = true;
    step->reads.push_back(b.plain(n.inputs[3]));
  }
  step->writes = {b.define(n.outputs[0], DType::F32, ys)};
  step->label = n.describe() + ": " + kernel;
  b.add(std::move(step));
}

}  // namespace hodu::cpu
