#include "kernels/cpu/tensor/onednn.h"

#include <omp.h>

#include <mutex>
#include <unordered_map>

#include "kernels/cpu/tensor/loops.h"  // num_threads

namespace hodu::tensor_kernels::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void use_eager_threads() {
  const int n = num_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

dnnl::memory::desc plain_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc plain_md(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * dims[i + 1];
  return plain_md(dims, st);
}

dnnl::memory memory(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, engine(), const_cast<void*>(data));
}

bool is_reference(const char* impl) { return std::string(impl).rfind("ref", 0) == 0; }

std::any& cached(const std::string& key, const std::function<std::any()>& make) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::any> cache;  // node-based: references stay valid
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  // Made without the lock: a maker may itself ask the cache (a backward primitive needs its
  // forward one as a hint). Two threads making the same key keep the first.
  std::any value = make();
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, std::move(value)).first->second;
}

std::string key_of(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) {
    s += std::to_string(x);
    s += 'x';
  }
  return s;
}

}  // namespace hodu::tensor_kernels::onednn
