// Shared by the model-based searchers: observations (and warm-start trials) turned into unit
// coordinates and losses, and scalarization for multi-objective search.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/rng.h"
#include "search/encoding.h"
#include "search/searcher.h"

namespace hpctune::search {

struct DataPoint {
  int64_t seq = -1;             // < 0: a warm-start trial
  std::vector<double> u;        // unit coordinates (NaN for inactive)
  std::vector<double> losses;   // one per objective, minimize form; empty when failed
  Outcome outcome = Outcome::kCompleted;
  int64_t step = 0;
};

// An observation as a data point (params encoded, values turned into losses).
DataPoint make_data_point(const Encoder& encoder, const Observation& obs, const std::vector<Objective>& objectives);

// Warm-start observations, repaired into the space (a seeded draw fills parameters that the
// earlier campaign did not have), as data points with seq -1, -2, ...
std::vector<DataPoint> warm_start_points(const Space& space, const Encoder& encoder, const SearchSpec& spec);

// Random weights on the simplex (uniform), for ParEGO-style scalarization.
std::vector<double> random_simplex_weights(std::size_t m, Rng& rng);

// Augmented Chebyshev scalarization of losses normalized to [0, 1] over the data:
// max_i w_i f_i + 0.05 sum_i w_i f_i. Points without losses get NaN.
std::vector<double> scalarize(const std::vector<DataPoint>& data, const std::vector<double>& weights);

// Output transforms of the targets (as HEBO), for a GP whose noise is Gaussian while losses
// rarely are: a heavy upper tail makes the standardized best points all look alike.
//
// Yeo-Johnson power transform of one value (defined for every real y; lambda = 1 is the identity).
double yeo_johnson(double y, double lambda) noexcept;
// Its lambda fitted by maximum likelihood (a normal after the transform), searched in [-2, 4].
double fit_yeo_johnson_lambda(const std::vector<double>& y);
// Copula transform: the normal quantile of each value's mid-rank (rank + 0.5) / n; ties share the
// mean of their ranks. Keeps only the order of the values.
std::vector<double> copula_transform(const std::vector<double>& y);

// --- Multi-fidelity (SearchSpec::fidelity, under early stopping) ---------------------------------
//
// A pruned trial's value is its value at the step where it stopped: a slow starter stopped at
// step 3 of 27 would look bad forever if a model took it for a final value. bayesian, tpe (and
// auto through them) therefore fit their model on the values at one fidelity level, as BOHB
// (Falkner et al. 2018) does per budget:
//   - the levels are the rungs (0 < r < max_step) and max_step, the top one; with several
//     objectives only the top one (the reports carry the primary objective only);
//   - a trial's value at the top level is its final value (is_final()); at a rung r, its first
//     report at a step in [r, the next level) (the value the stopper judged it on; with reports at
//     the rungs' steps, the value at step r). A partial Observation (pruned, or completed short
//     of a full training: completes_training()) is one more report at its step, and no report
//     above that step counts;
//   - the model's level is the highest one with at least fidelity_min_points() values;
//   - at that level, a trial that is not finished (running or paused, reported or not) and has not
//     reached it is pending (a fantasy, or constant liar), one that reached it an observation; a
//     failed trial takes part as failed (each algorithm's usual treatment: the worst loss, or the
//     bad group) where it has no value; a trial stopped below it (pruned, or partial) is `stopped`:
//     its value there is unknown, but the model must not take its place for unexplored. Left out,
//     a GP at rung 3 whose data held no low learning rate proposed lr = 0.01 and 0.083 for 15 of
//     30 trials, each pruned at rung 1 and so never in its data: the model takes such a trial as
//     visited (a fantasy at its predicted value; TPE: the bad group, where Optuna ranks pruned
//     trials).

// Each trial's intermediate values of its primary objective, raw: seq -> step -> value.
using ReportLog = std::map<int64_t, std::map<int64_t, double>>;

// The data of the level a model is fitted on.
struct LevelData {
  int64_t level = 0;    // the step whose values are modelled (max_step: final values); 0: no level has
                        // `needed` values yet (the algorithm keeps to its start-up design)
  int64_t needed = 0;   // fidelity_min_points()
  std::vector<DataPoint> points;       // at `level` (step = level): the finished trials in the order of
                                       // `told`, then the running ones that reached it, by seq
  std::vector<int64_t> pending;        // not finished, not at `level` yet: their seqs, ascending, keys of
                                       // the `pending` map given to fidelity_model_data() (the searcher's
                                       // pending(), which keeps their parameters: not copied here)
  std::vector<std::pair<int64_t, int64_t>> counts;  // every level and how many values it has, ascending
  std::vector<std::size_t> stopped;    // rows of `told` stopped below `level` (pruned or partial, not
                                       // failed), in told order
};

// The values a level needs before a model is fitted on it: max(d + 1, 6), d the searched (not
// fixed) parameters. d + 1 is BOHB's N_min (a model needs more points than dimensions); 6 keeps a
// one- or two-parameter model from being fitted on two or three points of a low rung.
int64_t fidelity_min_points(const Space& space);

// The levels of a fidelity (rungs inside (0, max_step), ascending, distinct; then max_step); empty
// without one. `objectives` > 1: max_step only.
std::vector<int64_t> fidelity_levels(const Fidelity& fidelity, std::size_t objectives);

// The told trials' values at the rungs, which a searcher keeps between calls of fidelity_model_data
// (its `cache`): its told trials only grow, and a told trial's values change only when it gets a
// report after it was told (a replay after restore()), which SearcherBase counts (told_reports()).
// A call then fills the rows of the trials told since the last one, not every row (at 20,000 trials
// the walk through every trial's reports was most of an ask).
struct RungCache {
  std::vector<double> value;   // [row * rungs + k], rows: told, then the call's pending trials
  std::vector<char> has;       // the same: 1 where the row has a value at rung k
  std::vector<char> final;     // per told row: it has a final value (the top level)
  std::size_t rows = 0;        // the told rows filled
  int64_t last_seq = 0;        // told[rows - 1].seq, to see that the told trials only grew
  uint64_t told_reports = 0;   // SearcherBase::told_reports() when they were filled
};

// The data at the model's level. `told`: the warm-start points and the finished trials as data
// points (make_data_point), in the order the algorithm keeps them; `pending`: the suggestions asked
// and not finished (SearcherBase::pending()), which LevelData::pending names by seq; `reports`:
// tell_report()'s values; `cache` (optional) with `told_reports`: see RungCache. A pure function of
// its arguments (the cache changes its cost only): the order of tell_report() and restore() calls
// does not matter.
LevelData fidelity_model_data(const SearchSpec& spec, const Encoder& encoder, const std::vector<DataPoint>& told,
                              const std::map<int64_t, Params>& pending, const ReportLog& reports,
                              RungCache* cache = nullptr, uint64_t told_reports = 0);

// Calls f(seq, params) for each trial of `pending` (SearcherBase::pending()) named in `seqs`
// (LevelData::pending, ascending), in seq order; a seq that is no longer pending is skipped.
template <class F>
void for_each_pending(const std::vector<int64_t>& seqs, const std::map<int64_t, Params>& pending, F&& f) {
  auto want = seqs.begin();
  for (auto it = pending.begin(); it != pending.end() && want != seqs.end(); ++it) {
    while (want != seqs.end() && *want < it->first) ++want;
    if (want != seqs.end() && *want == it->first) f(it->first, it->second);
  }
}

// state()["fidelity"]: {"level", "needed", "observations", "pending", "stopped", "levels": [{"step", "values"}]}.
nlohmann::json fidelity_state(const LevelData& data);

// The notes() line of a model under early stopping: what it is fitted on. `model`: "Gaussian
// process", "Parzen estimators", ...
std::string fidelity_note(const SearchSpec& spec, const std::string& model);

}  // namespace hpctune::search
