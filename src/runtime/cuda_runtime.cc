#include "runtime/cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace hodu {
namespace {

struct Loaded {
  CudaRuntime rt;
  bool ok = false;
  std::string reason;
};

template <typename Fn>
bool resolve(void* lib, Fn& fn, std::initializer_list<const char*> names, std::string& missing) {
  for (const char* n : names)
    if (void* p = ::dlsym(lib, n)) {
      fn = reinterpret_cast<Fn>(p);
      return true;
    }
  missing += (missing.empty() ? "" : ", ") + std::string(*names.begin());
  return false;
}

Loaded load() {
  Loaded l;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("HODU_CUDART")) candidates.push_back(env);
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) candidates.push_back(name);
  for (const char* dir : {"/usr/local/cuda/lib64/", "/usr/local/cuda/lib/"})
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"})
      candidates.push_back(std::string(dir) + name);
  void* lib = nullptr;
  std::string last_error;
  for (const auto& c : candidates) {
    lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      l.rt.path = c;
      break;
    }
    if (const char* e = ::dlerror()) last_error = e;
  }
  if (!lib) {
    l.reason = "the CUDA runtime (libcudart.so) was not found" + (last_error.empty() ? "" : ": " + last_error);
    return l;
  }
  CudaRuntime& r = l.rt;
  std::string missing;
  resolve(lib, r.GetDeviceCount, {"cudaGetDeviceCount"}, missing);
  resolve(lib, r.GetDeviceProperties, {"cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"}, missing);
  resolve(lib, r.DeviceGetAttribute, {"cudaDeviceGetAttribute"}, missing);
  resolve(lib, r.SetDevice, {"cudaSetDevice"}, missing);
  resolve(lib, r.GetDevice, {"cudaGetDevice"}, missing);
  resolve(lib, r.MemGetInfo, {"cudaMemGetInfo"}, missing);
  resolve(lib, r.RuntimeGetVersion, {"cudaRuntimeGetVersion"}, missing);
  resolve(lib, r.DriverGetVersion, {"cudaDriverGetVersion"}, missing);
  resolve(lib, r.GetErrorString, {"cudaGetErrorString"}, missing);
  resolve(lib, r.GetLastError, {"cudaGetLastError"}, missing);
  resolve(lib, r.DeviceSynchronize, {"cudaDeviceSynchronize"}, missing);
  resolve(lib, r.Malloc, {"cudaMalloc"}, missing);
  resolve(lib, r.Free, {"cudaFree"}, missing);
  resolve(lib, r.HostAlloc, {"cudaHostAlloc"}, missing);
  resolve(lib, r.FreeHost, {"cudaFreeHost"}, missing);
  resolve(lib, r.StreamCreateWithFlags, {"cudaStreamCreateWithFlags"}, missing);
  resolve(lib, r.StreamDestroy, {"cudaStreamDestroy"}, missing);
  resolve(lib, r.StreamSynchronize, {"cudaStreamSynchronize"}, missing);
  resolve(lib, r.StreamQuery, {"cudaStreamQuery"}, missing);
  resolve(lib, r.StreamWaitEvent, {"cudaStreamWaitEvent"}, missing);
  resolve(lib, r.EventCreateWithFlags, {"cudaEventCreateWithFlags"}, missing);
  resolve(lib, r.EventDestroy, {"cudaEventDestroy"}, missing);
  resolve(lib, r.EventRecord, {"cudaEventRecord"}, missing);
  resolve(lib, r.EventSynchronize, {"cudaEventSynchronize"}, missing);
  resolve(lib, r.EventQuery, {"cudaEventQuery"}, missing);
  resolve(lib, r.EventElapsedTime, {"cudaEventElapsedTime_v2", "cudaEventElapsedTime"}, missing);
  resolve(lib, r.StreamBeginCapture, {"cudaStreamBeginCapture"}, missing);
  resolve(lib, r.StreamEndCapture, {"cudaStreamEndCapture"}, missing);
  resolve(lib, r.GraphInstantiate, {"cudaGraphInstantiate"}, missing);
  resolve(lib, r.GraphLaunch, {"cudaGraphLaunch"}, missing);
  resolve(lib, r.GraphExecUpdate, {"cudaGraphExecUpdate"}, missing);
  resolve(lib, r.GraphExecDestroy, {"cudaGraphExecDestroy"}, missing);
  resolve(lib, r.GraphDestroy, {"cudaGraphDestroy"}, missing);
  if (!missing.empty()) {
    l.reason = r.path + " lacks " + missing;
    ::dlclose(lib);
    return l;
  }
  r.RuntimeGetVersion(&r.runtime_version);
  if (r.DriverGetVersion(&r.driver_version) != 0) r.driver_version = 0;
  // The library stays loaded for the life of the process (handles outlive any one user).
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static Loaded l = load();
  return l;
}

}  // namespace

const CudaRuntime* CudaRuntime::get() { return loaded().ok ? &loaded().rt : nullptr; }

std::string CudaRuntime::unavailable_reason() { return loaded().ok ? "" : loaded().reason; }

const CudaRuntime& CudaRuntime::for_device(int index) {
  const CudaRuntime* rt = get();
  HODU_CHECK(rt, ErrorCode::Device, "cuda:{}: {}", index, unavailable_reason());
  int n = rt->device_count();
  HODU_CHECK(index >= 0 && index < n, ErrorCode::Device, "cuda:{}: this machine has {} CUDA device(s)", index, n);
  return *rt;
}

void CudaRuntime::check(int rc, const char* what) const {
  if (rc == 0) return;
  GetLastError();  // clear the sticky-free error state for the next call
  fail(ErrorCode::Device, "{}: CUDA error {} ({})", what, rc, GetErrorString ? GetErrorString(rc) : "?");
}

bool CudaRuntime::ready(int rc, const char* what) const {
  if (rc == kErrorNotReady) {
    GetLastError();
    return false;
  }
  check(rc, what);
  return true;
}

int CudaRuntime::device_count() const {
  int n = 0;
  if (GetDeviceCount(&n) != 0) {
    GetLastError();
    return 0;
  }
  return n;
}

}  // namespace hodu
