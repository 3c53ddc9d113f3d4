#include "search/initial_design.h"

#include <algorithm>
#include <numeric>

namespace hpctune::search {

bool parse_design_kind(const std::string& name, DesignKind& out) {
  if (name == "uniform") out = DesignKind::kUniform;
  else if (name == "sobol") out = DesignKind::kSobol;
  else if (name == "lhs") out = DesignKind::kLhs;
  else return false;
  return true;
}

int64_t startup_trials(int64_t budget, int64_t dims) {
  const int64_t base = std::clamp<int64_t>((dims + 1) / 2, 5, 10);
  if (budget <= 0) return base;
  return std::min(base, std::max<int64_t>(2, budget / 4));
}

InitialDesign::InitialDesign(const Space& space, DesignKind kind, uint64_t seed, int64_t block)
    : space_(&space), kind_(kind), seed_(seed), block_(std::max<int64_t>(1, block)) {
  if (kind_ == DesignKind::kSobol) sobol_ = std::make_unique<SobolSequence>(space.size(), derive_seed(seed, 0x5B));
}

const std::vector<std::vector<uint32_t>>& InitialDesign::lhs_block(int64_t b) {
  auto it = lhs_.find(b);
  if (it != lhs_.end()) return it->second;
  // Keep only a few blocks: designs are read mostly in order.
  if (lhs_.size() > 4) lhs_.erase(lhs_.begin());
  Rng rng(derive_seed(derive_seed(seed_, 0x1A5), static_cast<uint64_t>(b)));
  std::vector<std::vector<uint32_t>> perms(space_->size(), std::vector<uint32_t>(static_cast<std::size_t>(block_)));
  for (auto& perm : perms) {
    std::iota(perm.begin(), perm.end(), 0u);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  }
  return lhs_.emplace(b, std::move(perms)).first->second;
}

std::vector<double> InitialDesign::unit_point(int64_t k) {
  const std::size_t d = space_->size();
  switch (kind_) {
    case DesignKind::kUniform: {
      Rng rng(derive_seed(seed_, static_cast<uint64_t>(k)));
      std::vector<double> u(d);
      for (auto& x : u) x = rng.uniform();
      return u;
    }
    case DesignKind::kSobol: return sobol_->point(static_cast<uint64_t>(k));
    case DesignKind::kLhs: {
      const auto& perms = lhs_block(k / block_);
      const auto i = static_cast<std::size_t>(k % block_);
      Rng rng(derive_seed(derive_seed(seed_, 0x1A6), static_cast<uint64_t>(k)));
      std::vector<double> u(d);
      for (std::size_t j = 0; j < d; ++j)
        u[j] = (static_cast<double>(perms[j][i]) + rng.uniform()) / static_cast<double>(block_);
      return u;
    }
  }
  return std::vector<double>(d, 0.5);
}

Params InitialDesign::point(int64_t k) {
  if (kind_ == DesignKind::kUniform) {
    // The documented contract of random search: suggestion k is Space::sample(Rng(derive_seed(seed, k))).
    Rng rng(derive_seed(seed_, static_cast<uint64_t>(k)));
    return space_->sample(rng);
  }
  return space_->from_unit_vector(unit_point(k));
}

}  // namespace hpctune::search
