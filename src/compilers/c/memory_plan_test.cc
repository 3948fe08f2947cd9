#include "compilers/c/memory_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hodu::compilers::c {
namespace {

bool overlap(int64_t a, int64_t asz, int64_t b, int64_t bsz) { return a < b + bsz && b < a + asz; }

TEST(MemoryPlan, DisjointLifetimesShareMemory) {
  // a: steps 0-1, b: 1-2, c: 2-3. a and c never live together.
  auto p = plan_memory({{1000, 0, 1, -1}, {1000, 1, 2, -1}, {1000, 2, 3, -1}});
  EXPECT_EQ(p.offsets[0], p.offsets[2]);
  EXPECT_FALSE(overlap(p.offsets[0], 1000, p.offsets[1], 1000));
  EXPECT_FALSE(overlap(p.offsets[1], 1000, p.offsets[2], 1000));
  EXPECT_LT(p.arena_bytes, p.naive_bytes);
  EXPECT_EQ(p.naive_bytes, 3 * 1024);
}

TEST(MemoryPlan, LiveTogetherNeverOverlap) {
  std::vector<PlanBuffer> bufs;
  for (int i = 0; i < 20; ++i) bufs.push_back({100 + 37 * i, i % 5, i % 5 + 3, -1});
  auto p = plan_memory(bufs);
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % 64, 0);
    EXPECT_LE(p.offsets[i] + bufs[i].bytes.value(), p.arena_bytes);
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      bool live_together = bufs[i].first_step <= bufs[j].last_step && bufs[j].first_step <= bufs[i].last_step;
      if (live_together) {
        EXPECT_FALSE(overlap(p.offsets[i], bufs[i].bytes.value(), p.offsets[j], bufs[j].bytes.value())) << i << " " << j;
      }
    }
  }
}

TEST(MemoryPlan, InPlaceReuseSharesTheOffset) {
  // b is written over a at step 1 (a's last read), c is live with b.
  auto p = plan_memory({{4096, 0, 1, -1}, {4096, 1, 3, 0}, {4096, 2, 3, -1}});
  EXPECT_EQ(p.offsets[0], p.offsets[1]);
  EXPECT_NE(p.offsets[1], p.offsets[2]);
  EXPECT_EQ(p.arena_bytes, 2 * 4096);
}

TEST(MemoryPlan, IllegalInPlaceIsABug) {
  // a is still read at step 2, so b cannot overwrite it at step 1.
  EXPECT_THROW(plan_memory({{64, 0, 2, -1}, {64, 1, 3, 0}}), Error);
}

TEST(MemoryPlan, InPlaceReuseByALargerBufferGrowsTheSlot) {
  // b (a conv's blocked output, channels rounded up to 16) is written over a (its
  // residual, plain layout) at step 1; c is live with both and must not overlap b's bytes.
  auto p = plan_memory({{448, 0, 1, -1}, {512, 1, 3, 0}, {256, 0, 3, -1}});
  EXPECT_EQ(p.offsets[0], p.offsets[1]);
  const int64_t b0 = p.offsets[1], b1 = b0 + 512, c0 = p.offsets[2], c1 = c0 + 256;
  EXPECT_TRUE(b1 <= c0 || c1 <= b0) << "b at [" << b0 << ", " << b1 << "), c at [" << c0 << ", " << c1 << ")";
  EXPECT_EQ(p.arena_bytes, 512 + 256);
}

}  // namespace
}  // namespace hodu::compilers::c
