// CpuAllocator: 64-byte aligned host memory (one cache line, the widest
// AVX-512 load), with statistics. Thread-safe. Not cached: the system
// allocator already caches small blocks.
#pragma once
#include <mutex>
#include <unordered_map>

#include "runtime/memory/allocator.h"

namespace hodu {

class CpuAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  // limit_bytes > 0: allocations beyond it fail with OutOfMemory (tests, budgets).
  explicit CpuAllocator(size_t limit_bytes = 0) : limit_(limit_bytes) {}
  ~CpuAllocator() override;

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes, StreamId stream = 0) override;
  void deallocate(void* ptr) override;
  MemoryStats stats() const override;
  void reset_peak_stats() override;

 private:
  size_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  MemoryStats stats_;
};

}  // namespace hodu
