// Master: runs (or resumes) one campaign end to end.
//
//   store (lock, campaign row) -> searcher + stopper -> ROUTER socket -> Scheduler::restore
//   -> launcher starts the groups -> loop { recv with deadline, handle, tick, group exits,
//   progress, Ctrl-C } -> shutdown workers -> stop groups -> campaign state recorded.
//
// Store writes are batched: one transaction per loop turn (all frames that are waiting, up to a
// bound), so SQLite commits at most a few hundred times a second whatever the trial rate.
// Killing the master at any point loses at most the uncommitted turn; `resume` re-asks the search
// for anything not recorded, which for the seeded algorithms gives the same trials again.
//
// Exit paths: completion, Ctrl-C (interrupt flag; trials recorded as interrupted), search.max_failures
// (no dispatch after it; the campaign is recorded failed), a fatal error.
// Every path stops every group (SIGTERM, then SIGKILL); groups also die with the master (SIGKILL
// included) through PR_SET_PDEATHSIG.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "protocol/transport.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace hpctune::scheduler {

struct MasterOptions {
  std::string db_path;                            // "" = the config's storage
  std::optional<config::CampaignConfig> config;   // set for `run`; unset for `resume` (read from the DB)
  std::optional<int64_t> groups;                  // --groups override
  std::optional<uint64_t> seed;                   // --seed override
  // `resume --max-trials`: a new budget, larger than the trials recorded (kUsage otherwise); also
  // extends a completed campaign, and is kept in the store for later resumes.
  std::optional<int64_t> max_trials;
  // The address to listen on: --bind, else the config's resources.bind (checked by the caller,
  // common/endpoint.h); and the sockets' options (transport.h: where issue 13's CURVE keys go).
  std::optional<std::string> bind;
  protocol::TransportOptions transport;
  std::string worker_program;                     // default: this executable
  const std::atomic<int>* interrupt = nullptr;    // > 0 once Ctrl-C was pressed
  std::function<void(const std::string&)> log;    // one line per event worth telling
  std::function<void(const Progress&, double elapsed_s)> progress;  // at most ~10 times a second
  // Test-only: raise SIGKILL the `failpoint_hit`-th time the named point is passed
  // ("after-trial-insert", "after-result", "after-commit").
  std::string failpoint;
  int64_t failpoint_hit = 1;
};

struct CampaignOutcome {
  int64_t campaign_id = 0;
  std::string name;
  std::string db_path;
  bool interrupted = false;
  std::string gave_up;  // why search.max_failures stopped the campaign; "" when it did not
  Progress progress;
  Counters counters;
  double elapsed_s = 0;
};

Result<CampaignOutcome> run_master(const MasterOptions& options);

// The store's row for a new campaign of this config, running from `created_at` (seconds since the
// epoch): the config's text and its normalized JSON with the effective seed and group count.
store::CampaignRow campaign_row(const config::CampaignConfig& cfg, double created_at);

// The scheduler's options for the search stage `stage_id` of campaign `campaign_id`, from its
// config: seed, objectives, budgets, trainer and heartbeats. What is not in the config
// (trials_dir, master_incarnation) is left for the caller.
SchedulerOptions scheduler_options(const config::CampaignConfig& cfg, int64_t campaign_id, int64_t stage_id);

}  // namespace hpctune::scheduler
