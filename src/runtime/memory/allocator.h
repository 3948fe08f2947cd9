// Allocator: the one interface every memory source implements (CPU, pinned
// host, CUDA caching), with statistics in the style of PyTorch's
// torch.cuda.memory_stats: for each of `allocated` (handed to callers),
// `reserved` (obtained from the device) and `active` (allocated, plus freed
// blocks still in use by another stream) the current and peak bytes and the
// number of allocations, overall and per pool (small < 1 MiB, large).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace hodu {

// A stream of work on a device; 0 is the device's default stream.
using StreamId = uint64_t;

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // how many times it grew (allocations)
  int64_t freed = 0;      // how many times it shrank

  void increase(int64_t bytes);
  void decrease(int64_t bytes);
  bool operator==(const Stat&) const = default;
};

enum class Pool { Small = 0, Large = 1 };

struct MemoryStats {
  // [0] small pool, [1] large pool, [2] all
  Stat allocated_bytes[3], reserved_bytes[3], active_bytes[3];
  Stat segments[3];        // backend allocations (current = live segments)
  int64_t num_alloc_retries = 0;  // backend failed, cache freed, retried
  int64_t num_ooms = 0;           // retry failed too: OutOfMemory thrown
  int64_t num_cache_flushes = 0;  // empty_cache() or OOM retry released cached segments

  const Stat& allocated() const { return allocated_bytes[2]; }
  const Stat& reserved() const { return reserved_bytes[2]; }
  const Stat& active() const { return active_bytes[2]; }
  // An uncached allocator's block of `bytes` is its own segment: allocated,
  // reserved, active and segments move together, in its pool and overall.
  void add_uncached_block(int64_t bytes);
  void remove_uncached_block(int64_t bytes);
  void reset_peaks();  // every peak back to its current value
  // One line: "allocated 1.0 MiB (peak 2.0 MiB), reserved 20.0 MiB (peak ...), active ..., segments N".
  std::string summary() const;
};

// "1.5 MiB"
std::string format_bytes(int64_t bytes);

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // At least `bytes` (0 gives a unique non-null pointer), aligned to at least
  // 64 bytes; throws ErrorCode::OutOfMemory with the statistics in the message.
  virtual void* allocate(size_t bytes, StreamId stream = 0) = 0;
  // nullptr is ignored; a pointer this allocator did not return is InvalidArgument.
  virtual void deallocate(void* ptr) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak_stats() = 0;
  // Gives cached, unused memory back to the device (no-op for uncached allocators).
  virtual void empty_cache() {}
};

}  // namespace hodu
