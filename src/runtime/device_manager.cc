#include "runtime/device_manager.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "runtime/cuda_runtime.h"
#include "runtime/session.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HODU_X86 1
#endif

namespace hodu {
namespace {

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return trim(s);
}

// "48K", "1024K", "32M" → bytes.
int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  int64_t n = std::atoll(s.c_str());
  switch (s.back()) {
    case 'K': return n << 10;
    case 'M': return n << 20;
    case 'G': return n << 30;
    default: return n;
  }
}

#ifdef HODU_X86
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

void probe_isa(CpuInfo& c) {
#ifdef HODU_X86
  unsigned a, b, cx, d;
  if (!__get_cpuid(0, &a, &b, &cx, &d)) return;
  unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &cx, 4);
  c.vendor = vendor;
  __get_cpuid(1, &a, &b, &cx, &d);
  bool osxsave = cx & (1u << 27);
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  bool os_avx = (xcr0 & 0x6) == 0x6;
  bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
  bool os_amx = (xcr0 & 0x60000) == 0x60000;
  c.sse4_2 = cx & (1u << 20);
  c.avx = os_avx && (cx & (1u << 28));
  c.fma = os_avx && (cx & (1u << 12));
  c.f16c = os_avx && (cx & (1u << 29));
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &cx, &d);
    unsigned subleaves = a;
    c.avx2 = os_avx && (b & (1u << 5));
    c.avx512f = os_avx512 && (b & (1u << 16));
    c.avx512bw = os_avx512 && (b & (1u << 30));
    c.avx512vl = os_avx512 && (b & (1u << 31));
    c.avx512_vnni = os_avx512 && (cx & (1u << 11));
    c.avx512_fp16 = os_avx512 && (d & (1u << 23));
    c.amx_bf16 = os_amx && (d & (1u << 22));
    c.amx_tile = os_amx && (d & (1u << 24));
    c.amx_int8 = os_amx && (d & (1u << 25));
    if (subleaves >= 1) {
      __get_cpuid_count(7, 1, &a, &b, &cx, &d);
      c.avx512_bf16 = os_avx512 && (a & (1u << 5));
    }
  }
  if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &cx, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &cx, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
    c.model = trim(brand);
  }
#else
  (void)c;
#endif
}

void probe_cuda(DeviceReport& r) {
  const CudaRuntime* rt = CudaRuntime::get();
  if (!rt) {
    r.cuda_status = CudaRuntime::unavailable_reason();
    return;
  }
  r.cuda_runtime_loaded = true;
  r.cuda_runtime_path = rt->path;
  r.cuda_runtime_version = rt->runtime_version;
  r.cuda_driver_version = rt->driver_version;
  int n = 0;
  int rc = rt->GetDeviceCount(&n);
  if (rc != 0) {
    r.cuda_status = fmt::format("no CUDA device: {} (error {})", rt->GetErrorString(rc), rc);
    rt->GetLastError();
    return;
  }
  if (n == 0) r.cuda_status = "no CUDA device";
  int current = 0;
  rt->GetDevice(&current);
  for (int i = 0; i < n; ++i) {
    CudaDeviceInfo d;
    d.index = i;
    // cudaDeviceProp is large and version-dependent; only `name` (offset 0) is read.
    std::vector<char> prop(16384, 0);
    if (rt->GetDeviceProperties(prop.data(), i) == 0) d.name = std::string(prop.data(), strnlen(prop.data(), 256));
    rt->DeviceGetAttribute(&d.cc_major, CudaRuntime::kAttrComputeCapabilityMajor, i);
    rt->DeviceGetAttribute(&d.cc_minor, CudaRuntime::kAttrComputeCapabilityMinor, i);
    rt->DeviceGetAttribute(&d.sm_count, CudaRuntime::kAttrMultiProcessorCount, i);
    size_t free_b = 0, total_b = 0;
    if (rt->SetDevice(i) == 0 && rt->MemGetInfo(&free_b, &total_b) == 0) {
      d.free_memory = static_cast<int64_t>(free_b);
      d.total_memory = static_cast<int64_t>(total_b);
    }
    rt->GetLastError();
    d.derive_features();
    r.cuda.push_back(d);
  }
  if (n > 0) rt->SetDevice(current);
}

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

std::string cuda_version_string(int v) { return v <= 0 ? "none" : fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

std::vector<std::string> CpuInfo::isa_flags() const {
  std::vector<std::string> f;
  auto add = [&](bool on, const char* name) {
    if (on) f.push_back(name);
  };
  add(sse4_2, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_fp16, "avx512_fp16");
  add(amx_tile, "amx_tile");
  add(amx_bf16, "amx_bf16");
  add(amx_int8, "amx_int8");
  return f;
}

void CudaDeviceInfo::derive_features() {
  int cc = cc_major * 10 + cc_minor;
  fp16 = cc >= 53;
  bf16 = cc >= 80;
  tf32 = cc >= 80;
  fp8 = cc >= 89;
  int4 = cc >= 75 && cc < 90;
}

CpuInfo DeviceManager::probe_cpu() {
  CpuInfo c;
  probe_isa(c);
  if (c.model.empty()) {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) {
        c.model = trim(line.substr(line.find(':') + 1));
        break;
      }
  }
  c.logical_cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (c.logical_cores <= 0) c.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  c.physical_cores = physical_core_count();
  for (int i = 0;; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level = read_line(dir + "level");
    if (level.empty()) break;
    c.caches.push_back({std::atoi(level.c_str()), read_line(dir + "type"), parse_size(read_line(dir + "size"))});
  }
  if (c.caches.empty()) {
    // No sysfs cache folder (some VMs and containers): glibc reads the sizes from cpuid.
    struct Q {
      int name, level;
      const char* type;
    };
    for (Q q : {Q{_SC_LEVEL1_DCACHE_SIZE, 1, "Data"}, Q{_SC_LEVEL1_ICACHE_SIZE, 1, "Instruction"},
                Q{_SC_LEVEL2_CACHE_SIZE, 2, "Unified"}, Q{_SC_LEVEL3_CACHE_SIZE, 3, "Unified"},
                Q{_SC_LEVEL4_CACHE_SIZE, 4, "Unified"}}) {
      long size = ::sysconf(q.name);
      if (size > 0) c.caches.push_back({q.level, q.type, size});
    }
  }
  return c;
}

DeviceReport DeviceManager::probe() {
  DeviceReport r;
  r.cpu = probe_cpu();
  probe_cuda(r);
  return r;
}

DeviceManager::DeviceManager() : report_(probe()) {}

DeviceManager& DeviceManager::instance() {
  static DeviceManager m;
  return m;
}

bool DeviceManager::has(const Device& d) const {
  if (d.kind == Device::Kind::CPU) return d.index == 0;
  return d.index >= 0 && d.index < static_cast<int>(report_.cuda.size());
}

void DeviceManager::require(const Device& d) const {
  if (has(d)) return;
  if (d.kind == Device::Kind::CPU) fail(ErrorCode::InvalidArgument, "device {}: only cpu (index 0) exists", d.to_string());
  if (report_.cuda.empty()) fail(ErrorCode::Device, "device {}: {}", d.to_string(), report_.cuda_status);
  fail(ErrorCode::InvalidArgument, "device {}: this machine has {} CUDA device(s) (cuda:0..cuda:{})", d.to_string(),
       report_.cuda.size(), report_.cuda.size() - 1);
}

nlohmann::json DeviceReport::to_json() const {
  nlohmann::json caches = nlohmann::json::array();
  for (const auto& c : cpu.caches) caches.push_back({{"level", c.level}, {"type", c.type}, {"size_bytes", c.size_bytes}});
  nlohmann::json cpu_j = {{"device", "cpu"},
                          {"vendor", cpu.vendor},
                          {"model", cpu.model},
                          {"physical_cores", cpu.physical_cores},
                          {"logical_cores", cpu.logical_cores},
                          {"isa", cpu.isa_flags()},
                          {"avx2", cpu.avx2},
                          {"avx512f", cpu.avx512f},
                          {"avx512_bf16", cpu.avx512_bf16},
                          {"amx", cpu.amx_tile},
                          {"caches", caches}};
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& d : cuda)
    gpus.push_back({{"device", "cuda:" + std::to_string(d.index)},
                    {"name", d.name},
                    {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                    {"total_memory_bytes", d.total_memory},
                    {"free_memory_bytes", d.free_memory},
                    {"sm_count", d.sm_count},
                    {"fp16", d.fp16},
                    {"bf16", d.bf16},
                    {"tf32", d.tf32},
                    {"fp8", d.fp8},
                    {"int4", d.int4}});
  return {{"cpu", cpu_j},
          {"cuda",
           {{"runtime_loaded", cuda_runtime_loaded},
            {"runtime_path", cuda_runtime_path},
            {"runtime_version", cuda_version_string(cuda_runtime_version)},
            {"driver_version", cuda_version_string(cuda_driver_version)},
            {"status", cuda_status},
            {"devices", gpus}}}};
}

std::string DeviceReport::to_text() const {
  std::string s = fmt::format("cpu: {}{}\n", cpu.model.empty() ? "unknown" : cpu.model,
                              cpu.vendor.empty() ? "" : " (" + cpu.vendor + ")");
  s += fmt::format("  cores: {} physical, {} logical\n", cpu.physical_cores, cpu.logical_cores);
  std::string isa;
  for (const auto& f : cpu.isa_flags()) isa += (isa.empty() ? "" : " ") + f;
  s += fmt::format("  isa: {}\n", isa.empty() ? "baseline" : isa);
  for (const auto& c : cpu.caches)
    s += fmt::format("  cache: L{} {} {} KiB\n", c.level, c.type, c.size_bytes >> 10);
  if (cuda.empty()) {
    s += fmt::format("cuda: none ({})\n", cuda_status);
  } else {
    s += fmt::format("cuda: runtime {}, driver {} ({})\n", cuda_version_string(cuda_runtime_version),
                     cuda_version_string(cuda_driver_version), cuda_runtime_path);
    for (const auto& d : cuda) {
      std::string types = "fp32";
      if (d.tf32) types += " tf32";
      if (d.fp16) types += " fp16";
      if (d.bf16) types += " bf16";
      if (d.fp8) types += " fp8";
      if (d.int4) types += " int4";
      s += fmt::format("cuda:{}: {}, compute capability {}.{}, {} SMs, {} ({} free), {}\n", d.index, d.name,
                       d.cc_major, d.cc_minor, d.sm_count, mib(d.total_memory), mib(d.free_memory), types);
    }
  }
  return s;
}

}  // namespace hodu
