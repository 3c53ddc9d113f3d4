// The report library's entry point: a campaign's store opened read-only, and what every view
// needs from it (the campaign row, its trials, its objectives and Pareto front).
//
// The views of the other headers are built from a CampaignView:
//   ranking.h       trials best first, the best trial, the first failure
//   objective.h     the objective(s) and the recorded Pareto front
//   tables.h        the trials and the front as aligned tables
//   csv.h           the trials as CSV (the CLI's and the dashboard's), formulas defused
//   trial_json.h    trials, events and curves as JSON; the whole campaign for `export`
//   trial_detail.h  one trial: curve, attempts, events, artifacts, log tails
//   status.h        counts by state, stages and the best trial (`status`, as text and JSON)
//   stages.h        each stage's trials and result summary, the Stages table, a pbt schedule
//   progress.h      the live progress line of `run`
//   format.h        numbers, durations, times, widths, aligned tables
// The CLI prints them; the dashboard (issue 14) will serve them.
//
// Threads. open_campaign() may be called from any number of threads at once (an HTTP handler
// per request): each call opens its own read-only SQLite connection, which never blocks the
// master writing (WAL) nor is blocked by it, and sees its last committed transaction. A
// CampaignView is used by one thread at a time (its connection has no mutex): open one per
// request, or guard a shared one. Every other function of report/ takes rows and returns text or
// JSON without shared state, and is safe on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "report/objective.h"
#include "store/store.h"

namespace hpctune::report {

struct CampaignView {
  std::string db_path;
  std::unique_ptr<store::Store> store;  // read-only: for the views that read more (metrics, events)
  store::CampaignRow campaign;
  std::vector<store::TrialRow> trials;  // in id order
  // The trials the campaign's best is chosen from: in a workflow its main stage's (the first stage
  // with a search of its own: the others train on other data or blend), every trial otherwise.
  std::vector<store::TrialRow> main_trials;
  std::string main_stage;  // its name; "" without stages
  Objectives objectives;
  std::set<int64_t> pareto;  // the recorded front (several objectives only)
  // What `hpctune simulate` recorded in its campaign_simulated event (the cost model, where outcomes
  // came from); null for a campaign that ran for real. report/status.h: simulated_mark.
  nlohmann::json simulated;
  // The front for the tables' `pareto` column: null with a single objective.
  const std::set<int64_t>* front() const { return objectives.several() ? &pareto : nullptr; }
};

// Opens `db` read-only and loads its campaign. kNotFound when the file does not exist or holds no
// campaign; the store's errors otherwise (kUnavailable for a schema newer than this build).
Result<CampaignView> open_campaign(const std::string& db);

// The name of the campaign's main stage: the first stage of its config with a search of its own
// ("" without stages).
std::string main_stage_name(const nlohmann::json& config_json);

// The address the campaign's master listens on (resources.bind of its stored config; the default
// for a campaign recorded before the key existed).
std::string campaign_bind(const store::CampaignRow& campaign);

}  // namespace hpctune::report
