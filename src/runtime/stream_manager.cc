#include "runtime/stream_manager.h"

#include <atomic>
#include <chrono>

#include "core/error.h"

namespace hodu {
namespace {

std::atomic<StreamId> g_next_cpu_stream{1};

class CpuEvent : public Event, public std::enable_shared_from_this<CpuEvent> {
 public:
  void arm() {
    std::lock_guard lock(mutex_);
    recorded_ = true;
    reached_ = false;
  }
  void reach() {
    {
      std::lock_guard lock(mutex_);
      reached_ = true;
      when_ = std::chrono::steady_clock::now();
    }
    cv_.notify_all();
  }
  bool query() const override {
    std::lock_guard lock(mutex_);
    return !recorded_ || reached_;
  }
  void synchronize() override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !recorded_ || reached_; });
  }
  double elapsed_ms(const Event& start) const override {
    const auto* s = dynamic_cast<const CpuEvent*>(&start);
    HODU_CHECK(s, ErrorCode::InvalidArgument, "elapsed_ms: events of different devices");
    std::scoped_lock lock(mutex_, s->mutex_);
    HODU_CHECK(reached_ && s->reached_, ErrorCode::InvalidArgument,
               "elapsed_ms: both events must be recorded and reached (synchronize first)");
    return std::chrono::duration<double, std::milli>(when_ - s->when_).count();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool recorded_ = false, reached_ = false;
  std::chrono::steady_clock::time_point when_;
};

class CpuStreamGraph : public StreamGraph {
 public:
  CpuStreamGraph(CpuStream* stream, std::vector<std::function<void()>> tasks)
      : stream_(stream), tasks_(std::move(tasks)) {}
  void launch() override {
    for (const auto& t : tasks_) stream_->submit(t);
  }
  void update(StreamGraph& other) override {
    auto* o = dynamic_cast<CpuStreamGraph*>(&other);
    HODU_CHECK(o, ErrorCode::InvalidArgument, "graph update: the new graph was captured on another kind of stream");
    tasks_ = o->tasks_;
  }
  size_t size() const override { return tasks_.size(); }

 private:
  CpuStream* stream_;
  std::vector<std::function<void()>> tasks_;
};

class CudaEvent : public Event {
 public:
  explicit CudaEvent(const CudaRuntime* rt) : rt_(rt) { rt_->check(rt_->EventCreateWithFlags(&event_, 0), "cudaEventCreate"); }
  ~CudaEvent() override { rt_->EventDestroy(event_); }
  bool query() const override { return rt_->ready(rt_->EventQuery(event_), "cudaEventQuery"); }
  void synchronize() override { rt_->check(rt_->EventSynchronize(event_), "cudaEventSynchronize"); }
  double elapsed_ms(const Event& start) const override {
    const auto* s = dynamic_cast<const CudaEvent*>(&start);
    HODU_CHECK(s, ErrorCode::InvalidArgument, "elapsed_ms: events of different devices");
    float ms = 0;
    rt_->check(rt_->EventElapsedTime(&ms, s->event_, event_), "cudaEventElapsedTime");
    return ms;
  }
  cudaEvent handle() const { return event_; }

 private:
  const CudaRuntime* rt_;
  cudaEvent event_ = nullptr;
};

class CudaStreamGraph : public StreamGraph {
 public:
  CudaStreamGraph(const CudaRuntime* rt, cudaStream stream, cudaGraph graph) : rt_(rt), stream_(stream), graph_(graph) {
    rt_->check(rt_->GraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  ~CudaStreamGraph() override {
    if (exec_) rt_->GraphExecDestroy(exec_);
    if (graph_) rt_->GraphDestroy(graph_);
  }
  void launch() override { rt_->check(rt_->GraphLaunch(exec_, stream_), "cudaGraphLaunch"); }
  void update(StreamGraph& other) override {
    auto* o = dynamic_cast<CudaStreamGraph*>(&other);
    HODU_CHECK(o, ErrorCode::InvalidArgument, "graph update: the new graph was captured on another kind of stream");
    alignas(8) char result_info[64] = {};  // cudaGraphExecUpdateResultInfo
    if (rt_->GraphExecUpdate(exec_, o->graph_, result_info) != 0) {
      // Topology changed: instantiate the new graph instead.
      rt_->GetLastError();
      rt_->GraphExecDestroy(exec_);
      exec_ = nullptr;
      rt_->check(rt_->GraphInstantiate(&exec_, o->graph_, 0), "cudaGraphInstantiate");
    }
    std::swap(graph_, o->graph_);
  }
  size_t size() const override { return 0; }

 private:
  const CudaRuntime* rt_;
  cudaStream stream_;
  cudaGraph graph_ = nullptr;
  cudaGraphExec exec_ = nullptr;
};

}  // namespace

// ---- CpuStream

CpuStream::CpuStream() : id_(g_next_cpu_stream++) { thread_ = std::thread([this] { worker(); }); }

CpuStream::~CpuStream() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CpuStream::worker() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    bool skip;
    {
      std::lock_guard lock(mutex_);
      skip = error_ != nullptr;  // a failed stream runs nothing more until synchronize() reports it
    }
    if (!skip) {
      try {
        task();
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

void CpuStream::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (capturing_) {
      captured_.push_back(std::move(task));
      return;
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void CpuStream::submit(std::function<void()> task) {
  HODU_CHECK(task, ErrorCode::InvalidArgument, "cpu stream: empty task");
  enqueue(std::move(task));
}

void CpuStream::synchronize() {
  std::unique_lock lock(mutex_);
  HODU_CHECK(!capturing_, ErrorCode::InvalidArgument, "cpu stream: synchronize() while capturing a graph");
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

bool CpuStream::query() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !busy_;
}

std::shared_ptr<Event> CpuStream::create_event() { return std::make_shared<CpuEvent>(); }

void CpuStream::record(Event& event) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  HODU_CHECK(e, ErrorCode::InvalidArgument, "cpu stream: cannot record an event of another device");
  e->arm();
  enqueue([keep = e->shared_from_this()] { keep->reach(); });  // the task keeps the event alive
}

void CpuStream::wait(Event& event) {
  auto* e = dynamic_cast<CpuEvent*>(&event);
  HODU_CHECK(e, ErrorCode::InvalidArgument, "cpu stream: cannot wait for an event of another device");
  enqueue([keep = e->shared_from_this()] { keep->synchronize(); });
}

void CpuStream::begin_capture() {
  std::lock_guard lock(mutex_);
  HODU_CHECK(!capturing_, ErrorCode::InvalidArgument, "cpu stream: already capturing a graph");
  capturing_ = true;
  captured_.clear();
}

std::unique_ptr<StreamGraph> CpuStream::end_capture() {
  std::lock_guard lock(mutex_);
  HODU_CHECK(capturing_, ErrorCode::InvalidArgument, "cpu stream: end_capture() without begin_capture()");
  capturing_ = false;
  return std::make_unique<CpuStreamGraph>(this, std::move(captured_));
}

bool CpuStream::capturing() const {
  std::lock_guard lock(mutex_);
  return capturing_;
}

// ---- CudaStream

CudaStream::CudaStream(int device_index) : rt_(&CudaRuntime::for_device(device_index)), index_(device_index) {
  rt_->check(rt_->SetDevice(index_), "cudaSetDevice");
  rt_->check(rt_->StreamCreateWithFlags(&stream_, CudaRuntime::kStreamNonBlocking), "cudaStreamCreateWithFlags");
}

CudaStream::~CudaStream() {
  if (stream_) rt_->StreamDestroy(stream_);
}

void CudaStream::synchronize() { rt_->check(rt_->StreamSynchronize(stream_), "cudaStreamSynchronize"); }

bool CudaStream::query() const { return rt_->ready(rt_->StreamQuery(stream_), "cudaStreamQuery"); }

std::shared_ptr<Event> CudaStream::create_event() {
  rt_->check(rt_->SetDevice(index_), "cudaSetDevice");
  return std::make_shared<CudaEvent>(rt_);
}

void CudaStream::record(Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  HODU_CHECK(e, ErrorCode::InvalidArgument, "cuda stream: cannot record an event of another device");
  rt_->check(rt_->EventRecord(e->handle(), stream_), "cudaEventRecord");
}

void CudaStream::wait(Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  HODU_CHECK(e, ErrorCode::InvalidArgument, "cuda stream: cannot wait for an event of another device");
  rt_->check(rt_->StreamWaitEvent(stream_, e->handle(), 0), "cudaStreamWaitEvent");
}

void CudaStream::begin_capture() {
  HODU_CHECK(rt_->runtime_version >= 12000, ErrorCode::Unsupported,
             "CUDA graphs need CUDA runtime 12 or newer (found {})", rt_->runtime_version);
  HODU_CHECK(!capturing_, ErrorCode::InvalidArgument, "cuda stream: already capturing a graph");
  rt_->check(rt_->StreamBeginCapture(stream_, CudaRuntime::kCaptureModeThreadLocal), "cudaStreamBeginCapture");
  capturing_ = true;
}

std::unique_ptr<StreamGraph> CudaStream::end_capture() {
  HODU_CHECK(capturing_, ErrorCode::InvalidArgument, "cuda stream: end_capture() without begin_capture()");
  capturing_ = false;
  cudaGraph graph = nullptr;
  rt_->check(rt_->StreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
  return std::make_unique<CudaStreamGraph>(rt_, stream_, graph);
}

// ---- StreamManager

StreamManager& StreamManager::instance() {
  static StreamManager m;
  return m;
}

std::shared_ptr<Stream> StreamManager::create_stream(const Device& device) {
  std::shared_ptr<Stream> s;
  if (device.kind == Device::Kind::CPU) {
    HODU_CHECK(device.index == 0, ErrorCode::InvalidArgument, "device {}: only cpu (index 0) exists",
               device.to_string());
    s = std::make_shared<CpuStream>();
  } else {
    s = std::make_shared<CudaStream>(device.index);
  }
  std::lock_guard lock(mutex_);
  auto& list = streams_[{static_cast<int>(device.kind), device.index}];
  std::erase_if(list, [](const std::weak_ptr<Stream>& w) { return w.expired(); });
  list.push_back(s);
  return s;
}

Stream& StreamManager::default_stream(const Device& device) {
  {
    std::lock_guard lock(mutex_);
    auto it = defaults_.find({static_cast<int>(device.kind), device.index});
    if (it != defaults_.end()) return *it->second;
  }
  auto s = create_stream(device);
  std::lock_guard lock(mutex_);
  auto& slot = defaults_[{static_cast<int>(device.kind), device.index}];
  if (!slot) slot = s;
  return *slot;
}

void StreamManager::synchronize(const Device& device) {
  std::vector<std::shared_ptr<Stream>> live;
  {
    std::lock_guard lock(mutex_);
    for (auto& w : streams_[{static_cast<int>(device.kind), device.index}])
      if (auto s = w.lock()) live.push_back(s);
  }
  for (auto& s : live) s->synchronize();
}

}  // namespace hodu
