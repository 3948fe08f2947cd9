// CudaBackend: DeviceBackend over the dlopen'd CUDA runtime (cudaMalloc,
// cudaFree, events on cudaStream_t handles passed as StreamId). Compiles
// everywhere; needs a GPU to run (untested on the GPU-less build machine).
// PinnedHostAllocator: page-locked host memory through cudaHostAlloc, for
// fast host↔device copies; without CUDA it falls back to ordinary 64-byte
// aligned host memory and says so in name() and is_pinned().
#pragma once
#include <memory>
#include <mutex>
#include <unordered_map>

#include "runtime/cuda_runtime.h"
#include "runtime/memory/cpu_allocator.h"
#include "runtime/memory/device_backend.h"

namespace hodu {

class CudaBackend : public DeviceBackend {
 public:
  // Device error if the CUDA runtime or the device is absent.
  explicit CudaBackend(int device_index);
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  Device device() const override { return Device::cuda(index_); }
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  EventId record_event(StreamId stream) override;
  bool event_done(EventId event) override;
  void release_event(EventId event) override;
  void synchronize() override;
  void memory_info(size_t& free_bytes, size_t& total_bytes) override;

 private:
  void select() const;
  const CudaRuntime* rt_;
  int index_;
};

class PinnedHostAllocator : public Allocator {
 public:
  PinnedHostAllocator();
  ~PinnedHostAllocator() override;
  std::string name() const override;
  Device device() const override { return Device::cpu(); }
  bool is_pinned() const { return rt_ != nullptr; }
  void* allocate(size_t bytes, StreamId stream = 0) override;
  void deallocate(void* ptr) override;
  MemoryStats stats() const override;
  void reset_peak_stats() override;

 private:
  const CudaRuntime* rt_;
  std::string fallback_reason_;
  CpuAllocator fallback_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  MemoryStats stats_;
};

}  // namespace hodu
