#include "runtime/memory/memory_manager.h"

#include "core/error.h"
#include "core/tensor.h"
#include "runtime/memory/caching_allocator.h"
#include "runtime/memory/cpu_allocator.h"
#include "runtime/memory/cuda_backend.h"

namespace hodu {

namespace {

// Routes core's tensor storage (Storage::allocate) through the cpu allocator, so
// memory_stats("cpu") counts every tensor hodu allocates.
class AllocatorHostMemory : public HostMemory {
 public:
  explicit AllocatorHostMemory(std::shared_ptr<Allocator> allocator) : allocator_(std::move(allocator)) {}
  void* allocate(size_t bytes) override { return allocator_->allocate(bytes); }
  void deallocate(void* ptr) override { allocator_->deallocate(ptr); }

 private:
  std::shared_ptr<Allocator> allocator_;  // kept alive by every block it handed out
};

}  // namespace

MemoryManager& MemoryManager::instance() {
  static MemoryManager* m = new MemoryManager();  // never destroyed: tensors may outlive static destruction
  return *m;
}

MemoryManager::MemoryManager() { allocator(Device::cpu()); }

Allocator& MemoryManager::allocator(const Device& device) {
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  if (auto it = allocators_.find(key); it != allocators_.end()) return *it->second;
  std::shared_ptr<Allocator> created;
  if (device.kind == Device::Kind::CPU) {
    HODU_CHECK(device.index == 0, ErrorCode::InvalidArgument, "device {}: only cpu (index 0) exists",
               device.to_string());
    created = std::make_shared<CpuAllocator>();
    Storage::set_host_memory(std::make_shared<AllocatorHostMemory>(created));
  } else {
    created = std::make_shared<CachingAllocator>(std::make_shared<CudaBackend>(device.index));  // may throw
  }
  return *(allocators_[key] = std::move(created));
}

Allocator& MemoryManager::pinned_host() {
  std::lock_guard lock(mutex_);
  if (!pinned_) pinned_ = std::make_shared<PinnedHostAllocator>();
  return *pinned_;
}

void MemoryManager::set_allocator(const Device& device, std::shared_ptr<Allocator> allocator) {
  std::lock_guard lock(mutex_);
  if (device.kind == Device::Kind::CPU) Storage::set_host_memory(std::make_shared<AllocatorHostMemory>(allocator));
  allocators_[{static_cast<int>(device.kind), device.index}] = std::move(allocator);
}

}  // namespace hodu
