// Platform-independent random draws on top of std::mt19937_64 (whose output the standard fixes).
// std::*_distribution are not used: their algorithms differ between standard libraries.
#pragma once

#include <cstdint>
#include <random>

namespace tune::search {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) without modulo bias; n > 0.
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller, one draw per call).
  double normal();

 private:
  std::mt19937_64 engine_;
};

// Mixes a seed and a stream index into a new 64-bit seed (splitmix64).
[[nodiscard]] uint64_t mix_seed(uint64_t seed, uint64_t stream);

}  // namespace tune::search
