#include "runtime/memory/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "runtime/memory/fake_backend.h"

namespace hodu {
namespace {

constexpr size_t MiB = 1 << 20;

struct Fixture {
  explicit Fixture(size_t limit = 1024 * MiB) : backend(std::make_shared<FakeBackend>(limit)), alloc(backend) {}
  std::shared_ptr<FakeBackend> backend;
  CachingAllocator alloc;
};

char* at(void* p, size_t offset) { return static_cast<char*>(p) + offset; }

TEST(CachingAllocator, RoundingAndSegmentSizes) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(1000), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB), 12 * MiB);  // rounded to 2 MiB
}

TEST(CachingAllocator, SmallBlocksSplitOneSegment) {
  Fixture f;
  void* a = f.alloc.allocate(1000);
  void* b = f.alloc.allocate(100);
  EXPECT_EQ(f.backend->raw_allocs(), 1);
  EXPECT_EQ(b, at(a, 1024));  // carved out right after a
  EXPECT_EQ(f.alloc.block_size(a), 1024u);
  EXPECT_EQ(f.alloc.block_size(b), 512u);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.allocated().current, 1536);
  EXPECT_EQ(s.reserved().current, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(2 * MiB));  // small pool
  EXPECT_EQ(s.reserved_bytes[1].current, 0);
  EXPECT_EQ(s.segments[2].current, 1);
  EXPECT_EQ(s.allocated().allocated, 2);
  // Freed blocks are cached and reused (best fit).
  f.alloc.deallocate(a);
  EXPECT_EQ(f.alloc.stats().allocated().current, 512);
  EXPECT_EQ(f.alloc.stats().reserved().current, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(f.alloc.allocate(900), a);
  EXPECT_EQ(f.backend->raw_allocs(), 1);
  EXPECT_EQ(f.alloc.stats().allocated().peak, 1536);
}

TEST(CachingAllocator, FreedNeighboursMerge) {
  Fixture f;
  void* a = f.alloc.allocate(3 * MiB);  // 20 MiB segment, split
  void* b = f.alloc.allocate(4 * MiB);
  void* c = f.alloc.allocate(5 * MiB);
  EXPECT_EQ(f.backend->raw_allocs(), 1);
  EXPECT_EQ(b, at(a, 3 * MiB));
  EXPECT_EQ(c, at(a, 7 * MiB));
  f.alloc.deallocate(a);
  f.alloc.deallocate(c);  // merges with the free tail
  f.alloc.deallocate(b);  // merges with both sides: one 20 MiB block again
  // A 19 MiB request fits only if the whole segment is one block again.
  void* big = f.alloc.allocate(19 * MiB);
  EXPECT_EQ(big, a);
  EXPECT_EQ(f.backend->raw_allocs(), 1);
  f.alloc.deallocate(big);
  f.alloc.empty_cache();
  EXPECT_EQ(f.backend->raw_frees(), 1);
  EXPECT_EQ(f.alloc.stats().reserved().current, 0);
  EXPECT_EQ(f.backend->used(), 0u);
}

TEST(CachingAllocator, FragmentationNeedsANewSegment) {
  Fixture f;
  std::vector<void*> p;
  for (int i = 0; i < 4; ++i) p.push_back(f.alloc.allocate(5 * MiB));
  EXPECT_EQ(f.backend->raw_allocs(), 1);  // 4 x 5 MiB fill one 20 MiB segment
  f.alloc.deallocate(p[0]);
  f.alloc.deallocate(p[2]);
  // 10 MiB are free, but in two 5 MiB holes: 8 MiB needs a new segment.
  void* q = f.alloc.allocate(8 * MiB);
  EXPECT_EQ(f.backend->raw_allocs(), 2);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.reserved().current, static_cast<int64_t>(40 * MiB));
  EXPECT_EQ(s.allocated().current, static_cast<int64_t>(18 * MiB));
  EXPECT_EQ(s.segments[1].current, 2);
  // A hole is reused exactly.
  EXPECT_EQ(f.alloc.allocate(5 * MiB), p[0]);
  // empty_cache keeps segments with blocks in use.
  f.alloc.empty_cache();
  EXPECT_EQ(f.backend->raw_frees(), 0);
  (void)q;
}

TEST(CachingAllocator, LargeRemainderUnder1MiBIsNotSplit) {
  Fixture f;
  void* a = f.alloc.allocate(11 * MiB - 4096);  // 12 MiB segment; the 1 MiB + 4 KiB rest is split off
  EXPECT_EQ(f.alloc.block_size(a), 11 * MiB - 4096);
  void* b = f.alloc.allocate(15 * MiB + 1);  // 16 MiB segment; rest < 1 MiB stays with the block
  EXPECT_EQ(f.alloc.block_size(b), 16 * MiB);
}

TEST(CachingAllocator, StreamsDoNotShareBlocks) {
  Fixture f;
  void* a = f.alloc.allocate(1000, /*stream=*/1);
  f.alloc.deallocate(a);
  void* b = f.alloc.allocate(1000, 2);
  EXPECT_NE(b, a);
  EXPECT_EQ(f.backend->raw_allocs(), 2);  // stream 2 gets its own segment
  EXPECT_EQ(f.alloc.allocate(1000, 1), a);
}

TEST(CachingAllocator, RecordStreamDelaysReuse) {
  Fixture f;
  void* p = f.alloc.allocate(1000, 1);
  f.alloc.record_stream(p, 2);
  f.alloc.deallocate(p);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.allocated().current, 0);
  EXPECT_EQ(s.active().current, 1024);  // stream 2 may still read it
  EXPECT_EQ(f.backend->live_events(), 1u);
  void* q = f.alloc.allocate(1000, 1);
  EXPECT_NE(q, p);
  f.backend->complete_events(2);
  void* r = f.alloc.allocate(1000, 1);
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.backend->live_events(), 0u);
  EXPECT_EQ(f.alloc.stats().active().current, 2048);
  EXPECT_THROW(f.alloc.record_stream(at(p, 8), 2), Error);
}

TEST(CachingAllocator, OutOfMemoryFreesCacheAndRetries) {
  Fixture f(24 * MiB);
  void* a = f.alloc.allocate(3 * MiB, 1);
  f.alloc.deallocate(a);  // 20 MiB cached for stream 1
  void* b = f.alloc.allocate(3 * MiB, 2);  // needs 20 more: only after the cache is released
  EXPECT_NE(b, nullptr);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_cache_flushes, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(f.backend->raw_frees(), 1);
  EXPECT_EQ(f.backend->failed_allocs(), 1);
  EXPECT_EQ(s.reserved().current, static_cast<int64_t>(20 * MiB));
}

TEST(CachingAllocator, OutOfMemoryReportsStatistics) {
  Fixture f(24 * MiB);
  void* a = f.alloc.allocate(15 * MiB);
  try {
    f.alloc.allocate(15 * MiB);
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate 15.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("total capacity of 24.0 MiB of which 8.0 MiB is free"), std::string::npos) << m;
    EXPECT_NE(m.find("allocated 16.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved 16.0 MiB"), std::string::npos) << m;
  }
  EXPECT_EQ(f.alloc.stats().num_ooms, 1);
  // The allocator still works after an OOM.
  f.alloc.deallocate(a);
  EXPECT_NE(f.alloc.allocate(15 * MiB), nullptr);
}

TEST(CachingAllocator, BadPointers) {
  Fixture f;
  void* a = f.alloc.allocate(100);
  f.alloc.deallocate(a);
  EXPECT_THROW(f.alloc.deallocate(a), Error);  // double free
  int x = 0;
  EXPECT_THROW(f.alloc.deallocate(&x), Error);
  f.alloc.deallocate(nullptr);  // ignored
}

// Random allocations and frees: blocks never overlap, and the statistics
// always equal what is live.
TEST(CachingAllocator, RandomWorkloadKeepsAccountsAndBlocksDisjoint) {
  Fixture f(512 * MiB);
  std::mt19937 rng(7);
  struct Live {
    void* p;
    size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  for (int step = 0; step < 3000; ++step) {
    bool do_alloc = live.empty() || (live.size() < 48 && rng() % 3 != 0);  // bounded working set
    if (do_alloc) {
      size_t n = rng() % 4 == 0 ? 1 + rng() % (12 * MiB) : 1 + rng() % 8192;
      StreamId s = rng() % 2;
      void* p = f.alloc.allocate(n, s);
      unsigned char tag = static_cast<unsigned char>(step);
      std::memset(p, tag, n);
      live.push_back({p, n, tag});
    } else {
      size_t i = rng() % live.size();
      const Live& l = live[i];
      // Nobody wrote into this block while it was live.
      const auto* bytes = static_cast<const unsigned char*>(l.p);
      ASSERT_EQ(bytes[0], l.tag);
      ASSERT_EQ(bytes[l.n - 1], l.tag);
      ASSERT_EQ(bytes[l.n / 2], l.tag);
      f.alloc.deallocate(l.p);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 100 == 0) {
      int64_t sum = 0;
      for (const auto& l : live) sum += static_cast<int64_t>(f.alloc.block_size(l.p));
      auto s = f.alloc.stats();
      ASSERT_EQ(s.allocated().current, sum);
      ASSERT_EQ(s.active().current, sum);
      ASSERT_EQ(s.reserved().current, static_cast<int64_t>(f.backend->used()));
      ASSERT_EQ(s.allocated().current, s.allocated_bytes[0].current + s.allocated_bytes[1].current);
    }
  }
  for (const auto& l : live) f.alloc.deallocate(l.p);
  f.alloc.empty_cache();
  EXPECT_EQ(f.backend->used(), 0u);
  auto s = f.alloc.stats();
  EXPECT_EQ(s.allocated().current, 0);
  EXPECT_EQ(s.reserved().current, 0);
  EXPECT_EQ(s.segments[2].current, 0);
  EXPECT_GT(s.allocated().peak, 0);
  f.alloc.reset_peak_stats();
  EXPECT_EQ(f.alloc.stats().allocated().peak, 0);
}

TEST(CachingAllocator, ConcurrentUse) {
  Fixture f;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 500; ++i) {
        mine.push_back(f.alloc.allocate(256 + 64 * (i % 50), static_cast<StreamId>(t)));
        if (i % 3 == 0) {
          f.alloc.deallocate(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) f.alloc.deallocate(p);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(f.alloc.stats().allocated().current, 0);
  f.alloc.empty_cache();
  EXPECT_EQ(f.backend->used(), 0u);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  auto backend = std::make_shared<FakeBackend>(256 * MiB);
  {
    CachingAllocator a(backend);
    a.allocate(100);
    void* p = a.allocate(3 * MiB, 1);
    a.record_stream(p, 3);
    a.deallocate(p);
    a.allocate(12 * MiB);
  }
  EXPECT_EQ(backend->used(), 0u);
  EXPECT_EQ(backend->live_events(), 0u);
}

}  // namespace
}  // namespace hodu
