#include "engines/cpu/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>

namespace hodu::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunkBytes = size_t{32} << 20;

struct Arena {
  std::mutex mu;
  std::shared_ptr<char> chunk;  // the chunk being filled
  size_t used = 0, size = 0;
};

Arena& arena() {
  static Arena* a = new Arena();  // never destroyed: buffers may outlive static destructors
  return *a;
}

}  // namespace

std::shared_ptr<void> weight_buffer(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  if (bytes < kWeightArenaMinBytes) {
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (!a.chunk || a.size - a.used < bytes) {
    const size_t size = std::max(kChunkBytes, (bytes + kHugePage - 1) / kHugePage * kHugePage);
    char* p = static_cast<char*>(std::aligned_alloc(kHugePage, size));
    if (!p) throw std::bad_alloc();
    ::madvise(p, size, MADV_HUGEPAGE);  // a hint: ignored where THP is off
    a.chunk = std::shared_ptr<char>(p, [](char* q) { std::free(q); });
    a.used = 0;
    a.size = size;
  }
  std::shared_ptr<void> buffer(a.chunk, a.chunk.get() + a.used);  // shares the chunk's ownership
  a.used += bytes;
  return buffer;
}

}  // namespace hodu::cpu
