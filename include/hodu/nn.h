/* hodu/nn.h — modules, layers, losses and initializers (public).
 *
 *   struct Net : hodu::nn::Module {
 *     std::shared_ptr<hodu::nn::Linear> fc1, fc2;
 *     Net() : Module("Net") {
 *       fc1 = register_module("fc1", std::make_shared<hodu::nn::Linear>(64, 32));
 *       fc2 = register_module("fc2", std::make_shared<hodu::nn::Linear>(32, 10));
 *     }
 *     hodu::Tensor forward(const hodu::Tensor& x) override { return fc2->forward(fc1->forward(x).relu()); }
 *   };
 *
 * A Module owns named parameters (tensors that require grad), named buffers
 * (state that is not trained: BatchNorm's running statistics) and named child
 * modules; names nest with dots ("fc1.weight"), as PyTorch's state_dict keys.
 * Layers initialize their parameters exactly as PyTorch 1.13 does, drawing
 * from the default generator (hodu::manual_seed) unless given another. */
#pragma once
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hodu/random.h"
#include "hodu/tensor.h"

namespace hodu::eager::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  explicit Module(std::string type_name = "Module");
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  // The computation of a single-input module (Unsupported unless overridden).
  virtual Tensor forward(const Tensor& x);
  // The computation on several inputs giving several outputs; by default forward(inputs[0]).
  // hodu::capture calls this one.
  virtual std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs);
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& type_name() const { return type_name_; }
  // Parameters/buffers of this module and (recurse) its children, prefixed with their path.
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // Every module below this one (depth first, this one first as "").
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t parameter_count() const;  // elements

  // Training or evaluation mode, for this module and every child (Dropout, BatchNorm).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Parameters then buffers, named as named_parameters/named_buffers.
  NamedTensors state_dict() const;
  // Copies the values in (shapes must match; dtypes are converted). strict: every key must be
  // known and every parameter/buffer given; InvalidArgument naming the keys otherwise.
  void load_state_dict(const NamedTensors& state, bool strict = true);
  // Weights as safetensors (state_dict), and back.
  void save(const std::string& path) const;
  void load(const std::string& path, bool strict = true);

  // Sets every parameter's grad to undefined (set_to_none) or to zeros.
  void zero_grad(bool set_to_none = false);
  // Converts every parameter and buffer of a floating type to `dtype` in place (kFloat64 for
  // gradient checks); the tensors keep their identity.
  void to(DType dtype);
  // One line per module with its parameters' shapes.
  std::string to_string() const;

 protected:
  // Registers a parameter (requires_grad set) / buffer / child; returns what it registered.
  Tensor register_parameter(std::string name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(std::string name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }
  void add_child(std::string name, std::shared_ptr<Module> module);

 private:
  void collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out) const;
  std::string type_name_;
  bool training_ = true;
  NamedTensors parameters_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// ---- layers ------------------------------------------------------------------

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  int64_t in_features, out_features;
  Tensor weight, bias;  // [out, in], [out] (bias undefined without one)
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Dims kernel_size, Dims stride = {1, 1}, Dims padding = {0, 0},
         Dims dilation = {1, 1}, int64_t groups = 1, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  Dims stride, padding, dilation;
  int64_t groups;
  Tensor weight, bias;  // [out, in / groups, kh, kw], [out]
};

class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  int64_t stride, padding, dilation, groups;
  Tensor weight, bias;
};

// Normalizes over the batch and spatial dims per channel; running statistics
// (buffers running_mean, running_var, num_batches_tracked) in training mode,
// used in evaluation mode.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);
  Tensor forward(const Tensor& x) override;
  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Dims normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  Dims normalized_shape;
  double eps;
  Tensor weight, bias;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  double p;
  Generator* gen;
};

class Embedding : public Module {
 public:
  // padding_idx: a row that stays zero and gets no gradient (-1: none).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1, Generator* gen = nullptr);
  Tensor forward(const Tensor& indices) override;
  int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;  // [num_embeddings, embedding_dim]
};

// PyTorch's nn.MultiheadAttention: in_proj_weight [3E, E], in_proj_bias [3E],
// out_proj (Linear E -> E). Inputs [L, N, E] ([N, L, E] with batch_first).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, Generator* gen = nullptr);
  // attn_mask: [L, S] (or [N * heads, L, S]), bool (true: not attended) or float (added);
  // key_padding_mask: [N, S] bool (true: padding). Gives (output, attention weights averaged
  // over heads [N, L, S], undefined unless need_weights).
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), const Tensor& key_padding_mask = Tensor(),
                                    bool need_weights = true);
  // Self-attention: forward(x, x, x) without weights.
  Tensor forward(const Tensor& x) override;
  // {x} (self-attention), {query, key_value} or {query, key, value}: {output} (what capture traces).
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  int64_t embed_dim, num_heads;
  double dropout;
  bool batch_first;
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;
  Generator* gen;
};

// Runs its modules one after another.
class Sequential : public Module {
 public:
  Sequential();
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  // Modules given by value (moved in) or as shared_ptrs.
  template <typename... M>
  explicit Sequential(M&&... modules) : Sequential() {
    (push_back(as_module(std::forward<M>(modules))), ...);
  }
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return modules_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return modules_.at(i); }

 private:
  template <typename T> struct IsShared : std::false_type {};
  template <typename T> struct IsShared<std::shared_ptr<T>> : std::true_type {};
  template <typename M>
  static std::shared_ptr<Module> as_module(M&& m) {
    if constexpr (IsShared<std::decay_t<M>>::value) return m;
    else return std::make_shared<std::decay_t<M>>(std::forward<M>(m));
  }
  std::vector<std::shared_ptr<Module>> modules_;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return x.relu(); }
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : Module("GELU"), approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override;
  std::string approximate;
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override { return x.tanh(); }
};
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return x.sigmoid(); }
};
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Dims kernel_size, Dims stride = {}, Dims padding = {0, 0})
      : Module("MaxPool2d"), kernel_size(std::move(kernel_size)), stride(std::move(stride)), padding(std::move(padding)) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_size, stride, padding); }
  Dims kernel_size, stride, padding;
};
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Dims kernel_size, Dims stride = {}, Dims padding = {0, 0})
      : Module("AvgPool2d"), kernel_size(std::move(kernel_size)), stride(std::move(stride)), padding(std::move(padding)) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_size, stride, padding); }
  Dims kernel_size, stride, padding;
};

// ---- losses (reduction: "mean", "sum" or "none") ---------------------------------

// logits [N, C] (or [N, C, d...]), target: class indices [N] (i64; ignore_index skipped) or
// class probabilities shaped as logits. label_smoothing as PyTorch 1.13.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const std::string& reduction = "mean",
                     double label_smoothing = 0.0, int64_t ignore_index = -100, const Tensor& weight = Tensor());
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const std::string& reduction = "mean",
                int64_t ignore_index = -100, const Tensor& weight = Tensor());
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
// pos_weight [C] (or undefined) weighs the positive term, as PyTorch's.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const std::string& reduction = "mean",
                                        const Tensor& pos_weight = Tensor());

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(std::string reduction = "mean", double label_smoothing = 0.0, int64_t ignore_index = -100)
      : reduction(std::move(reduction)), label_smoothing(label_smoothing), ignore_index(ignore_index) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, reduction, label_smoothing, ignore_index);
  }
  std::string reduction;
  double label_smoothing;
  int64_t ignore_index;
};
class MSELoss {
 public:
  explicit MSELoss(std::string reduction = "mean") : reduction(std::move(reduction)) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  std::string reduction;
};
class BCEWithLogitsLoss {
 public:
  explicit BCEWithLogitsLoss(std::string reduction = "mean", Tensor pos_weight = Tensor())
      : reduction(std::move(reduction)), pos_weight(std::move(pos_weight)) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return binary_cross_entropy_with_logits(logits, target, reduction, pos_weight);
  }
  std::string reduction;
  Tensor pos_weight;
};

// ---- initializers (in place, without recording history; PyTorch's nn.init) ------
namespace init {
// fan_in / fan_out of a weight ([out, in, k...]): in * prod(k), out * prod(k).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);
// nonlinearity: linear, conv*, sigmoid (1), tanh (5/3), relu (sqrt 2), leaky_relu (param: slope), selu (3/4).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);
Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// mode: "fan_in" or "fan_out".
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
}  // namespace init

}  // namespace hodu::eager::nn
