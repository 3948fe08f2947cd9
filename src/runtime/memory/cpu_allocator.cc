#include "runtime/memory/cpu_allocator.h"

#include <cstdlib>

#include "core/error.h"
#include "core/huge_pages.h"

namespace hodu {

CpuAllocator::~CpuAllocator() {
  for (auto& [p, n] : sizes_) std::free(p);
}

void* CpuAllocator::allocate(size_t bytes, StreamId) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard lock(mutex_);
  int64_t now = stats_.allocated().current;
  void* p = nullptr;
  if (limit_ == 0 || static_cast<size_t>(now) + rounded <= limit_) p = aligned_alloc_large(kAlignment, rounded);
  if (!p) {
    stats_.num_ooms++;
    fail(ErrorCode::OutOfMemory, "cpu: out of memory allocating {}{}; {}", format_bytes(static_cast<int64_t>(bytes)),
         limit_ ? " (limit " + format_bytes(static_cast<int64_t>(limit_)) + ")" : "", stats_.summary());
  }
  sizes_[p] = rounded;
  stats_.add_uncached_block(static_cast<int64_t>(rounded));
  return p;
}

void CpuAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = sizes_.find(ptr);
  HODU_CHECK(it != sizes_.end(), ErrorCode::InvalidArgument, "cpu allocator: {} was not allocated here (or freed twice)",
             ptr);
  stats_.remove_uncached_block(static_cast<int64_t>(it->second));
  std::free(ptr);
  sizes_.erase(it);
}

MemoryStats CpuAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CpuAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

}  // namespace hodu
