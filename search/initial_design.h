// Space-filling designs shared by random search and the initial phase of the model-based
// algorithms: point k of a design is a pure function of (space, kind, seed, block, k), so a
// restarted search regenerates exactly the points it would have proposed.
//
//   uniform: point k from Rng(derive_seed(seed, k)).
//   sobol:   point k of a digitally shifted Sobol sequence.
//   lhs:     Latin hypercube in blocks of `block` points (the trial budget or the initial design
//            size); every block is a complete LHS of its own, so the first `block` points are
//            stratified in every parameter.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "search/sobol.h"
#include "search/space.h"

namespace hpctune::search {

enum class DesignKind { kUniform, kSobol, kLhs };

class InitialDesign {
 public:
  InitialDesign(const Space& space, DesignKind kind, uint64_t seed, int64_t block);

  // Point k of the design as unit-cube coordinates (one per parameter in space order).
  std::vector<double> unit_point(int64_t k);
  // Point k of the design as a configuration of the space.
  Params point(int64_t k);

 private:
  const std::vector<std::vector<uint32_t>>& lhs_block(int64_t b);

  const Space* space_;
  DesignKind kind_;
  uint64_t seed_;
  int64_t block_;
  std::unique_ptr<SobolSequence> sobol_;
  std::map<int64_t, std::vector<std::vector<uint32_t>>> lhs_;  // block -> [dim][i] stratum
};

// "uniform" | "sobol" | "lhs".
bool parse_design_kind(const std::string& name, DesignKind& out);

// How many random start-up trials a model-based algorithm runs before its model, from the budget
// (max_trials; 0 when unknown) and the number of searched parameters d:
//
//   min(clamp(ceil(d / 2), 5, 10), max(2, budget / 4))
//
// Measured with TPE (issue 12; 10 seeds, budgets 50 and 100, 5 continuous and 3 discrete
// problems of d = 2 to 10): 5 random trials matched or beat 10 and 20 on most problems, Levy-10
// included, so the start-up grows with the dimension only slowly, up to Optuna's 10. A quarter
// of the budget at most, so that a small campaign still uses its model for most of its trials
// (max_trials 8: 2 random, the model from trial 3); 2 at least, the fewest a model can split.
int64_t startup_trials(int64_t budget, int64_t dims);

}  // namespace hpctune::search
