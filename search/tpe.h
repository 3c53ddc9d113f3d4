// tpe: a tree-structured Parzen estimator in the manner of Optuna's TPESampler (3.x defaults).
//
// The finished trials are split into "below" (the best gamma(n) = min(ceil(0.1 n), 25)) and
// "above" (the rest); completed trials rank before pruned ones (pruned: deeper step first, then
// value), failed ones are left out, and running trials join "above" as the worst (constant liar).
// Each side becomes a Parzen estimator per parameter, over the unit space (log parameters in log
// space): truncated Gaussians at the observations, bandwidths from the distance to the
// neighbours clipped to [1/min(100, n + 1), 1] ("magic clip"), plus a prior kernel N(0.5, 1)
// of weight prior_weight; categorical parameters get a smoothed histogram. Older observations
// weigh less once there are more than 25 (Optuna's default_weights). Of n_ei_candidates samples
// from the "below" estimator, the one maximizing log l(x) - log g(x) is suggested.
//
// Univariate (default, as Optuna): every parameter separately, parents first, so conditional
// parameters only ever see the trials where they were active. Multivariate: the unconditional
// parameters are sampled and scored jointly (product kernels, Scott-like bandwidth
// 0.2 n^(-1/(d+4))), the conditional ones univariately after them.
//
// Several objectives: the split ranks by non-dominated front, then crowding distance (MOTPE-like).
// Warm-start trials are ordinary (oldest) observations.
//
// Settings (SearchSpec::settings):
//   n_startup        int     10       random suggestions until this many trials have finished
//   init             string  uniform  design of the startup points: uniform | sobol | lhs
//   n_ei_candidates  int     24       samples from l(x) per suggestion
//   multivariate     bool    false    joint estimator over the unconditional parameters
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
