/* hodu/random.h — seeded random number generators (public).
 *
 * A Generator is a Mersenne Twister (mt19937, 32-bit) seeded by a 64-bit
 * seed: the same seed gives the same numbers on every machine and build
 * (uniform floats from 24 random bits, normals by Box–Muller). Functions that
 * take a Generator* use the default one (hodu::manual_seed) when given
 * nullptr. A Generator is not thread-safe; the default one is locked. */
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace hodu::eager {

class Generator {
 public:
  explicit Generator(uint64_t seed = 5489);
  ~Generator();
  Generator(const Generator&);
  Generator& operator=(const Generator&);

  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }
  uint32_t next_u32();
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits
  float uniform_float();  // [0, 1), 24 random bits
  double normal();   // N(0, 1)
  // The whole state as text and back (checkpoints of data loaders).
  std::string state() const;
  void set_state(const std::string& state);

  static Generator& default_generator();

 private:
  struct State;
  uint64_t seed_;
  std::unique_ptr<State> state_;
};

}  // namespace hodu::eager
