#include "runtime/memory/cuda_backend.h"

#include "core/error.h"
#include "runtime/log.h"

namespace hodu {
namespace {

constexpr int kCudaErrorMemoryAllocation = 2;

}  // namespace

CudaBackend::CudaBackend(int device_index) : rt_(&CudaRuntime::for_device(device_index)), index_(device_index) {}

void CudaBackend::select() const { rt_->check(rt_->SetDevice(index_), "cudaSetDevice"); }

void* CudaBackend::raw_alloc(size_t bytes) {
  select();
  void* p = nullptr;
  int rc = rt_->Malloc(&p, bytes);
  if (rc == kCudaErrorMemoryAllocation) {
    rt_->GetLastError();  // not sticky: clear it so later calls are unaffected
    return nullptr;
  }
  rt_->check(rc, "cudaMalloc");
  return p;
}

void CudaBackend::raw_free(void* ptr) {
  select();
  rt_->check(rt_->Free(ptr), "cudaFree");
}

EventId CudaBackend::record_event(StreamId stream) {
  select();
  cudaEvent e = nullptr;
  rt_->check(rt_->EventCreateWithFlags(&e, CudaRuntime::kEventDisableTiming), "cudaEventCreateWithFlags");
  rt_->check(rt_->EventRecord(e, reinterpret_cast<cudaStream>(stream)), "cudaEventRecord");
  return reinterpret_cast<EventId>(e);
}

bool CudaBackend::event_done(EventId event) {
  return rt_->ready(rt_->EventQuery(reinterpret_cast<cudaEvent>(event)), "cudaEventQuery");
}

void CudaBackend::release_event(EventId event) {
  rt_->check(rt_->EventDestroy(reinterpret_cast<cudaEvent>(event)), "cudaEventDestroy");
}

void CudaBackend::synchronize() {
  select();
  rt_->check(rt_->DeviceSynchronize(), "cudaDeviceSynchronize");
}

void CudaBackend::memory_info(size_t& free_bytes, size_t& total_bytes) {
  select();
  if (rt_->MemGetInfo(&free_bytes, &total_bytes) != 0) {
    rt_->GetLastError();
    free_bytes = total_bytes = 0;
  }
}

PinnedHostAllocator::PinnedHostAllocator() : rt_(CudaRuntime::get()) {
  if (rt_ && rt_->device_count() == 0) rt_ = nullptr;  // cudaHostAlloc needs a device
  if (!rt_) {
    fallback_reason_ = CudaRuntime::get() ? "no CUDA device" : CudaRuntime::unavailable_reason();
    log_verbose("pinned host memory unavailable ({}); using pageable host memory", fallback_reason_);
  }
}

PinnedHostAllocator::~PinnedHostAllocator() {
  if (rt_)
    for (auto& [p, n] : sizes_) rt_->FreeHost(p);
}

std::string PinnedHostAllocator::name() const {
  return rt_ ? "pinned" : "pinned (fallback: pageable host memory, " + fallback_reason_ + ")";
}

void* PinnedHostAllocator::allocate(size_t bytes, StreamId stream) {
  if (!rt_) return fallback_.allocate(bytes, stream);
  size_t n = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  int rc = rt_->HostAlloc(&p, n, CudaRuntime::kHostAllocDefault);
  std::lock_guard lock(mutex_);
  if (rc != 0 || !p) {
    rt_->GetLastError();
    stats_.num_ooms++;
    fail(ErrorCode::OutOfMemory, "pinned: cudaHostAlloc of {} failed ({}); {}", format_bytes(static_cast<int64_t>(n)),
         rt_->GetErrorString(rc), stats_.summary());
  }
  sizes_[p] = n;
  stats_.add_uncached_block(static_cast<int64_t>(n));
  return p;
}

void PinnedHostAllocator::deallocate(void* ptr) {
  if (!rt_) return fallback_.deallocate(ptr);
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = sizes_.find(ptr);
  HODU_CHECK(it != sizes_.end(), ErrorCode::InvalidArgument, "pinned: {} was not allocated here", ptr);
  stats_.remove_uncached_block(static_cast<int64_t>(it->second));
  rt_->check(rt_->FreeHost(ptr), "cudaFreeHost");
  sizes_.erase(it);
}

MemoryStats PinnedHostAllocator::stats() const {
  if (!rt_) return fallback_.stats();
  std::lock_guard lock(mutex_);
  return stats_;
}

void PinnedHostAllocator::reset_peak_stats() {
  if (!rt_) return fallback_.reset_peak_stats();
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

}  // namespace hodu
