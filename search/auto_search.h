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
//     categorical grids; conditional or not)                 -> a portfolio (search/portfolio.h)
//     of tpe and, below 100 trials, forest (bayesian with `surrogate: forest`, SMAC's random
//     forest, whose splits are "this value or not" and need no distance between unordered
//     values), from 100 trials on the Gaussian process. Hartmann-6 on a 6-level unordered grid,
//     60 trials, median over 100 seeds (0..99 / 1000..1099): forest+tpe 0.646 / 0.638, GP+tpe
//     0.791 / 0.752, tpe 0.741 / 0.638, the GP 1.05; at 100-200 trials the GP+tpe portfolio was
//     the better one on the NAS-like cells (cat-08 at 200: 0.472 on every seed against 0.618;
//     nas-cell and nas-cell2 at 100: 0 against 0.19 and 0.85; cat-01 at 100: 1.39 against 2.33)
//     (bench/results/search.md, search-hartmann-grid.md)
//   - otherwise (continuous, ordinal grids, mixed mostly numbers, several objectives) -> bayesian
// The budget matters against gp_max_trials and forest_below_trials (100; no budget counts as a
// large one); otherwise a small budget (10 trials) picks as a large one, since the GP's and the
// portfolio's start-up designs shrink to half the budget.
// Under early stopping (SearchSpec::fidelity) every pick but random models per rung (model_data.h),
// and notes() says so.
// The pick depends only on the space, the budget and the objectives, so it is the same after a
// resume. Settings: gp_max_trials, forest_below_trials.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "search/portfolio.h"
#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

struct AutoChoice {
  std::string algorithm;  // a registered algorithm, or "portfolio" (search/portfolio.h) of `members`
  std::string reason;  // a clause for the user: "a budget of 5000 trials, above gp_max_trials 2000"
  std::vector<std::string> members = {};  // "portfolio": the members' names (portfolio_member), the design's first
};

std::vector<SettingDecl> auto_settings();
// What auto runs for this spec (its settings already resolved or empty: the defaults then).
Result<AutoChoice> auto_choice(const SearchSpec& spec);
Result<std::unique_ptr<Searcher>> make_auto(const SearchSpec& spec);
// A portfolio member of auto's by name: "forest" is bayesian with surrogate: forest, any other
// name the registered algorithm of that name with its defaults.
PortfolioMember portfolio_member(const std::string& name);

}  // namespace hpctune::search
