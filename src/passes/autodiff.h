// Autodiff on the IR: a forward graph turned into one graph that also computes
// gradients (build_gradient_graph), and a whole training step — forward,
// backward and optimizer update — as one graph an engine plans once
// (build_training_step). The backward part is made of graph nodes: canonical
// ops where they express a gradient naturally (MatMul, Mul, ReduceSum, ...) and
// hodu-domain grad ops where a fused backward kernel is much faster
// (docs/passes.md, "Autodiff").
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::passes {

struct GradientRequest {
  std::string loss;              // the value differentiated (any float tensor of the graph)
  std::vector<std::string> wrt;  // graph inputs or initializers
  // false: dL/dloss is ones of loss's shape (the gradient of sum(loss)). true: a new graph
  // input "grad.<loss>" of loss's type carries it (a caller's dL/dy for a non-scalar y).
  bool seed_input = false;
};

// A new graph: `forward`'s nodes plus the backward nodes. Outputs: forward's outputs, then one
// "grad.<name>" per wrt value (its dtype and shape; zeros when loss does not depend on it).
// Symbolic dims stay symbolic. An op on the path from wrt to loss without a gradient rule is
// Unsupported, naming the op and the node.
Graph build_gradient_graph(const Graph& forward, const GradientRequest& request);

// The ops build_gradient_graph can differentiate, as "op" or "domain.op".
std::vector<std::string> differentiable_ops();

struct OptimizerSpec {
  enum class Kind { SGD, Adam, AdamW };
  Kind kind = Kind::SGD;
  float weight_decay = 0;  // SGD/Adam: L2 added to the gradient; AdamW: decoupled (p *= 1 - lr·wd)
  bool maximize = false;
  // SGD
  float momentum = 0, dampening = 0;
  bool nesterov = false;
  // Adam, AdamW
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  bool amsgrad = false;

  static OptimizerSpec sgd(float momentum = 0, float dampening = 0, bool nesterov = false, float weight_decay = 0);
  static OptimizerSpec adam(float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f, float weight_decay = 0);
  static OptimizerSpec adamw(float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f,
                             float weight_decay = 1e-2f);
};

// The input carrying the learning rate (an f32 scalar) in a training-step graph: schedulers
// change it per step without a new plan.
inline constexpr const char* kLearningRateInput = "lr";

// One training step as one graph, with PyTorch 1.13's update rules exactly (SGD with momentum,
// dampening, Nesterov, weight decay; Adam and AdamW with bias correction, amsgrad).
// Inputs: forward's inputs, then "lr", then each param (the initializers named in `params`,
// which stop being initializers), then the optimizer state: "<param>.momentum_buffer" (SGD with
// momentum), "<param>.exp_avg", "<param>.exp_avg_sq" ["<param>.max_exp_avg_sq"] (Adam/AdamW),
// "optimizer.step" (f32 scalar: steps taken), and the running mean/var of each
// BatchNormalization in training mode (its initializers). Outputs: forward's outputs (then the
// loss, where forward does not output it), then "<x>.next" for every param and state input x,
// in the order of the inputs.
Graph build_training_step(const Graph& forward, std::string loss, std::vector<std::string> params,
                          const OptimizerSpec& optimizer);

// The initializers a training step would train by default: float tensors of rank >= 1 that are
// not overridable inputs, not a BatchNormalization's mean/var (state, not parameters), and not
// an exporter's constants (names with "::", as torch.onnx names them).
std::vector<std::string> trainable_initializers(const Graph& forward);

// The names x of a training-step graph whose updated value is the output "<x>.next" (params
// and optimizer state), in input order.
std::vector<std::string> training_state_names(const Graph& step);

// The values of a training step's state inputs before its first step: each param's and
// BatchNormalization statistic's initial value from `forward`, the optimizer state zero.
std::map<std::string, Tensor> initial_training_state(const Graph& forward, const Graph& step);

}  // namespace hodu::passes
