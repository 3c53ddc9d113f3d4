// Rng: the one random generator of hpctune, seeded explicitly, portable across compilers.
//
// std::uniform_real_distribution and friends are implementation-defined, so the same seed could
// give different trials with another standard library. Rng implements its own distributions on top
// of xoshiro256** (seeded through splitmix64) so that "the same config and seed give the same
// trials" holds everywhere. Never seed from std::random_device.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace hpctune {

// splitmix64: used to expand a seed and to derive independent streams (seed, index) -> seed.
inline uint64_t splitmix64(uint64_t& state) noexcept {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A seed for stream `index` of `seed`, e.g. the per-trial seed of trial #index.
inline uint64_t derive_seed(uint64_t seed, uint64_t index) noexcept {
  uint64_t s = seed ^ (0xD1B54A32D192ED03ULL * (index + 1));
  splitmix64(s);
  return splitmix64(s);
}

class Rng {
 public:
  using result_type = uint64_t;
  explicit Rng(uint64_t seed = 0) noexcept { reseed(seed); }

  void reseed(uint64_t seed) noexcept {
    uint64_t s = seed;
    for (auto& word : s_) word = splitmix64(s);
    has_spare_ = false;
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<uint64_t>::max(); }

  result_type operator()() noexcept { return next(); }

  uint64_t next() noexcept {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), unbiased (Lemire). n must be > 0.
  uint64_t below(uint64_t n) noexcept {
    __uint128_t m = static_cast<__uint128_t>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform integer in [lo, hi], inclusive.
  int64_t integer(int64_t lo, int64_t hi) noexcept {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }

  // Standard normal (Marsaglia polar method).
  double normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = uniform() * 2.0 - 1.0;
      v = uniform() * 2.0 - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = std::sqrt(-2.0 * std::log(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }
  double normal(double mean, double stddev) noexcept { return mean + stddev * normal(); }

  bool bernoulli(double p) noexcept { return uniform() < p; }

  // The complete generator state, for checkpoints: set_state(state()) continues the same sequence.
  struct State {
    uint64_t words[4]{};
    double spare = 0.0;
    bool has_spare = false;
  };
  State state() const noexcept {
    State st;
    for (int i = 0; i < 4; ++i) st.words[i] = s_[i];
    st.spare = spare_;
    st.has_spare = has_spare_;
    return st;
  }
  void set_state(const State& st) noexcept {
    for (int i = 0; i < 4; ++i) s_[i] = st.words[i];
    spare_ = st.spare;
    has_spare_ = st.has_spare;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4]{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace hpctune
