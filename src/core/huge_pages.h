// Large host buffers on 2 MiB pages. The kernel here gives transparent huge pages only where
// asked (THP "madvise"), so a 100 MB set of packed weights took ~25,000 page faults of 4 KiB
// when first written: ResNet-50's first run spent a third of its time in the kernel. Header-only:
// libhodu and libhodu_kernels.so (which does not link libhodu) both use it.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace hodu {

// Below this a buffer keeps the default pages (huge ones would round small buffers up).
constexpr size_t kHugePageMinBytes = size_t{4} << 20;

// Asks for huge pages over [p, p + bytes) before it is first touched (a hint: ignored where
// THP is off; only the 2 MiB-aligned middle of the range can use them).
inline void advise_huge_pages(void* p, size_t bytes) {
  if (!p || bytes < kHugePageMinBytes) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  ::madvise(reinterpret_cast<void*>(begin), bytes + (reinterpret_cast<uintptr_t>(p) - begin), MADV_HUGEPAGE);
}

// std::aligned_alloc (free with std::free), on huge pages when large.
inline void* aligned_alloc_large(size_t alignment, size_t bytes) {
  void* p = std::aligned_alloc(alignment, bytes);
  advise_huge_pages(p, bytes);
  return p;
}

}  // namespace hodu
