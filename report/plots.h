// The computations behind the dashboard's charts, as pure functions of rows and numbers (no I/O,
// no store): best so far, box statistics, downsampling that keeps the best, the ETA, trainer-group
// utilization, Pareto flags, the space's parameters read from a stored config, parameter
// importance (search/importance.h: PED-ANOVA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/importance.h"
#include "search/space.h"
#include "store/store.h"

namespace hpctune::report {

// Element i is the best of values[0..i] (the largest when maximizing); NaN values are skipped
// (the best so far carries on; NaN until a first finite value).
std::vector<double> best_so_far(const std::vector<double>& values, bool maximize);

struct BoxStats {
  int64_t n = 0;
  double min = 0, q1 = 0, median = 0, q3 = 0, max = 0, mean = 0;
};
// Quartiles by linear interpolation between order statistics (numpy's default); n = 0 for none.
BoxStats box_stats(std::vector<double> values);

// k ascending indices of 0..n-1 at an even stride, the first and the last included (all of them
// when k >= n; none when k == 0).
std::vector<size_t> even_stride(size_t n, size_t k);

// The points of an optimization history to draw, ascending: every point that improved the best
// so far, plus an even stride of the others up to `max_points` in all (the improvements are kept
// even when they alone exceed it).
std::vector<size_t> history_keep(const std::vector<double>& values, bool maximize, size_t max_points);

// Which of n trials to draw, ascending: the best ⌈max_points/5⌉ by loss (smaller is better; ties
// by position), then an even stride of the rest up to max_points. All when n <= max_points.
std::vector<size_t> keep_best_and_stride(const std::vector<double>& losses, size_t max_points);

// Remaining trials × the median of `recent_durations` / max(1, busy_groups); nullopt without a
// duration or with nothing remaining.
std::optional<double> eta_seconds(int64_t remaining, std::vector<double> recent_durations, int64_t busy_groups);

// Busy time of trainer groups over [t0, t1]: each interval clipped to the span, overlaps of one
// group counted once.
struct BusyInterval {
  int64_t group = -1;
  double start = 0, end = 0;
};
struct Utilization {
  std::map<int64_t, double> busy_s;  // per group listed in `groups` (and any group of an interval)
  double percent = 0;                // busy time of all groups / (span × number of groups) × 100
};
Utilization utilization(const std::vector<BusyInterval>& intervals, double t0, double t1,
                        const std::vector<int64_t>& groups);

// Which points are on the Pareto front (non-dominated), each objective maximized or minimized as
// `maximize` says; a point with a non-finite value is never on it.
std::vector<bool> pareto_flags(const std::vector<std::vector<double>>& values, const std::vector<bool>& maximize);

// A space parameter as the dashboard shows it: type float | int | categorical | bool | fixed.
struct PlotParam {
  std::string name, type;
  bool log = false;
  std::optional<double> low, high;
  nlohmann::json choices;  // the values of a categorical or bool parameter; null otherwise
  search::ParamSpec spec;  // for the unit-interval transform (search::Space::to_unit)
};
// The parameters of a stored config's `space` (normalized: every parameter a full spec), in the
// space's order; the `space` of stage `stage` when that stage has one of its own. Entries it cannot
// read are skipped.
std::vector<PlotParam> space_params(const nlohmann::json& config_json, const std::string& stage = "");
// Whether a stored config's search.algorithm breeds children of earlier trials, so that its trials'
// generation numbers say something (search::AlgorithmTraits::breeds); false for an unknown one.
bool search_breeds(const nlohmann::json& config_json);

// PED-ANOVA over the trials that finished with an objective (search::ped_anova): each parameter on
// its unit interval, categories by index.
search::ImportanceResult parameter_importance(const std::vector<const store::TrialRow*>& trials,
                                              const std::vector<PlotParam>& params, bool maximize);


}  // namespace hpctune::report
