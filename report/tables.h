// The trials and the Pareto front as aligned tables for people (CSV for spreadsheets: csv.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "report/format.h"
#include "store/store.h"

namespace hpctune::report {

// One row per trial: id, its stage (with `stages`, when the campaign has more than one), state,
// attempt, objective, each searched parameter (shown_params: not the keys hpctune adds), `from`
// (the trial it started from: a transfer's source, a retrained member's original; only when one
// has it), seconds (from the start of the current attempt to its end). With a front, a `pareto`
// column marks its members with '*'.
std::string trials_table(const std::vector<store::TrialRow>& trials, const std::string& metric,
                         const std::set<int64_t>* pareto = nullptr, const std::vector<store::StageRow>* stages = nullptr);
// With several objectives: a column for each (the first is the trial's objective, the others are
// read from its metrics).
std::string trials_table(const std::vector<store::TrialRow>& trials, const std::vector<std::string>& objectives,
                         const std::set<int64_t>* pareto = nullptr, const std::vector<store::StageRow>* stages = nullptr);

// The front's trials: id, each of `metrics` (the objectives), each searched parameter; in id order.
std::string pareto_table(const std::vector<store::TrialRow>& trials, const std::set<int64_t>& front,
                         const std::vector<std::string>& metrics);

}  // namespace hpctune::report
