// Text output for people and machines: aligned tables, CSV and JSON of trials, the progress line.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/scheduler.h"
#include "store/store.h"

namespace hpctune::report {

// A table with a header row, columns aligned; numeric-looking cells right-aligned.
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// Trials sorted best first (by objective; finished trials without one last).
std::vector<store::TrialRow> rank_trials(std::vector<store::TrialRow> trials, bool maximize);

// The best trial: the first of rank_trials if it has an objective and did not fail; nullopt when
// no trial has finished with one yet.
std::optional<store::TrialRow> best_trial(const std::vector<store::TrialRow>& trials, bool maximize);

// Seconds from the campaign's creation to its end, or to `now` while it has not ended; nullopt
// when it records no creation time.
std::optional<double> campaign_elapsed(const store::CampaignRow& campaign, double now);

// What `hpctune status --format json` reports, read from the store by the CLI.
struct CampaignStatus {
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;
  std::map<std::string, int64_t> counts;  // Store::count_by_state: every state name, zeros included
  int64_t attempts_lost = 0;              // attempts closed as lost (worker died or went silent)
  std::vector<store::TrialRow> trials;
  std::vector<std::string> objectives;  // each objective's metric, in order (one for a single objective)
  bool maximize = true;                 // the first objective's direction
  const std::set<int64_t>* front = nullptr;  // the recorded Pareto front with several objectives
  double now = 0;                            // for the elapsed time of a campaign still running
};
// {campaign: {name, state, seed, algorithm, objectives, created_at, finished_at, elapsed_s,
// max_trials}, stages: [{id, name, kind, state, created_at, finished_at}], trials: {total,
// by_state}, attempts_lost, best: {trial, metric, objective, attempt, params, metrics} or null,
// and with several objectives pareto_front: [trial ids]}. Times are null when unset.
nlohmann::json status_json(const CampaignStatus& status);

// The Pareto front a multi-objective campaign recorded (search_state.pareto_front_trials, trial
// ids); empty for a single objective or before the master first saved its search state.
std::set<int64_t> recorded_pareto_front(const store::CampaignRow& campaign);

// One row per trial: id, state, attempt, objective, each parameter, seconds (from the start of
// the current attempt to its end). With a front, a
// `pareto` column marks its members with '*'.
std::string trials_table(const std::vector<store::TrialRow>& trials, const std::string& metric,
                         const std::set<int64_t>* pareto = nullptr);
// With several objectives: a column for each (the first is the trial's objective, the others are
// read from its metrics).
std::string trials_table(const std::vector<store::TrialRow>& trials, const std::vector<std::string>& objectives,
                         const std::set<int64_t>* pareto = nullptr);
// A time in seconds since the epoch for JSON: null when it is 0 ("not yet").
nlohmann::json time_or_null(double t);
// With a front, a `pareto` column (1 or 0) / a "pareto" member (true or false) per trial.
std::string trials_csv(const std::vector<store::TrialRow>& trials, const std::set<int64_t>* pareto = nullptr);
nlohmann::json trials_json(const std::vector<store::TrialRow>& trials, const std::set<int64_t>* pareto = nullptr);
// The front's trials: id, each of `metrics` (the objectives), each parameter; in id order.
std::string pareto_table(const std::vector<store::TrialRow>& trials, const std::set<int64_t>& front,
                         const std::vector<std::string>& metrics);

// "[12/16] ██████░░ done 10 · running 2 · queued 0 · best 0.8712 (#7) · 0:42 · ETA 0:08", at most
// `width` columns (0: no limit): the least important fields are left out first (the bar, the
// queue, ...), then the line is cut. A line wider than the terminal would wrap, and every redraw
// would leave a copy behind.
std::string progress_line(const scheduler::Progress& p, double elapsed_s, int width);
// Columns `text` takes on a terminal (one per UTF-8 code point).
size_t display_width(const std::string& text);
std::string format_duration(double seconds);
std::string format_number(double value);

}  // namespace hpctune::report
