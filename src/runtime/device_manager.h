// DeviceManager: what this machine has to compute on. The CPU (model, cores,
// ISA features from cpuid, caches from sysfs) and the CUDA devices, found at
// run time through the dlopen'd CUDA runtime (none, with a reason, when it or
// the driver is absent). `hodu devices [--json]` prints this.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace hodu {

struct CacheInfo {
  int level = 0;
  std::string type;  // "Data", "Instruction", "Unified"
  int64_t size_bytes = 0;
};

struct CpuInfo {
  std::string vendor;
  std::string model;
  int physical_cores = 0;
  int logical_cores = 0;
  // ISA features (cpuid; AVX-512/AMX also need the OS to enable their state, checked through xgetbv).
  bool sse4_2 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false, avx512_bf16 = false,
       avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  std::vector<CacheInfo> caches;

  std::vector<std::string> isa_flags() const;  // names of the features present
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int64_t total_memory = 0, free_memory = 0;
  int sm_count = 0;
  // Derived from the compute capability.
  bool fp16 = false;  // 5.3+
  bool bf16 = false;  // 8.0+
  bool tf32 = false;  // 8.0+
  bool fp8 = false;   // 8.9+ (Ada, Hopper)
  bool int4 = false;  // 7.5+ tensor-core int4 (Turing, Ampere; gone from Hopper's MMA)

  // Fills the derived flags from cc_major/cc_minor.
  void derive_features();
};

struct DeviceReport {
  CpuInfo cpu;
  std::vector<CudaDeviceInfo> cuda;
  bool cuda_runtime_loaded = false;
  std::string cuda_runtime_path;
  std::string cuda_status;  // why there are no CUDA devices, "" when there are
  int cuda_runtime_version = 0, cuda_driver_version = 0;  // 12040 = 12.4

  nlohmann::json to_json() const;
  std::string to_text() const;
};

class DeviceManager {
 public:
  // The process-wide manager; devices are probed once, on first use.
  static DeviceManager& instance();

  const DeviceReport& report() const { return report_; }
  const CpuInfo& cpu() const { return report_.cpu; }
  const std::vector<CudaDeviceInfo>& cuda_devices() const { return report_.cuda; }
  bool has(const Device& d) const;
  // InvalidArgument/Device error naming the device and what is available, if absent.
  void require(const Device& d) const;

  static CpuInfo probe_cpu();
  static DeviceReport probe();

 private:
  DeviceManager();
  DeviceReport report_;
};

// "12.4" from 12040.
std::string cuda_version_string(int version);

}  // namespace hodu
