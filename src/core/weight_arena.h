// Packed weights side by side on 2 MiB pages. A transformer at a few tokens streams every
// weight from memory on each run: with each matrix in its own buffer (most under the 4 MiB
// from which buffers ask for huge pages: huge_pages.h) a BERT-sized model is thousands of
// 4 KiB pages a run, and the TLB misses cost ~8 % of a torch TransformerEncoder's run at 16
// tokens (docs/performance.md). Buffers from here are carved, 64-byte aligned, out of 2 MiB-
// aligned chunks advised onto huge pages; a chunk is freed with the last buffer in it (the
// arena keeps no hold on it; freed space is not reused before). Only the bytes written become resident (a touched huge page
// whole), so a chunk's unused tail costs nothing. Header-only: the cpu engine (libhodu) and
// libhodu_kernels.so (which does not link libhodu) each keep their own arena.
#pragma once
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>

namespace hodu {

// Buffers smaller than this come from the heap (a bias: the TLB has room for those).
constexpr size_t kWeightArenaMinBytes = size_t{64} << 10;

namespace weight_arena_detail {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunkBytes = size_t{32} << 20;
struct Arena {
  std::mutex mu;
  std::weak_ptr<char> chunk;  // the chunk being filled: freed with its last buffer, not held here
  size_t used = 0, size = 0;
};
inline Arena& arena() {
  static Arena a;  // buffers never point back to it: they may outlive it
  return a;
}
}  // namespace weight_arena_detail

// `bytes` (64-byte aligned) for a packed weight; thread-safe. Throws std::bad_alloc.
inline std::shared_ptr<void> weight_buffer(size_t bytes) {
  using namespace weight_arena_detail;
  bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  if (bytes < kWeightArenaMinBytes) {
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  std::shared_ptr<char> chunk = a.chunk.lock();
  if (!chunk || a.size - a.used < bytes) {
    const size_t size = std::max(kChunkBytes, (bytes + kHugePage - 1) / kHugePage * kHugePage);
    char* p = static_cast<char*>(std::aligned_alloc(kHugePage, size));
    if (!p) throw std::bad_alloc();
    ::madvise(p, size, MADV_HUGEPAGE);  // a hint: ignored where THP is off
    chunk = std::shared_ptr<char>(p, [](char* q) { std::free(q); });
    a.chunk = chunk;
    a.used = 0;
    a.size = size;
  }
  std::shared_ptr<void> buffer(chunk, chunk.get() + a.used);  // shares the chunk's ownership
  a.used += bytes;
  return buffer;
}

}  // namespace hodu
