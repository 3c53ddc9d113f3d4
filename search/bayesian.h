// bayesian: Gaussian-process Bayesian optimization over the transformed (unit) space.
//
// After an initial design, each suggestion maximizes an acquisition function of a GP
// (gaussian_process.h) fitted to the observations: expected improvement, computed in log space,
// a lower confidence bound, or max-value entropy search. The acquisition is maximized by random sampling (plus
// perturbations of the best observations), then a local search from the best few candidates that
// moves numbers by Gaussian steps (ints also by one level) and switches choices, conditions
// repaired after every move. Ints and choices enter the GP rounded to their level (encoding.h),
// so its surface is flat within a level.
//
// Pending trials (asked, not told) and the earlier members of a batch are added to the GP as
// fantasies: the posterior mean there (kriging believer) or a constant (constant liar), so a batch
// spreads out. Between hyperparameter refits, new points extend the Cholesky factor in O(n^2).
//
// Targets: each observation's loss (the objective, negated when maximized); failed trials take the
// worst loss seen; pruned trials their last value. Under early stopping (SearchSpec::fidelity) the
// model is fitted on the values at one level instead (model_data.h: the highest rung, or the final
// step, with at least max(d + 1, 6) values, as BOHB): a pruned trial's partial value never stands for
// a final one, and a running or paused trial is a fantasy until it reaches the level; the design
// goes on until a level has the values. state()["fidelity"] and each suggestion's meta.level say
// which level the model was fitted on. With several objectives, every batch draws
// random simplex weights from its seq and models their augmented Chebyshev scalarization
// (ParEGO). Warm-start trials are observations from the start and shorten the initial design.
//
// Settings (SearchSpec::settings):
//   n_initial         int     derived  initial design size; default clamp(2 * d, 5, 20), d the
//                                      number of searched (non-fixed) parameters
//   init              string  sobol    design of the initial points: uniform | sobol | lhs
//   acquisition       string  ei       ei | ucb | mes. mes: max-value entropy search (Wang &
//                                      Jegelka 2017): the information a value gives about the
//                                      minimum's value, whose distribution is a Gumbel fitted
//                                      to the model at 1,000 random points (10 draws per
//                                      suggestion); the polish ranks neighbours by it too, an
//                                      escape's ball keeps expected improvement. Hartmann-6 on
//                                      the 6-level UNordered grid, 60 trials, the GP alone: the
//                                      optimum in 21 / 13 of 100 seeds (1000.. / 0..) against
//                                      ei's 11 / 8; on the ordered grid 53 / 40 against 56 / 51,
//                                      so not the default (bench/results/search-hartmann-grid.md)
//   ucb_kappa         float   2.0      ucb: minimize mean - kappa * stddev
//   pending           string  kriging_believer   kriging_believer | constant_liar
//   liar              string  worst    constant_liar's value: best | mean | worst observed
//   output_transform  string  power    none | log | power | copula: log models log(y - min + delta)
//                                      of the loss (for objectives with a heavy upper tail; worse on
//                                      smooth ones); power a Yeo-Johnson transform of the
//                                      standardized loss, its lambda fitted by maximum likelihood
//                                      (HEBO; the default: it halves the GP's regret on
//                                      rosenbrock4, levy10, ackley4 at budget 100); copula the
//                                      normal quantiles of the losses' ranks
//   input_warping     bool    false    a Kumaraswamy CDF warp of each numeric input, its two
//                                      parameters fitted with the kernel's (Snoek et al. 2014);
//                                      off by default: with the power transform it measured
//                                      worse on rosenbrock4 and levy10 at budgets 50 and 100
//   choice_kernel     string  overlap  overlap | onehot: an unordered choice's one-hot features
//                                      share one lengthscale (a Hamming-distance kernel) or have
//                                      one per value
//   refit_every       int     5        refit the hyperparameters every k new observations
//                                      (always while fewer than 30)
//   fit_restarts      int     3        random starts of the marginal-likelihood fit, besides the
//                                      previous and default hyperparameters
//   max_fit_points    int     100      hyperparameters are fitted on at most this many points
//   acq_samples       int     1000     random candidates per suggestion
//   acq_local_starts  int     5        local searches per suggestion
//   start_at_centre   bool    true     the design's first point is the middle of every numeric
//                                      and ordered parameter's range (log-scaled ones at the
//                                      geometric middle); unordered choices as the design drew
//                                      them. Ackley, Rosenbrock and Levy grids at 20 trials: the
//                                      regret of CMA-ES, which starts there, instead of random's
//   escape_after      int     derived  6 where more than half the searched parameters are
//                                      numbers or ordered levels, else 0 (off). Once this many
//                                      trials in a row found no better loss, every other
//                                      suggestion descends another basin of the model: the
//                                      observed points are grouped by where a descent of the
//                                      GP's mean, one level at a time, ends; the best point of
//                                      the best other basin is the centre of a ball in which
//                                      expected improvement over that point is maximised, until
//                                      escape_after suggestions in the ball have not bettered
//                                      it; then the next basin. Suggestions carry
//                                      meta.escape_from (the centre's trial)
//   escape_radius     float   0.15     the ball's radius, in unit coordinates times
//                                      sqrt(searched parameters)
//   polish_last       int     derived  a third of max_trials on grids (every searched parameter
//                                      an int on a linear scale or a choice), else 0 (off). In
//                                      the last this many trials, a suggestion that is not an
//                                      escape is the untried one-level neighbour (an int or an
//                                      ordered level by one, an unordered choice to any other
//                                      value) of the best point with the best expected
//                                      improvement (meta.polish), so that the search ends ON a
//                                      local optimum of the grid, not one level short of it; once
//                                      every neighbour was tried (a local optimum, confirmed),
//                                      escapes take every turn. Hartmann-6 on the 6-level ordered
//                                      grid, 60 trials, seeds 1000..1099: the grid's optimum in 56
//                                      seeds instead of 48 (bench/results/search-hartmann-grid.md)
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> bayesian_settings();
Result<std::unique_ptr<Searcher>> make_bayesian(const SearchSpec& spec);
// The default n_initial: clamp(2 * d, 5, 20), d the searched (not fixed) parameters, at most half
// the budget (when one is given).
int64_t default_n_initial(const Space& space, int64_t budget = 0);
// The default escape_after: 6 where more than half the searched parameters are numbers or
// ordered levels, else 0.
int64_t default_escape_after(const Space& space);
// The default polish_last: a third of the budget on grids (every searched parameter an int on a
// linear scale or a choice), else 0.
int64_t default_polish_last(const Space& space, int64_t budget);

}  // namespace hpctune::search
