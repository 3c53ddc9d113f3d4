// Scheduler: the trial lifecycle, the dispatch queue and the worker registry of one campaign.
//
// It knows nothing of sockets or processes: it is handed a ServerTransport to answer on, a Store
// to record in, and a TrialSource (trial_source.h: a searcher and its early stopper) that proposes
// trials and decides on reports: continue, stop or pause. The Master (master.h) drives it
// from its loop: handle() for every frame that arrives, tick() regularly. Tests drive it over the
// in-process transport.
//
// Trial lifecycle (store::TrialState), one row per trial, one attempts row per attempt:
//
//   queued --assign--> assigned --report--> running --done--> done
//                                 (the first report, without metrics, is sent as the trial starts)
//     ^                   |                    |--done after stop--> pruned   (early stopping)
//     |                   |                    |--done after pause--> paused as attempt+1, with the
//     +---- next tick ----|--------------------+   source's new parameters and checkpoint; queued
//                         |                    |   again (at the front) at the next tick, so the
//                         |                    |   pause is committed before any group takes it;
//                         |                    |   or, for a source that holds_paused(), held until
//                         |                    |   its resume_next() names it for a free group
//                         |                    |   (held trials it never names end pruned)
//                         |                    |--failed--> failed            (the trainer's error)
//                         +--------------------+--group lost--> queued as attempt+1
//                                                  (failed once max_attempts attempts were lost)
//   assigned/running --Ctrl-C--> interrupted; `resume` queues it again as a new attempt.
//
// A group is lost when it is silent past heartbeat_timeout or when its process exits (the launcher
// calls on_group_exit). Results are keyed by
// (trial_id, attempt): a result for an attempt that is no longer current is recorded as an event
// and otherwise ignored, so each result applies exactly once.
//
// A process lost with several trials (packed groups: options.process_groups). The slots of one
// process die together, so when one of them exits or goes silent, no one of its trials can be
// blamed: none of the lost attempts is charged against max_attempts, and the trials run again as
// two cohorts (halves, by trial id), each in a process with no trial of another cohort beside it
// (a process that runs cohort-0 trials takes only those; a queued cohort trial that finds no such
// process waits while the one with the fewest trials drains). A trial that brought its process
// down is found in log2(k) losses: a process lost with one trial charges it, and that trial keeps
// running alone. So a poison trial cannot use up its pack-mates' attempts.
//
// Authentication (protocol/messages.h, kSecretEnv): every launch of a group gets a credential from
// launch_credential() ("<campaign secret>.<launch token>"), which the launcher hands to that
// process only. A hello is refused (counted; logged rate-limited; no store write, no answer) when
// its credential is not the current one of the group it names, and when the group is registered and
// alive with another incarnation: a new incarnation is only expected once the old one was declared
// lost (its process exited, or it was silent past heartbeat_timeout). The same incarnation on a new
// connection is the same worker reconnecting and replaces its old connection.
//
// Frames that do not decode, unknown message types, messages from peers that never said hello and
// messages that do not fit the peer's state (a done for a trial it does not run) are counted in
// Counters and dropped; the scheduler keeps serving the well-behaved workers. The log gets the
// first few such frames of each peer per 10 s and then one summary line per peer per 10 s; no store
// row is written for a frame from a peer that never registered, and at most a few
// `late_result_ignored` events per peer that did.
#pragma once

#include <chrono>
#include <limits>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/progress.h"
#include "common/result.h"
#include "scheduler/clock.h"
#include "scheduler/trial_source.h"
#include "protocol/messages.h"
#include "store/store.h"
#include "protocol/transport.h"
#include "search/early_stopping.h"
#include "search/searcher.h"

namespace hpctune::scheduler {

struct SchedulerOptions {
  int64_t campaign_id = 0;
  int64_t stage_id = 0;
  uint64_t seed = 0;
  std::vector<search::Objective> objectives;  // [0] drives early stopping and "best"
  int64_t max_trials = 0;
  double max_time_s = 0;        // 0 = unlimited; counted from start()
  int64_t max_attempts = 3;     // attempts per trial before it is failed
  // search.max_failures: stop dispatching once this many trials have failed before any succeeded
  // (done or pruned); 0 = never. A trial whose training diverged counts a quarter (note_failure).
  // The trials in flight still finish.
  int64_t max_failures = 5;
  nlohmann::json trainer;       // fixed trainer settings sent with every assign
  std::string trials_dir;       // "<storage>.trials"; "" = trials keep no files
  // The stage (an index into the stages) whose trials make the campaign's best: a workflow's main
  // stage (config::CampaignConfig::main_stage); the other stages train on other data or blend.
  std::size_t best_stage = 0;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{10000};
  // The driver vouches for its groups' liveness (the simulator, simulate/simulator.h: a simulated
  // group is alive until it says the group went silent, note_silent()): no heartbeat is sent to a
  // group, none is awaited, and tick() looks only at the groups said silent, so its cost does not
  // grow with the groups. Such a group is lost once silent past heartbeat_timeout, as a real one.
  bool vouched_liveness = false;
  uint64_t master_incarnation = 0;
  std::string backend = "local";  // the launcher's name, written to the groups table
  // The GPUs a group was given (launch::Launcher::devices), recorded with each attempt it runs;
  // unset = none.
  std::function<std::vector<int>(int64_t group)> group_devices;
  // The groups that run in one process with `group`, itself included (launch::Launcher::
  // process_groups: a pack's slots), and so are lost together. Set: packed dispatch (below, "A
  // process lost with several trials"); unset: each group is its own process.
  std::function<std::vector<int64_t>(int64_t group)> process_groups;
  // The campaign secret (hex, from protocol::random_hex); "" = the scheduler draws one itself.
  std::string secret;
  // The searcher's state (and, with several objectives, the Pareto front) is saved into the open
  // transaction every max(search_state_every, finished / 10) finished trials and whenever a new
  // generation is bred, so a crash keeps a recent copy. 0 = only when save_search_state() is called.
  int64_t search_state_every = 10;
  // Maps the `now` of every call onto the unix seconds written to the store (clock.h). A test on a
  // manual clock sets it to its own anchor.
  WallClock wall = WallClock::real();
};

// Counted and dropped frames, by reason; asserted by tests.
struct Counters {
  int64_t malformed = 0;      // did not decode
  int64_t unregistered = 0;   // from a peer that never said hello (or was declared lost)
  int64_t out_of_order = 0;   // valid, but not what the peer's state allows
  int64_t stale_results = 0;  // done/failed/report for an attempt that is no longer current
  int64_t bad_version = 0;    // hello with another protocol version
  int64_t unauthenticated = 0;   // hello without this campaign's secret and the group's launch token
  int64_t identity_refused = 0;  // hello that would displace a live group with another incarnation
  int64_t send_failures = 0;  // sends that failed (peer gone)
  int64_t lost_attempts = 0;  // attempts declared lost
};

// One stage the scheduler runs: its row in the store, its TrialSource, its budget of trials.
// A stage without a source runs no trials (an ensemble that only blends, or a completed stage a
// resumed master does not run again: its recorded trials still belong to it). An inactive stage
// is not asked for trials until activate_stage() (its inputs are not complete yet).
struct StageSource {
  int64_t stage_id = 0;
  TrialSource* source = nullptr;
  int64_t max_trials = 0;
  bool active = true;
  nlohmann::json trainer = nullptr;  // the trainer settings of its trials; null = options.trainer
};

class Scheduler {
 public:
  using LogFn = std::function<void(const std::string& line)>;
  // Test hook called at named points ("after-trial-insert", "after-result"); see master.h.
  using FailPointFn = std::function<void(const char* name)>;

  // Several stages on one pool of groups: dispatch asks each stage's source in turn (in the order
  // given) for trials; options.stage_id and max_trials are unused.
  Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
            std::vector<StageSource> stages);
  // One stage: options.stage_id, `source`, options.max_trials.
  Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store, TrialSource& source);
  // The search stage: `searcher` and `stopper` as a SearchSource (neither is owned).
  Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
            search::Searcher& searcher, search::EarlyStopper& stopper);

  // Loads the campaign's trials from the store (for resume): trials that were assigned, running
  // or interrupted are queued again as a new attempt; finished ones are told to the searcher via
  // restore(). Call once before the loop.
  Status restore(Clock::time_point now);

  // One frame from `peer`. Errors are values: only store failures come back (fatal to the master).
  Status handle(const protocol::PeerId& peer, std::string_view bytes, Clock::time_point now);

  // Heartbeats out, silent groups declared lost, new trials dispatched.
  Status tick(Clock::time_point now);
  // With vouched_liveness: group `group` has been silent since `since` (its last frame, or the
  // heartbeat it would have sent then); tick() loses it once silent past heartbeat_timeout.
  void note_silent(int64_t group, Clock::time_point since);
  // The earliest moment tick() would act without a frame, with vouched_liveness: search.max_time,
  // a group said silent reaching heartbeat_timeout; nullopt when none (Master::next_deadline).
  std::optional<Clock::time_point> next_deadline() const;

  // A fresh credential for the next launch of group `group`, to hand to that process only (in
  // protocol::kSecretEnv); the credential of the group's earlier launch stops being accepted for new
  // hellos. kIo when the system has no random source.
  Result<std::string> launch_credential(int64_t group);

  // The launcher saw group `group`'s process exit: whatever it ran is lost.
  Status on_group_exit(int64_t group, const std::string& why, Clock::time_point now);

  // Ctrl-C: no more dispatch; running trials are told to stop and recorded as interrupted.
  Status interrupt(Clock::time_point now);

  // Writes searcher.state() into the campaign row (store::Store::set_search_state), adding, for a
  // campaign with several objectives, "pareto_front_trials": the ids of the done trials whose
  // objective values no other done trial dominates (pruned and failed trials are not candidates),
  // ascending. Inside the caller's transaction if one is open.
  Status save_search_state(Clock::time_point now);
  // The current Pareto front as trial ids, ascending (empty for a single objective).
  std::vector<int64_t> pareto_front_trials() const;

  // Sends shutdown to every registered worker (end of campaign).
  void shutdown_workers(const std::string& reason);

  // True when no more trials will be created and none is queued or in flight (as of the `now` of
  // the latest call: search.max_time counts on the caller's clock).
  bool finished() const;
  // Lets stage `index` (of the constructor's list) be asked for trials from the next dispatch on.
  void activate_stage(std::size_t index);
  // Whether stage `index` is active, will create no more trials and has none queued or in flight.
  bool stage_complete(std::size_t index) const;
  // Stage `index` failed (Master: it could not start or finish, or an input stage failed): it is
  // never asked for trials again, never complete, and finished() no longer waits for it. Its
  // queued and paused trials are recorded interrupted (a resume may run them if the stage can start
  // then); a trial in flight runs to its end.
  Status close_stage(std::size_t index, Clock::time_point now);
  bool interrupted() const { return interrupted_; }
  // A signal came and interrupt() follows after this turn: no more trials are asked for or sent,
  // while the results already received are still recorded (Master::step drains them cheaply).
  void hold_dispatch() { dispatch_held_ = true; }
  // Why dispatch stopped early (search.max_failures), "" when it did not.
  const std::string& gave_up() const { return gave_up_; }
  // An error that ends the campaign once the current turn is committed (the trial source failed:
  // it was logged and recorded as an event; nothing of the turn is lost). nullopt when none.
  const std::optional<Error>& fatal() const { return fatal_; }
  // Whether `group` is registered now (said hello and was not lost since).
  bool group_registered(int64_t group) const { return group_peer_.count(group) > 0; }
  // Groups that have said hello at least once (for the launcher's start-up check).
  bool group_ever_registered(int64_t group) const { return ever_registered_.count(group) > 0; }
  // Groups declared lost for their silence since the last call: the launcher kills them, so that
  // a stopped or hung group cannot run its attempt on beside the retry.
  std::vector<int64_t> take_silent_groups() { return std::exchange(silent_groups_, {}); }
  // The groups whose worker was lost since the last call (silent, exited, confused), for the
  // master's bookkeeping of group states: only they can leave its running state (Master::follow_groups).
  std::vector<int64_t> take_lost_groups() { return std::exchange(lost_groups_, {}); }

  const Counters& counters() const { return counters_; }
  Progress progress() const;

  void set_log(LogFn log) { log_ = std::move(log); }
  void set_failpoint(FailPointFn fp) { failpoint_ = std::move(fp); }

 private:
  Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
            std::unique_ptr<TrialSource> owned);

  struct Stage {
    int64_t id = 0;
    TrialSource* source = nullptr;
    int64_t max_trials = 0;
    int64_t created = 0;
    bool exhausted = false;
    bool active = true;
    bool closed = false;     // close_stage(): failed, asked for nothing more
    // The warning events already said for this stage, each once (note_unjudged, note_restarted_steps,
    // note_step_past_judge, note_bunched_reports: their event kinds).
    std::set<std::string> warned;
    // note_constant_objective(): the stage's first done trial's objective value and parameters, the
    // done trials with other parameters that reported exactly that value too, and whether it is
    // settled (said once, or another value came).
    struct SameValue {
      std::optional<double> value;
      nlohmann::json params;
      std::vector<int64_t> trials;
      bool settled = false;
    } same_value;
    // note_overhead(): the overhead and the length (s) of the stage's first attempts with 2 or more
    // step reports, and whether it is settled (said once, or judged).
    struct Overhead {
      std::vector<double> overhead_s, attempt_s;
      bool settled = false;
    } overhead;
    nlohmann::json trainer;  // null = opt_.trainer
    std::unordered_map<int64_t, int64_t> seq_to_id;  // every trial of the stage
  };
  struct Worker {
    protocol::PeerId peer;
    uint64_t incarnation = 0;
    int64_t group = -1;
    std::string gpus;  // the GPUs its hello named ("0,1"; "" = none)
    Clock::time_point last_seen;
    Clock::time_point last_heartbeat_sent;
    bool idle = false;     // sent ready (or finished a trial) and has nothing assigned
    int64_t trial_id = 0;  // the trial it runs, 0 when none
    Clock::time_point assigned_at;  // when trial_id was sent
    // A report, heartbeat or result of the current attempt has come back: the worker knows it.
    // Frames of one peer arrive in order, so a later heartbeat saying otherwise is the truth.
    bool acknowledged = false;
  };
  struct Trial {
    int64_t id = 0;
    int64_t seq = 0;
    nlohmann::json params;
    store::TrialState state = store::TrialState::kQueued;
    int64_t attempt = 1;
    protocol::PeerId peer;
    int64_t last_step = 0;
    protocol::Metrics last_metrics;
    bool stop_sent = false;
    // This attempt's first step report, and the first that carried the first objective's metric
    // (-1: none yet; a program that counts its epochs from 0 reports step 0): a judge of reports
    // judged the attempt only if that came before its last step.
    int64_t first_report_step = -1;
    int64_t judged_from = -1;
    std::size_t stage = 0;         // index into stages_
    std::optional<Verdict> pause;  // a pause was asked for this attempt
    std::string resume_from;       // the checkpoint the next attempt starts from
    std::optional<uint64_t> seed;  // the suggestion's meta "seed"; else derived from stage and seq
    // This attempt runs again after the last one was lost (its group or the master died): it may
    // find its training already done (recall_last_report).
    bool rerun = false;
    // The step of the checkpoint the trial's next attempt starts from (Verdict::resume_step), from
    // its pause until that attempt is dispatched, which resumed there (resumed_at); 0 when it
    // started from the beginning, reruns, or runs first after a master's restart (not checked).
    int64_t paused_at = 0;
    int64_t resumed_at = 0;
    // Packed dispatch: the trials it may share a process with, those of its cohort; 0 = any of
    // cohort 0. A trial lost with others in one process gets a new cohort (note_process_loss).
    int64_t cohort = 0;
    // This attempt's wall times (wall()): dispatched, its first and last step reports, and how many
    // came (note_overhead).
    double dispatched_w = 0, first_report_w = 0, last_report_w = 0;
    int64_t reports = 0;
  };

  Status on_hello(const protocol::PeerId& peer, const protocol::Hello& m, Clock::time_point now);
  Status on_report(Worker& w, const protocol::Report& m, Clock::time_point now);
  Status on_done(Worker& w, const protocol::Done& m, Clock::time_point now);
  Status record_trial_events(const Worker& w, const Trial& t, const protocol::Done& m, double tw);
  Status note_pause(const Worker& w, Trial& t, int64_t step, double value, Verdict verdict, const nlohmann::json& extra,
                    double tw);
  Status judge_at_target(const Worker& w, Trial& t, const protocol::Done& m, double tw);
  Result<bool> recall_last_report(Worker& w, Trial& t, Clock::time_point now);
  Status note_unjudged(const Worker& w, Trial& t, double tw);
  Status note_restarted_steps(const Worker& w, const Trial& t, int64_t step, double tw);
  Status note_step_past_judge(const Worker& w, const Trial& t, int64_t step, int64_t last, double tw);
  Status note_constant_objective(const Worker& w, const Trial& t, double value, double tw);
  Status note_overhead(const Worker& w, const Trial& t, double tw);
  Status note_bunched_reports(const Worker& w, const Trial& t, double tw);
  Status on_failed(Worker& w, const protocol::Failed& m, Clock::time_point now);
  Status on_stray(const protocol::PeerId& peer, const protocol::Message& m, Clock::time_point now);
  std::string check_credential(const protocol::Hello& m) const;
  Status note_late_result(const protocol::PeerId& peer, int64_t group, int64_t trial_id, int64_t attempt,
                          const char* type, Clock::time_point now);
  void note_noise(const protocol::PeerId& peer, const char* reason, const std::string& line, Clock::time_point now);
  void flush_noise(Clock::time_point now, bool all);

  Status dispatch(Clock::time_point now);
  // Packed dispatch (opt_.process_groups): the next queued trial and the idle worker it may run on,
  // taken off the queue and idle_; nullopt when none fits. `reserved`: processes left to drain
  // for a cohort in this dispatch (their first group -> the cohort).
  std::optional<std::pair<Worker*, int64_t>> next_packed_assignment(std::map<int64_t, int64_t>& reserved);
  struct ProcessLoad {
    int64_t first_group = 0;
    int64_t busy = 0;    // its groups running a trial
    int64_t cohort = 0;  // theirs (one cohort per process)
  };
  ProcessLoad process_load(int64_t group) const;
  // The groups of `group`'s process ({group} without options.process_groups) and the trials they run.
  std::vector<int64_t> process_groups(int64_t group) const;
  std::vector<int64_t> process_trials(int64_t group) const;
  // A process that ran several trials is lost (its exit, or one of its groups silent): none of
  // them is charged, and they run again in two cohorts without other trials beside them. The
  // halves (trial ids), none when it ran fewer than two trials not yet noted lost.
  std::vector<std::vector<int64_t>> note_process_loss(int64_t group);
  // A resumed master's cohorts: each `trials_split` event (lose_process records the halves), in
  // order, gives its halves' live trials new cohorts, as note_process_loss did.
  Status restore_cohorts();
  // Group `group` is lost, and so is every other group of its process (note_process_loss).
  Status lose_process(int64_t group, const std::string& why, Clock::time_point now);
  Status ask_more(std::size_t n, Clock::time_point now);
  Status ask_stage(Stage& stage, std::size_t stage_index, std::size_t n, Clock::time_point now);
  Status lose_worker(const protocol::PeerId& peer, const std::string& why, Clock::time_point now);
  // Requeues (or fails, past max_attempts) the attempt `w` runs and leaves it with none.
  Status lose_attempt(Worker& w, const std::string& why, Clock::time_point now);
  Status on_heartbeat(Worker& w, const protocol::Heartbeat& m, Clock::time_point now);
  Trial* current_trial(Worker& w, int64_t trial_id, int64_t attempt);
  void tell_searcher(const Trial& t, search::Outcome outcome, const protocol::Metrics& metrics, int64_t step);
  std::optional<double> objective_of(const protocol::Metrics& metrics) const;
  std::optional<double> judged_value(const protocol::Metrics& metrics) const;
  void send(Worker& w, const protocol::Message& m);
  void log(const std::string& line) const;
  std::string trial_dir(int64_t trial_id) const;  // "" when trials keep no files
  // The wall-clock time to record for `now`, strictly later than any time recorded before: the
  // messages of one batch share `now`, and the recorded order of reports (metrics.t) is the order
  // a resumed master replays them to its stopper in.
  double wall(Clock::time_point now);
  bool out_of_time(Clock::time_point now) const;
  struct FinalTrial {
    std::size_t stage;
    int64_t seq;
    double finished_at;
  };
  Status replay_reports(const std::map<int64_t, FinalTrial>& final_trials,
                        const std::map<int64_t, FinalTrial>& unfinished);
  void note_done_values(int64_t trial_id, const nlohmann::json& metrics);
  Status after_finish(Clock::time_point now);
  void note_failure(int64_t trial_id, const std::string& reason);
  // Whether recorded final metrics hold the objective as null, NaN or infinity (a diverged training).
  bool reported_nonfinite(const nlohmann::json& metrics) const;

  SchedulerOptions opt_;
  protocol::ServerTransport& transport_;
  store::Store& store_;
  std::unique_ptr<TrialSource> owned_source_;  // the SearchSource of the searcher constructor
  std::vector<Stage> stages_;
  TrialSource& source_of(const Trial& t) { return *stages_[t.stage].source; }
  LogFn log_;
  FailPointFn failpoint_;

  std::unordered_map<protocol::PeerId, Worker> workers_;
  // The idle workers, by group (dispatch's order), so that dispatch does not scan every worker
  // after every result: with 2048 groups that scan was a fifth of the master's time (bench/scale).
  // Exact: mark_idle() adds a worker, dispatch and lose_worker take it out, so that dispatch counts
  // them without a scan and walks only those it assigns to (issue 36: 2038 idle groups of 2048).
  std::set<std::pair<int64_t, protocol::PeerId>> idle_;
  void mark_idle(Worker& w);
  std::map<int64_t, protocol::PeerId> group_peer_;
  std::map<int64_t, bool> ever_registered_;
  std::vector<int64_t> silent_groups_;
  std::vector<int64_t> lost_groups_;
  // Packed dispatch: the trials of a process lost with others, not charged when their attempt is
  // lost (lose_attempt), and the last cohort given out.
  std::set<int64_t> uncharged_losses_;
  int64_t last_cohort_ = 0;
  std::map<protocol::PeerId, Clock::time_point> said_silent_;  // vouched_liveness: note_silent()'s
  std::map<int64_t, Trial> trials_;  // live (non-final) trials by id
  std::deque<int64_t> queue_;
  std::vector<int64_t> paused_;  // paused at this turn: queued again (at the front) or held at the next tick
  std::vector<int64_t> held_;    // paused trials whose source resumes them (resume_next), in pause order
  // Moves held trials that their sources name (resume_next) into the queue until it holds `n`.
  void take_resumptions(std::size_t n);
  // Ends, pruned, the held trials of every stage that will run none of them (see holds_paused()).
  Status settle_held(Clock::time_point now);
  bool stage_busy(std::size_t stage) const;  // a trial of it queued, paused this turn or in flight
  std::optional<Error> fatal_;
  int64_t created_ = 0;              // suggestions turned into trials, every stage
  int64_t done_ = 0, pruned_ = 0, failed_ = 0, interrupted_count_ = 0;
  int64_t diverged_ = 0;  // of failed_: trials whose last objective was NaN or infinite (note_failure)
  std::optional<double> best_;
  int64_t best_trial_ = 0;
  bool interrupted_ = false;
  bool dispatch_held_ = false;  // hold_dispatch()
  std::string gave_up_;  // see gave_up()
  Status pause_attempt(Worker& w, Trial& t, const protocol::Done& m, Clock::time_point now);
  Status fail_paused(Worker& w, Trial& t, const std::string& error, Clock::time_point now);
  Status fail_attempt(Worker& w, Trial& t, int64_t attempt, const std::string& error, const std::string& shown,
                      Clock::time_point now);
  Clock::time_point start_;
  double last_wall_ = -std::numeric_limits<double>::infinity();  // see wall()
  Clock::time_point last_now_;  // the latest `now` handed in: what finished() and shutdown see
  Counters counters_;
  std::string secret_;                                // the campaign secret
  std::map<int64_t, std::string> launch_tokens_;      // group -> token of its current launch
  std::unordered_map<protocol::PeerId, int64_t> late_events_;  // late_result_ignored rows per peer
  std::unordered_map<protocol::PeerId, bool> lost_peers_;      // peers that registered, then were lost
  // Rate-limited logging of dropped frames, per peer (see the top of this file).
  struct Noise {
    Clock::time_point window_start;
    int64_t logged = 0;                     // lines logged in this window
    std::map<std::string, int64_t> quiet;   // frames dropped without a line in this window, by reason
  };
  std::unordered_map<protocol::PeerId, Noise> noise_;
  // Done trials with every objective, as minimize-form losses: the Pareto-front candidates.
  std::vector<std::pair<int64_t, std::vector<double>>> front_candidates_;
  int64_t since_state_save_ = 0;   // trials finished since the search state was last saved
  int64_t max_generation_ = -1;    // the highest generation created so far
};

// Warm start (search.warm_start): the finished trials of an earlier campaign, made to fit this
// campaign's space, for search::SearchSpec::warm_start.
struct WarmStart {
  std::string path;
  std::vector<search::Observation> observations;  // seq = the earlier trial's seq; values raw
  int64_t read = 0;                                // trials found in the other store
  std::map<std::string, int64_t> skipped;          // reason -> trials left out
  int64_t skipped_total() const;
  nlohmann::json summary() const;                  // {path, read, loaded, skipped, skipped_by_reason}
};

// Projects an earlier campaign's parameters onto `space`: parameters the space does not have and
// parameters whose condition is false are dropped; an active parameter of the space that `params`
// lacks is left out (the searcher fills it with a seeded draw, see search/model_data.h). Refuses
// (nullopt, with the reason in *why) when a kept value is outside its range or choices (a fixed
// parameter with another value included: the result was measured elsewhere) and when no searched
// parameter of the space is present at all.
std::optional<search::Params> project_params(const search::Space& space, const search::Params& params,
                                             std::string* why = nullptr);

// Opens the store at `path` read-only (no master lock, nothing written) and reads the trials of its
// campaign (a store holds one campaign). Kept: trials in state `done` whose final metrics have a
// finite value for every objective of `objectives` (matched by metric name) and whose parameters
// project onto `space`. Pruned trials are left out (their values are partial), as are failed,
// unfinished, and out-of-space ones; each is counted under its reason. Errors are kConfig naming
// search.warm_start and the path: a missing or unreadable file, a file that is not an hpctune
// store (or one of another schema version), a store without a campaign, `own_db` itself.
Result<WarmStart> load_warm_start(const std::string& path, const search::Space& space,
                                  const std::vector<search::Objective>& objectives, const std::string& own_db = "");

}  // namespace hpctune::scheduler
