// Packed weights shared between the plans of one model (packed_weight_cache.h).
#include "engines/cpu/packed_weight_cache.h"

#include "engines/cpu/plan.h"

#include <functional>
#include <string_view>

namespace hodu::cpu {

uint64_t PackedWeightCache::hash_of(const Tensor& t) {
  const auto key = std::make_tuple(static_cast<const void*>(t.storage().get()), t.offset(), t.nbytes());
  {
    std::lock_guard lock(mu_);
    auto it = hashes_.find(key);
    if (it != hashes_.end() && it->second.first.lock() == t.storage())
      return it->second.second;
  }
  const Tensor c = t.contiguous();
  const uint64_t h = std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(c.raw_data()), c.nbytes()));
  std::lock_guard lock(mu_);
  hashes_[key] = {t.storage(), h};
  return h;
}

PackedConstant PackedWeightCache::get(const Tensor& t, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                                      const std::function<PackedConstant()>& pack) {
  const uint64_t hash = hash_of(t);
  const size_t bytes = t.nbytes();
  {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_)
      if (e.hash == hash && e.bytes == bytes && e.from == from && e.to == to) return PackedConstant{e.buffer, e.mem};
  }
  PackedConstant p = pack();
  std::lock_guard lock(mu_);
  entries_.push_back({hash, bytes, from, to, p.buffer, p.mem});
  return p;
}

size_t PackedWeightCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace hodu::cpu
