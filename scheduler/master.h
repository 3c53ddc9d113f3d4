// Master: runs (or resumes) one campaign end to end.
//
//   Master, a steppable object with its parts injected (the transport, the store, the launcher and
//   the clock's anchor): start(now) restores the scheduler and launches the groups; step(now)
//   handles every frame waiting, ticks, follows each group's state and start-up deadline, commits;
//   stop(now) shuts the workers and groups down and records the campaign's end. It never sleeps
//   and never reads the real clock: a test drives it on a manual clock with the in-process
//   transport and a fake launcher (tests/test_scheduler.cpp).
//
//   run_master() (scheduler/run_master.cpp), what `hpctune run` and `resume` call, is the thin
//   driver on the real clock: the campaign's preparation (scheduler/campaign_preparation.h, the
//   simulator's too: store, lock, preflight, warm start, campaign row), the ZeroMQ transport (with
//   CURVE and the campaign's keys per resources.security), the launcher of resources.backend
//   (scheduler/launcher_options.h), and the loop { wait for a frame up to the poll interval,
//   step(wall clock now), Ctrl-C, the allocation's end as the launcher tells it, progress } until
//   the campaign is finished.
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
#include <set>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "launch/launcher.h"
#include "protocol/transport.h"
#include "scheduler/campaign_preparation.h"
#include "scheduler/clock.h"
#include "scheduler/scheduler.h"
#include "scheduler/stages.h"
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
  // common/endpoint.h); and the sockets' options (transport.h). When resources.security asks for
  // CURVE for this address (transport_uses_curve), run_master sets the security fields itself from
  // the campaign's key directory (protocol/curve_keys.h: "<db>.keys/", created on the first run)
  // and hands the workers their keys in their environment.
  std::optional<std::string> bind;
  protocol::TransportOptions transport;
  std::string worker_program;                     // default: this executable
  MakeStage make_stage;                           // the stage kinds (workflow::make_stage); required
  const std::atomic<int>* interrupt = nullptr;    // > 0 once Ctrl-C was pressed
  // > 0 once SIGUSR1 came: SLURM's warning before pre-emption or the time limit (the batch
  // script's --signal=B:USR1@<signal_before>). As Ctrl-C (no more dispatch, running trials told to
  // stop and recorded interrupted), and then, with resources.slurm.requeue inside a SLURM job, the
  // outcome names the job to requeue (the caller requeues it once the store is closed).
  const std::atomic<int>* preempt = nullptr;
  std::function<void(const std::string&)> log;    // one line per event worth telling
  // Told, before the master binds, when its address is reachable from other machines and
  // resources.security is none (the transport then neither encrypts nor authenticates). Once the
  // campaign's stored config is known, so `resume` needs no read of the store ahead of the master lock.
  std::function<void(const std::string&)> warn;
  std::function<void(const Progress&, double elapsed_s)> progress;  // at most ~10 times a second
  // Test-only: raise SIGKILL the `failpoint_hit`-th time the named point is passed
  // ("after-trial-insert", "after-result", "after-commit", "stage-completed": a stage's result
  // written, not yet committed).
  std::string failpoint;
  int64_t failpoint_hit = 1;
};

struct CampaignOutcome {
  int64_t campaign_id = 0;
  std::string name;
  std::string db_path;
  bool interrupted = false;
  bool preempted = false;   // interrupted by SIGUSR1 (MasterOptions::preempt)
  std::string requeue_job;  // the SLURM job to requeue now (`scontrol requeue`); "" = none
  std::string gave_up;  // why search.max_failures stopped the campaign; "" when it did not
  // Why stages failed ("stage 'a' (search): ...; stage 'b' ..."), "" when none did: the campaign is
  // then recorded failed, and `run` exits non-zero, once every stage that could run has run.
  std::string failed_stages;
  Progress progress;
  Counters counters;
  double elapsed_s = 0;
};

Result<CampaignOutcome> run_master(const MasterOptions& options);

// The parts a Master works with, owned by the caller.
struct MasterParts {
  protocol::ServerTransport* transport = nullptr;
  store::Store* store = nullptr;
  launch::Launcher* launcher = nullptr;
  WallClock wall;                        // the unix seconds of the `now`s handed in
  std::string log_dir;                   // named in start-up errors
  std::function<void(const std::string&)> log;
  std::string failpoint;                 // see MasterOptions
  int64_t failpoint_hit = 1;
  std::string secret;                    // the campaign secret; "" = drawn by the scheduler
  uint64_t master_incarnation = 0;
  // Builds each stage of the plan (workflow::make_stage; tests inject their own). Required.
  MakeStage make_stage;
  // The driver vouches for the groups' liveness (SchedulerOptions::vouched_liveness; the simulator).
  bool vouched_liveness = false;
  // SchedulerOptions::search_state_every: 0 = the searcher's state only at the end (the simulator:
  // a simulated campaign is not resumed, and a genetic search of 20,000 trials in generations of 10
  // wrote its growing state 2,000 times, most of the simulation's time).
  int64_t search_state_every = 10;
  // Ctrl-C or SIGTERM, and SLURM's warning (SIGUSR1), each > 0 once given: from the message in
  // hand on, the step holds dispatch (Scheduler::hold_dispatch): the results already received are
  // recorded and none costs an ask (each may take a second on thousands of groups with a model), so
  // that the driver stops within one message's work, not a step's of up to 512 asks.
  const std::atomic<int>* interrupt = nullptr;
  const std::atomic<int>* preempt = nullptr;
};

class Master {
 public:
  Master(PreparedCampaign campaign, MasterParts parts);
  ~Master();
  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;

  // Builds each stage of the plan (stages.h) from the registry of stage kinds, with its row in the
  // store (created, or found by name on resume), restores the scheduler from the store and
  // launches every group. A stage that cannot be built or begun fails alone (see Stage failures
  // below); any other error is fatal as in step(): the campaign is recorded failed.
  //
  // Stage failures: a stage fails when it cannot be built or begun, when finish() fails, when it
  // ran trials and none of them succeeded (every one failed), or when a stage of its `from` failed
  // (reason "stage 'x' it depends on failed: <x's reason>"; at stop() too, when search.max_failures
  // stopped the campaign: the running stage fails with that reason, and so do its dependents).
  // Its state and reason are written by one statement, with a stage_failed event, in the turn's
  // transaction; its queued trials are recorded interrupted (Scheduler::close_stage). The other
  // stages run to their end; the campaign then ends failed, with each stage's reason in `status`.
  // A resume runs every stage that is not completed again (a failed one is begun again: a fixed
  // file or a restored checkpoint lets it run; otherwise it fails again with its reason).
  Status start(Clock::time_point now);
  // Blocks up to `timeout` for the next frame (kept for step()); the driver's only wait.
  Status wait(std::chrono::milliseconds timeout);
  // One turn, never blocking: every frame waiting (up to a bound) handled, the scheduler ticked,
  // group exits, restarts and start-up deadlines followed, one commit. True once the campaign is
  // finished (call stop()). An error is fatal: the campaign is already recorded failed, every group
  // stopped, and the error comes back.
  Result<bool> step(Clock::time_point now);
  // Ctrl-C: no more dispatch, running trials recorded interrupted (one transaction).
  Status interrupt(Clock::time_point now);
  // The normal end: workers told to shut down, groups stopped, the search state and the campaign's
  // final state recorded.
  Result<CampaignOutcome> stop(Clock::time_point now);

  bool interrupted() const;
  // MasterParts::interrupt or ::preempt was given: the step in progress holds dispatch.
  bool signalled() const;
  Progress progress() const;
  const Scheduler& scheduler() const { return *sched_; }
  // The stages' rows, in the plan's order.
  std::vector<int64_t> stage_ids() const;
  launch::GroupState group_state(int64_t group) const;
  // With MasterParts::vouched_liveness: group `group` went silent at `since` (Scheduler::note_silent).
  void note_silent(int64_t group, Clock::time_point since) { sched_->note_silent(group, since); }
  // How often step() ticks (heartbeats, group states and deadlines): the driver waits no longer.
  std::chrono::milliseconds poll_interval() const { return poll_interval_; }
  // With MasterParts::vouched_liveness: the earliest moment a step would act without a frame
  // (search.max_time, a silent group's heartbeat timeout, a group's start-up deadline); nullopt
  // when none. A driver whose steps took no frame may step next then, not every poll_interval.
  std::optional<Clock::time_point> next_deadline() const;

 private:
  struct Group {
    launch::GroupState state = launch::GroupState::kPending;
    Clock::time_point deadline{};  // start-up deadline, set when it leaves kPending
    int64_t restarts = 0;
    bool ever_registered = false;
    bool died_before_hello = false;
  };
  Status launch(int64_t group, Clock::time_point now);
  Status follow_groups(Clock::time_point now);
  Error fail(Error e, Clock::time_point now);
  void log(const std::string& line) const;

  PreparedCampaign c_;
  MasterParts p_;
  struct HeldStage {
    int64_t id = 0;  // its stages row
    std::string name, kind;
    std::vector<std::size_t> inputs;  // the stages of its `from`, as indices into stages_
    std::string state;                // pending | running | completed | failed
    std::string reason;               // why it failed
    bool begun_before = false;        // an earlier master began it (StageContext::resuming)
    std::unique_ptr<StageRuntime> runtime;  // null for a stage completed before this master
  };
  bool inputs_complete(const HeldStage& st) const;
  StageContext stage_context(std::size_t k, Clock::time_point now) const;
  Status begin_stage(std::size_t k, Clock::time_point now, bool before_scheduler);
  Status fail_stage(std::size_t k, const std::string& reason, Clock::time_point now);
  // "stage 'x' it depends on failed: <its reason>" for the first failed stage of k's `from`; "" if none.
  std::string failed_input_reason(std::size_t k) const;
  // "" when some trial of stage k succeeded (or it ran none); else why it failed.
  Result<std::string> no_trial_succeeded(std::size_t k) const;
  std::string failed_stages() const;  // see CampaignOutcome::failed_stages
  Status start_stages(Clock::time_point now);
  Status advance_stages(Clock::time_point now);
  std::vector<HeldStage> stages_;  // one per TrialSource, in the plan's order
  std::unique_ptr<Scheduler> sched_;
  std::map<int64_t, Group> groups_;
  // The groups follow_groups() looks at: all but the running ones whose worker is registered.
  std::set<int64_t> unsettled_;
  std::optional<protocol::Envelope> pending_;  // a frame wait() received
  std::chrono::milliseconds poll_interval_{50};
  Clock::time_point start_{}, last_tick_{};
  std::optional<Clock::time_point> last_heartbeat_;  // store::kMasterHeartbeatEvery_s apart
  bool any_registered_ = false;
  bool failed_ = false;
  struct FailPointState;
  std::unique_ptr<FailPointState> failpoint_;
};

// The scheduler's options for the search stage `stage_id` of campaign `campaign_id`, from its
// config: seed, objectives, budgets, trainer and heartbeats. What is not in the config
// (trials_dir, master_incarnation) is left for the caller.
SchedulerOptions scheduler_options(const config::CampaignConfig& cfg, int64_t campaign_id, int64_t stage_id);

// Records a warning of the master's start (`text`, without "warning: ") as a master_warning event
// at `t`, which `hpctune status` and the dashboard show (report::recorded_warnings).
Status record_master_warning(store::Store& store, int64_t campaign_id, const std::string& text, double t);

}  // namespace hpctune::scheduler
