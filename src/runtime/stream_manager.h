// StreamManager: ordered queues of device work (streams), markers in them
// (events), waiting (synchronize), and captured graphs of work replayed with
// one launch.
//
//  - CpuStream runs submitted tasks in order on its own thread; a task that
//    throws poisons the stream: synchronize() rethrows the first error.
//  - CudaStream wraps a cudaStream_t from the dlopen'd runtime; work is
//    launched onto native_handle() by the engines. Needs a GPU (untested here).
//  - Events: record(event) on a stream marks its current end; wait(event)
//    makes another stream wait for it; elapsed_ms between two events.
//  - Graphs: begin_capture() … end_capture() records the work submitted in
//    between instead of running it (CPU: the tasks; CUDA: cudaStreamBeginCapture
//    / EndCapture / GraphInstantiate); launch() replays it; update() swaps in a
//    newly captured graph of the same shape (cudaGraphExecUpdate, falling back
//    to re-instantiation when the topology changed).
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/device.h"
#include "runtime/cuda_runtime.h"
#include "runtime/memory/allocator.h"

namespace hodu {

class Event {
 public:
  virtual ~Event() = default;
  virtual bool query() const = 0;  // true once the stream has reached it
  virtual void synchronize() = 0;  // waits until it is reached
  // Milliseconds from `start` to this event (both recorded and reached).
  virtual double elapsed_ms(const Event& start) const = 0;
};

class StreamGraph {
 public:
  virtual ~StreamGraph() = default;
  virtual void launch() = 0;  // on the stream it was captured on
  // Replaces the captured work with `other`'s (same stream kind); keeps this handle.
  virtual void update(StreamGraph& other) = 0;
  virtual size_t size() const = 0;  // captured tasks (CPU) or 0 when unknown (CUDA)
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  virtual StreamId id() const = 0;  // what allocators key blocks by
  virtual void synchronize() = 0;   // waits for all submitted work; rethrows a task's error
  virtual bool query() const = 0;   // true when idle
  virtual std::shared_ptr<Event> create_event() = 0;
  virtual void record(Event& event) = 0;
  virtual void wait(Event& event) = 0;  // later work on this stream waits for the event
  // Graph capture: work submitted between begin and end is recorded, not run.
  virtual void begin_capture() = 0;
  virtual std::unique_ptr<StreamGraph> end_capture() = 0;
  virtual bool capturing() const = 0;
};

class CpuStream : public Stream {
 public:
  CpuStream();
  ~CpuStream() override;  // finishes the queued work
  Device device() const override { return Device::cpu(); }
  StreamId id() const override { return id_; }
  // Queues a task (or records it while capturing).
  void submit(std::function<void()> task);
  void synchronize() override;
  bool query() const override;
  std::shared_ptr<Event> create_event() override;
  void record(Event& event) override;
  void wait(Event& event) override;
  void begin_capture() override;
  std::unique_ptr<StreamGraph> end_capture() override;
  bool capturing() const override;

 private:
  void worker();
  void enqueue(std::function<void()> task);
  StreamId id_;
  mutable std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  bool capturing_ = false;
  std::vector<std::function<void()>> captured_;
  std::thread thread_;
};

class CudaStream : public Stream {
 public:
  explicit CudaStream(int device_index);  // Device error without CUDA or the device
  ~CudaStream() override;
  Device device() const override { return Device::cuda(index_); }
  StreamId id() const override { return reinterpret_cast<StreamId>(stream_); }
  cudaStream native_handle() const { return stream_; }
  void synchronize() override;
  bool query() const override;
  std::shared_ptr<Event> create_event() override;
  void record(Event& event) override;
  void wait(Event& event) override;
  void begin_capture() override;
  std::unique_ptr<StreamGraph> end_capture() override;
  bool capturing() const override { return capturing_; }

 private:
  const CudaRuntime* rt_;
  int index_;
  cudaStream stream_ = nullptr;
  bool capturing_ = false;
};

class StreamManager {
 public:
  static StreamManager& instance();
  // The device's default stream (created on first use).
  Stream& default_stream(const Device& device);
  std::shared_ptr<Stream> create_stream(const Device& device);
  // Waits for every stream this manager created on the device.
  void synchronize(const Device& device);

 private:
  std::mutex mutex_;
  std::map<std::pair<int, int>, std::vector<std::weak_ptr<Stream>>> streams_;
  std::map<std::pair<int, int>, std::shared_ptr<Stream>> defaults_;
};

}  // namespace hodu
