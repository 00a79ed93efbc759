// A tiny, fully specified PRNG (splitmix64) so synthetic samples are reproducible across
// platforms and library versions; std::uniform_*_distribution is implementation-defined.
#pragma once

#include <cstdint>

namespace dspipe::synth {

// The splitmix64 finalizer: a bijective 64-bit mix.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit constexpr Rng(uint64_t seed) : state_(seed) {}
  // Independent stream for item `index` of the stream family `seed`.
  static constexpr Rng ForItem(uint64_t seed, uint64_t index) {
    return Rng(Mix64(Mix64(seed) + 0x9E3779B97F4A7C15ULL * (index + 1)));
  }

  constexpr uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return Mix64(state_);
  }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi] (inclusive). The bias for spans far below 2^64 is negligible.
  int Int(int lo, int hi) {
    const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo + 1);
    return lo + static_cast<int>(((Next() >> 32) * span) >> 32);
  }

 private:
  uint64_t state_;
};

}  // namespace dspipe::synth
