#include "frontend/tensor/inplace.h"

#include "frontend/autograd/node.h"
#include "frontend/capture/tracer.h"
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {
void check_result(const Tensor& r, const Tensor& self, const char* name) {
  HODU_CHECK(r.shape() == self.shape(), ErrorCode::InvalidArgument,
             "{}: the result has shape {}, the tensor written in place {}", name, shape_to_string(r.shape()),
             shape_to_string(self.shape()));
  HODU_CHECK(kernels::is_float(self.dtype()) || !kernels::is_float(r.dtype()), ErrorCode::InvalidArgument,
             "{}: a {} result cannot be written into a {} tensor", name, dtype_name(r.dtype()),
             dtype_name(self.dtype()));
}
}  // namespace

Tensor& apply_inplace(Tensor& self, const char* name, const std::vector<const Tensor*>& others,
                      const std::function<Tensor(const Tensor& self_value)>& compute,
                      const std::function<bool(hodu::Tensor& storage)>& direct) {
  TensorImpl& impl = *self.impl();
  core(self, name);
  bool grad = is_grad_enabled() && self.requires_grad();
  for (const Tensor* o : others) grad = grad || (is_grad_enabled() && o->defined() && o->requires_grad());
  if (grad) {
    HODU_CHECK(!(self.is_leaf() && impl.requires_grad), ErrorCode::InvalidArgument,
               "{}: a leaf tensor that requires grad is used in an in-place operation (wrap the update in "
               "NoGradGuard, as optimizers do)",
               name);
    HODU_CHECK(!impl.is_view, ErrorCode::Unsupported,
               "{}: in-place operation on a view of another tensor while autograd records it; use the out-of-place "
               "op",
               name);
  }
  if (!grad && !trace::active()) {
    if (direct && direct(impl.data)) {
      bump_version(self);
      return self;
    }
    Tensor r;
    {
      NoGradGuard guard;
      r = compute(self);
    }
    check_result(r, self, name);
    kernels::copy_into(impl.data, core(r));
    bump_version(self);
    return self;
  }
  // The value before the op, with self's history, in its own storage (the op may save it).
  Tensor before = self;
  if (grad) {
    auto old = std::make_shared<TensorImpl>();
    old->data = kernels::empty(impl.data.dtype(), impl.data.shape());
    kernels::copy_into(old->data, impl.data);
    old->grad_fn = impl.grad_fn;
    old->output_nr = impl.output_nr;
    old->requires_grad = false;
    before = Tensor(old);
    if (trace::active()) trace::alias(before, self);
  }
  Tensor r = compute(before);
  check_result(r, self, name);
  kernels::copy_into(impl.data, core(r));
  bump_version(self);
  if (grad) {
    TensorImpl& ri = *r.impl();
    impl.grad_fn = ri.grad_fn;
    impl.output_nr = ri.output_nr;
    if (impl.grad_fn) impl.grad_fn->outputs[impl.output_nr] = {impl.data.shape(), impl.data.dtype()};
  }
  if (trace::active()) trace::alias(self, r);
  return self;
}

}  // namespace hodu::eager
