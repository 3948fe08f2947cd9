#include "distributed/training/shard_sampler.h"

#include <numeric>
#include <random>

#include "core/error.h"

namespace hodu::distributed {
namespace {

// A draw in [0, n) without modulo bias (Lemire's multiply-and-reject).
uint64_t bounded(std::mt19937_64& gen, uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(gen()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = -n % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(gen()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

// One seed per epoch, mixed (splitmix64) so neighbouring seeds and epochs are unrelated.
uint64_t mix(uint64_t seed, uint64_t epoch) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (epoch + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

ShardSampler::ShardSampler(int64_t rows, int64_t batch_per_rank, int ranks, int rank, uint64_t seed, bool shuffle)
    : rows_(rows), batch_(batch_per_rank), ranks_(ranks), rank_(rank), seed_(seed), shuffle_(shuffle) {
  HODU_CHECK(batch_per_rank > 0, ErrorCode::InvalidArgument, "the batch must be at least 1 (got {})", batch_per_rank);
  HODU_CHECK(ranks > 0 && rank >= 0 && rank < ranks, ErrorCode::InvalidArgument, "rank {} of {}", rank, ranks);
  HODU_CHECK(rows >= global_batch(), ErrorCode::InvalidArgument,
             "the data has {} rows, fewer than one global batch ({} per rank x {} ranks = {})", rows, batch_per_rank,
             ranks, global_batch());
}

std::vector<int64_t> ShardSampler::permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  std::mt19937_64 gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[bounded(gen, static_cast<uint64_t>(i) + 1)]);
  return p;
}

std::vector<int64_t> ShardSampler::global_rows(int64_t step) const {
  HODU_CHECK(step >= 0, ErrorCode::InvalidArgument, "step {} < 0", step);
  const int64_t epoch = step / steps_per_epoch(), first = (step % steps_per_epoch()) * global_batch();
  std::vector<int64_t> out(static_cast<size_t>(global_batch()));
  if (!shuffle_) {
    std::iota(out.begin(), out.end(), first);
    return out;
  }
  if (cached_epoch_ != epoch) {
    cached_ = permutation(rows_, mix(seed_, static_cast<uint64_t>(epoch)));
    cached_epoch_ = epoch;
  }
  std::copy(cached_.begin() + first, cached_.begin() + first + global_batch(), out.begin());
  return out;
}

std::vector<int64_t> ShardSampler::rows(int64_t step) const {
  std::vector<int64_t> all = global_rows(step);
  return std::vector<int64_t>(all.begin() + rank_ * batch_, all.begin() + (rank_ + 1) * batch_);
}

}  // namespace hodu::distributed
