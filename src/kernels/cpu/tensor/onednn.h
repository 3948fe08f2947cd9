// oneDNN for the tensor kernels: one engine, a stream per thread, and a cache
// of primitives keyed by their shapes so that a repeated eager call only binds
// memory and executes. Internal.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <any>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/tensor/loops.h"  // num_threads

namespace hodu::tensor_kernels::onednn {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine();
dnnl::stream& stream();  // this thread's
// Sets the OpenMP threads oneDNN runs on to the eager setting (call before execute).
void use_eager_threads();

// A plain memory descriptor with the tensor's dims and strides (f32).
dnnl::memory::desc plain_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);
dnnl::memory::desc plain_md(const std::vector<int64_t>& dims);  // row-major
dnnl::memory memory(const dnnl::memory::desc& md, const void* data);
// oneDNN answered with its reference implementation (plain loops).
bool is_reference(const char* impl_info);

// The cached value for `key`, made by `make` on a miss. Values live until exit.
std::any& cached(const std::string& key, const std::function<std::any()>& make);
template <typename T>
T& cached_as(const std::string& key, const std::function<T()>& make) {
  return std::any_cast<T&>(cached(key, [&] { return std::any(make()); }));
}
// "3x4x5" and friends for keys.
std::string key_of(const std::vector<int64_t>& v);

}  // namespace hodu::tensor_kernels::onednn
