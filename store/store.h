// Store: the SQLite database of one hpctune campaign (campaign, stages, trials, attempts, metrics,
// events, artifacts, lineage, trainer groups).
//
// Who opens it:
//   - the master, with Store::open() and OpenOptions::master_lock: the only writer. It takes the
//     master lock (a flock on the database file itself, so that a second master is refused whatever
//     name it uses: a symlink or a hard link) before SQLite reads or writes anything, and batches
//     its writes: begin() ... many writes ... commit() once per loop iteration. A write outside
//     begin()/commit() commits on its own.
//   - `hpctune status/trials/export`, with Store::open_readonly(), while the master runs: the
//     database is in WAL mode, so readers see the last committed transaction and never block the
//     writer (nor the writer them). In a directory this process cannot write (a finished campaign
//     copied to a read-only place), no master can be writing either, and the file is opened
//     immutable: without the -shm/-wal side files SQLite would otherwise need to create.
//
// Files are created with explicit modes (OpenOptions::file_mode, 0600 by default, whatever the
// umask); SQLite gives the -wal and -shm files the database file's mode.
//
// Trial lifecycle as the store records it (the master decides; the store enforces exactly-once):
//
//   insert_trial ──> queued ──mark_assigned──> assigned ──mark_running──> running
//                      ^                          │                          │
//                      │ requeue_trial            ├──── finish_trial ────────┴──> done | pruned | failed
//                      │ (attempt+1; attempt row  │                               (final)
//                      │  closed as lost or       │
//                      └── interrupted) <─────────┴── or failed when max_attempts charged attempts
//                                                     were lost
//   mark_interrupted (Ctrl-C): assigned|running ──> interrupted; a resumed master requeues it.
//
// Every transition that a late or duplicated message could trigger (finish, running, requeue,
// interrupt) is conditional on (trial id, current attempt, non-final state): a stale call changes
// nothing and is not an error. Each attempt has a row in `attempts` (running -> done | pruned |
// failed | lost | interrupted). A lost attempt is charged (counts against max_attempts) unless the
// loss was not the trial's doing: a master restart; interrupted attempts are never charged.
//
// Errors are values: SQLITE_BUSY / SQLITE_LOCKED come back as Errc::kBusy, other SQLite failures
// as Errc::kIo (constraint violations as kInvalidArgument), each with SQLite's text and what was
// being done. A Store is used by one thread at a time (the connection is opened without a mutex).
// Statements are prepared once and reused: the master records thousands of trials per second.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace hpctune::store {

// ---------------------------------------------------------------------------------------------
// Trial states

enum class TrialState { kQueued, kAssigned, kRunning, kDone, kPruned, kFailed, kInterrupted, kPaused };
// Every state: the one list that parsing, count_by_state, the CLI's tables and the database's
// trial_states lookup table (filled from it at every open for writing) come from. A state added to
// the enum is added here (and to to_string), and shows up everywhere; the database needs no
// migration for it (schema.h).
inline constexpr TrialState kTrialStates[] = {TrialState::kQueued, TrialState::kAssigned, TrialState::kRunning,
                                              TrialState::kDone,   TrialState::kPruned,   TrialState::kFailed,
                                              TrialState::kInterrupted, TrialState::kPaused};
// The states of an attempt row, the same way (attempt_states): running until it ends as done,
// pruned or failed (the trial's result), lost (its group died or went silent), interrupted (Ctrl-C
// or a master restart) or paused (its trial source paused the trial; the next attempt resumes it).
inline constexpr const char* kAttemptStates[] = {"running", "done", "pruned", "failed", "lost", "interrupted", "paused"};

const char* to_string(TrialState state) noexcept;
std::optional<TrialState> trial_state_from_string(std::string_view text) noexcept;
// done, pruned and failed: no further result is accepted. interrupted is not final (resume requeues).
bool is_final(TrialState state) noexcept;

// ---------------------------------------------------------------------------------------------
// Paths under a campaign's trial directory (`trials_dir`, <db>.trials, absolute)
//
// The checkpoints a paused trial resumes from (trials.resume_from) and the snapshots the trial
// sources name in their events (pbt's snapshot, resume_from and checkpoint; trial_paused's and
// pause_requested's resume_from; a promotion's checkpoint) are recorded relative to the trial
// directory (the files of the artifacts table relative to their trial's own, add_artifact)
// ("3/pbt/001-step-4"), so that a campaign moved whole (`mv camp/ /project/camp/`: the database
// with its <db>.trials) resumes. Older versions recorded them absolute; such a path is read as
// before, except that one below an earlier place of the trial directory maps to the same place
// below the present one: a directory of the present one's name (<db>.trials) followed by a trial
// number. Whatever comes out is then checked like any other (resume_from_problem: under
// `trials_dir`, no '..', no symbolic link below it); nothing recorded is trusted.

// `path` as it is recorded: relative to `trials_dir` when it lies below it (lexically), else as given.
std::string path_to_record(const std::string& trials_dir, const std::string& path);
// A recorded path where it is now, absolute (see above); "" stays "".
std::string recorded_path_at(const std::string& trials_dir, const std::string& recorded);

// ---------------------------------------------------------------------------------------------
// Rows. Times are seconds since the Unix epoch; 0 means "not yet" (NULL in the database).

struct CampaignRow {
  int64_t id = 0;
  std::string name, config_text, config_source;
  nlohmann::json config_json = nlohmann::json::object();
  uint64_t seed = 0;
  std::string state = "running";  // running | completed | failed | interrupted
  double created_at = 0, finished_at = 0;
  nlohmann::json search_state;  // null unless the searcher keeps a checkpoint
  std::string master_host;
  int64_t master_pid = 0;
  // The unix time the running master last wrote its heartbeat (Store::set_campaign_heartbeat);
  // 0 = never (a campaign recorded before schema v9, or a master that died before its first turn).
  double heartbeat_at = 0;
};

struct StageRow {
  int64_t id = 0, campaign_id = 0;
  std::string kind;   // search | ensemble | transfer | pbt
  std::string name;
  std::string state = "running";  // pending | running | completed | failed | interrupted
  nlohmann::json config_json = nlohmann::json::object();
  nlohmann::json result = nlohmann::json::object();  // what the stage computed (scheduler/stages.h)
  std::string reason;  // why it failed ("" unless failed): its error, or the input stage that failed
  double created_at = 0, started_at = 0, finished_at = 0;
};

struct TrialRow {
  int64_t id = 0, campaign_id = 0;
  int64_t stage_id = 0;  // 0 = the campaign's implicit single stage (NULL in the database)
  int64_t seq = 0;       // the searcher's 0-based suggestion index, unique per (campaign, stage)
  nlohmann::json params = nlohmann::json::object(), meta = nlohmann::json::object();
  TrialState state = TrialState::kQueued;
  int64_t attempt = 1, group_id = -1;
  double created_at = 0, started_at = 0, finished_at = 0;
  int64_t step = 0;        // the last step reported by the current attempt
  nlohmann::json metrics;  // final metrics; null until the trial is final
  std::optional<double> objective;
  std::string error;
  std::optional<int64_t> parent_trial_id;
  int64_t generation = 0;
  std::string resume_from;  // the checkpoint the next attempt starts from ("" = none): set by a pause
  // Read, not written: the seconds its attempts trained, summed (each pbt interval, each rung of a
  // paused trial; an attempt lost with its group or interrupted is not counted; nor one running).
  double run_seconds = 0;
};

struct MetricRow {
  int64_t trial_id = 0, attempt = 0, step = 0;
  std::string name;
  double value = 0;  // NaN is stored as NULL and read back as NaN
  double t = 0;
};

struct EventRow {
  int64_t id = 0, campaign_id = 0;
  double t = 0;
  std::string kind;
  int64_t trial_id = 0, attempt = 0, group_id = -1;  // 0 / 0 / -1 = none
  nlohmann::json detail;
};

struct ArtifactRow {
  int64_t id = 0, trial_id = 0, attempt = 0;
  std::string kind, path;
  int64_t bytes = 0;
  double created_at = 0;
};

struct LineageRow {
  int64_t child_trial_id = 0, parent_trial_id = 0;
  // What the scheduler writes today: "parent", one row per parent of a genetic or evolution child
  // (the suggestion's meta "parents", seq numbers). Free text, so
  // later relations (transfer source, ensemble member, PBT exploit) need no schema change.
  std::string relation;
};

// An attempt row as the readers that keep a snapshot need it (Store::attempts_changed).
struct AttemptRow {
  int64_t trial_id = 0, attempt = 0, group_id = -1;
  std::string state;  // kAttemptStates
  double started_at = 0, finished_at = 0;
  bool charged = true;
  std::string devices;  // the GPUs of the attempt's group ("0,1"); "" = none (schema v7)
};

// Store::attempt_time: the attempts of one state, and the seconds they ran together.
struct AttemptTime {
  int64_t attempts = 0;
  double seconds = 0;
};

struct GroupRow {
  int64_t campaign_id = 0, group_id = 0;
  std::string backend;
  int64_t ranks_data = 1, ranks_model = 1;
  nlohmann::json hosts = nlohmann::json::array();
  std::string state;
  uint64_t incarnation = 0;
  int64_t restarts = 0;
  double started_at = 0, updated_at = 0;
};

// The running master writes its heartbeat (Store::set_campaign_heartbeat) this often; a reader
// takes a master for gone when the master lock is free and its heartbeat is older than
// kMasterHeartbeatStale_s (report/status.h: master_liveness).
inline constexpr double kMasterHeartbeatEvery_s = 5;
inline constexpr double kMasterHeartbeatStale_s = 30;

// Whether some process holds the master lock (Store::acquire_master_lock) of the database at
// `path` now: a probe for readers (`status`, the dashboard) that never writes nor creates a file.
// It takes a shared flock on a descriptor of its own without waiting and drops it at once; a
// master starting in that very instant is refused as "starting" (so readers call it only when the
// heartbeat already says the master may be gone). False for ":memory:" and a missing file; kIo
// when the file cannot be opened or its file system has no flock.
Result<bool> master_lock_held(const std::string& path);

struct OpenOptions {
  // Test hook: migrate only up to this version (-1 = latest). A store opened below the latest
  // version can run only the statements whose tables and columns exist at that version; the others
  // fail with kIo ("no such column ...").
  int migrate_to = -1;
  // How long a statement waits for a lock held by another connection before returning kBusy.
  int busy_timeout_ms = 5000;
  // open(): take the master lock (see acquire_master_lock) before SQLite touches the file, so that
  // a refused second master never reads a half-created file or competes for the WAL switch.
  bool master_lock = false;
  // Permission bits of the files open() creates: the database (and so its -wal and -shm files) and
  // the master lock's identity file. Applied exactly, whatever the umask; existing files keep theirs.
  unsigned file_mode = 0600;
};

// The modes of the files and directories of a campaign for the setting `storage_access`:
// owner 0600/0700, group 0640/0750, all 0644/0755. kInvalidArgument for any other name.
struct AccessModes {
  unsigned file = 0600, dir = 0700;
};
Result<AccessModes> access_modes(std::string_view storage_access);

// ---------------------------------------------------------------------------------------------
// RAII handles for the raw SQLite objects. Move-only; the destructors never throw and ignore
// errors; close() reports them and is idempotent.

class Statement {
 public:
  Statement() noexcept = default;
  explicit Statement(sqlite3_stmt* stmt) noexcept : stmt_(stmt) {}
  Statement(Statement&& other) noexcept : stmt_(other.release()) {}
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() noexcept;

  Status close() noexcept;  // finalizes; always succeeds (errors were reported by step)
  sqlite3_stmt* get() const noexcept { return stmt_; }
  sqlite3_stmt* release() noexcept;
  explicit operator bool() const noexcept { return stmt_ != nullptr; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

class Connection {
 public:
  Connection() noexcept = default;
  explicit Connection(sqlite3* db) noexcept : db_(db) {}
  Connection(Connection&& other) noexcept : db_(other.release()) {}
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() noexcept;  // sqlite3_close_v2: never fails, defers if statements are still open

  // Closes the connection; kBusy if a statement of it is still open (the handle stays open then).
  Status close() noexcept;
  sqlite3* get() const noexcept { return db_; }
  sqlite3* release() noexcept;
  explicit operator bool() const noexcept { return db_ != nullptr; }

 private:
  sqlite3* db_ = nullptr;
};

// ---------------------------------------------------------------------------------------------

class Store {
 public:
  // Opens (creating it if missing) and migrates the database at `path` (":memory:" works).
  // Errors: kInvalidArgument when the file is not an hpctune database (naming the path);
  // kUnavailable when its schema is newer than this build knows; kBusy when another connection
  // holds the write lock past the busy timeout during migration; kIo otherwise.
  static Result<std::unique_ptr<Store>> open(const std::string& path, OpenOptions options = {});
  // Opens an existing database for reading only; never creates or migrates it. kNotFound when the
  // file does not exist; kUnavailable when its schema is newer than this build or older than 2
  // (a version 2 database is read as it is).
  static Result<std::unique_ptr<Store>> open_readonly(const std::string& path, OpenOptions options = {});
  static int latest_version() noexcept;

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store() noexcept;  // rolls back an open transaction, releases the master lock

  // Rolls back an open transaction, finalizes the statements, closes the database and releases
  // the master lock. Idempotent. Every other method fails with kInvalidArgument afterwards.
  Status close() noexcept;

  int schema_version() const noexcept { return version_; }
  const std::string& path() const noexcept { return path_; }
  bool read_only() const noexcept { return read_only_; }
  std::string journal_mode();  // "wal" for a file database, "memory" for ":memory:"

  // Takes an exclusive flock on the database file itself (kept for the Store's lifetime, dropped by
  // the kernel when the process dies, even by SIGKILL): the lock belongs to the file, not to the
  // name, so a symlink or a hard link to a locked database is refused too. Then writes "pid host"
  // into "<real path>-master.lock" for the refusal message. Idempotent. kBusy with "another
  // hpctune master (pid P on host H) is running a campaign on <path>; stop it first" when someone
  // else holds it ("another hpctune master is starting on <path>" before it wrote its identity).
  // A no-op for ":memory:"; kInvalidArgument on a read-only store. Prefer
  // OpenOptions::master_lock, which locks before SQLite opens the file.
  Status acquire_master_lock();
  bool holds_master_lock() const noexcept { return lock_fd_ >= 0; }

  // Batching: begin() starts a write transaction (BEGIN IMMEDIATE, so the write lock is taken now
  // and commit() cannot fail on a lock upgrade); commit() makes everything since durable at once.
  // kInvalidArgument for begin() inside a transaction and for commit() outside one. If commit()
  // fails the transaction stays open: retry commit() or rollback(). rollback() outside a
  // transaction is a no-op.
  Status begin();
  Status commit();
  Status rollback();
  bool in_transaction() const noexcept;

  // --- campaigns and stages ----------------------------------------------------------------
  // One campaign per database: kInvalidArgument if this database already holds one.
  Result<int64_t> create_campaign(const CampaignRow& row);
  // The campaign of this database; nullopt if none was created yet.
  Result<std::optional<CampaignRow>> load_campaign();
  // state: running | completed | failed | interrupted; finished_at 0 clears it.
  Status set_campaign_state(int64_t id, const std::string& state, double finished_at);
  Status set_search_state(int64_t id, const nlohmann::json& state);
  // Records which master process runs the campaign now (on start and on resume).
  Status set_campaign_master(int64_t id, const std::string& host, int64_t pid);
  // The master's heartbeat (CampaignRow::heartbeat_at): written by the running master every
  // kMasterHeartbeatEvery_s inside its turn's transaction. A no-op below schema v9.
  Status set_campaign_heartbeat(int64_t id, double t);
  // Replaces the campaign's normalized config (config_json): what a resume changed and must keep,
  // such as a budget extended with `resume --max-trials`.
  Status set_campaign_config_json(int64_t id, const nlohmann::json& config_json);

  // A new stage row in `state` (pending | running); started_at = t when running.
  Result<int64_t> create_stage(int64_t campaign_id, const std::string& kind, const std::string& name,
                               const nlohmann::json& config, double t, const std::string& state = "running");
  // The stage's state and, for a failed one, why (one statement: the two are never apart); `reason`
  // is cleared for any other state.
  Status set_stage_state(int64_t stage_id, const std::string& state, double finished_at,
                         const std::string& reason = "");
  // The stage starts running at `t` (state running, started_at = t).
  Status start_stage(int64_t stage_id, double t);
  // The stage completed at `t` with `result`.
  Status complete_stage(int64_t stage_id, const nlohmann::json& result, double t);
  Result<std::vector<StageRow>> stages(int64_t campaign_id);  // ordered by id

  // --- trials -------------------------------------------------------------------------------
  // Inserts a trial (row.id is ignored) and returns its id. kInvalidArgument if (campaign, stage,
  // seq) already exists.
  Result<int64_t> insert_trial(const TrialRow& row);

  // queued (or paused) -> assigned for `attempt` on `group_id`, and inserts the attempt's row (state running,
  // started_at = t). The master calls this for a trial it has just picked, so a trial that is not
  // queued at `attempt` is a bug: kInvalidArgument naming the trial's actual state and attempt.
  // `devices`: the GPUs the group was given ("0,1"; "" = none), kept on the attempt's row.
  Status mark_assigned(int64_t trial_id, int64_t attempt, int64_t group_id, uint64_t incarnation, double t,
                       const std::string& devices = "");
  // assigned -> running (started_at = t). Ignored (Ok) when `attempt` is stale or the trial is not
  // assigned/running: a late "started" message must not resurrect a trial.
  Status mark_running(int64_t trial_id, int64_t attempt, double t);
  // The result of `attempt`: the trial becomes final_state (done | pruned | failed, else
  // kInvalidArgument) with its final metrics, objective, last step and error; the attempt's row is
  // closed with the same state. Returns false and changes nothing when the attempt is stale or the
  // trial is already final (a duplicated or late result); true when recorded.
  Result<bool> finish_trial(int64_t trial_id, int64_t attempt, TrialState final_state,
                            const nlohmann::json& metrics, std::optional<double> objective, int64_t step,
                            const std::string& error, double t);
  // The attempt was lost (worker died or went silent) or interrupted: closes its row as
  // `attempt_state` (lost | interrupted, else kInvalidArgument) and queues the trial again as
  // attempt + 1 (group -1, step 0), or marks it failed once max_attempts charged attempts of it
  // were lost. `charged` = false (a master restart; always so for interrupted) records an attempt
  // that does not count against max_attempts: the trial is always queued again. Returns the
  // trial's new state; when the call is stale (other attempt, or the trial is queued or final) it
  // changes nothing and returns the current state. kNotFound for an unknown trial.
  Result<TrialState> requeue_trial(int64_t trial_id, int64_t attempt, const std::string& attempt_state,
                                   const std::string& error, int64_t max_attempts, double t,
                                   bool charged = true);
  // The trial source paused `attempt` (assigned or running): its attempt row is closed as paused
  // (never charged), and the trial becomes paused as attempt + 1 with `params` (its new parameters)
  // and `resume_from` (the checkpoint the next attempt starts from), until mark_assigned gives it to a
  // group again. Returns false and changes nothing when the call is stale (another attempt, or the
  // trial is not assigned or running).
  Result<bool> pause_trial(int64_t trial_id, int64_t attempt, const nlohmann::json& params,
                           const std::string& resume_from, const std::string& reason, double t);
  // Ctrl-C: a non-final trial at `attempt` becomes interrupted, and its running attempt row too.
  // Ignored (Ok) when stale or final.
  Status mark_interrupted(int64_t trial_id, int64_t attempt, double t);
  // Its stage failed: a queued or paused trial at `attempt` (no attempt in flight) becomes
  // interrupted, so that nothing of the failed stage looks as if it would still run (a resume
  // queues it again). Ignored (Ok) otherwise.
  Status mark_waiting_interrupted(int64_t trial_id, int64_t attempt);

  // Intermediate metrics of one report. Idempotent per (trial, attempt, step, name). Also
  // advances the trial's `step` when `attempt` is its current attempt.
  Status add_metrics(int64_t trial_id, int64_t attempt, int64_t step,
                     const std::map<std::string, double>& metrics, double t);
  // trial_id <= 0, attempt <= 0, group_id < 0 mean "none".
  Status add_event(int64_t campaign_id, const std::string& kind, int64_t trial_id, int64_t attempt,
                   int64_t group_id, const nlohmann::json& detail, double t);
  // `path` below <path>.trials/<trial_id> is recorded relative to it; artifacts() gives every path
  // absolute, where it is now (a relative one is relative to the trial's directory).
  Status add_artifact(int64_t trial_id, int64_t attempt, const std::string& kind, const std::string& path,
                      int64_t bytes, double t);
  // Idempotent per (child, parent, relation).
  Status add_lineage(int64_t child, int64_t parent, const std::string& relation);
  // Inserts or updates a trainer group; started_at is set on insert only, updated_at always.
  Status upsert_group(int64_t campaign_id, int64_t group_id, const std::string& backend, int64_t ranks_data,
                      int64_t ranks_model, const std::string& state, uint64_t incarnation, int64_t restarts,
                      double t, const nlohmann::json& hosts = nlohmann::json::array());

  // --- reads --------------------------------------------------------------------------------
  Result<std::vector<TrialRow>> trials(int64_t campaign_id);  // ordered by stage (none first), then seq
  Result<std::optional<TrialRow>> trial(int64_t trial_id);
  Result<std::vector<MetricRow>> metrics(int64_t trial_id);   // ordered by attempt, step, name
  // Every report of metric `name` by any trial of the campaign (all attempts), in the order they
  // were recorded (by t, then trial, attempt, step): what a resumed master replays into its early
  // stopper.
  Result<std::vector<MetricRow>> campaign_metrics(int64_t campaign_id, const std::string& name);
  // The most recent `limit` events (limit <= 0: all), oldest first.
  Result<std::vector<EventRow>> events(int64_t campaign_id, int64_t limit);
  // The first `limit` events of `kind` (limit <= 0: all), oldest first.
  Result<std::vector<EventRow>> events_of_kind(int64_t campaign_id, const std::string& kind, int64_t limit);
  // Every trial state name -> count, zeros included.
  Result<std::map<std::string, int64_t>> count_by_state(int64_t campaign_id);
  // By attempt state: how many attempts of the campaign's trials started, and the seconds they ran
  // (an attempt not finished, until `until`).
  Result<std::map<std::string, AttemptTime>> attempt_time(int64_t campaign_id, double until);
  // {trial_id, attempt, group_id, worker_incarnation, state, started_at, finished_at, error,
  // charged, devices ("0,1"; "" none)} per attempt, ordered by attempt.
  Result<std::vector<nlohmann::json>> attempts(int64_t trial_id);
  Result<std::vector<ArtifactRow>> artifacts(int64_t trial_id);
  Result<std::vector<LineageRow>> lineage(int64_t child_trial_id);
  Result<std::vector<GroupRow>> groups(int64_t campaign_id);

  // --- incremental reads, for a reader that keeps a snapshot (the dashboard) ----------------
  // PRAGMA data_version: changes whenever another connection committed a change to the database
  // since this connection last asked (cheap: no table is read).
  Result<int64_t> data_version();
  // A read transaction (BEGIN, deferred), so that several reads see one committed state; end it
  // with commit(). A read-only store may open one; keep it short (it pins the WAL snapshot).
  Status begin_read();
  // The trials with id > after_id, and those whose id is in `ids`, ordered by id.
  Result<std::vector<TrialRow>> trials_changed(int64_t campaign_id, int64_t after_id, const std::vector<int64_t>& ids);
  // The attempts of the same trials, ordered by trial, attempt.
  Result<std::vector<AttemptRow>> attempts_changed(int64_t after_id, const std::vector<int64_t>& ids);
  // The lineage rows of the same children, ordered by child, parent, relation.
  Result<std::vector<LineageRow>> lineage_changed(int64_t after_id, const std::vector<int64_t>& ids);
  // The lineage rows whose parent is `parent_trial_id` (its children), ordered by child.
  Result<std::vector<LineageRow>> lineage_children(int64_t parent_trial_id);
  // The events of one trial, oldest first (through the index on events.trial_id).
  Result<std::vector<EventRow>> trial_events(int64_t trial_id);
  // How the trial's data replicas combined gradients (done.sync_mode: allreduce, ssp, downpour,
  // hogwild), recorded with its result; "" when its trainer has none, before it finished, or in a
  // database older than schema v8 (set_sync_mode then records nothing).
  Status set_sync_mode(int64_t trial_id, const std::string& mode);
  Result<std::string> sync_mode(int64_t trial_id);
  // The first event of `kind` among the campaign's first 64 (those its preparation writes, such as
  // campaign_simulated): a bounded read, whatever the campaign's size. nullopt when none.
  Result<std::optional<EventRow>> first_event(int64_t campaign_id, const std::string& kind);
  // The reports of the listed trials, ordered by trial, attempt, step, name.
  Result<std::vector<MetricRow>> metrics_of(const std::vector<int64_t>& trial_ids);

 private:
  Store() = default;

  // Internals (store.cpp): the statement cache and the error and savepoint helpers.
  Result<sqlite3_stmt*> prepared(int query);
  Status run(int query, const char* what);  // a cached statement without parameters or rows
  Status exec(const char* sql, const std::string& what);  // unprepared; open and migration only
  Error sql_error(int rc, const std::string& what) const;
  // Steps a bound read to its end, collecting read(statement) of each row (a Row, or a Result<Row>
  // whose error ends the read); `what` names the read in the error.
  template <typename Row, typename Binder, typename Read>
  Result<std::vector<Row>> collect(Binder& b, Read read, const std::string& what) const;
  Status check_open() const;
  // read_trial() of the row at `s`, and its resume_from inside the campaign's trial directory
  // (<path>.trials: under it, no '..', no symbolic link below it); kIo naming the column and trial.
  Result<TrialRow> read_checked_trial(sqlite3_stmt* s) const;
  // The campaign's trial directory, <path>.trials, absolute; "" in memory.
  std::string trials_dir() const;
  Status check_identity();
  Status lock_database(unsigned file_mode);  // the flock of acquire_master_lock
  std::string lock_holder() const;           // the refusal message's description of the holder
  Status migrate(int target);
  Status fill_state_tables();  // every name of kTrialStates / kAttemptStates (INSERT OR IGNORE)
  template <typename F>
  auto atomically(F&& fn) -> decltype(fn());  // fn inside a SAVEPOINT: all its writes or none
  Result<std::pair<std::string, int64_t>> state_and_attempt(int64_t trial_id);  // ("", 0) if missing

  std::string path_;
  int version_ = 0;
  bool read_only_ = false;
  int lock_fd_ = -1;       // a descriptor of the database file holding the flock
  int identity_fd_ = -1;   // "<real path>-master.lock", holding "pid host" while we hold the lock
  Connection db_;
  std::vector<Statement> stmts_;  // the prepared-statement cache, indexed by store.cpp's Query
};

}  // namespace hpctune::store
