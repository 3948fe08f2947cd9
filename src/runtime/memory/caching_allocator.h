// CachingAllocator: a device allocator in the manner of PyTorch's
// CUDACachingAllocator, written against DeviceBackend so its logic runs (and
// is tested) on the CPU with FakeBackend.
//
//  - Sizes round up to 512 B. Requests <= 1 MiB come from the small pool, cut
//    out of 2 MiB segments; larger ones from the large pool (20 MiB segments
//    for requests under 10 MiB, otherwise the request rounded up to 2 MiB).
//  - Blocks belong to the stream that allocated them and are reused only by
//    that stream. record_stream(ptr, s) marks a block as used by another
//    stream too: when freed, it stays "active" until an event recorded on each
//    such stream has completed, and only then returns to the pool.
//  - Best fit: the smallest free block of the stream that is large enough; the
//    rest is split off when it is at least 512 B (small pool) or more than
//    1 MiB (large pool). A freed block merges with free neighbours of its segment.
//  - When the backend is out of memory, every cached segment with no block in
//    use is released and the allocation is retried once; if it still fails,
//    ErrorCode::OutOfMemory with the size, the device's free/total memory and
//    the allocator's statistics.
//  - empty_cache() releases every fully free segment to the backend.
// Thread-safe (one mutex).
#pragma once
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "runtime/memory/device_backend.h"

namespace hodu {

class CachingAllocator : public Allocator {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = 1 << 20;        // largest "small" request
  static constexpr size_t kSmallBuffer = 2 << 20;      // small-pool segment
  static constexpr size_t kLargeBuffer = 20 << 20;     // segment for requests under kMinLargeAlloc
  static constexpr size_t kMinLargeAlloc = 10 << 20;
  static constexpr size_t kRoundLarge = 2 << 20;

  explicit CachingAllocator(std::shared_ptr<DeviceBackend> backend);
  ~CachingAllocator() override;

  std::string name() const override { return "caching(" + backend_->name() + ")"; }
  Device device() const override { return backend_->device(); }
  void* allocate(size_t bytes, StreamId stream = 0) override;
  void deallocate(void* ptr) override;
  MemoryStats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;

  // `ptr` (allocated here) is also used by `stream`; see above.
  void record_stream(void* ptr, StreamId stream);

  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);
  // Size of the block behind a pointer (the rounded size); InvalidArgument if unknown.
  size_t block_size(void* ptr) const;
  DeviceBackend& backend() { return *backend_; }

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using BlockPool = std::set<Block*, BlockLess>;

  BlockPool& pool_of(Pool p) { return p == Pool::Small ? small_ : large_; }
  Block* find_free_block(Pool pool, StreamId stream, size_t size);
  Block* new_segment(Pool pool, StreamId stream, size_t size);
  void free_block(Block* block);  // back to its pool, merged with free neighbours
  void process_events();          // returns blocks whose cross-stream events have completed
  void synchronize_and_process_events();
  void release_cached_segments();  // every fully free segment, to the backend
  [[noreturn]] void fail_oom(size_t requested, size_t rounded, size_t segment);

  std::shared_ptr<DeviceBackend> backend_;
  mutable std::mutex mutex_;
  BlockPool small_, large_;
  std::unordered_map<void*, Block*> allocated_;
  std::unordered_map<Block*, std::vector<EventId>> pending_;  // freed, waiting for other streams
  MemoryStats stats_;
};

}  // namespace hodu
