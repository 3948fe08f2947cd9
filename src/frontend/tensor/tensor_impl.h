// What an eager hodu::Tensor refers to: the data (a core Tensor: storage and
// view) and its autograd state. Internal to the frontend.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "hodu/tensor.h"
#include "kernels/cpu/tensor/kernels.h"
#include "kernels/cpu/tensor/loops.h"

namespace hodu::eager {

// The kernels the eager ops run (src/kernels/cpu/tensor, shared with the cpu engine).
namespace kernels = ::hodu::tensor_kernels;
namespace loops = ::hodu::tensor_kernels::loops;
using tensor_kernels::dispatch_compute;
using tensor_kernels::dispatch_float;
using tensor_kernels::Tag;

class Node;

struct TensorImpl {
  hodu::Tensor data;
  // Bumped by in-place ops; shared by the views of one storage.
  std::shared_ptr<std::atomic<uint64_t>> version = std::make_shared<std::atomic<uint64_t>>(0);
  bool requires_grad = false;  // of a leaf; a non-leaf requires grad when grad_fn is set
  bool retains_grad = false;
  bool is_view = false;        // shares its base's storage (in-place ops on it are not differentiated)
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;      // which output of grad_fn this is
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad, shared by every use
  Tensor grad;
};

// A new eager tensor over `data` (no history).
inline Tensor make_tensor(hodu::Tensor data) {
  auto impl = std::make_shared<TensorImpl>();
  impl->data = std::move(data);
  return Tensor(std::move(impl));
}

// A view of `base` over `data` (same storage): shares the version counter.
inline Tensor make_view(const Tensor& base, hodu::Tensor data) {
  auto impl = std::make_shared<TensorImpl>();
  impl->data = std::move(data);
  impl->version = base.impl()->version;
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// The core tensor of `t`; InvalidArgument naming `op` when t is undefined.
const hodu::Tensor& core(const Tensor& t, const char* op);
inline const hodu::Tensor& core(const Tensor& t) { return t.impl()->data; }
inline void bump_version(const Tensor& t) { t.impl()->version->fetch_add(1, std::memory_order_relaxed); }

}  // namespace hodu::eager
