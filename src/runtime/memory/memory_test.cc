#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"
#include "runtime/device_manager.h"
#include "runtime/memory/cpu_allocator.h"
#include "runtime/memory/cuda_backend.h"
#include "runtime/memory/memory_manager.h"

namespace hodu {
namespace {

TEST(CpuAllocator, AlignedWithStats) {
  CpuAllocator a;
  void* p = a.allocate(100);
  void* q = a.allocate(3 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  auto s = a.stats();
  EXPECT_EQ(s.allocated().current, 128 + (3 << 20));
  EXPECT_EQ(s.allocated_bytes[0].current, 128);
  EXPECT_EQ(s.allocated_bytes[1].current, 3 << 20);
  a.deallocate(q);
  s = a.stats();
  EXPECT_EQ(s.allocated().current, 128);
  EXPECT_EQ(s.allocated().peak, 128 + (3 << 20));
  EXPECT_EQ(s.allocated().allocated, 2);
  EXPECT_EQ(s.allocated().freed, 1);
  EXPECT_NE(a.allocate(0), nullptr);
  EXPECT_THROW(a.deallocate(q), Error);
  a.deallocate(p);
}

TEST(CpuAllocator, LimitGivesOutOfMemoryWithStats) {
  CpuAllocator a(1 << 20);
  void* p = a.allocate(600 << 10);
  try {
    a.allocate(600 << 10);
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("allocated 600.0 KiB"), std::string::npos) << e.what();
  }
  a.deallocate(p);
}

TEST(PinnedHostAllocator, AllocatesPinnedOrSaysItFellBack) {
  PinnedHostAllocator a;
  void* p = a.allocate(4096);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[4095] = 1;
  if (DeviceManager::instance().cuda_devices().empty()) {
    EXPECT_FALSE(a.is_pinned());
    EXPECT_NE(a.name().find("fallback"), std::string::npos) << a.name();
  } else {
    EXPECT_TRUE(a.is_pinned());
  }
  EXPECT_GE(a.stats().allocated().current, 4096);
  a.deallocate(p);
  EXPECT_EQ(a.stats().allocated().current, 0);
}

TEST(MemoryManager, CpuAllocatorAndMissingCuda) {
  auto& m = MemoryManager::instance();
  Allocator& cpu = m.allocator(Device::cpu());
  EXPECT_EQ(&cpu, &m.allocator(Device::cpu()));
  void* p = cpu.allocate(10);
  EXPECT_GE(m.memory_stats(Device::cpu()).allocated().current, 64);
  cpu.deallocate(p);
  if (DeviceManager::instance().cuda_devices().empty()) {
    try {
      m.allocator(Device::cuda(0));
      ADD_FAILURE() << "expected a Device error without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Device);
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(m.allocator(Device::cuda(4096)), Error);
}

}  // namespace
}  // namespace hodu
