// Averages a training step's gradient buckets over the ranks. The main thread
// submits bucket i as soon as the stage computing it has run; with overlap a
// thread of the reducer all-reduces it (MPI_Allreduce, sum, then divided by the
// number of ranks) while the main thread runs the next stage, and wait() blocks
// only for what is still in flight. Without overlap wait() does every
// all-reduce itself. Times are kept so a run can say how much of the
// communication was hidden behind the backward.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "distributed/training/communicator.h"
#include "distributed/training/step_partition.h"

namespace hodu::distributed {

struct ReduceStats {
  int64_t steps = 0;
  double reduce_ms = 0;   // time inside the all-reduces
  double exposed_ms = 0;  // time the main thread waited for them (the rest was hidden)
  int64_t bytes = 0;      // reduced per step
};

class GradientReducer {
 public:
  // overlap: a thread of its own makes the MPI calls (needs MPI_THREAD_SERIALIZED; without it
  // the reducer does them in wait()).
  GradientReducer(Communicator comm, std::vector<GradientBucket> buckets, bool overlap);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  bool overlapping() const { return worker_.joinable(); }
  // Copies bucket `index`'s values (looked up in `values`) into its buffer and starts its all-reduce.
  // InvalidArgument when a value is missing or has another dtype or element count than planned.
  void submit(size_t index, const std::map<std::string, Tensor>& values);
  // Blocks until every bucket of the step is averaged; rethrows an all-reduce's error.
  void wait();
  // An averaged value (a view of its bucket's buffer, valid until the next submit of that bucket).
  const Tensor& averaged(const std::string& name) const;
  const ReduceStats& stats() const { return stats_; }

 private:
  void reduce(size_t index);  // all-reduce and divide, on whichever thread runs it
  void work();
  Communicator comm_;
  std::vector<GradientBucket> buckets_;
  std::vector<Tensor> buffers_;
  std::map<std::string, Tensor> views_;
  ReduceStats stats_;
  // The worker's queue.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t submitted_ = 0, finished_ = 0;
  double worker_ms_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace hodu::distributed
