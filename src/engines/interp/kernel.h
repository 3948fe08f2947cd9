// The reference interpreter's kernel interface. A kernel is a plain function
// that reads ctx.inputs and the node's attributes and fills ctx.outputs.
// Kernels are registered per op family (ops/<family>.cc) in one visible list
// (op_table.cc). Adding an op: schema entry, one kernel here, one test case.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ir/graph.h"

namespace hodu::interp {

struct KernelContext {
  const Node& node;
  std::vector<const RuntimeValue*> inputs;  // nullptr: omitted optional input
  std::vector<RuntimeValue> outputs;        // sized to node.outputs.size()
  int threads = 1;
  uint64_t seed = 0;  // per-node seed for random ops (deterministic per run)
  // Runs a subgraph (If/Loop/Scan body) with the given inputs bound to its
  // graph inputs, outer-scope values visible; returns its outputs in order.
  std::function<std::vector<RuntimeValue>(const Graph&, const std::vector<RuntimeValue>&)> run_subgraph;
  // The graph holding `node` (Gradient differentiates part of it); null when run outside a graph.
  const Graph* graph = nullptr;

  size_t num_inputs() const { return inputs.size(); }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] && !inputs[i]->is_none(); }
  // The i-th input as a tensor; InvalidModel naming the node if absent or not a tensor.
  const Tensor& input(size_t i) const;
  const RuntimeValue& value(size_t i) const;
  bool wants_output(size_t i) const { return node.has_output(i); }
  void set_output(size_t i, Tensor t) {
    if (i < outputs.size()) outputs[i] = RuntimeValue(std::move(t));
  }
  void set_output(size_t i, RuntimeValue v) {
    if (i < outputs.size()) outputs[i] = std::move(v);
  }
  // Throws Error(code, "<node description>: <message>").
  template <typename... Args>
  [[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(code, node.describe() + ": " + fmt::format(f, std::forward<Args>(args)...));
  }
};

using KernelFn = void (*)(KernelContext&);

// (domain, op_type) → kernel. Domain "" is ai.onnx.
class OpTable {
 public:
  static const OpTable& instance();
  void add(const std::string& domain, const std::string& op, KernelFn fn) { kernels_[{domain, op}] = fn; }
  KernelFn find(const std::string& domain, const std::string& op) const;
  std::vector<std::pair<std::string, std::string>> ops() const;

 private:
  std::map<std::pair<std::string, std::string>, KernelFn> kernels_;
};

// One registration function per op family (ops/*.cc); op_table.cc calls them all.
void register_elementwise_ops(OpTable& t);   // unary/binary math, activations, logic, bitwise, Cast, Where, Clip
void register_reduction_ops(OpTable& t);     // Reduce*, ArgMax/Min, CumSum/CumProd, Softmax family, TopK
void register_linalg_ops(OpTable& t);        // MatMul, Gemm, Einsum, Det, integer/quantized matmul
void register_normalization_ops(OpTable& t); // BatchNorm, LayerNorm, GroupNorm, RMSNorm, InstanceNorm, LRN, ...
void register_quantization_ops(OpTable& t);  // QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinear*
void register_nn_ops(OpTable& t);            // Conv*, pooling, Resize, GridSample, Pad, DepthToSpace, NMS, ...
void register_rnn_ops(OpTable& t);           // RNN, LSTM, GRU
void register_signal_ops(OpTable& t);        // DFT, STFT, windows, MelWeightMatrix
void register_attention_ops(OpTable& t);     // Attention, RotaryEmbedding, losses
void register_tensor_ops(OpTable& t);        // shape/layout/indexing: Reshape, Concat, Gather, Scatter, Slice, ...
void register_generator_ops(OpTable& t);     // Constant*, Range, EyeLike, random ops, Bernoulli, Multinomial
void register_control_flow_ops(OpTable& t);  // If, Loop, Scan
void register_sequence_ops(OpTable& t);      // Sequence*, Optional*, SplitToSequence, ConcatFromSequence
void register_string_ops(OpTable& t);        // StringNormalizer, StringConcat, StringSplit, RegexFullMatch
void register_ml_ops(OpTable& t);            // ai.onnx.ml
void register_training_ops(OpTable& t);      // ai.onnx.preview.training: Adagrad, Adam, Momentum
void register_gradient_ops(OpTable& t);      // ai.onnx.preview.training: Gradient (symbolic differentiation)
void register_grad_ops(OpTable& t);          // hodu's gradient ops (ConvGrad, SoftmaxGrad, ...), emitted by autodiff
void register_sequence_model_ops(OpTable& t);  // LinearAttention, CausalConvWithState, FlexAttention (preview)
void register_text_ops(OpTable& t);          // TfIdfVectorizer

}  // namespace hodu::interp
