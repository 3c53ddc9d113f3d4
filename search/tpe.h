// tpe: a tree-structured Parzen estimator in the manner of Optuna's TPESampler (3.x kernels;
// multivariate with constant liar by default, as Optuna 5).
//
// The finished trials are split into "below" (the best gamma(n) = min(ceil(0.1 n), 25)) and
// "above" (the rest); completed trials rank before pruned ones (pruned: deeper step first, then
// value), failed ones are left out, and running trials join "above" as the worst (constant liar).
// Under early stopping (SearchSpec::fidelity) the split is of the values at one level instead
// (model_data.h: the highest rung, or the final step, with at least max(d + 1, 6) values, as BOHB),
// the trials that have not reached it running (constant liar); startup lasts until a level has them.
// Each side becomes a Parzen estimator over the unit space (log parameters in log space):
//   - floats: truncated Gaussians at the observations, plus a prior kernel N(0.5, 1) of weight
//     prior_weight; univariate bandwidths from the distance to the neighbours clipped to
//     [1/min(100, n + 1), 1] ("magic clip"), multivariate ones 0.2 n^(-1/(d+4)) (Scott-like);
//   - ints and ordered choices: the same kernels, discretized as Optuna's int distributions: the
//     probability of a level is the kernel's mass over the level's interval [v - step/2,
//     v + step/2] (over [0, 1]), not a density at a point, and draws snap to the level;
//   - unordered choices: Optuna's categorical kernels, each observation weight 1 on its own
//     choice plus prior_weight / n_kernels on every choice, and a uniform prior kernel.
// Older observations weigh less once there are more than 25 (Optuna's default_weights). Of
// n_ei_candidates draws from the "below" estimator, the one maximizing log l(x) - log g(x) is
// suggested. When that configuration was already evaluated or is running (the usual end of a
// small discrete space), whole configurations drawn from l are ranked by their summed score
// and the best one not seen yet is suggested (the same one only when every draw was seen).
//
// Groups: univariate, every parameter separately (parents first, so conditional parameters only
// ever see the trials where they were active). Multivariate (default): the unconditional
// parameters jointly (product kernels), and with `group` (default) the conditional ones jointly
// per condition (parameters with the same `when` always occur together; Optuna's group=True),
// without it univariately.
//
// Several objectives: the split ranks by non-dominated front, then crowding distance (MOTPE-like).
// Warm-start trials are ordinary (oldest) observations. notes(): "startup: 5 trials of 50; model
// from trial 6".
//
// Settings (SearchSpec::settings):
//   n_startup        int     derived  random suggestions until this many trials have finished;
//                                     default startup_trials(max_trials, searched parameters)
//                                     (search/initial_design.h)
//   init             string  uniform  design of the startup points: uniform | sobol | lhs
//   n_ei_candidates  int     24       samples from l(x) per suggestion
//   multivariate     bool    true     joint estimators over parameters that occur together
//   group            bool    true     multivariate: conditional parameters jointly per condition
//   constant_liar    bool    true     running trials count as the worst in "above"
//   gamma            float   0.1      fraction of trials in "below" ...
//   gamma_max        int     25       ... capped at this many
//   prior_weight     float   1.0      weight of the prior kernel
//   magic_clip       bool    true     lower-bound the bandwidths by 1 / min(100, n + 1)
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> tpe_settings();
Result<std::unique_ptr<Searcher>> make_tpe(const SearchSpec& spec);

}  // namespace hpctune::search
