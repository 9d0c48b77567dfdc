// Bit-exact ports of the two NumPy generators Megatron's datasets use, so our sample order is
// Megatron's for the same seed:
//  - LegacyRandomState: numpy.random.RandomState(seed) (MT19937, init_genrand seeding) and its
//    legacy shuffle (Fisher-Yates from the end, j drawn by masked rejection "random_interval").
//  - Pcg64Generator: numpy.random.default_rng(seed) (SeedSequence -> PCG64 XSL-RR) and
//    Generator.integers(low, high) for int64 (Lemire's bounded method on buffered 32-bit draws).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mg {

class LegacyRandomState {
 public:
  explicit LegacyRandomState(uint32_t seed);
  uint32_t next_uint32();
  uint64_t next_uint64();
  // A value in [0, max], as numpy's random_interval.
  uint64_t interval(uint64_t max);
  // In-place shuffle of a 1-D array, as RandomState.shuffle.
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (std::size_t i = x.size(); i-- > 1;) std::swap(x[i], x[interval(i)]);
  }

 private:
  uint32_t key_[624];
  int pos_;
};

class Pcg64Generator {
 public:
  explicit Pcg64Generator(uint64_t seed);
  uint64_t next_uint64();
  uint32_t next_uint32();
  // Generator.integers(low, high, size=n) with the default int64 dtype: values in [low, high).
  std::vector<int64_t> integers(int64_t low, int64_t high, int64_t n);

 private:
  unsigned __int128 state_, inc_;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

}  // namespace mg
