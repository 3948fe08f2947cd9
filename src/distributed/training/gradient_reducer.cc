#include "distributed/training/gradient_reducer.h"

#include <chrono>
#include <cstring>

#include "core/error.h"

namespace hodu::distributed {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

template <typename T>
void divide(Tensor& t, int n) {
  T* p = t.data<T>();
  const T d = static_cast<T>(n);
  for (int64_t i = 0, e = t.numel(); i < e; ++i) p[i] /= d;
}

}  // namespace

GradientReducer::GradientReducer(Communicator comm, std::vector<GradientBucket> buckets, bool overlap)
    : comm_(std::move(comm)), buckets_(std::move(buckets)) {
  for (const auto& b : buckets_) {
    buffers_.push_back(Tensor::empty(b.dtype, {b.total_elements}));
    int64_t offset = 0;
    for (size_t i = 0; i < b.values.size(); ++i) {
      views_[b.values[i]] = Tensor::from_storage(b.dtype, b.shapes[i], buffers_.back().storage(), offset);
      offset += b.elements[i];
    }
    stats_.bytes += static_cast<int64_t>(b.bytes());
  }
  if (overlap && comm_.size() > 1 && Environment::threads_supported()) worker_ = std::thread([this] { work(); });
}

GradientReducer::~GradientReducer() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void GradientReducer::submit(size_t index, const std::map<std::string, Tensor>& values) {
  const GradientBucket& b = buckets_.at(index);
  char* dst = static_cast<char*>(buffers_[index].raw_data());
  const size_t elem = static_cast<size_t>(dtype_bits(b.dtype) / 8);
  for (size_t i = 0; i < b.values.size(); ++i) {
    auto it = values.find(b.values[i]);
    HODU_CHECK(it != values.end(), ErrorCode::Internal, "gradient bucket {}: no value '{}'", index, b.values[i]);
    const Tensor& t = it->second;
    HODU_CHECK(t.dtype() == b.dtype && t.numel() == b.elements[i], ErrorCode::InvalidArgument,
               "'{}' is {} at run time, where {} elements of {} were planned{}", b.values[i], t.type_string(),
               b.elements[i], dtype_name(b.dtype),
               b.elements[i] == 1 ? " (the loss must be one number: its mean over the batch)" : "");
    Tensor c = t.contiguous();
    std::memcpy(dst, c.raw_data(), c.nbytes());
    dst += static_cast<size_t>(b.elements[i]) * elem;
  }
  if (comm_.size() == 1) return;
  if (!worker_.joinable()) return;  // reduced in wait()
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(index);
    ++submitted_;
  }
  cv_.notify_all();
}

void GradientReducer::reduce(size_t index) {
  Tensor& buf = buffers_[index];
  comm_.allreduce_sum(buf.raw_data(), buf.numel(), buf.dtype());
  if (buf.dtype() == DType::F32) divide<float>(buf, comm_.size());
  else divide<double>(buf, comm_.size());
}

void GradientReducer::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    size_t index = queue_.front();
    queue_.pop_front();
    lock.unlock();
    auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      reduce(index);
    } catch (...) {
      error = std::current_exception();
    }
    double ms = ms_since(t0);
    lock.lock();
    worker_ms_ += ms;
    if (error && !error_) error_ = error;
    ++finished_;
    cv_.notify_all();
  }
}

void GradientReducer::wait() {
  ++stats_.steps;
  if (comm_.size() == 1) return;
  auto t0 = std::chrono::steady_clock::now();
  if (!worker_.joinable()) {
    for (size_t i = 0; i < buckets_.size(); ++i) reduce(i);
    double ms = ms_since(t0);
    stats_.reduce_ms += ms;
    stats_.exposed_ms += ms;
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return finished_ == submitted_; });
  stats_.exposed_ms += ms_since(t0);
  stats_.reduce_ms += worker_ms_;
  worker_ms_ = 0;
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

const Tensor& GradientReducer::averaged(const std::string& name) const {
  auto it = views_.find(name);
  HODU_CHECK(it != views_.end(), ErrorCode::Internal, "no averaged value '{}'", name);
  return it->second;
}

}  // namespace hodu::distributed
