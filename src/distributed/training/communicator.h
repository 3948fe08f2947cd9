// The MPI side of data-parallel training, behind a small interface so that no
// other header includes <mpi.h>: an Environment that initializes and finalizes
// MPI for the process, and a Communicator (a group of ranks, MPI_COMM_WORLD by
// default) with the few collectives training needs. Gradients are summed with
// MPI_Allreduce in place; every call is blocking and must be made by every rank
// in the same order (MPI's rule). Errors are hodu::Error (Io: a failed MPI call).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace hodu::distributed {

// MPI for this process: MPI_Init_thread (asking MPI_THREAD_SERIALIZED, which lets the
// gradient reducer's thread make the calls while the main thread computes) unless MPI is
// already initialized, and MPI_Finalize at destruction if it initialized it. Started outside
// mpirun a process is a world of one rank (MPI's singleton start).
class Environment {
 public:
  Environment(int* argc = nullptr, char*** argv = nullptr);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  // Whether MPI lets a second thread make the calls (MPI_THREAD_SERIALIZED or more).
  static bool threads_supported();

 private:
  bool initialized_here_ = false;
};

class Communicator {
 public:
  // MPI_COMM_WORLD; MPI must be initialized (an Environment exists).
  static Communicator world();
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks on this host (MPI_COMM_TYPE_SHARED), for dividing the cores among them.
  int local_size() const { return local_size_; }

  // Sums `count` elements of `data` (f32 or f64) over every rank, in place.
  void allreduce_sum(void* data, int64_t count, DType dtype) const;
  // rank 0's `bytes` bytes at `data` on every rank.
  void broadcast(void* data, int64_t bytes, int root = 0) const;
  // Whether `ok` holds on every rank.
  bool all(bool ok) const;
  // The smallest / largest of each rank's `value`.
  int64_t min(int64_t value) const;
  int64_t max(int64_t value) const;
  void barrier() const;
  // Ends every rank of the job (MPI_Abort) after this rank printed why.
  [[noreturn]] void abort(int code) const;

 private:
  struct Impl;  // holds the MPI_Comm
  Communicator() = default;
  std::shared_ptr<const Impl> impl_;
  int rank_ = 0, size_ = 1, local_size_ = 1;
};

// Thrown on the ranks that did not fail when another rank did (run_agreed): that rank reports
// the error, these exit quietly.
class FailedElsewhere : public Error {
 public:
  explicit FailedElsewhere(int rank)
      : Error(ErrorCode::InvalidArgument, "rank " + std::to_string(rank) + " failed"), rank_(rank) {}
  int failed_rank() const { return rank_; }

 private:
  int rank_;
};

// Runs `fn` on every rank, then agrees on the outcome (a collective): when it threw on some rank,
// the lowest such rank rethrows its error (prefixed "rank R (host): " unless R is 0) and every
// other rank throws FailedElsewhere, so a failure shared by all ranks (a bad option) is reported
// once and a failure of one rank (its file is missing) does not leave the others waiting.
void run_agreed(const Communicator& comm, const std::function<void()>& fn);

}  // namespace hodu::distributed
