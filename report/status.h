// The state of a campaign at a glance (`hpctune status`): its stages, trials by state, attempts
// lost, the best trial, the elapsed time; as JSON for scripts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "store/store.h"

namespace hpctune::report {

struct CampaignView;

struct CampaignStatus {
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;
  std::map<std::string, int64_t> counts;  // Store::count_by_state: every state name, zeros included
  int64_t attempts_lost = 0;              // attempts closed as lost (worker died or went silent)
  std::vector<store::TrialRow> trials;
  std::vector<std::string> objectives;  // each objective's metric, in order (one for a single objective)
  bool maximize = true;                 // the first objective's direction
  std::optional<std::set<int64_t>> front;  // the recorded Pareto front with several objectives
  double now = 0;                          // for the elapsed time of a campaign still running
};

// The status of the view's campaign at `now` (seconds since the epoch): reads the counts, stages
// and attempts from the view's store.
Result<CampaignStatus> campaign_status(CampaignView& view, double now);

// {campaign: {name, state, seed, algorithm, objectives, created_at, finished_at, elapsed_s,
// max_trials}, stages: [{id, name, kind, state, created_at, finished_at}], trials: {total,
// by_state}, attempts_lost, best: {trial, metric, objective, attempt, params, metrics} or null,
// and with several objectives pareto_front: [trial ids]}. Times are null when unset.
nlohmann::json status_json(const CampaignStatus& status);

// Seconds from the campaign's creation to its end, or to `now` while it has not ended; nullopt
// when it records no creation time.
std::optional<double> campaign_elapsed(const store::CampaignRow& campaign, double now);

// Attempts closed as lost (a worker died or went silent, or the master restarted).
Result<int64_t> count_lost_attempts(store::Store& db, const std::vector<store::TrialRow>& trials);

}  // namespace hpctune::report
