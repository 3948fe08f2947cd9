// In-place ops: the checks PyTorch makes, and the history they rewrite. Internal.
#pragma once
#include <functional>
#include <vector>

#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"

namespace hodu::eager {

// Makes `self` hold compute(self's value). Without autograd (grad mode off, or nothing
// requires grad) `direct(storage)` may write the result straight into self's storage
// (returns false when it cannot); else the result is computed out of place and copied in.
// With autograd, self's history continues from the out-of-place op's node. Refuses (like
// PyTorch) a leaf that requires grad in grad mode, and views whose base requires grad.
Tensor& apply_inplace(Tensor& self, const char* name, const std::vector<const Tensor*>& others,
                      const std::function<Tensor(const Tensor& self_value)>& compute,
                      const std::function<bool(hodu::Tensor& storage)>& direct = nullptr);

Tensor& inplace_binary(Tensor& self, kernels::BinaryOp op, const Tensor& other, const char* name);

}  // namespace hodu::eager
