// A scrambled Sobol sequence (Joe & Kuo direction numbers, random digital shift from a seed).
//
// point(k) is computed directly from k (natural order, not Gray-code order: every power-of-two
// prefix is the same point set), so a restarted search can jump to any index. Dimensions past the
// direction table (53) fall back to a pseudo-random coordinate derived from (seed, k, dim).
#pragma once

#include <cstdint>
#include <vector>

namespace hpctune::search {

class SobolSequence {
 public:
  SobolSequence(std::size_t dims, uint64_t seed);
  std::size_t dims() const noexcept { return dims_; }
  // Coordinates in [0, 1).
  std::vector<double> point(uint64_t index) const;

  static constexpr std::size_t kTableDims = 53;

 private:
  std::size_t dims_;
  uint64_t seed_;
  std::vector<std::vector<uint32_t>> directions_;  // [dim][bit]
  std::vector<uint32_t> shift_;
};

}  // namespace hpctune::search
