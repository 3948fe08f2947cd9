#include "runtime/memory/fake_backend.h"

#include <cstdlib>

#include "core/error.h"

namespace hodu {

FakeBackend::~FakeBackend() {
  for (auto& [p, n] : blocks_) std::free(p);
}

void* FakeBackend::raw_alloc(size_t bytes) {
  std::lock_guard lock(mutex_);
  if (used_ + bytes > limit_) {
    failed_allocs_++;
    return nullptr;
  }
  void* p = std::aligned_alloc(512, (bytes + 511) / 512 * 512);
  if (!p) {
    failed_allocs_++;
    return nullptr;
  }
  blocks_[p] = bytes;
  used_ += bytes;
  raw_allocs_++;
  return p;
}

void FakeBackend::raw_free(void* ptr) {
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(ptr);
  HODU_CHECK(it != blocks_.end(), ErrorCode::Internal, "fake backend: free of unknown pointer {}", ptr);
  used_ -= it->second;
  blocks_.erase(it);
  std::free(ptr);
  raw_frees_++;
}

EventId FakeBackend::record_event(StreamId stream) {
  std::lock_guard lock(mutex_);
  EventId id = next_event_++;
  events_[id] = {stream, auto_complete_};
  return id;
}

bool FakeBackend::event_done(EventId event) {
  std::lock_guard lock(mutex_);
  auto it = events_.find(event);
  HODU_CHECK(it != events_.end(), ErrorCode::Internal, "fake backend: unknown event {}", event);
  return it->second.second;
}

void FakeBackend::release_event(EventId event) {
  std::lock_guard lock(mutex_);
  events_.erase(event);
}

void FakeBackend::synchronize() {
  std::lock_guard lock(mutex_);
  for (auto& [id, e] : events_) e.second = true;
}

void FakeBackend::memory_info(size_t& free_bytes, size_t& total_bytes) {
  std::lock_guard lock(mutex_);
  total_bytes = limit_;
  free_bytes = limit_ - used_;
}

void FakeBackend::complete_events(StreamId stream) {
  std::lock_guard lock(mutex_);
  for (auto& [id, e] : events_)
    if (e.first == stream) e.second = true;
}

size_t FakeBackend::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

size_t FakeBackend::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

}  // namespace hodu
