// Weights packed by the plans of one model, shared between them. The cpu engine builds a plan
// per input shape for a model with free input dims; each used to pack every weight again (a
// decoder fed its growing key/value cache one token at a time: a new plan, 24 MB of weights
// re-packed and 20 MB more resident, every step). A weight is found again by its bytes (the
// per-shape models share the base model's initializers, and what the passes derive from them —
// folded batch-norm weights, scaled products — comes out the same), so each is packed once.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/tensor.h"

namespace hodu::cpu {

struct PackedConstant;

class PackedWeightCache {
 public:
  // The packed copy of `t` (laid out as `from`) in layout `to`: an earlier one of the same bytes
  // and layouts, or `pack()`'s result, kept for the plans after.
  PackedConstant get(const Tensor& t, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                     const std::function<PackedConstant()>& pack);
  // Packed copies held (for tests).
  size_t size() const;

 private:
  struct Entry {
    uint64_t hash;
    size_t bytes;
    dnnl::memory::desc from, to;
    std::shared_ptr<void> buffer;
    dnnl::memory mem;
  };
  // The hash of t's bytes; remembered per storage, so that a weight released after packing
  // (EngineOptions::exclusive_weights) is not read, and so rebuilt, by the next plan.
  uint64_t hash_of(const Tensor& t);
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::map<std::tuple<const void*, int64_t, size_t>, std::pair<std::weak_ptr<Storage>, uint64_t>> hashes_;
};

}  // namespace hodu::cpu
