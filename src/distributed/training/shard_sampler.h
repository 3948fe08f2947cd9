// Which rows of the data each rank trains on at each step. The global batch of
// step s is the one a single process with N x the batch would take: epoch e =
// s / steps_per_epoch reads the rows in a permutation drawn from (seed, e)
// (or in file order without shuffling), whole global batches only (the last
// incomplete one is dropped so every rank gets as many rows); rank r takes the
// r-th of the N equal slices of the global batch. Nothing is kept between
// steps, so a resumed run continues at any step with the same rows.
#pragma once
#include <cstdint>
#include <vector>

namespace hodu::distributed {

class ShardSampler {
 public:
  // InvalidArgument when the dataset holds fewer rows than one global batch (batch x ranks).
  ShardSampler(int64_t rows, int64_t batch_per_rank, int ranks, int rank, uint64_t seed, bool shuffle);
  int64_t global_batch() const { return batch_ * ranks_; }
  int64_t steps_per_epoch() const { return rows_ / global_batch(); }
  // The rows of the whole global batch of `step`, then this rank's slice of them.
  std::vector<int64_t> global_rows(int64_t step) const;
  std::vector<int64_t> rows(int64_t step) const;

  // The permutation of [0, n) drawn from `seed` (Fisher-Yates over mt19937_64 with unbiased
  // bounded draws: the same on every machine and standard library).
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed);

 private:
  int64_t rows_, batch_;
  int ranks_, rank_;
  uint64_t seed_;
  bool shuffle_;
  // The permutation of the last epoch asked for.
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace hodu::distributed
