// Packed weights side by side on 2 MiB pages. A transformer at a few tokens streams every
// weight from memory on each run: with each matrix in its own buffer (most under the 4 MiB
// from which buffers ask for huge pages) a BERT-sized model is thousands of 4 KiB pages a run,
// and the TLB misses cost ~8 % of a torch TransformerEncoder's run at 16 tokens
// (docs/performance.md). Buffers from here are carved, 64-byte aligned, out of 2 MiB-aligned
// chunks advised onto huge pages; a chunk is freed with the last buffer in it. Only the bytes
// written become resident (a touched huge page whole), so a chunk's unused tail costs nothing.
#pragma once
#include <cstddef>
#include <memory>

namespace hodu::cpu {

// Buffers smaller than this come from the heap (a bias: the TLB has room for those).
constexpr size_t kWeightArenaMinBytes = size_t{64} << 10;

// `bytes` (64-byte aligned) for a packed weight; thread-safe. Throws std::bad_alloc.
std::shared_ptr<void> weight_buffer(size_t bytes);

}  // namespace hodu::cpu
