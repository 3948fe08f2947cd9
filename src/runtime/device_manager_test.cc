#include "runtime/device_manager.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hodu {
namespace {

TEST(DeviceManager, CpuIsDescribed) {
  const auto& r = DeviceManager::instance().report();
  EXPECT_GT(r.cpu.logical_cores, 0);
  EXPECT_GT(r.cpu.physical_cores, 0);
  EXPECT_LE(r.cpu.physical_cores, r.cpu.logical_cores);
  EXPECT_FALSE(r.cpu.model.empty());
  ASSERT_FALSE(r.cpu.caches.empty());
  EXPECT_EQ(r.cpu.caches[0].level, 1);
  EXPECT_GT(r.cpu.caches[0].size_bytes, 1024);
#if defined(__x86_64__)
  EXPECT_TRUE(r.cpu.sse4_2);  // x86-64-v2 baseline of every machine this builds on
  if (r.cpu.avx512f) {
    EXPECT_TRUE(r.cpu.avx2);
  }
#endif
  auto j = r.to_json();
  EXPECT_EQ(j["cpu"]["logical_cores"], r.cpu.logical_cores);
  EXPECT_TRUE(j["cuda"]["devices"].is_array());
  if (r.cuda.empty()) {
    EXPECT_FALSE(r.cuda_status.empty());
  }
  EXPECT_NE(r.to_text().find("cpu:"), std::string::npos);
  EXPECT_TRUE(DeviceManager::instance().has(Device::cpu()));
  EXPECT_THROW(DeviceManager::instance().require(Device::cuda(r.cuda.size())), Error);
}

TEST(DeviceManager, FeaturesFromComputeCapability) {
  CudaDeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.derive_features();
  EXPECT_TRUE(d.fp16 && d.bf16 && d.tf32 && d.fp8);
  EXPECT_FALSE(d.int4);
  d.cc_major = 7;
  d.cc_minor = 5;
  d.derive_features();
  EXPECT_TRUE(d.fp16 && d.int4);
  EXPECT_FALSE(d.bf16 || d.fp8);
  d.cc_major = 8;
  d.cc_minor = 9;
  d.derive_features();
  EXPECT_TRUE(d.fp8 && d.bf16 && d.int4);
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(cuda_version_string(0), "none");
}

}  // namespace
}  // namespace hodu
