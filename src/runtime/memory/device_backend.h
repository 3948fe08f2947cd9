// DeviceBackend: the few raw device operations the CachingAllocator needs —
// malloc/free of whole segments and events that tell when a stream has
// finished with a block. The CUDA backend implements it with the dlopen'd
// runtime; FakeBackend implements it in host memory so the allocator's logic
// is tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"
#include "runtime/memory/allocator.h"

namespace hodu {

using EventId = uint64_t;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // nullptr when the device is out of memory; other failures throw ErrorCode::Device.
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  // Marks the current end of `stream`'s work; event_done() turns true once it has run.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool event_done(EventId event) = 0;
  virtual void release_event(EventId event) = 0;
  // Waits for all work on the device.
  virtual void synchronize() = 0;
  // Device memory: total and free bytes (0, 0 when unknown), for OOM messages.
  virtual void memory_info(size_t& free_bytes, size_t& total_bytes) {
    free_bytes = total_bytes = 0;
  }
};

}  // namespace hodu
