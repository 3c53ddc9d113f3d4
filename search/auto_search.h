// auto: the default algorithm (a config without search.algorithm): picks one of the others from the
// space and the budget, says what it picked and why (notes(), state()["auto"]), and delegates to it.
//
// The rules come from bench/results/search.md (30 cases: continuous, ordinal, categorical, mixed
// conditional and a tabulated Fashion-MNIST MLP; budgets 50 and 100; 10 seeds), where the
// Gaussian process (`bayesian`: levels rounded inside the kernel, an overlap kernel for unordered
// choices, a Yeo-Johnson output transform) had the best median of hpctune's algorithms on nearly
// every case, conditional spaces included, and from bench/results/search-hartmann-grid.md for
// spaces of unordered choices:
//   - nothing to search (every parameter fixed)            -> random
//   - budget above `gp_max_trials` (default 2000)          -> tpe: the GP's ask grows with the
//     observations (about 57 ms at n = 1000, d = 10) and its fit is O(n^3); TPE's stays ~2 ms
//   - one objective, at least half of the searched parameters unordered choices (NAS-like cells,
//     categorical grids; conditional or not)                 -> portfolio of bayesian and tpe
//     (search/portfolio.h): on such spaces neither is better everywhere (20 seeds, 30/60/100
//     trials: the GP wins nas-cell, tpe hartmann6-cat6 and nas-cell2 at 60); the two sharing the
//     trials were the best of the three in 10 of those 18 cases (the GP alone in 8, tpe in 5) and
//     the worst in 2; on six categorical problems not used to choose (grids of unordered levels,
//     random cells): best in 11 of 18 (the GP 9, tpe 8), against the GP better 7, worse 3
//   - otherwise (continuous, ordinal grids, mixed mostly numbers, several objectives) -> bayesian
// The budget only matters against gp_max_trials: a small budget (10 trials) picks as a large one,
// since the GP's and the portfolio's start-up designs shrink to half the budget.
// The pick depends only on the space, the budget and the objectives, so it is the same after a
// resume. Settings: gp_max_trials.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

struct AutoChoice {
  std::string algorithm;  // a registered algorithm, or "portfolio" (search/portfolio.h) of `members`
  std::string reason;  // a clause for the user: "a budget of 5000 trials, above gp_max_trials 2000"
  std::vector<std::string> members = {};  // "portfolio": the member algorithms, the design's first
};

std::vector<SettingDecl> auto_settings();
// What auto runs for this spec (its settings already resolved or empty: the defaults then).
Result<AutoChoice> auto_choice(const SearchSpec& spec);
Result<std::unique_ptr<Searcher>> make_auto(const SearchSpec& spec);

}  // namespace hpctune::search
