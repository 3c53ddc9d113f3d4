// cmaes: the covariance matrix adaptation evolution strategy, for continuous (and ordinal) spaces.
//
// The update follows Hansen's tutorial ("The CMA Evolution Strategy: A Tutorial", 2016) with the
// defaults of the `cmaes` Python package (Nomura) that Optuna's CmaEsSampler uses: population
// lambda = 4 + floor(3 ln d), mu = lambda / 2, log-rank weights with negative weights for the
// worse half (active CMA), cs / ds / cc / c1 / cmu as in the tutorial's table 1, mean update with
// cm = 1, cumulative step-size adaptation, rank-one and rank-mu covariance updates, eigen
// decomposition of C once per generation (Eigen, as gaussian_process.cpp).
//
// The search runs in the unit cube of search/encoding.h (log parameters in log space): the mean
// starts at the centre (or at the best warm-start trial), sigma0 = 1/6 of the unit range. Bounds
// as the `cmaes` package: a sample outside [0, 1]^d is drawn again (up to 100 times), then clipped.
//
// Which parameters are in the Gaussian: unconditional floats, ints and ordered choices with two or
// more values. Ints and ordered choices are searched in their continuous coordinate and rounded
// when decoded. With `margin: true` (default) they get the margin of "CMA-ES with margin" (Hamano
// et al. 2022) in a simplified form: before rounding, the deviation of a discrete coordinate from
// the mean is scaled up (a per-coordinate factor A_j >= 1, recomputed each generation from m,
// sigma and C) so that the probability of sampling a level other than the mean's is at least
// 1 / (d lambda); the distribution then never collapses on one integer level. The update uses the
// unscaled sample. Unordered choices, conditional parameters and fixed values are NOT part of the
// Gaussian: like Optuna (its independent sampler), they are drawn uniformly for every suggestion.
// A space with no Gaussian dimension is searched uniformly at random.
//
// Asynchronous ask/tell: CMA-ES is generational. ask(n) returns up to n members of the current
// generation (member seq k draws from rng_for(k)); once all lambda members of the generation were
// suggested, ask returns fewer, or none, until every member has been told and the generation is
// updated (the scheduler asks again after each tell). Failed members rank as the worst (ties by
// seq), pruned ones with their last value. The update depends on the members' values only, never
// on the order of the tells, so restore() (which replays suggestions and tells in seq order: the
// member k of generation g is always suggested after all of generation g - 1 was told) rebuilds
// exactly the state of the uninterrupted run.
//
// Restarts (IPOP, Auger and Hansen 2005): when the search stagnates (two generations whose values
// are all equal, sigma * max(sqrt C_ii, |pc_i|) below 1e-8, or cond(C) above 1e14), it restarts
// with the population multiplied by inc_popsize, sigma0, C = I, from the best point found so far
// (the `cmaes` package's should_stop() waits 10 + 30 d / lambda generations of flat values: too
// long for the budgets of hyperparameter search). With `restart: none` the population stays.
//
// One objective only: several objectives are a kConfig error ("cmaes optimizes one objective").
//
// Settings (SearchSpec::settings):
//   popsize      int     derived  lambda (default 4 + floor(3 ln d), d = Gaussian dimensions)
//   sigma0       float   1/6      initial step size in the unit cube
//   margin       bool    true     keep ints / ordered choices from collapsing on one level
//   restart      string  ipop     ipop | none
//   inc_popsize  int     2        IPOP: the population factor at each restart
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> cmaes_settings();
Result<std::unique_ptr<Searcher>> make_cmaes(const SearchSpec& spec);

}  // namespace hpctune::search
