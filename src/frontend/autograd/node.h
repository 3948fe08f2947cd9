// The autograd tape: a Node per recorded op, edges to the nodes that made its
// inputs, and the helpers ops use to record themselves. Internal.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frontend/tensor/tensor_impl.h"

namespace hodu::eager {

class Node;

// Where a gradient goes: input `input_nr` of node `fn` (null: nowhere).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  // grads: one per output, zeros where none arrived. Returns one per next edge
  // (undefined where that input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees what the node saved for its backward (after a backward without retain_graph).
  virtual void release() {}

  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].fn != nullptr; }

  struct OutputInfo {
    Dims shape;
    DType dtype = DType::F32;
  };
  std::vector<Edge> next_edges;
  std::vector<OutputInfo> outputs;
  std::vector<std::weak_ptr<TensorImpl>> retained;  // per output: a non-leaf that retain_grad()s
  uint64_t sequence_nr;                             // later nodes run first
};

// The node of an op: its backward is a function of the output gradients.
class FunctionNode : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads, const FunctionNode& node)>;
  FunctionNode(std::string name, Backward backward) : name_(std::move(name)), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return name_; }
  void release() override { backward_ = nullptr; }

 private:
  std::string name_;
  Backward backward_;
};

// Adds the gradient into a leaf's grad().
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::weak_ptr<TensorImpl> leaf;
};

// A value an op keeps for its backward, with the version it had then: get()
// refuses a value changed in place since. An output of the op itself is kept
// detached (no cycle output -> node -> output); get(node) gives it back as that
// node's output again when the backward is recorded (create_graph), so that
// second derivatives flow through it.
class Saved {
 public:
  Saved() = default;
  explicit Saved(const Tensor& t, bool is_output = false, uint32_t output_nr = 0);
  Tensor get() const;
  Tensor get(const Node& owner) const;
  bool defined() const { return t_.defined(); }

 private:
  Tensor t_;
  uint64_t version_ = 0;
  bool output_ = false;
  uint32_t output_nr_ = 0;
};

// True when grad mode is on and one of the tensors requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);
// Where a gradient of `t` goes (its grad_fn, its leaf accumulator, or nowhere).
Edge gradient_edge(const Tensor& t);
// Makes `outputs` results of a new node named `name` over `inputs` (call only when needs_grad).
void record(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor*>& outputs,
            FunctionNode::Backward backward);
// Reduces a broadcast gradient back to `shape` (sums the broadcast dims).
Tensor sum_to(const Tensor& grad, const Dims& shape);

}  // namespace hodu::eager
