#include "core/weight_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace hodu {
namespace {

bool overlap(const void* a, size_t na, const void* b, size_t nb) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + nb && y < x + na;
}

TEST(WeightArena, BuffersAreAlignedDisjointAndWritable) {
  const std::vector<size_t> sizes = {100, kWeightArenaMinBytes, 3 << 20, 1, 5 << 20, 40 << 20, 700 << 10};
  std::vector<std::shared_ptr<void>> bufs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bufs.push_back(weight_buffer(sizes[i]));
    ASSERT_NE(bufs.back(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bufs.back().get()) % 64, 0u) << "buffer " << i;
    std::memset(bufs.back().get(), static_cast<int>(i + 1), sizes[i]);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(bufs[i].get());
    EXPECT_EQ(p[0], i + 1);
    EXPECT_EQ(p[sizes[i] - 1], i + 1) << "buffer " << i << " was overwritten by a later one";
    for (size_t j = i + 1; j < sizes.size(); ++j)
      EXPECT_FALSE(overlap(bufs[i].get(), sizes[i], bufs[j].get(), sizes[j])) << i << " and " << j;
  }
}

TEST(WeightArena, LargeBuffersShareAChunkFreedWithTheLast) {
  auto a = weight_buffer(1 << 20);
  auto b = weight_buffer(1 << 20);
  // Side by side in one chunk (the TLB sees one run of huge pages), which both own.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()), reinterpret_cast<uintptr_t>(a.get()) + (1 << 20));
  EXPECT_EQ(a.use_count(), 2);
  std::weak_ptr<void> chunk = a;
  a.reset();
  EXPECT_FALSE(chunk.expired()) << "the chunk lives while b does";
  std::memset(b.get(), 7, 1 << 20);  // still writable after a's release
  b.reset();
  EXPECT_TRUE(chunk.expired()) << "the arena holds no chunk once its buffers are gone (no leak at exit)";
  // Small buffers come from the heap: their own owner.
  auto s = weight_buffer(128);
  EXPECT_EQ(s.use_count(), 1);
}

}  // namespace
}  // namespace hodu
