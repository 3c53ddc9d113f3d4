// random: independent draws from the space, optionally space-filling.
//
// Settings (SearchSpec::settings):
//   init   string  "uniform"  uniform | sobol | lhs
//            uniform: suggestion k is Space::sample(Rng(derive_seed(seed, k)));
//            sobol:   point k of a scrambled Sobol sequence (seeded);
//            lhs:     Latin hypercube over max_trials points (100 when max_trials is 0), then
//                     further independent LHS blocks of the same size.
//
// Suggestion k depends only on (space, settings, seed, k): restore() after a crash continues
// exactly as the uninterrupted run. Multi-objective: nothing changes; state() has the front.
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> random_search_settings();
Result<std::unique_ptr<Searcher>> make_random_search(const SearchSpec& spec);

}  // namespace hpctune::search
