// The state of a campaign at a glance (`hpctune status`): its stages, trials by state, attempts
// lost, the best trial, the elapsed time; as JSON for scripts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "report/group_time.h"
#include "store/store.h"

namespace hpctune::report {

struct CampaignView;

// Whether the master of a campaign recorded `running` still runs. A master killed outright
// (SIGKILL, a lost node) leaves its campaign `running` in the store; readers never write, so they
// judge it from the master lock (Store::master_lock_held: the kernel drops it with the process) and
// the heartbeat the master writes every store::kMasterHeartbeatEvery_s.
struct MasterLiveness {
  // The master is gone: its lock is free, and its heartbeat is older than
  // store::kMasterHeartbeatStale_s (or that far in the future: no live master wrote it) or it ran on this host and its process no longer exists (a
  // campaign without a heartbeat, recorded before there were any, is judged by the process only). The views then show the campaign interrupted, with the command that resumes it.
  bool gone = false;
  double heartbeat_age_s = -1;  // seconds since the last heartbeat; < 0 = none recorded
  std::string resume;           // "hpctune resume DB" when gone, "" otherwise
  // The state as the views show it: the recorded state, or "interrupted (the master is gone: last
  // heartbeat 3m 2s ago; resume with: hpctune resume DB)"; "running (no heartbeat for 45s; the
  // master still holds its lock)" for a master that holds its lock but has stopped writing.
  std::string text;
};

// The judgement from the facts (pure, for tests): `lock_held` the master lock's probe (ignored
// unless the campaign is recorded running), `process_gone` whether the recorded master process is
// known to be gone (it ran on this host and no such pid exists), `now` unix seconds.
MasterLiveness judge_master(const store::CampaignRow& campaign, bool lock_held, bool process_gone, double now,
                            const std::string& db_path);

// Reads the facts for judge_master, for a campaign recorded running: whether the recorded master
// process is gone (only when it ran on this host), and, only when that or a stale heartbeat says
// the master may be gone, the master lock (store::master_lock_held). Never writes. A probe that
// fails (no flock on this file system) counts as held: never a false "gone".
MasterLiveness master_liveness(const store::CampaignRow& campaign, const std::string& db_path, double now);

// {alive, heartbeat_at, heartbeat_age_s, host, pid, resume} for status's and the dashboard's JSON
// (alive and heartbeat_age_s null unless the campaign is recorded running, heartbeat_at null when
// none was recorded; resume null unless gone).
nlohmann::json master_json(const store::CampaignRow& campaign, const MasterLiveness& master);

struct CampaignStatus {
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;
  std::map<std::string, int64_t> counts;  // Store::count_by_state: every state name, zeros included
  int64_t attempts_lost = 0;              // attempts closed as lost (worker died or went silent)
  std::vector<store::TrialRow> trials;
  std::vector<store::TrialRow> main_trials;  // what the best is chosen from (CampaignView::main_trials)
  std::string main_stage;
  std::vector<std::string> objectives;  // each objective's metric, in order (one for a single objective)
  bool maximize = true;                 // the first objective's direction
  std::optional<std::set<int64_t>> front;  // the recorded Pareto front with several objectives
  double now = 0;                          // for the elapsed time of a campaign still running
  // The GPUs ("0,1") of the current attempt of each assigned or running trial and of the best
  // trial, by trial id; only trials whose attempt had some.
  std::map<int64_t, std::string> gpus;
  nlohmann::json simulated;  // CampaignView::simulated: null unless `hpctune simulate` recorded it
  MasterLiveness master;     // master_liveness at `now`; the recorded state when not running
  // What the campaign's master warned of that a user should act on (`reports_unjudged`: early
  // stopping or pbt that never judged a trial; `steps_restarted`: a program whose step count starts
  // again after it loads its checkpoint; `same_objective`, `steps_past_judge`), one line each.
  std::vector<std::string> warnings;
  GroupTime group_time;  // where the groups' time went (report/group_time.h)
};

// The master's warnings recorded in `db` as events (a database on a network file system, a program
// whose reports early stopping never judged, whose steps start again or pass max_t, trials that all
// report one value), one line each: `status` and the dashboard show them.
Result<std::vector<std::string>> recorded_warnings(store::Store& db, int64_t campaign_id);

// The status of the view's campaign at `now` (seconds since the epoch): reads the counts, stages
// and attempts from the view's store.
Result<CampaignStatus> campaign_status(CampaignView& view, double now);

// {campaign: {name, state, seed, algorithm, objectives, created_at, finished_at, elapsed_s,
// max_trials, simulated: null, or {mark (simulated_mark), detail (the campaign_simulated event's)},
// recorded_state (the store's), master (master_json)}, ...: state is "interrupted" where the
// store says running but the master is gone (MasterLiveness), and master.resume then names the
// command that continues it.
// stages: [...], trials: {total, by_state}, attempts_lost, compute (group_time_json), best: {trial, metric,
// objective, attempt, params, metrics} or null, and with several objectives pareto_front: [trial
// ids]}. Times are null when unset. With GPUs: best.devices ("0,1") and running_gpus: [{trial,
// group, devices}] for the trials running on GPUs now.
// Each item of `stages`, in the order they were created:
//   {id, name, kind (search | ensemble | transfer | pbt), state (pending | running | completed |
//    failed | interrupted; interrupted too where the store says running but the master is gone),
//    recorded_state (the store's), created_at, started_at, finished_at,
//    trials: {total, by_state} (that stage's trials, as the campaign's `trials`),
//    result: what the stage recorded when it completed, as stored ({} until then, and for a search
//    stage without stop_when); its keys by kind are documented in workflow/<kind>_stage.h:
//      search    {stop_when: {metric, reaches, reached, trial, value, finished_trials, generations, seconds}}
//      ensemble  {method, candidates, skipped, retrained, members: [{trial, weight, retrain_of?}],
//                 val_accuracy, val_log_loss, test_accuracy, test_log_loss,
//                 best_single: {trial, val_accuracy, val_log_loss, test_accuracy, test_log_loss}, files}
//                (task: regression: {task, method, candidates, skipped, retrained, members, val_mse, test_mse,
//                 best_single: {trial, val_mse, test_mse}, files})
//      transfer  {sources, compare_metric (M: the stage's compare_metric, by default the objective's
//                 metric with val_ as test_), target: {trial, objective, <objective metric>, M}, baseline,
//                 best_baseline, targets, baselines, gain (better in the objective's direction: > 0),
//                 paired: {pairs, wins, target_M, baseline_M, gain}}
//      pbt       {population, steps, ready, exploits, explores,
//                 best: {trial, value, test_metric (T: the objective's metric with val_ as test_), T},
//                 schedule: [{from_step, to_step, params, trial}]}}
nlohmann::json status_json(const CampaignStatus& status);

// `hpctune status` for people: the campaign, the Stages table when there is one to show
// (report/stages.h: show_stages; cut to `width` columns, 0 = no limit), the trials by state, where
// the groups' time went (group_time_text), the best trial with its parameters and metrics, and the
// Pareto front with several objectives.
std::string status_text(const CampaignView& view, const CampaignStatus& status, size_t width);

// The mark of a campaign `hpctune simulate` recorded, from its campaign_simulated event's detail
// (CampaignView::simulated): "simulated (machine M, outcomes O)", M the machine file when the
// event names one (else "fixed step cost"), O "function trainer", "replay of DB" or "surrogate of
// DB". "" for null (a real campaign). Fields of the wrong type are left out, never trusted.
std::string simulated_mark(const nlohmann::json& detail);

// Why the campaign's stages failed: "stage 'NAME' (KIND): REASON" per failed stage, in order
// (status's "reason" lines and campaign.reason in its JSON).
std::vector<std::string> stage_failures(const std::vector<store::StageRow>& stages);

// Seconds from the campaign's creation to its end, or to `now` while it has not ended; nullopt
// when it records no creation time.
std::optional<double> campaign_elapsed(const store::CampaignRow& campaign, double now);

// Attempts closed as lost (a worker died or went silent, or the master restarted).
Result<int64_t> count_lost_attempts(store::Store& db, const std::vector<store::TrialRow>& trials);

}  // namespace hpctune::report
