// FakeBackend: a DeviceBackend in host memory with a configurable limit, for
// testing the CachingAllocator on a machine without a GPU. Events complete
// only when the test says so (complete_events), or at once when auto_complete
// is set, so cross-stream reuse can be observed step by step.
#pragma once
#include <map>
#include <mutex>
#include <set>

#include "runtime/memory/device_backend.h"

namespace hodu {

class FakeBackend : public DeviceBackend {
 public:
  explicit FakeBackend(size_t limit_bytes) : limit_(limit_bytes) {}
  ~FakeBackend() override;

  std::string name() const override { return "fake"; }
  Device device() const override { return Device::cuda(0); }
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  EventId record_event(StreamId stream) override;
  bool event_done(EventId event) override;
  void release_event(EventId event) override;
  void synchronize() override;  // completes every event
  void memory_info(size_t& free_bytes, size_t& total_bytes) override;

  // Test controls and counters.
  void complete_events(StreamId stream);  // every event recorded so far on the stream
  void set_auto_complete(bool on) { auto_complete_ = on; }
  size_t used() const;
  int64_t raw_allocs() const { return raw_allocs_; }
  int64_t raw_frees() const { return raw_frees_; }
  int64_t failed_allocs() const { return failed_allocs_; }
  size_t live_events() const;

 private:
  size_t limit_;
  bool auto_complete_ = false;
  mutable std::mutex mutex_;
  std::map<void*, size_t> blocks_;
  size_t used_ = 0;
  int64_t raw_allocs_ = 0, raw_frees_ = 0, failed_allocs_ = 0;
  EventId next_event_ = 1;
  std::map<EventId, std::pair<StreamId, bool>> events_;  // id → (stream, done)
};

}  // namespace hodu
