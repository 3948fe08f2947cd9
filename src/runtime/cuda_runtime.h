// The CUDA runtime, loaded at run time with dlopen: hodu never links CUDA, and
// on a machine without it CudaRuntime::get() returns nullptr (available() is
// false, with a reason). Only the handful of functions the runtime services
// need are resolved; CUDA's handle types are kept opaque (void*).
//
// Search order: $HODU_CUDART (a path), libcudart.so, libcudart.so.13, .so.12,
// then the same names under /usr/local/cuda/lib64 and /usr/local/cuda/lib.
// The graph API uses CUDA 12+ signatures; older runtimes refuse it clearly.
#pragma once
#include <cstddef>
#include <string>

namespace hodu {

using cudaStream = void*;
using cudaEvent = void*;
using cudaGraph = void*;
using cudaGraphExec = void*;

struct CudaRuntime {
  // The process-wide loaded runtime, or nullptr if libcudart is absent.
  static const CudaRuntime* get();
  // Why get() is null ("" when it is not), for messages.
  static std::string unavailable_reason();

  // The loaded runtime, checked to have device `index`; ErrorCode::Device
  // ("cuda:N: <why>") when the runtime or the device is absent.
  static const CudaRuntime& for_device(int index);

  // Throws ErrorCode::Device "<what>: <cudaGetErrorString>" when rc != 0.
  void check(int rc, const char* what) const;
  // For query calls (cudaEventQuery, cudaStreamQuery): false when rc is
  // "not ready" (the error is cleared), true on success, check() otherwise.
  bool ready(int rc, const char* what) const;
  // Device count, 0 when the runtime loads but finds no device/driver.
  int device_count() const;

  std::string path;  // the library that was loaded
  int runtime_version = 0;  // e.g. 13000
  int driver_version = 0;   // 0 when no driver

  // cudaError_t is an int; every function returns it.
  int (*GetDeviceCount)(int*) = nullptr;
  int (*GetDeviceProperties)(void* prop, int device) = nullptr;  // reads only `name` (offset 0, all versions)
  int (*DeviceGetAttribute)(int* value, int attr, int device) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*GetDevice)(int*) = nullptr;
  int (*MemGetInfo)(size_t* free, size_t* total) = nullptr;
  int (*RuntimeGetVersion)(int*) = nullptr;
  int (*DriverGetVersion)(int*) = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
  int (*GetLastError)() = nullptr;
  int (*DeviceSynchronize)() = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*HostAlloc)(void**, size_t, unsigned flags) = nullptr;
  int (*FreeHost)(void*) = nullptr;
  int (*StreamCreateWithFlags)(cudaStream*, unsigned) = nullptr;
  int (*StreamDestroy)(cudaStream) = nullptr;
  int (*StreamSynchronize)(cudaStream) = nullptr;
  int (*StreamQuery)(cudaStream) = nullptr;
  int (*StreamWaitEvent)(cudaStream, cudaEvent, unsigned) = nullptr;
  int (*EventCreateWithFlags)(cudaEvent*, unsigned) = nullptr;
  int (*EventDestroy)(cudaEvent) = nullptr;
  int (*EventRecord)(cudaEvent, cudaStream) = nullptr;
  int (*EventSynchronize)(cudaEvent) = nullptr;
  int (*EventQuery)(cudaEvent) = nullptr;
  int (*EventElapsedTime)(float*, cudaEvent, cudaEvent) = nullptr;
  int (*StreamBeginCapture)(cudaStream, int mode) = nullptr;
  int (*StreamEndCapture)(cudaStream, cudaGraph*) = nullptr;
  int (*GraphInstantiate)(cudaGraphExec*, cudaGraph, unsigned long long flags) = nullptr;  // CUDA 12+
  int (*GraphLaunch)(cudaGraphExec, cudaStream) = nullptr;
  int (*GraphExecUpdate)(cudaGraphExec, cudaGraph, void* result_info) = nullptr;  // CUDA 12+
  int (*GraphExecDestroy)(cudaGraphExec) = nullptr;
  int (*GraphDestroy)(cudaGraph) = nullptr;

  // cudaDeviceAttr values used by the DeviceManager (stable across versions).
  static constexpr int kAttrMultiProcessorCount = 16;
  static constexpr int kAttrComputeCapabilityMajor = 75;
  static constexpr int kAttrComputeCapabilityMinor = 76;
  static constexpr unsigned kHostAllocDefault = 0;
  static constexpr unsigned kStreamNonBlocking = 1;
  static constexpr unsigned kEventDisableTiming = 2;
  static constexpr int kErrorNotReady = 600;
  static constexpr int kCaptureModeThreadLocal = 1;
};

}  // namespace hodu
