// evolution: asynchronous aging ("regularized") evolution, Real et al. 2019.
//
// The population is the `population` most recently born finished trials (birth = seq, so a trial's
// age does not depend on when its result arrived, and restore() rebuilds the same population).
// Until `population` trials were suggested, suggestions come from the initial design. After that,
// every suggestion samples `sample_size` members uniformly without replacement, takes the best
// (failed trials are worst; with several objectives a non-dominated one), and mutates it: each
// parameter with probability mutation_rate (at least one), numbers by a Gaussian step in unit
// space, choices by switching to another value, conditions repaired. The oldest member dies when a
// new one is born. Suggestion k draws from Rng(derive_seed(seed, k)). The best `population`
// warm-start trials form the initial population and shorten the initial design.
//
// Settings (SearchSpec::settings):
//   population      int     20       P
//   sample_size     int     5        S (at most P)
//   mutation_rate   float   derived  per-parameter mutation probability (default 1 / d)
//   mutation_sigma  float   0.15     Gaussian step for numbers, in unit space
//   init            string  lhs      initial design: uniform | sobol | lhs
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> evolution_settings();
Result<std::unique_ptr<Searcher>> make_evolution(const SearchSpec& spec);

}  // namespace hpctune::search
