// SPDX-License-Identifier: Apache-2.0
// Fully specified randomness (splitmix64), so synthetic data, shuffles and augmentations are
// identical across platforms, standard libraries and thread counts. std::*_distribution is
// implementation-defined and therefore not used anywhere in dspipe.
#pragma once

#include <cstdint>

// Internal to dspipe (dspipe::core: not exported from libdspipe.so).
namespace dspipe::core {

__extension__ typedef unsigned __int128 Uint128;

// The splitmix64 finalizer: a bijective 64-bit mix.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit constexpr Rng(uint64_t seed) : state_(seed) {}
  // Independent stream for item `index` of the stream family `seed` (synthetic samples).
  static constexpr Rng ForItem(uint64_t seed, uint64_t index) {
    return Rng(Mix64(Mix64(seed) + 0x9E3779B97F4A7C15ULL * (index + 1)));
  }
  // A stream keyed by (a, b, c), e.g. (seed, epoch, index): distinct keys give statistically
  // independent streams.
  static constexpr Rng For(uint64_t a, uint64_t b, uint64_t c) {
    return Rng(Mix64(Mix64(Mix64(a ^ 0x6A09E667F3BCC909ULL) + b) + c));
  }

  constexpr uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return Mix64(state_);
  }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi] (inclusive); bias negligible for spans far below 2^32.
  int Int(int lo, int hi) {
    const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo + 1);
    return lo + static_cast<int>(((Next() >> 32) * span) >> 32);
  }
  // Uniform integer in [0, bound) without bias (Lemire's multiply-and-reject). bound >= 1.
  uint64_t Below(uint64_t bound) {
    Uint128 m = static_cast<Uint128>(Next()) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<Uint128>(Next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace dspipe::core
