#include "distributed/training/communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace hodu::distributed {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(ErrorCode::Io, "{} failed: {}", what, std::string(text, static_cast<size_t>(len)));
}

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    default: fail(ErrorCode::Unsupported, "all-reduce of {} tensors: only f32 and f64 are summed", dtype_name(dt));
  }
}

bool mpi_initialized() {
  int init = 0, done = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&done);
  return init && !done;
}

}  // namespace

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
};

Environment::Environment(int* argc, char*** argv) {
  int done = 0;
  MPI_Finalized(&done);
  HODU_CHECK(!done, ErrorCode::InvalidArgument, "MPI was finalized already; it cannot start again in this process");
  if (mpi_initialized()) return;
  // A rank waiting in MPI yields the core (unless the user set it): each rank's kernel threads
  // fill the host's cores and its reducer thread waits in MPI_Allreduce beside them, so
  // Open MPI's busy polling took the cores the peers' backward needed (measured on the MLP of
  // bench/train_mpi at -np 2 on this loaded 2-core machine, ms a step: 616 and 700 polling
  // against 302 and 307 yielding through shared memory; 319 and 261 against 281 and 172 with CMA).
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  initialized_here_ = true;
  // Errors come back as codes (turned into hodu::Error) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

Environment::~Environment() {
  if (initialized_here_ && mpi_initialized()) MPI_Finalize();
}

bool Environment::threads_supported() {
  int provided = MPI_THREAD_SINGLE;
  if (mpi_initialized()) MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_SERIALIZED;
}

Communicator Communicator::world() {
  HODU_CHECK(mpi_initialized(), ErrorCode::InvalidArgument,
             "MPI is not initialized: create a hodu::distributed::Environment first");
  Communicator c;
  auto impl = std::make_shared<Impl>();
  impl->comm = MPI_COMM_WORLD;
  check(MPI_Comm_rank(impl->comm, &c.rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(impl->comm, &c.size_), "MPI_Comm_size");
  MPI_Comm local;
  check(MPI_Comm_split_type(impl->comm, MPI_COMM_TYPE_SHARED, c.rank_, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  MPI_Comm_size(local, &c.local_size_);
  MPI_Comm_free(&local);
  c.impl_ = impl;
  return c;
}

void Communicator::allreduce_sum(void* data, int64_t count, DType dtype) const {
  MPI_Datatype t = mpi_type(dtype);
  const int64_t elem = dtype_bits(dtype) / 8;
  // MPI counts are ints: a larger buffer goes in pieces.
  for (int64_t done = 0; done < count;) {
    int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX / 2));
    check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + done * elem, n, t, MPI_SUM, impl_->comm),
          "MPI_Allreduce");
    done += n;
  }
}

void Communicator::broadcast(void* data, int64_t bytes, int root) const {
  for (int64_t done = 0; done < bytes;) {
    int n = static_cast<int>(std::min<int64_t>(bytes - done, INT_MAX / 2));
    check(MPI_Bcast(static_cast<char*>(data) + done, n, MPI_BYTE, root, impl_->comm), "MPI_Bcast");
    done += n;
  }
}

bool Communicator::all(bool ok) const {
  int v = ok ? 1 : 0;
  check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, impl_->comm), "MPI_Allreduce");
  return v != 0;
}

int64_t Communicator::min(int64_t value) const {
  check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MIN, impl_->comm), "MPI_Allreduce");
  return value;
}

int64_t Communicator::max(int64_t value) const {
  check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, impl_->comm), "MPI_Allreduce");
  return value;
}

void Communicator::barrier() const { check(MPI_Barrier(impl_->comm), "MPI_Barrier"); }

void Communicator::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(impl_ ? impl_->comm : MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void run_agreed(const Communicator& comm, const std::function<void()>& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  const int64_t none = comm.size();
  const int64_t first = comm.min(error ? comm.rank() : none);
  if (first == none) return;
  if (first != comm.rank()) throw FailedElsewhere(static_cast<int>(first));
  if (comm.rank() == 0) std::rethrow_exception(error);
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  const std::string where = fmt::format("rank {} ({}): ", comm.rank(), std::string(host, static_cast<size_t>(len)));
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    throw e.with_context(where);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Internal, where + e.what());
  }
}

}  // namespace hodu::distributed
