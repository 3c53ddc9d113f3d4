// Trials in order of merit (ranking.h).
#include "report/ranking.h"

#include <algorithm>

namespace hpctune::report {

std::vector<store::TrialRow> rank_trials(std::vector<store::TrialRow> trials, bool maximize) {
  std::stable_sort(trials.begin(), trials.end(), [&](const store::TrialRow& a, const store::TrialRow& b) {
    const bool ha = a.objective.has_value() && a.state != store::TrialState::kFailed;
    const bool hb = b.objective.has_value() && b.state != store::TrialState::kFailed;
    if (ha != hb) return ha;
    if (!ha) return a.id < b.id;
    return maximize ? *a.objective > *b.objective : *a.objective < *b.objective;
  });
  return trials;
}

std::optional<store::TrialRow> best_trial(const std::vector<store::TrialRow>& trials, bool maximize) {
  auto ranked = rank_trials(trials, maximize);
  if (ranked.empty() || !ranked.front().objective || ranked.front().state == store::TrialState::kFailed) {
    return std::nullopt;
  }
  return std::move(ranked.front());
}

std::optional<store::TrialRow> first_failure(const std::vector<store::TrialRow>& trials) {
  const store::TrialRow* first = nullptr;
  for (const auto& t : trials) {
    if (t.state == store::TrialState::kFailed && (!first || t.finished_at < first->finished_at)) first = &t;
  }
  if (!first) return std::nullopt;
  return *first;
}

}  // namespace hpctune::report
