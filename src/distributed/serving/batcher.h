// The dynamic batcher of one served model. Requests wait in one queue; each
// worker owns a Session (a model instance) and, when idle, forms the next
// batch: the oldest request plus every later one whose non-batch dims and
// dtypes match, up to max_batch rows, waiting at most timeout_us after the
// oldest request arrived for more to come. The batch's inputs are stacked
// along dim 0, run once, and the outputs sliced back per request. A batch
// that fails is re-run request by request, so one bad request fails alone.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/session.h"

namespace hodu::serving {

class Metrics;

struct BatchOptions {
  int64_t max_batch = 1;   // rows (dim 0) of one run; 1 = every request runs alone
  int64_t timeout_us = 0;  // how long the oldest queued request waits for others to join it
  int64_t max_queue = 1024;  // queued requests beyond this are refused (Unavailable)
};

// The server is stopping or the queue is full: HTTP 503, try again elsewhere.
class Unavailable : public Error {
 public:
  explicit Unavailable(std::string message) : Error(ErrorCode::Unsupported, std::move(message)) {}
};

// Whether requests to a model can be stacked along dim 0: every input and
// output a tensor whose dim 0 is dynamic (a symbol or unknown), one symbol
// shared by the inputs and used nowhere else. Empty when they can; otherwise why not.
std::string batch_dim_problem(const Session& session);

// Inputs stacked along dim 0 (same dtype and non-batch dims).
Tensor stack_rows(const std::vector<const Tensor*>& parts);

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;

  // One worker thread per instance. `metrics` may be null.
  Batcher(std::string model, std::string version, std::vector<std::unique_ptr<Session>> instances,
          BatchOptions options, Metrics* metrics);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  const Session& session() const { return *instances_[0]; }
  const BatchOptions& options() const { return options_; }
  int workers() const { return static_cast<int>(instances_.size()); }
  // Whether requests are stacked; when not, batching_note() says why.
  bool batching() const { return batching_; }
  std::string batching_note() const;

  // Runs one request whose feeds session().check_inputs accepted. Thread-safe;
  // blocks until its batch has run. Throws the run's Error, or Unavailable.
  std::vector<NamedValue> infer(std::map<std::string, RuntimeValue> feeds);
  // Runs every queued request, then ends the workers. Later infer calls throw Unavailable.
  void stop();

 private:
  struct Pending {
    std::map<std::string, RuntimeValue> feeds;
    int64_t rows = 0;
    std::string key;  // requests with equal keys may share a run
    Clock::time_point enqueued;
    std::promise<std::vector<NamedValue>> done;
  };
  using Batch = std::vector<std::shared_ptr<Pending>>;

  void worker(Session& session);
  Batch take_batch(std::unique_lock<std::mutex>& lock);
  void run_batch(Session& session, Batch& batch);
  void run_alone(Session& session, Pending& p);
  std::string key_of(const std::map<std::string, RuntimeValue>& feeds, int64_t& rows) const;

  std::string model_, version_;
  std::vector<std::unique_ptr<Session>> instances_;
  BatchOptions options_;
  Metrics* metrics_;
  std::atomic<bool> batching_ = false;
  std::string note_;  // under mutex_
  std::vector<std::string> input_names_;

  mutable std::mutex mutex_;  // queue_, stopping_, note_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::mutex forming_;  // held by the one idle worker that forms the next batch
  std::vector<std::thread> workers_;
};

}  // namespace hodu::serving
