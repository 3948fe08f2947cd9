/* hodu/autograd.h — reverse-mode autodiff on the eager tape (public).
 *
 * An op whose input requires grad (and while grad mode is on) records a node
 * holding what its backward needs. Tensor::backward() walks those nodes from
 * the output back to the leaves and adds the gradients into each leaf's
 * grad(): gradients accumulate until zeroed, as in PyTorch. The saved values
 * are freed by a backward unless retain_graph is set; a second backward
 * through a freed graph is an InvalidArgument error. An in-place change of a
 * value a node saved makes that node's backward fail (version counters). */
#pragma once
#include <vector>

#include "hodu/tensor.h"

namespace hodu::eager {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);  // this thread

// Grad mode off for its scope (this thread): ops record nothing, as in
// evaluation or optimizer updates.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Grad mode on for its scope (inside a NoGradGuard).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

namespace autograd {

// The gradients of `outputs` with respect to `inputs`, returned instead of
// accumulated into grad(). grad_outputs: one per output (undefined: ones for a
// one-element output). allow_unused: an input the outputs do not depend on
// gives an undefined tensor instead of an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

// backward() of several outputs at once.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

}  // namespace autograd
}  // namespace hodu::eager
