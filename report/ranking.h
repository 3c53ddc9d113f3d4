// Trials in order of merit: best first by the objective, the best trial, the first failure.
#pragma once

#include <optional>
#include <vector>

#include "store/store.h"

namespace hpctune::report {

// Trials sorted best first (by objective; finished trials without one, and failed ones, last, in
// id order). Stable: equal objectives keep their order.
std::vector<store::TrialRow> rank_trials(std::vector<store::TrialRow> trials, bool maximize);

// The best trial: the first of rank_trials if it has an objective and did not fail; nullopt when
// no trial has finished with one yet.
std::optional<store::TrialRow> best_trial(const std::vector<store::TrialRow>& trials, bool maximize);

// The failed trial that finished first (for "the first failure, trial N: ..."); nullopt when none
// failed.
std::optional<store::TrialRow> first_failure(const std::vector<store::TrialRow>& trials);

}  // namespace hpctune::report
