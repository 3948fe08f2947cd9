// MemoryManager: one allocator per device, created on first use — cpu: the
// 64-byte aligned CpuAllocator; cuda:N: a CachingAllocator over CudaBackend(N)
// (Device error when CUDA or the device is absent); plus the pinned host
// allocator. memory_stats()/empty_cache() per device, as hodu.runtime exposes.
#pragma once
#include <map>
#include <memory>
#include <mutex>

#include "runtime/memory/allocator.h"

namespace hodu {

class MemoryManager {
 public:
  static MemoryManager& instance();

  Allocator& allocator(const Device& device);
  Allocator& pinned_host();
  MemoryStats memory_stats(const Device& device) { return allocator(device).stats(); }
  void empty_cache(const Device& device) { allocator(device).empty_cache(); }
  // Replaces the allocator of a device (tests, custom backends).
  void set_allocator(const Device& device, std::shared_ptr<Allocator> allocator);

 private:
  MemoryManager();
  std::mutex mutex_;
  std::map<std::pair<int, int>, std::shared_ptr<Allocator>> allocators_;  // (kind, index)
  std::shared_ptr<Allocator> pinned_;
};

}  // namespace hodu
