#include "frontend/autograd/node.h"

#include <atomic>

#include "core/error.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

Node::Node() : sequence_nr(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  HODU_CHECK(backward_ != nullptr, ErrorCode::InvalidArgument,
             "{}: trying to backward through the graph a second time (or to use its saved values after they were "
             "freed); pass retain_graph=true to the first backward if you need to backward twice",
             name_);
  return backward_(grads, *this);
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& l) : leaf(l) {
  outputs.push_back({l->data.shape(), l->data.dtype()});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  auto impl = leaf.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor g = std::move(grads[0]);
  if (g.dtype() != impl->data.dtype()) g = g.to(impl->data.dtype());
  HODU_CHECK(g.shape() == impl->data.shape(), ErrorCode::Internal, "AccumulateGrad: gradient {} for a leaf of shape {}",
             shape_to_string(g.shape()), shape_to_string(impl->data.shape()));
  const bool create_graph = is_grad_enabled();
  if (!impl->grad.defined()) {
    if (create_graph) {
      impl->grad = g;
    } else {
      // Steal the gradient's storage when nothing else holds it; otherwise a copy (it may be
      // another input's gradient too, or a broadcast view).
      bool owned = g.is_contiguous() && g.impl().use_count() == 1 && core(g).storage().use_count() == 1 &&
                   core(g).numel() * static_cast<int64_t>(dtype_bits(g.dtype()) / 8) ==
                       static_cast<int64_t>(core(g).storage()->bytes());
      impl->grad = owned ? g.detach() : g.detach().clone();
    }
  } else if (create_graph) {
    impl->grad = impl->grad + g;
  } else {
    impl->grad.add_(g.detach());
  }
  return {};
}

Saved::Saved(const Tensor& t, bool is_output, uint32_t output_nr)
    : t_(is_output ? t.detach() : t), version_(t.defined() ? t.version() : 0), output_(is_output), output_nr_(output_nr) {}

Tensor Saved::get(const Node& owner) const {
  Tensor t = get();
  if (!output_ || !t.defined() || !is_grad_enabled()) return t;
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->grad_fn = std::const_pointer_cast<Node>(owner.shared_from_this());
  impl->output_nr = output_nr_;
  impl->grad_accumulator.reset();
  return Tensor(std::move(impl));
}

Tensor Saved::get() const {
  if (t_.defined() && t_.version() != version_)
    fail(ErrorCode::InvalidArgument,
         "one of the values needed for gradient computation was modified by an in-place operation: a {} tensor "
         "is at version {}, expected version {}",
         t_.type_string(), t_.version(), version_);
  return t_;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  TensorImpl* impl = t.impl().get();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return {};
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl());
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

void record(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor*>& outputs,
            FunctionNode::Backward backward) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->retained.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* impl = outputs[i]->impl().get();
    node->outputs.push_back({impl->data.shape(), impl->data.dtype()});
    impl->grad_fn = node;
    impl->output_nr = static_cast<uint32_t>(i);
    impl->requires_grad = false;
  }
}

Tensor sum_to(const Tensor& grad, const Dims& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  HODU_CHECK(lead >= 0, ErrorCode::Internal, "sum_to: gradient {} cannot reduce to {}", shape_to_string(grad.shape()),
             shape_to_string(shape));
  Dims dims;
  for (int64_t i = 0; i < grad.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  Tensor r = dims.empty() ? grad : grad.sum(dims, true);
  return r.reshape(shape);
}

}  // namespace hodu::eager
