// The interpreter's op list: every family registers its kernels here.
#include "engines/interp/kernel.h"

namespace hodu::interp {

void register_fused_ops(OpTable& t);  // ops/fused.cc: hodu's fused ops
void register_image_ops(OpTable& t);  // ops/image.cc: ImageDecoder (image codec libraries)

const OpTable& OpTable::instance() {
  static const OpTable table = [] {
    OpTable t;
    register_elementwise_ops(t);
    register_reduction_ops(t);
    register_linalg_ops(t);
    register_normalization_ops(t);
    register_quantization_ops(t);
    register_nn_ops(t);
    register_rnn_ops(t);
    register_signal_ops(t);
    register_attention_ops(t);
    register_tensor_ops(t);
    register_generator_ops(t);
    register_control_flow_ops(t);
    register_sequence_ops(t);
    register_string_ops(t);
    register_ml_ops(t);
    register_training_ops(t);
    register_gradient_ops(t);
    register_grad_ops(t);
    register_sequence_model_ops(t);
    register_text_ops(t);
    register_fused_ops(t);
    register_image_ops(t);
    return t;
  }();
  return table;
}

KernelFn OpTable::find(const std::string& domain, const std::string& op) const {
  std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = kernels_.find({d, op});
  return it == kernels_.end() ? nullptr : it->second;
}

std::vector<std::pair<std::string, std::string>> OpTable::ops() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : kernels_) out.push_back(k);
  return out;
}

}  // namespace hodu::interp
