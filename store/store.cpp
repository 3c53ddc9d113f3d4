// Store: the SQLite implementation. See store.h for the contract and schema.h for the tables and
// their migrations.
//
// Performance notes: every statement is prepared once (SQLITE_PREPARE_PERSISTENT) on first use and
// reused with reset + clear_bindings, so the hot path never parses SQL. Multi-statement operations
// run inside a SAVEPOINT, which is nearly free inside the master's batch transaction and makes each
// operation atomic on its own outside one. WAL with synchronous=NORMAL means a commit appends to
// the log without fsync (durability is lost only on power failure, never on a process crash).
#include "store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bounded_json.h"
#include "common/system.h"
#include "common/terminal_safe.h"
#include "common/text.h"
#include "store/schema.h"

namespace hpctune::store {

// ---------------------------------------------------------------------------------------------
// Trial states

const char* to_string(TrialState state) noexcept {
  switch (state) {
    case TrialState::kQueued: return "queued";
    case TrialState::kAssigned: return "assigned";
    case TrialState::kRunning: return "running";
    case TrialState::kDone: return "done";
    case TrialState::kPruned: return "pruned";
    case TrialState::kFailed: return "failed";
    case TrialState::kInterrupted: return "interrupted";
    case TrialState::kPaused: return "paused";
  }
  return "unknown";
}

std::optional<TrialState> trial_state_from_string(std::string_view text) noexcept {
  for (auto s : kTrialStates) {
    if (text == to_string(s)) return s;
  }
  return std::nullopt;
}

bool is_final(TrialState state) noexcept {
  return state == TrialState::kDone || state == TrialState::kPruned || state == TrialState::kFailed;
}

// ---------------------------------------------------------------------------------------------
// Paths under the trial directory

std::string path_to_record(const std::string& trials_dir, const std::string& path) {
  namespace fs = std::filesystem;
  if (trials_dir.empty() || path.empty() || !fs::path(path).is_absolute()) return path;
  const std::string root = fs::path(trials_dir).lexically_normal().string() + "/";
  const std::string full = fs::path(path).lexically_normal().string();
  if (full.size() <= root.size() || full.compare(0, root.size(), root) != 0) return path;
  return full.substr(root.size());
}

std::string recorded_path_at(const std::string& trials_dir, const std::string& recorded) {
  namespace fs = std::filesystem;
  if (trials_dir.empty() || recorded.empty()) return recorded;
  const fs::path root = fs::path(trials_dir).lexically_normal();
  const fs::path given(recorded);
  if (!given.is_absolute()) return (root / given).string();
  // An absolute path of an older version: below the last "<name of trials_dir>/<trial number>" on
  // its way, the same below trials_dir (still checked by the caller).
  const std::string name = root.filename().string();
  std::vector<std::string> parts;
  for (const auto& part : given) parts.push_back(part.string());
  for (size_t i = parts.size(); i-- > 1;) {
    const std::string& id = parts[i];
    const bool trial = !id.empty() && id.size() <= 18 &&
                       std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!trial || parts[i - 1] != name) continue;
    fs::path at = root;
    for (size_t k = i; k < parts.size(); ++k) at /= parts[k];
    return at.string();
  }
  return recorded;
}

// ---------------------------------------------------------------------------------------------
// RAII handles

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    (void)close();
    stmt_ = other.release();
  }
  return *this;
}

Statement::~Statement() noexcept { (void)close(); }

Status Statement::close() noexcept {
  if (stmt_ != nullptr) {
    sqlite3_finalize(stmt_);  // its return code repeats the last step's error, already reported
    stmt_ = nullptr;
  }
  return Status::Ok();
}

sqlite3_stmt* Statement::release() noexcept {
  sqlite3_stmt* s = stmt_;
  stmt_ = nullptr;
  return s;
}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = other.release();
  }
  return *this;
}

Connection::~Connection() noexcept {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Status Connection::close() noexcept {
  if (db_ == nullptr) return Status::Ok();
  int rc = sqlite3_close(db_);
  if (rc != SQLITE_OK) {
    return err(Errc::kBusy, std::string("cannot close the database: ") + sqlite3_errmsg(db_));
  }
  db_ = nullptr;
  return Status::Ok();
}

sqlite3* Connection::release() noexcept {
  sqlite3* d = db_;
  db_ = nullptr;
  return d;
}

// ---------------------------------------------------------------------------------------------
// The statement cache

namespace {

enum Query : int {
  kBegin,
  kCommit,
  kRollback,
  kSavepoint,
  kRelease,
  kRollbackTo,
  kFirstCampaign,
  kInsertCampaign,
  kLoadCampaign,
  kLoadCampaignV8,
  kSetCampaignHeartbeat,
  kSetCampaignState,
  kSetSearchState,
  kSetCampaignMaster,
  kSetCampaignConfigJson,
  kInsertStage,
  kSetStageState,
  kStartStage,
  kCompleteStage,
  kSelectStages,
  kSelectStagesV5,
  kSelectStagesV4,
  kInsertTrial,
  kTrialStateAttempt,
  kAssignTrial,
  kInsertAttempt,
  kInsertAttemptV6,
  kRunTrial,
  kFinishTrial,
  kUpsertFinalAttempt,
  kCloseAttempt,
  kCountChargedLosses,
  kFailTrial,
  kRequeueTrial,
  kInterruptTrial,
  kInterruptAttempt,
  kInterruptWaiting,
  kInsertMetric,
  kAdvanceStep,
  kInsertEvent,
  kInsertArtifact,
  kInsertLineage,
  kUpsertGroup,
  kSelectTrials,
  kSelectTrial,
  kSelectTrialsV3,
  kSelectTrialV3,
  kPauseTrial,
  kPauseAttempt,
  kSelectMetrics,
  kSelectEvents,
  kCountByState,
  kSelectAttempts,
  kSelectAttemptsV6,
  kSelectAttemptsV2,
  kSelectArtifacts,
  kSelectLineage,
  kSelectGroups,
  kSelectCampaignMetric,
  kDataVersion,
  kBeginRead,
  kSelectTrialsChanged,
  kSelectTrialsChangedV3,
  kSelectAttemptsChanged,
  kSelectAttemptsChangedV6,
  kSelectAttemptsChangedV2,
  kSelectLineageChanged,
  kSelectLineageOfParent,
  kSelectTrialEvents,
  kSelectEventsOfKind,
  kSelectMetricsOf,
  kSelectFirstEventOfKind,
  kSetSyncMode,
  kSelectSyncMode,
  kAttemptTime,
  kNumQueries,
};

#define HPCTUNE_TRIAL_COLUMNS_V3                                                                  \
  "id, campaign_id, stage_id, seq, params, meta, state, attempt, group_id, created_at, started_at, " \
  "finished_at, step, metrics, objective, error, parent_trial_id, generation"
// The seconds the trial's attempts trained, summed (TrialRow::run_seconds): every attempt that ended
// and was not lost or interrupted, each from its start to its end. Computed, never stored.
#define HPCTUNE_TRIAL_RUN_SECONDS                                                                      \
  ", (SELECT TOTAL(a.finished_at - a.started_at) FROM attempts a WHERE a.trial_id = trials.id AND "     \
  "a.started_at > 0 AND a.finished_at >= a.started_at AND a.state <> 'lost' AND a.state <> 'interrupted')"
#define HPCTUNE_TRIAL_COLUMNS HPCTUNE_TRIAL_COLUMNS_V3 ", resume_from" HPCTUNE_TRIAL_RUN_SECONDS
#define HPCTUNE_CAMPAIGN_COLUMNS                                                                    \
  "id, name, config_text, config_source, config_json, seed, state, created_at, finished_at, "       \
  "search_state, master_host, master_pid"
#define HPCTUNE_CAMPAIGN_COLUMNS_V9 HPCTUNE_CAMPAIGN_COLUMNS ", heartbeat_at"

// Indexed by Query. Parameters are numbered so that each method's binding reads like its SQL.
// Hot statements spell out `state <> 'a' AND state <> 'b'` instead of `state NOT IN ('a', 'b')`:
// SQLite builds an ephemeral table for every execution of an IN list.
constexpr const char* kSql[kNumQueries] = {
    /* kBegin */ "BEGIN IMMEDIATE",
    /* kCommit */ "COMMIT",
    /* kRollback */ "ROLLBACK",
    /* kSavepoint */ "SAVEPOINT hpctune_op",
    /* kRelease */ "RELEASE hpctune_op",
    /* kRollbackTo */ "ROLLBACK TO hpctune_op",
    /* kFirstCampaign */ "SELECT id, name FROM campaigns ORDER BY id LIMIT 1",
    /* kInsertCampaign */
    "INSERT INTO campaigns (name, config_text, config_source, config_json, seed, state, created_at, "
    "finished_at, search_state, master_host, master_pid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    /* kLoadCampaign */ "SELECT " HPCTUNE_CAMPAIGN_COLUMNS_V9 " FROM campaigns ORDER BY id LIMIT 1",
    /* kLoadCampaignV8 */ "SELECT " HPCTUNE_CAMPAIGN_COLUMNS " FROM campaigns ORDER BY id LIMIT 1",
    /* kSetCampaignHeartbeat */ "UPDATE campaigns SET heartbeat_at = ?2 WHERE id = ?1",
    /* kSetCampaignState */ "UPDATE campaigns SET state = ?2, finished_at = ?3 WHERE id = ?1",
    /* kSetSearchState */ "UPDATE campaigns SET search_state = ?2 WHERE id = ?1",
    /* kSetCampaignMaster */ "UPDATE campaigns SET master_host = ?2, master_pid = ?3 WHERE id = ?1",
    /* kSetCampaignConfigJson */ "UPDATE campaigns SET config_json = ?2 WHERE id = ?1",
    /* kInsertStage */
    "INSERT INTO stages (campaign_id, kind, name, state, config_json, created_at, started_at) "
    "VALUES (?1, ?2, ?3, ?6, ?4, ?5, CASE WHEN ?6 = 'running' THEN ?5 END)",
    /* kSetStageState */ "UPDATE stages SET state = ?2, finished_at = ?3, reason = ?4 WHERE id = ?1",
    /* kStartStage */
    "UPDATE stages SET state = 'running', started_at = ?2, finished_at = NULL, reason = '' WHERE id = ?1",
    /* kCompleteStage */ "UPDATE stages SET state = 'completed', result = ?2, finished_at = ?3 WHERE id = ?1",
    /* kSelectStages */
    "SELECT id, campaign_id, kind, name, state, config_json, created_at, finished_at, result, started_at, reason "
    "FROM stages WHERE campaign_id = ?1 ORDER BY id",
    /* kSelectStagesV5 */
    "SELECT id, campaign_id, kind, name, state, config_json, created_at, finished_at, result, started_at, '' "
    "FROM stages WHERE campaign_id = ?1 ORDER BY id",
    /* kSelectStagesV4 */
    "SELECT id, campaign_id, kind, name, state, config_json, created_at, finished_at, '{}', created_at, '' "
    "FROM stages WHERE campaign_id = ?1 ORDER BY id",
    /* kInsertTrial */
    "INSERT INTO trials (campaign_id, stage_id, seq, params, meta, state, attempt, group_id, created_at, "
    "started_at, finished_at, step, metrics, objective, error, parent_trial_id, generation) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    /* kTrialStateAttempt */ "SELECT state, attempt FROM trials WHERE id = ?1",
    /* kAssignTrial */
    "UPDATE trials SET state = 'assigned', group_id = ?3, started_at = NULL "
    "WHERE id = ?1 AND attempt = ?2 AND (state = 'queued' OR state = 'paused')",
    /* kInsertAttempt */
    "INSERT INTO attempts (trial_id, attempt, group_id, worker_incarnation, state, started_at, devices) "
    "VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
    /* kInsertAttemptV6: a database opened without migrating it to v7 (OpenOptions::migrate_to) */
    "INSERT INTO attempts (trial_id, attempt, group_id, worker_incarnation, state, started_at) "
    "VALUES (?1, ?2, ?3, ?4, 'running', ?5)",
    /* kRunTrial */
    "UPDATE trials SET state = 'running', started_at = ?3 WHERE id = ?1 AND attempt = ?2 AND state = 'assigned'",
    /* kFinishTrial */
    "UPDATE trials SET state = ?3, metrics = ?4, objective = ?5, step = MAX(step, ?6), error = ?7, "
    "finished_at = ?8 WHERE id = ?1 AND attempt = ?2 AND state <> 'done' AND state <> 'pruned' AND state <> 'failed'",
    /* kUpsertFinalAttempt: a trial may be finished without ever being assigned (failed before dispatch) */
    "INSERT INTO attempts (trial_id, attempt, group_id, state, started_at, finished_at, error) "
    "VALUES (?1, ?2, (SELECT group_id FROM trials WHERE id = ?1), ?3, ?4, ?4, ?5) "
    "ON CONFLICT (trial_id, attempt) DO UPDATE SET state = excluded.state, "
    "finished_at = excluded.finished_at, error = excluded.error",
    /* kCloseAttempt */
    "UPDATE attempts SET state = ?3, finished_at = COALESCE(finished_at, ?4), error = ?5, charged = ?6 "
    "WHERE trial_id = ?1 AND attempt = ?2 AND (state = 'running' OR state = 'interrupted')",
    /* kCountChargedLosses */
    "SELECT COUNT(*) FROM attempts WHERE trial_id = ?1 AND state = 'lost' AND charged = 1",
    /* kFailTrial */
    "UPDATE trials SET state = 'failed', finished_at = ?3, error = ?4 WHERE id = ?1 AND attempt = ?2",
    /* kRequeueTrial */
    "UPDATE trials SET state = 'queued', attempt = attempt + 1, group_id = -1, started_at = NULL, step = 0, "
    "error = ?3 WHERE id = ?1 AND attempt = ?2",
    /* kInterruptTrial */
    "UPDATE trials SET state = 'interrupted' WHERE id = ?1 AND attempt = ?2 AND (state = 'assigned' OR state = 'running')",
    /* kInterruptAttempt */
    "UPDATE attempts SET state = 'interrupted', finished_at = ?3 "
    "WHERE trial_id = ?1 AND attempt = ?2 AND state = 'running'",
    /* kInterruptWaiting */
    "UPDATE trials SET state = 'interrupted' WHERE id = ?1 AND attempt = ?2 AND (state = 'queued' OR state = 'paused')",
    /* kInsertMetric */
    "INSERT OR REPLACE INTO metrics (trial_id, attempt, step, name, value, t) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* kAdvanceStep */
    "UPDATE trials SET step = ?3 WHERE id = ?1 AND attempt = ?2 AND step < ?3 "
    "AND state <> 'done' AND state <> 'pruned' AND state <> 'failed'",
    /* kInsertEvent */
    "INSERT INTO events (campaign_id, t, kind, trial_id, attempt, group_id, detail) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    /* kInsertArtifact */
    "INSERT INTO artifacts (trial_id, attempt, kind, path, bytes, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* kInsertLineage */
    "INSERT OR IGNORE INTO lineage (child_trial_id, parent_trial_id, relation) VALUES (?1, ?2, ?3)",
    /* kUpsertGroup */
    "INSERT INTO \"groups\" (campaign_id, group_id, backend, ranks_data, ranks_model, hosts, state, "
    "incarnation, restarts, started_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10) "
    "ON CONFLICT (campaign_id, group_id) DO UPDATE SET backend = excluded.backend, "
    "ranks_data = excluded.ranks_data, ranks_model = excluded.ranks_model, hosts = excluded.hosts, "
    "state = excluded.state, incarnation = excluded.incarnation, restarts = excluded.restarts, "
    "updated_at = excluded.updated_at",
    /* kSelectTrials */
    "SELECT " HPCTUNE_TRIAL_COLUMNS " FROM trials WHERE campaign_id = ?1 ORDER BY IFNULL(stage_id, 0), seq",
    /* kSelectTrial */ "SELECT " HPCTUNE_TRIAL_COLUMNS " FROM trials WHERE id = ?1",
    /* kSelectTrialsV3: a v2/v3 database read without migrating it (no resume_from yet) */
    "SELECT " HPCTUNE_TRIAL_COLUMNS_V3 ", ''" HPCTUNE_TRIAL_RUN_SECONDS " FROM trials WHERE campaign_id = ?1 ORDER BY IFNULL(stage_id, 0), seq",
    /* kSelectTrialV3 */ "SELECT " HPCTUNE_TRIAL_COLUMNS_V3 ", ''" HPCTUNE_TRIAL_RUN_SECONDS " FROM trials WHERE id = ?1",
    /* kPauseTrial */
    "UPDATE trials SET state = 'paused', attempt = attempt + 1, params = ?3, resume_from = ?4, group_id = -1, "
    "started_at = NULL, step = 0 WHERE id = ?1 AND attempt = ?2 AND (state = 'assigned' OR state = 'running')",
    /* kPauseAttempt */
    "UPDATE attempts SET state = 'paused', finished_at = ?3, error = ?4, charged = 0 "
    "WHERE trial_id = ?1 AND attempt = ?2 AND state = 'running'",
    /* kSelectMetrics */
    "SELECT trial_id, attempt, step, name, value, t FROM metrics WHERE trial_id = ?1 "
    "ORDER BY attempt, step, name",
    /* kSelectEvents */
    "SELECT id, campaign_id, t, kind, trial_id, attempt, group_id, detail FROM "
    "(SELECT * FROM events WHERE campaign_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
    /* kCountByState */ "SELECT state, COUNT(*) FROM trials WHERE campaign_id = ?1 GROUP BY state",
    /* kSelectAttempts */
    "SELECT trial_id, attempt, group_id, worker_incarnation, state, started_at, finished_at, error, charged, devices "
    "FROM attempts WHERE trial_id = ?1 ORDER BY attempt",
    /* kSelectAttemptsV6: a v3..v6 database read without migrating it (no devices yet) */
    "SELECT trial_id, attempt, group_id, worker_incarnation, state, started_at, finished_at, error, charged, '' "
    "FROM attempts WHERE trial_id = ?1 ORDER BY attempt",
    /* kSelectAttemptsV2: a v2 database read without migrating it; `charged` as migration 3 sets it */
    "SELECT trial_id, attempt, group_id, worker_incarnation, state, started_at, finished_at, error, "
    "CASE WHEN state = 'interrupted' OR (state = 'lost' AND error = 'master restarted') THEN 0 ELSE 1 END, '' "
    "FROM attempts WHERE trial_id = ?1 ORDER BY attempt",
    /* kSelectArtifacts */
    "SELECT id, trial_id, attempt, kind, path, bytes, created_at FROM artifacts WHERE trial_id = ?1 ORDER BY id",
    /* kSelectLineage */
    "SELECT child_trial_id, parent_trial_id, relation FROM lineage WHERE child_trial_id = ?1 "
    "ORDER BY parent_trial_id, relation",
    /* kSelectGroups */
    "SELECT campaign_id, group_id, backend, ranks_data, ranks_model, hosts, state, incarnation, restarts, "
    "started_at, updated_at FROM \"groups\" WHERE campaign_id = ?1 ORDER BY group_id",
    /* kSelectCampaignMetric */
    "SELECT m.trial_id, m.attempt, m.step, m.name, m.value, m.t FROM metrics m JOIN trials tr ON tr.id = m.trial_id "
    "WHERE tr.campaign_id = ?1 AND m.name = ?2 ORDER BY m.t, m.trial_id, m.attempt, m.step",
    /* kDataVersion */ "PRAGMA data_version",
    /* kBeginRead: a deferred transaction, which a read-only connection may open */ "BEGIN",
    // The incremental reads of a reader that keeps a snapshot (the dashboard): the rows of the
    // trials after the last id it knows, and of the ids it lists (a JSON array: json_each).
    /* kSelectTrialsChanged */
    "SELECT " HPCTUNE_TRIAL_COLUMNS " FROM trials WHERE campaign_id = ?1 AND "
    "(id > ?2 OR id IN (SELECT value FROM json_each(?3))) ORDER BY id",
    /* kSelectTrialsChangedV3 */
    "SELECT " HPCTUNE_TRIAL_COLUMNS_V3 ", ''" HPCTUNE_TRIAL_RUN_SECONDS " FROM trials WHERE campaign_id = ?1 AND "
    "(id > ?2 OR id IN (SELECT value FROM json_each(?3))) ORDER BY id",
    /* kSelectAttemptsChanged */
    "SELECT trial_id, attempt, group_id, state, started_at, finished_at, charged, devices FROM attempts "
    "WHERE trial_id > ?1 OR trial_id IN (SELECT value FROM json_each(?2)) ORDER BY trial_id, attempt",
    /* kSelectAttemptsChangedV6 */
    "SELECT trial_id, attempt, group_id, state, started_at, finished_at, charged, '' FROM attempts "
    "WHERE trial_id > ?1 OR trial_id IN (SELECT value FROM json_each(?2)) ORDER BY trial_id, attempt",
    /* kSelectAttemptsChangedV2 */
    "SELECT trial_id, attempt, group_id, state, started_at, finished_at, "
    "CASE WHEN state = 'interrupted' OR (state = 'lost' AND error = 'master restarted') THEN 0 ELSE 1 END, '' "
    "FROM attempts WHERE trial_id > ?1 OR trial_id IN (SELECT value FROM json_each(?2)) ORDER BY trial_id, attempt",
    /* kSelectLineageChanged */
    "SELECT child_trial_id, parent_trial_id, relation FROM lineage WHERE child_trial_id > ?1 OR "
    "child_trial_id IN (SELECT value FROM json_each(?2)) ORDER BY child_trial_id, parent_trial_id, relation",
    /* kSelectLineageOfParent */
    "SELECT child_trial_id, parent_trial_id, relation FROM lineage WHERE parent_trial_id = ?1 "
    "ORDER BY child_trial_id, relation",
    /* kSelectTrialEvents */
    "SELECT id, campaign_id, t, kind, trial_id, attempt, group_id, detail FROM events WHERE trial_id = ?1 ORDER BY id",
    /* kSelectEventsOfKind */
    "SELECT id, campaign_id, t, kind, trial_id, attempt, group_id, detail FROM events WHERE campaign_id = ?1 AND kind = ?2 "
    "ORDER BY id LIMIT ?3",
    /* kSelectMetricsOf */
    "SELECT trial_id, attempt, step, name, value, t FROM metrics WHERE trial_id IN (SELECT value FROM json_each(?1)) "
    "ORDER BY trial_id, attempt, step, name",
    /* kSelectFirstEventOfKind */
    "SELECT id, campaign_id, t, kind, trial_id, attempt, group_id, detail FROM "
    "(SELECT * FROM events WHERE campaign_id = ?1 ORDER BY id LIMIT 64) WHERE kind = ?2 ORDER BY id LIMIT 1",
    /* kSetSyncMode */
    "UPDATE trials SET sync_mode = ?2 WHERE id = ?1",
    /* kSelectSyncMode */
    "SELECT sync_mode FROM trials WHERE id = ?1",
    /* kAttemptTime: an attempt not finished runs until ?2 */
    "SELECT a.state, COUNT(*), TOTAL(MAX(0.0, COALESCE(a.finished_at, ?2) - a.started_at)) FROM attempts a "
    "JOIN trials t ON t.id = a.trial_id WHERE t.campaign_id = ?1 AND a.started_at IS NOT NULL GROUP BY a.state",
};

#undef HPCTUNE_TRIAL_COLUMNS
#undef HPCTUNE_TRIAL_COLUMNS_V3
#undef HPCTUNE_TRIAL_RUN_SECONDS
#undef HPCTUNE_CAMPAIGN_COLUMNS

// Binds parameters of a cached statement and resets it (and its bindings) when it goes out of
// scope, so that no statement stays active: an active read would pin a WAL snapshot and block
// checkpoints. Values are copied (SQLITE_TRANSIENT): callers pass temporaries like json.dump().
class Bind {
 public:
  explicit Bind(sqlite3_stmt* stmt) noexcept : s_(stmt) {}
  Bind(const Bind&) = delete;
  Bind& operator=(const Bind&) = delete;
  ~Bind() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }

  Bind& i64(int i, int64_t v) { return note(sqlite3_bind_int64(s_, i, v)); }
  Bind& u64(int i, uint64_t v) { return i64(i, std::bit_cast<int64_t>(v)); }
  Bind& f64(int i, double v) { return note(sqlite3_bind_double(s_, i, v)); }
  Bind& null(int i) { return note(sqlite3_bind_null(s_, i)); }
  Bind& text(int i, std::string_view v) {
    // An empty string_view may have a null data(), which SQLite would store as NULL.
    return note(sqlite3_bind_text(s_, i, v.empty() ? "" : v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Bind& time(int i, double t) { return t == 0 ? null(i) : f64(i, t); }
  Bind& opt_f64(int i, std::optional<double> v) { return v ? f64(i, *v) : null(i); }
  Bind& opt_i64(int i, std::optional<int64_t> v) { return v ? i64(i, *v) : null(i); }
  Bind& id_or_null(int i, int64_t id) { return id > 0 ? i64(i, id) : null(i); }
  Bind& json(int i, const nlohmann::json& j) { return text(i, j.dump()); }
  Bind& json_or_null(int i, const nlohmann::json& j) { return j.is_null() ? null(i) : json(i, j); }

  // SQLITE_ROW, SQLITE_DONE or an error code (a failed bind comes back here).
  int step() noexcept { return rc_ != SQLITE_OK ? rc_ : sqlite3_step(s_); }
  sqlite3_stmt* stmt() const noexcept { return s_; }

 private:
  Bind& note(int rc) {
    if (rc_ == SQLITE_OK) rc_ = rc;
    return *this;
  }
  sqlite3_stmt* s_;
  int rc_ = SQLITE_OK;
};

// Column readers: NULL reads as 0, "", or the given fallback.
int64_t col_i64(sqlite3_stmt* s, int i) { return sqlite3_column_int64(s, i); }
double col_time(sqlite3_stmt* s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? 0.0 : sqlite3_column_double(s, i);
}
// Text columns: bytes that are not UTF-8 (a damaged or crafted file) become U+FFFD, so that every
// reader, JSON output included, can print them.
std::string col_text(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  if (p == nullptr) return {};
  return sanitize_utf8(std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s, i))));
}
std::optional<double> col_opt_f64(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(s, i);
}
std::optional<int64_t> col_opt_i64(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(s, i);
}
int64_t col_i64_or(sqlite3_stmt* s, int i, int64_t fallback) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? fallback : sqlite3_column_int64(s, i);
}
// JSON columns: NULL reads as json null. Text that does not parse, is nested deeper or is larger
// than hpctune reads (common/bounded_json.h) means the file was edited by hand, corrupted or
// crafted; it is reported (naming the column; the row readers add which row) rather than silently
// replaced, and never parsed into a value whose copy or print would overflow the stack.
Result<nlohmann::json> col_json(sqlite3_stmt* s, int i, const char* what) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return nlohmann::json();
  const unsigned char* p = sqlite3_column_text(s, i);
  if (p == nullptr) return nlohmann::json();
  const std::string_view text(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
  return parse_bounded_json(text, std::string("column ") + what);
}

// The numeric columns `cols` (index, table.column) of the current row hold numbers or NULL. SQLite
// keeps text that does not read as a number as text even in a REAL or INTEGER column, and
// sqlite3_column_double reads it as 0: a crafted objective 'abc' or 'nan' became the best trial.
// hpctune never writes such text (NaN is stored as NULL). Called before any other read of the row
// (reading a column may convert it). The text itself is not repeated: it may hold terminal controls.
Status numeric_columns(sqlite3_stmt* s, std::initializer_list<std::pair<int, const char*>> cols) {
  for (const auto& [i, name] : cols) {
    const int type = sqlite3_column_type(s, i);
    if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
      return err(Errc::kIo, std::string("column ") + name + " holds " + (type == SQLITE_TEXT ? "text" : "a blob") +
                                " where a number belongs (the file was edited, damaged or crafted)");
    }
  }
  return Status::Ok();
}

// A metrics row: trial_id, attempt, step, name, value (NULL reads as NaN), t.
Result<MetricRow> read_metric(sqlite3_stmt* s) {
  if (Status numbers = numeric_columns(s, {{0, "metrics.trial_id"}, {1, "metrics.attempt"}, {2, "metrics.step"},
                                           {4, "metrics.value"}, {5, "metrics.t"}});
      !numbers.ok()) {
    return std::move(numbers).error().with_context("while reading the metrics of trial " +
                                                   std::to_string(sqlite3_column_int64(s, 0)));
  }
  MetricRow m;
  m.trial_id = col_i64(s, 0);
  m.attempt = col_i64(s, 1);
  m.step = col_i64(s, 2);
  m.name = col_text(s, 3);
  m.value = col_opt_f64(s, 4).value_or(std::numeric_limits<double>::quiet_NaN());
  m.t = col_time(s, 5);
  return m;
}

// A trial's meta as the stages and the dashboard read it back: a transfer trial's `role`
// (target | baseline) and its `lineage` entries' `relation` are text. The key and what is wrong
// when a crafted or damaged file has another type there.
std::optional<std::string> trial_meta_problem(const nlohmann::json& meta) {
  if (!meta.is_object()) return std::nullopt;  // readers check that themselves
  if (meta.contains("role") && !meta["role"].is_string()) {
    return std::string("role: expected a string, got ") + meta["role"].type_name();
  }
  if (!meta.contains("lineage") || !meta["lineage"].is_array()) return std::nullopt;
  const auto& lineage = meta["lineage"];
  for (size_t i = 0; i < lineage.size(); ++i) {
    const auto& l = lineage[i];
    if (l.is_object() && l.contains("relation") && !l["relation"].is_string()) {
      return "lineage[" + std::to_string(i) + "].relation: expected a string, got " + l["relation"].type_name();
    }
  }
  return std::nullopt;
}

Result<TrialRow> read_trial(sqlite3_stmt* s) {
  if (Status numbers = numeric_columns(s, {{0, "trials.id"}, {1, "trials.campaign_id"}, {2, "trials.stage_id"},
                                           {3, "trials.seq"}, {7, "trials.attempt"}, {8, "trials.group_id"},
                                           {9, "trials.created_at"}, {10, "trials.started_at"},
                                           {11, "trials.finished_at"}, {12, "trials.step"}, {14, "trials.objective"},
                                           {16, "trials.parent_trial_id"}, {17, "trials.generation"}});
      !numbers.ok()) {
    return std::move(numbers).error().with_context("while reading trial " + std::to_string(sqlite3_column_int64(s, 0)));
  }
  TrialRow r;
  r.id = col_i64(s, 0);
  r.campaign_id = col_i64(s, 1);
  r.stage_id = col_i64_or(s, 2, 0);
  r.seq = col_i64(s, 3);
  auto where = [&] { return "while reading trial " + std::to_string(r.id); };
  auto params = col_json(s, 4, "trials.params");
  if (!params.ok()) return std::move(params).error().with_context(where());
  r.params = std::move(params).value();
  auto meta = col_json(s, 5, "trials.meta");
  if (!meta.ok()) return std::move(meta).error().with_context(where());
  r.meta = std::move(meta).value();
  if (auto bad = trial_meta_problem(r.meta)) {
    return err(Errc::kIo, "column trials.meta at " + *bad + " (the file was edited, damaged or crafted)")
        .with_context(where());
  }
  std::string state = col_text(s, 6);
  auto parsed = trial_state_from_string(state);
  if (!parsed) return err(Errc::kIo, "unknown trial state '" + state + "'").with_context(where());
  r.state = *parsed;
  r.attempt = col_i64(s, 7);
  // A trial is attempted at most search.max_attempts (100) times, plus a new attempt per pause of a
  // pausing search or PBT interval: far below this. A crafted count near 2^63 would overflow where
  // the next attempt is numbered.
  constexpr int64_t kMaxAttempt = int64_t(1) << 40;
  if (r.attempt < 0 || r.attempt > kMaxAttempt) {
    return err(Errc::kIo, "column trials.attempt: " + std::to_string(r.attempt) + " is out of 0.." +
                              std::to_string(kMaxAttempt) + " (the file was edited, damaged or crafted)")
        .with_context(where());
  }
  r.group_id = col_i64(s, 8);
  r.created_at = col_time(s, 9);
  r.started_at = col_time(s, 10);
  r.finished_at = col_time(s, 11);
  r.step = col_i64(s, 12);
  auto metrics = col_json(s, 13, "trials.metrics");
  if (!metrics.ok()) return std::move(metrics).error().with_context(where());
  r.metrics = std::move(metrics).value();
  r.objective = col_opt_f64(s, 14);
  r.error = col_text(s, 15);
  r.parent_trial_id = col_opt_i64(s, 16);
  r.generation = col_i64(s, 17);
  r.resume_from = col_text(s, 18);
  r.run_seconds = col_time(s, 19);
  // Sums of attempts' times: a crafted file's huge ones add up to infinity.
  if (!std::isfinite(r.run_seconds) || r.run_seconds < 0) {
    return err(Errc::kIo, "columns attempts.started_at and finished_at of its attempts sum to " +
                              std::to_string(r.run_seconds) + " seconds (the file was edited, damaged or crafted)")
        .with_context(where());
  }
  return r;
}

// Text read from the database for a message, quoted, its control characters escaped (a crafted
// value may hold terminal controls; terminal_safe, as `hpctune trial` shows a trainer's logs).
std::string shown_text(const std::string& text) { return "'" + terminal_safe(text, /*one_line=*/true) + "'"; }

// trials.resume_from names the checkpoint (a snapshot, workflow/pbt_stage.h) the next attempt of
// a paused trial starts from, which the master wrote under the campaign's trial directory
// `trials_dir` (<db>.trials, absolute). A crafted database could point it at any file of the user,
// which the trial's trainer would read, or copy into its own directory. What is wrong with `path`
// ("" when nothing): a `..` component, a place outside `trials_dir` (spelled as it is, or through
// the user's own links to it), or a symbolic link below it, which is never followed.
std::string resume_from_problem(const std::string& trials_dir, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path given(path);
  for (const auto& part : given) {
    if (part == "..") return "has a '..' component";
  }
  std::error_code ec;
  const fs::path full = fs::absolute(given, ec).lexically_normal();
  if (ec) return "cannot be made absolute: " + ec.message();
  const fs::path root = fs::path(trials_dir).lexically_normal();
  std::error_code root_ec;
  const fs::path real_root = fs::canonical(root, root_ec);  // none when the directory is gone
  // The first prefix of `full` that is the trial directory, as spelled or as the same directory
  // (a campaign resumed through another spelling of its path); the rest must be below it.
  fs::path prefix, rest;
  bool inside = false;
  for (const auto& part : full) {
    if (inside) {
      rest /= part;
      continue;
    }
    prefix /= part;
    inside = prefix == root || (!root_ec && fs::canonical(prefix, ec) == real_root && !ec);
  }
  if (!inside || rest.empty()) return "is outside the campaign's trial directory " + trials_dir;
  fs::path at = root;
  for (const auto& part : rest) {
    at /= part;
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) break;  // not there (any more): the trainer says so
    if (S_ISLNK(st.st_mode)) return "goes through a symbolic link below the campaign's trial directory " + trials_dir;
  }
  return "";
}

// campaigns.config_json is the normalized config hpctune wrote: a map whose keys have the types
// the config table gave them. Readers (status, trials, export, trial, the dashboard, resume) take
// those types for granted, so a crafted or damaged file with another type at one of the keys they
// read is refused here, naming the key, instead of reaching a reader as an internal error.
class ConfigJsonShape {
 public:
  Status check(const nlohmann::json& cj) {
    if (!cj.is_object()) return bad("", "a map of settings", cj);
    HPCTUNE_TRY(objective(cj, "objective"));
    if (cj.contains("objectives")) {
      const auto& list = cj["objectives"];
      if (!list.is_array()) return bad("objectives", "a list", list);
      for (size_t i = 0; i < list.size(); ++i) HPCTUNE_TRY(objective(list, i, "objectives"));
    }
    HPCTUNE_TRY(section(cj, "search", {{"algorithm", kString}, {"max_trials", kInteger}}));
    HPCTUNE_TRY(section(cj, "resources", {{"groups", kInteger}, {"bind", kString}}));
    HPCTUNE_TRY(section(cj, "trainer", {{"kind", kString}}));
    HPCTUNE_TRY(space(cj, ""));
    if (!cj.contains("stages")) return Status::Ok();
    const auto& stages = cj["stages"];
    if (!stages.is_array()) return bad("stages", "a list", stages);
    for (size_t i = 0; i < stages.size(); ++i) {
      const std::string at = "stages[" + std::to_string(i) + "]";
      const auto& st = stages[i];
      if (!st.is_object()) return bad(at, "a map", st);
      if (st.contains("name") && !st["name"].is_string()) return bad(at + ".name", "a string", st["name"]);
      HPCTUNE_TRY(section(st, "search", {{"algorithm", kString}, {"max_trials", kInteger}}, at + "."));
      HPCTUNE_TRY(space(st, at + "."));
    }
    return Status::Ok();
  }

 private:
  enum Kind { kString, kInteger, kBoolean };
  static bool is(const nlohmann::json& v, Kind k) {
    return k == kString ? v.is_string() : k == kInteger ? v.is_number_integer() : v.is_boolean();
  }
  static const char* name_of(Kind k) { return k == kString ? "a string" : k == kInteger ? "an integer" : "true or false"; }

  static Status bad(const std::string& path, const char* expected, const nlohmann::json& got) {
    return err(Errc::kIo, "column campaigns.config_json" + (path.empty() ? std::string() : " at " + path) +
                              ": expected " + expected + ", got " + std::string(got.type_name()) +
                              " (the file was edited, damaged or crafted)");
  }
  // `keys` of the map at `parent[key]`, when it is there.
  static Status section(const nlohmann::json& parent, const char* key, std::initializer_list<std::pair<const char*, Kind>> keys,
                        const std::string& prefix = "") {
    if (!parent.contains(key)) return Status::Ok();
    const auto& s = parent[key];
    if (!s.is_object()) return bad(prefix + key, "a map", s);
    for (const auto& [k, kind] : keys) {
      if (s.contains(k) && !is(s[k], kind)) return bad(prefix + key + "." + k, name_of(kind), s[k]);
    }
    return Status::Ok();
  }
  static Status objective(const nlohmann::json& parent, const char* key) {
    return section(parent, key, {{"metric", kString}, {"mode", kString}});
  }
  static Status objective(const nlohmann::json& list, size_t i, const char* key) {
    const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
    if (!list[i].is_object()) return bad(at, "a map", list[i]);
    for (const char* k : {"metric", "mode"}) {
      if (list[i].contains(k) && !list[i][k].is_string()) return bad(at + "." + k, "a string", list[i][k]);
    }
    return Status::Ok();
  }
  // A space: each parameter a plain value (fixed) or a spec whose type and log flag readers use.
  static Status space(const nlohmann::json& parent, const std::string& prefix) {
    if (!parent.contains("space")) return Status::Ok();
    const auto& sp = parent["space"];
    if (!sp.is_object()) return bad(prefix + "space", "a map", sp);
    for (auto it = sp.begin(); it != sp.end(); ++it) {
      if (!it->is_object()) continue;
      const std::string at = prefix + "space." + it.key();
      if (it->contains("type") && !(*it)["type"].is_string()) return bad(at + ".type", "a string", (*it)["type"]);
      if (it->contains("log") && !(*it)["log"].is_boolean()) return bad(at + ".log", "true or false", (*it)["log"]);
    }
    return Status::Ok();
  }
};

Result<CampaignRow> read_campaign(sqlite3_stmt* s) {
  CampaignRow r;
  r.id = col_i64(s, 0);
  r.name = col_text(s, 1);
  r.config_text = col_text(s, 2);
  r.config_source = col_text(s, 3);
  HPCTUNE_ASSIGN(r.config_json, col_json(s, 4, "campaigns.config_json"));
  HPCTUNE_TRY(ConfigJsonShape().check(r.config_json));
  r.seed = std::bit_cast<uint64_t>(col_i64(s, 5));
  r.state = col_text(s, 6);
  r.created_at = col_time(s, 7);
  r.finished_at = col_time(s, 8);
  HPCTUNE_ASSIGN(r.search_state, col_json(s, 9, "campaigns.search_state"));
  r.master_host = col_text(s, 10);
  r.master_pid = col_i64(s, 11);
  if (sqlite3_column_count(s) > 12) r.heartbeat_at = col_time(s, 12);  // schema v9
  return r;
}

bool is_campaign_state(std::string_view s) {
  return s == "running" || s == "completed" || s == "failed" || s == "interrupted";
}

bool is_file_path(const std::string& path) { return path != ":memory:" && !path.empty(); }

// Descriptors of database files that held (or failed to take) the master lock, parked for reuse
// instead of closed: closing any descriptor of a file drops every POSIX lock this process holds on
// it, SQLite's own included, and another Store of this process may have the file open. One parked
// descriptor per file and concurrent locker at most. A forked child inherits the parked
// descriptors, but they share their open file description (and so any flock taken on it) with
// the parent: only the process that parked one reuses it.
std::mutex g_parked_mutex;
std::multimap<std::pair<dev_t, ino_t>, std::pair<pid_t, int>> g_parked_fds;

void park_lock_fd(int fd) {
  (void)::flock(fd, LOCK_UN);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;  // cannot happen for an open descriptor; leak it rather than close
  std::lock_guard<std::mutex> lock(g_parked_mutex);
  g_parked_fds.emplace(std::make_pair(st.st_dev, st.st_ino), std::make_pair(::getpid(), fd));
}

// What a path that exists but is not a regular file is, for the refusal.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A database is a regular file, or a path where none exists yet: a directory, a device or a FIFO
// named as the database (`--db /tmp`, `--db /dev/null`) is refused before anything (the master
// lock, the identity file, SQLite's journal) is created beside it.
Status check_database_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return err(Errc::kIo, "cannot open database " + path + ": " + std::strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return Status::Ok();
  return err(Errc::kInvalidArgument, path + " is " + file_kind(st.st_mode) + ", not a database file");
}

// A descriptor of the database file at `path` (a parked one if there is), creating the file with
// exactly `mode` when it does not exist. Read-only: flock needs no write access, and SQLite
// reports a file it cannot write in its own words.
Result<int> database_fd(const std::string& path, unsigned mode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    std::lock_guard<std::mutex> lock(g_parked_mutex);
    auto [first, last] = g_parked_fds.equal_range({st.st_dev, st.st_ino});
    for (auto it = first; it != last; ++it) {
      if (it->second.first != ::getpid()) continue;
      const int fd = it->second.second;
      g_parked_fds.erase(it);
      return fd;
    }
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd >= 0) {
    // Created: the umask may have narrowed or (0000) widened the mode; set it exactly.
    if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
      const int e = errno;
      ::close(fd);
      return err(Errc::kIo, "cannot set the permissions of " + path + ": " + std::strerror(e));
    }
    return fd;
  }
  if (errno != EEXIST) return err(Errc::kIo, "cannot create database " + path + ": " + std::strerror(errno));
  // O_NONBLOCK: a path swapped for a FIFO since check_database_path is refused, not waited on.
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return err(Errc::kIo, "cannot open database " + path + ": " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return err(Errc::kInvalidArgument, path + " is " + file_kind(st.st_mode) + ", not a database file");
  }
  return fd;
}

// Creates the database file with exactly `mode` if it does not exist, so that SQLite (which
// creates files 0644 less the umask) opens ours, and gives its -wal and -shm files the same mode.
Status create_database_file(const std::string& path, unsigned mode) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    if (errno == EEXIST) return Status::Ok();
    return err(Errc::kIo, "cannot create database " + path + ": " + std::strerror(errno));
  }
  const int rc = ::fchmod(fd, static_cast<mode_t>(mode));
  const int e = errno;
  ::close(fd);  // a new file: no connection of this process can hold locks on it
  if (rc != 0) return err(Errc::kIo, "cannot set the permissions of " + path + ": " + std::strerror(e));
  return Status::Ok();
}

// "<real path>-master.lock": where the lock holder writes "pid host". Named from the real path,
// so that a second master through a symlink reads the same file.
std::string identity_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return std::string(buf) + "-master.lock";
  return path + "-master.lock";
}

// The path for SQLite's URI syntax: '%', '?' and '#' and control characters percent-encoded.
std::string uri_path(const std::string& path) {
  std::string out;
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// --- the schema a database of each schema version has ---------------------------------------------

// A column as pragma_table_info gives it: its name, declared type, NOT NULL, default (its SQL
// text; "" for none) and place in the primary key (0 = none, else 1-based).
struct Column {
  std::string name, type;
  bool not_null = false;
  std::string default_sql;
  int pk = 0;
};
// A table of the schema: its kind as pragma_table_list says it (table, view, virtual, shadow) and
// its columns; the views and triggers too, by kind and name ("trigger t"), which have no columns
// here; and each table's foreign keys (foreign_keys()).
// Each table's indexes and CHECK constraints are kept by a normalised text (normalized_sql), each
// with the text a message shows.
using Constraints = std::map<std::string, std::string>;
struct SchemaTables {
  std::vector<std::pair<std::string, std::vector<Column>>> tables;
  std::set<std::string> others;
  std::map<std::string, std::set<std::string>> foreign_keys;
  std::map<std::string, Constraints> indexes, checks;
};

// The text of each row of `sql` (?1 bound to `arg` when given), `ncols` columns each.
Result<std::vector<std::vector<std::string>>> text_rows(sqlite3* db, const char* sql, const std::string* arg, int ncols) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  Statement stmt(raw);
  if (rc == SQLITE_OK && arg) rc = sqlite3_bind_text(raw, 1, arg->c_str(), -1, SQLITE_TRANSIENT);
  std::vector<std::vector<std::string>> rows;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW) continue;
    std::vector<std::string> row;
    for (int i = 0; i < ncols; ++i) row.push_back(col_text(raw, i));
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return err(Errc::kIo, std::string("cannot read the database's schema: ") + sqlite3_errstr(rc));
  return rows;
}

// The columns of `table` in `db`, in order; none when there is no such table.
Result<std::vector<Column>> table_columns(sqlite3* db, const std::string& table) {
  HPCTUNE_ASSIGN(auto rows, text_rows(db,
                                      "SELECT name, type, \"notnull\", IFNULL(dflt_value, ''), pk "
                                      "FROM pragma_table_info(?1) ORDER BY cid",
                                      &table, 5));
  std::vector<Column> out;
  for (auto& r : rows) {
    out.push_back({std::move(r[0]), std::move(r[1]), r[2] == "1", std::move(r[3]), std::atoi(r[4].c_str())});
  }
  return out;
}

// The foreign keys of `table` in `db`, one text each: "campaign_id -> campaigns(id)", with its
// ON UPDATE / ON DELETE actions when they are not NO ACTION (a key of several columns is one text).
Result<std::set<std::string>> foreign_keys(sqlite3* db, const std::string& table) {
  HPCTUNE_ASSIGN(auto rows, text_rows(db,
                                      "SELECT id, \"from\", \"table\", IFNULL(\"to\", ''), on_update, on_delete "
                                      "FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
                                      &table, 6));
  std::map<std::string, std::array<std::string, 5>> keys;  // by id: from, table, to, on update, on delete
  for (const auto& r : rows) {
    auto& k = keys[r[0]];
    k[0] += (k[0].empty() ? "" : ", ") + r[1];
    k[1] = r[2];
    k[2] += (k[2].empty() ? "" : ", ") + r[3];
    k[3] = r[4];
    k[4] = r[5];
  }
  std::set<std::string> out;
  for (const auto& [id, k] : keys) {
    std::string text = k[0] + " -> " + k[1] + "(" + k[2] + ")";
    if (k[3] != "NO ACTION") text += " ON UPDATE " + k[3];
    if (k[4] != "NO ACTION") text += " ON DELETE " + k[4];
    out.insert(std::move(text));
  }
  return out;
}

// Whether a and b are the same text, letters in any case.
bool same_type(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
         });
}

// The end of the quoted text ('...', "...", `...` or [...]) that starts at `sql[i]`: the index after it.
size_t end_of_quoted(std::string_view sql, size_t i) {
  const char close = sql[i] == '[' ? ']' : sql[i];
  for (size_t k = i + 1; k < sql.size(); ++k) {
    if (sql[k] != close) continue;
    if (close != ']' && k + 1 < sql.size() && sql[k + 1] == close) {
      ++k;  // a doubled quote stands for itself
      continue;
    }
    return k + 1;
  }
  return sql.size();
}
bool is_quote(char c) { return c == '\'' || c == '"' || c == '`' || c == '['; }
bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

// SQL text as a comparison key: outside quotes, letters upper case, runs of blanks one space, and
// no space next to anything but a word ("check(  attempt>=1 )" and "CHECK (attempt >= 1)" agree).
std::string normalized_sql(std::string_view sql) {
  std::string out;
  bool blank = false;
  for (size_t i = 0; i < sql.size();) {
    const char c = sql[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      blank = true;
      ++i;
      continue;
    }
    if (blank && !out.empty() && is_word_char(out.back()) && (is_word_char(c) || is_quote(c))) out += ' ';
    blank = false;
    if (is_quote(c)) {
      const size_t end = end_of_quoted(sql, i);
      out.append(sql.substr(i, end - i));
      i = end;
      continue;
    }
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    ++i;
  }
  return out;
}

// SQL text as a message shows it: runs of blanks one space (the caller escapes it).
std::string shown_sql(std::string_view sql) {
  std::string out;
  for (char c : sql) {
    const bool blank = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!blank) out += c;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The CHECK constraints in the SQL that created `table` (sqlite_schema): the expression of each
// CHECK keyword outside quotes, its parentheses balanced.
Result<Constraints> check_constraints(sqlite3* db, const std::string& table) {
  HPCTUNE_ASSIGN(auto rows, text_rows(db, "SELECT IFNULL(sql, '') FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                                      &table, 1));
  Constraints out;
  const std::string sql = rows.empty() ? std::string() : rows.front().front();
  for (size_t i = 0; i < sql.size();) {
    if (is_quote(sql[i])) {
      i = end_of_quoted(sql, i);
      continue;
    }
    const bool word = (i == 0 || !is_word_char(sql[i - 1])) && i + 5 <= sql.size() &&
                      same_type(std::string_view(sql).substr(i, 5), "CHECK") &&
                      (i + 5 == sql.size() || !is_word_char(sql[i + 5]));
    if (!word) {
      ++i;
      continue;
    }
    size_t open = i + 5;
    while (open < sql.size() && std::isspace(static_cast<unsigned char>(sql[open]))) ++open;
    if (open >= sql.size() || sql[open] != '(') {
      i = open;
      continue;
    }
    size_t k = open + 1;
    for (int depth = 1; k < sql.size() && depth > 0;) {
      if (is_quote(sql[k])) {
        k = end_of_quoted(sql, k);
        continue;
      }
      depth += sql[k] == '(' ? 1 : sql[k] == ')' ? -1 : 0;
      ++k;
    }
    const std::string_view expr = std::string_view(sql).substr(open, k - open);  // with its parentheses
    out.emplace(normalized_sql(expr), "CHECK " + terminal_safe(shown_sql(expr), /*one_line=*/true));
    i = k;
  }
  return out;
}

// The indexes of `table`: each made by CREATE INDEX by its SQL; each that a UNIQUE constraint made
// by its name and columns (PRAGMA index_list, index_xinfo). The primary key's is left to the
// columns' comparison (their place in it).
Result<Constraints> table_indexes(sqlite3* db, const std::string& table) {
  HPCTUNE_ASSIGN(auto list, text_rows(db,
                                      "SELECT l.name, l.\"unique\", l.origin, IFNULL(m.sql, '') FROM pragma_index_list(?1) l "
                                      "LEFT JOIN sqlite_schema m ON m.type = 'index' AND m.name = l.name ORDER BY l.name",
                                      &table, 4));
  Constraints out;
  for (const auto& r : list) {
    if (r[2] == "pk") continue;
    if (!r[3].empty()) {
      out.emplace(normalized_sql(r[3]), "index " + shown_text(shown_sql(r[3])));
      continue;
    }
    HPCTUNE_ASSIGN(auto columns, text_rows(db,
                                           "SELECT IFNULL(name, '(an expression)') FROM pragma_index_xinfo(?1) "
                                           "WHERE key = 1 ORDER BY seqno",
                                           &r[0], 1));
    std::vector<std::string> names;
    for (const auto& c : columns) names.push_back(c.front());
    const std::string text = "index " + terminal_safe(r[0], true) + " (" + (r[1] == "1" ? "UNIQUE" : "") + " (" +
                             terminal_safe(join(names, ", "), true) + "))";
    out.emplace(text, text);
  }
  return out;
}

// What `name` is in the main schema: "table", "view", "virtual" or "shadow"; "" when nothing.
Result<std::string> table_kind(sqlite3* db, const std::string& name) {
  HPCTUNE_ASSIGN(auto rows, text_rows(db, "SELECT type FROM pragma_table_list(?1) WHERE schema = 'main'", &name, 1));
  return rows.empty() ? std::string() : rows.front().front();
}

// The views and triggers of `db`, as "view NAME" and "trigger NAME".
Result<std::set<std::string>> views_and_triggers(sqlite3* db) {
  HPCTUNE_ASSIGN(auto rows, text_rows(db, "SELECT type, name FROM sqlite_schema WHERE type IN ('view', 'trigger')",
                                      nullptr, 2));
  std::set<std::string> out;
  for (const auto& r : rows) out.insert(r[0] + " " + terminal_safe(r[1], /*one_line=*/true));
  return out;
}

// Every table of schema version `version` with its columns, as the migrations of schema.h create
// them: made once per version in an in-memory database, so that this list is never a second,
// hand-kept copy of the schema.
Result<SchemaTables> schema_tables(int version) {
  static std::mutex mu;
  static std::map<int, SchemaTables> made;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = made.find(version); it != made.end()) return it->second;
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(":memory:", &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  Connection conn(raw);
  if (rc != SQLITE_OK) return err(Errc::kIo, std::string("cannot open an in-memory database: ") + sqlite3_errstr(rc));
  for (const schema::Migration& m : schema::kMigrations) {
    if (m.version > version) break;
    char* msg = nullptr;
    if (sqlite3_exec(raw, m.sql, nullptr, nullptr, &msg) != SQLITE_OK) {
      const std::string why = msg ? msg : "?";
      sqlite3_free(msg);
      return err(Errc::kInternal, "schema migration " + std::to_string(m.version) + " fails on an empty database: " + why);
    }
  }
  auto names = text_rows(raw, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
                         nullptr, 1);
  if (!names.ok()) return err(Errc::kInternal, "cannot list the schema's tables: " + names.error().message());
  SchemaTables schema;
  for (const auto& row : *names) {
    HPCTUNE_ASSIGN(std::vector<Column> columns, table_columns(raw, row.front()));
    schema.tables.emplace_back(row.front(), std::move(columns));
    HPCTUNE_ASSIGN(schema.foreign_keys[row.front()], foreign_keys(raw, row.front()));
    HPCTUNE_ASSIGN(schema.indexes[row.front()], table_indexes(raw, row.front()));
    HPCTUNE_ASSIGN(schema.checks[row.front()], check_constraints(raw, row.front()));
  }
  HPCTUNE_ASSIGN(schema.others, views_and_triggers(raw));
  made[version] = schema;
  return schema;
}

// How the column `have` of `table` differs from the schema's `want` of the same name: its declared
// type, NOT NULL, default and place in the primary key. Text from the file is shown as shown_text().
std::vector<std::string> column_differences(const std::string& table, const Column& want, const Column& have) {
  const std::string column = "column " + table + "." + want.name;
  std::vector<std::string> out;
  if (!same_type(have.type, want.type)) {
    out.push_back(column + " is declared " + shown_text(have.type) + ", not '" + want.type + "'");
  }
  if (have.not_null != want.not_null) {
    out.push_back(column + (want.not_null ? " lacks its NOT NULL" : " is NOT NULL, which the schema's is not"));
  }
  if (have.default_sql != want.default_sql) {
    auto shown = [](const std::string& sql) { return sql.empty() ? std::string("none") : shown_text(sql); };
    out.push_back(column + " has the default " + shown(have.default_sql) + ", not " + shown(want.default_sql));
  }
  if (have.pk != want.pk) {
    auto place = [](int pk) { return pk == 0 ? std::string("not in the primary key") : "primary key column " + std::to_string(pk); };
    out.push_back(column + " is " + place(have.pk) + ", not " + place(want.pk));
  }
  return out;
}

// How the indexes or CHECK constraints `have` of `table` differ from the schema's `want`: those
// it lacks, then those the schema has not (as shown, escaped: text from the file).
std::vector<std::string> constraint_differences(const std::string& table, const Constraints& want,
                                                const Constraints& have) {
  std::vector<std::string> out;
  for (const auto& [key, shown] : want) {
    if (!have.count(key)) out.push_back("table " + table + " lacks the " + shown);
  }
  for (const auto& [key, shown] : have) {
    if (!want.count(key)) out.push_back("table " + table + " has the " + shown + ", which the schema has not");
  }
  return out;
}

// The database's schema is that of its version: every table and column is there, each table a
// table (not a view), each column of its declared type, NOT NULL, default and place in the
// primary key, each table with the foreign keys, indexes and CHECK constraints of the schema and
// no others, and no view or trigger the migrations do not create. A file edited by hand (a dropped
// column, a table rebuilt without one) would otherwise fail later, in some query, with SQLite's own
// message; a crafted one (a view in place of a table, a column of another type, a trigger that
// rewrites what is stored) would feed its own rows, and one without the UNIQUE index of trials
// (campaign, stage, seq) would take a suggestion twice. kIo naming what is missing or different;
// text from the file is escaped.
Status check_schema(sqlite3* db, int version, const std::string& path) {
  HPCTUNE_ASSIGN(SchemaTables expected, schema_tables(version));
  std::string missing, differs;
  auto add = [](std::string& list, const std::string& what) { list += (list.empty() ? "" : ", ") + what; };
  for (const auto& [table, columns] : expected.tables) {
    HPCTUNE_ASSIGN(std::string kind, table_kind(db, table));
    if (kind.empty()) {
      add(missing, "table " + table);
      continue;
    }
    if (kind != "table") {
      add(differs, table + " is a " + kind + ", not a table");
      continue;
    }
    HPCTUNE_ASSIGN(std::vector<Column> have, table_columns(db, table));
    for (const Column& column : columns) {
      const auto it = std::find_if(have.begin(), have.end(), [&](const Column& c) { return c.name == column.name; });
      if (it == have.end()) {
        add(missing, "column " + table + "." + column.name);
        continue;
      }
      for (const std::string& d : column_differences(table, column, *it)) add(differs, d);
    }
    HPCTUNE_ASSIGN(std::set<std::string> keys, foreign_keys(db, table));
    const std::set<std::string>& want = expected.foreign_keys[table];
    for (const std::string& k : want) {
      if (!keys.count(k)) add(differs, "table " + table + " lacks the foreign key " + k);
    }
    for (const std::string& k : keys) {
      if (!want.count(k)) add(differs, "table " + table + " has the foreign key " + shown_text(k) + ", which the schema has not");
    }
    HPCTUNE_ASSIGN(const Constraints indexes, table_indexes(db, table));
    HPCTUNE_ASSIGN(const Constraints checks, check_constraints(db, table));
    for (const std::string& d : constraint_differences(table, expected.indexes[table], indexes)) add(differs, d);
    for (const std::string& d : constraint_differences(table, expected.checks[table], checks)) add(differs, d);
  }
  HPCTUNE_ASSIGN(std::set<std::string> others, views_and_triggers(db));
  for (const std::string& other : others) {
    if (!expected.others.count(other)) add(differs, "it has " + other + ", which the schema has not");
  }
  if (missing.empty() && differs.empty()) return Status::Ok();
  const std::string of = " of its schema version " + std::to_string(version);
  std::string text = "database " + path;
  if (!missing.empty()) text += " lacks " + missing + of;
  if (!differs.empty()) text += (missing.empty() ? " differs from its schema version " + std::to_string(version) + ": "
                                                 : "; and differs from it: ") + differs;
  return err(Errc::kIo, text + " (the file was edited, damaged or crafted); refusing to use it");
}

// SQL text of an identifier, quoted.
std::string quoted(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// "id 3", "trial_id 1, attempt 2, step 3, name 'loss'": the row at `s` by its key columns
// (columns [0, key_count) of the statement, named `key`).
std::string row_key(sqlite3_stmt* s, const std::vector<std::string>& key) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < key.size(); ++i) {
    const int col = static_cast<int>(i);
    const int type = sqlite3_column_type(s, col);
    std::string value = type == SQLITE_INTEGER ? std::to_string(sqlite3_column_int64(s, col))
                        : type == SQLITE_NULL  ? std::string("NULL")
                        : type == SQLITE_TEXT  ? shown_text(col_text(s, col))
                                               : std::string("(not a number or text)");
    parts.push_back(key[i] + " " + value);
  }
  return join(parts, ", ");
}

// Every INTEGER and REAL column of every table of schema version `version` (schema_tables(): as
// the migrations create them) holds numbers or NULL in every row: SQLite keeps text that does not
// read as a number as text even there, and sqlite3_column_int64 reads it as 0 (a crafted
// campaigns.seed 'abc' resumed with seed 0). One scan per table, at open; the row readers check
// the columns they read again (numeric_columns), for a file changed under a reader that keeps it
// open. kIo naming the table, the column and the row by its key; the text itself is not repeated.
Status check_numeric_cells(sqlite3* db, int version, const std::string& path) {
  HPCTUNE_ASSIGN(SchemaTables schema, schema_tables(version));
  for (const auto& [table, columns] : schema.tables) {
    std::vector<const Column*> keyed;
    std::vector<std::string> key, numeric;
    for (const Column& c : columns) {
      if (c.pk > 0) keyed.push_back(&c);
      if (same_type(c.type, "INTEGER") || same_type(c.type, "REAL")) numeric.push_back(c.name);
    }
    if (numeric.empty()) continue;
    std::sort(keyed.begin(), keyed.end(), [](const Column* a, const Column* b) { return a->pk < b->pk; });
    for (const Column* c : keyed) key.push_back(c->name);
    if (key.empty()) key.push_back("rowid");
    std::vector<std::string> selected, tests;
    for (const std::string& k : key) selected.push_back(quoted(k));
    for (const std::string& n : numeric) {
      selected.push_back(quoted(n));
      tests.push_back("typeof(" + quoted(n) + ") IN ('text', 'blob')");
    }
    const std::string sql = "SELECT " + join(selected, ", ") + " FROM " + quoted(table) + " WHERE " +
                            join(tests, " OR ") + " LIMIT 1";
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr);
    Statement stmt(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) continue;
    if (rc != SQLITE_ROW) {
      return err(Errc::kIo, "cannot read table " + table + " of database " + path + ": " + sqlite3_errmsg(db));
    }
    for (size_t i = 0; i < numeric.size(); ++i) {
      const int type = sqlite3_column_type(raw, static_cast<int>(key.size() + i));
      if (type != SQLITE_TEXT && type != SQLITE_BLOB) continue;
      return err(Errc::kIo, "database " + path + ": column " + table + "." + numeric[i] + " of the row with " +
                                row_key(raw, key) + " holds " + (type == SQLITE_TEXT ? "text" : "a blob") +
                                " where a number belongs (the file was edited, damaged or crafted); refusing to use it");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<AccessModes> access_modes(std::string_view storage_access) {
  if (storage_access == "owner") return AccessModes{0600, 0700};
  if (storage_access == "group") return AccessModes{0640, 0750};
  if (storage_access == "all") return AccessModes{0644, 0755};
  return err(Errc::kInvalidArgument,
             "storage_access must be owner, group or all, not '" + std::string(storage_access) + "'");
}

// ---------------------------------------------------------------------------------------------
// Store: plumbing

int Store::latest_version() noexcept { return schema::kLatestVersion; }

Store::~Store() noexcept { (void)close(); }

Status Store::close() noexcept {
  Status result;
  if (db_) {
    if (!sqlite3_get_autocommit(db_.get())) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    for (auto& s : stmts_) (void)s.close();
    result = db_.close();
  }
  if (identity_fd_ >= 0) {
    // Clear our identity before letting go, so nobody reads a stale "pid host" later.
    if (::ftruncate(identity_fd_, 0) != 0) { /* best effort: the next holder overwrites it anyway */ }
    ::close(identity_fd_);
    identity_fd_ = -1;
  }
  if (lock_fd_ >= 0) {
    park_lock_fd(lock_fd_);  // drops the flock
    lock_fd_ = -1;
  }
  return result;
}

Error Store::sql_error(int rc, const std::string& what) const {
  const int primary = rc & 0xff;
  Errc code = Errc::kIo;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) code = Errc::kBusy;
  else if (primary == SQLITE_CONSTRAINT) code = Errc::kInvalidArgument;
  // sqlite3_errmsg describes the last failed call on this connection, which is the one that
  // returned rc as long as callers build the error right away (they do).
  const std::string text = db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc);
  // "no such column" after open (the file was changed under a reader that keeps it open, as the
  // dashboard does): said as open() says it, naming what is missing, not in SQLite's words.
  if (primary == SQLITE_ERROR && db_ && version_ > 0) {
    if (Status columns = check_schema(db_.get(), version_, path_); !columns.ok()) return std::move(columns).error();
  }
  return err(code, what + ": " + text + " (database " + path_ + ")");
}

template <typename Row, typename Binder, typename Read>
Result<std::vector<Row>> Store::collect(Binder& b, Read read, const std::string& what) const {
  std::vector<Row> out;
  int rc;
  while ((rc = b.step()) == SQLITE_ROW) {
    if constexpr (std::is_same_v<decltype(read(b.stmt())), Row>) {
      out.push_back(read(b.stmt()));
    } else {
      HPCTUNE_ASSIGN(Row row, read(b.stmt()));
      out.push_back(std::move(row));
    }
  }
  if (rc != SQLITE_DONE) return sql_error(rc, what);
  return out;
}

Status Store::check_open() const {
  if (!db_) return err(Errc::kInvalidArgument, "the store for " + path_ + " is closed");
  return Status::Ok();
}

Result<sqlite3_stmt*> Store::prepared(int query) {
  HPCTUNE_TRY(check_open());
  Statement& slot = stmts_[static_cast<std::size_t>(query)];
  if (!slot) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), kSql[query], -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    Statement stmt(raw);
    if (rc != SQLITE_OK) return sql_error(rc, std::string("cannot prepare \"") + kSql[query] + "\"");
    slot = std::move(stmt);
  }
  return slot.get();
}

Status Store::run(int query, const char* what) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(query));
  Bind b(s);
  int rc = b.step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return sql_error(rc, what);
  return Status::Ok();
}

Status Store::exec(const char* sql, const std::string& what) {
  HPCTUNE_TRY(check_open());
  char* msg = nullptr;
  int rc = sqlite3_exec(db_.get(), sql, nullptr, nullptr, &msg);
  if (rc != SQLITE_OK) {
    std::string text = msg != nullptr ? msg : sqlite3_errstr(rc);
    sqlite3_free(msg);
    const int primary = rc & 0xff;
    Errc code = (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) ? Errc::kBusy : Errc::kIo;
    if (primary == SQLITE_NOTADB) code = Errc::kInvalidArgument;
    return err(code, what + ": " + text + " (database " + path_ + ")");
  }
  return Status::Ok();
}

template <typename F>
auto Store::atomically(F&& fn) -> decltype(fn()) {
  HPCTUNE_TRY(run(kSavepoint, "cannot start a savepoint"));
  auto result = fn();
  if (result.ok()) {
    Status released = run(kRelease, "cannot commit");
    if (released.ok()) return result;
    // RELEASE of an outermost savepoint is a COMMIT and can fail (e.g. SQLITE_BUSY): undo it all.
    (void)run(kRollbackTo, "cannot roll back");
    (void)run(kRelease, "cannot release");
    return std::move(released).error();
  }
  (void)run(kRollbackTo, "cannot roll back");
  (void)run(kRelease, "cannot release");
  return result;
}

// Reads the identity of the file before anything writes to it: a file that is not SQLite, a
// SQLite file of another application, or a newer hpctune schema is refused untouched.
Status Store::check_identity() {
  sqlite3* db = db_.get();
  auto pragma_int = [&](const char* sql, int64_t& out) -> Status {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
    Statement stmt(raw);
    if (rc == SQLITE_OK) {
      rc = sqlite3_step(raw);
      if (rc == SQLITE_ROW) {
        out = sqlite3_column_int64(raw, 0);
        return Status::Ok();
      }
    }
    if ((rc & 0xff) == SQLITE_NOTADB) {
      return err(Errc::kInvalidArgument,
                 path_ + " is not an hpctune database (not a SQLite file: " + sqlite3_errmsg(db) + ")");
    }
    return sql_error(rc, "cannot read the schema of " + path_);
  };
  int64_t app_id = 0, version = 0, objects = 0;
  HPCTUNE_TRY(pragma_int("PRAGMA application_id", app_id));
  HPCTUNE_TRY(pragma_int("PRAGMA user_version", version));
  HPCTUNE_TRY(pragma_int("SELECT COUNT(*) FROM sqlite_schema", objects));
  if (app_id != schema::kApplicationId && !(app_id == 0 && version == 0 && objects == 0)) {
    return err(Errc::kInvalidArgument, path_ + " is a SQLite database but not an hpctune one (application_id " +
                                           std::to_string(app_id) + ", " + std::to_string(objects) +
                                           " schema objects); refusing to modify it");
  }
  if (version > schema::kLatestVersion) {
    return err(Errc::kUnavailable, "database schema version " + std::to_string(version) +
                                       " is newer than this hpctune (" + std::to_string(schema::kLatestVersion) +
                                       "); upgrade hpctune (database " + path_ + ")");
  }
  version_ = static_cast<int>(version);
  return Status::Ok();
}

Status Store::fill_state_tables() {
  // Names are only ever added: when both tables hold as many as the code names, there is nothing to
  // write (and an open takes no write lock for it).
  auto count = [&](const char* sql) -> int64_t {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql, -1, &raw, nullptr) != SQLITE_OK) return -1;
    Statement stmt(raw);
    return sqlite3_step(raw) == SQLITE_ROW ? col_i64(raw, 0) : -1;
  };
  if (count("SELECT COUNT(*) FROM trial_states") == static_cast<int64_t>(std::size(kTrialStates)) &&
      count("SELECT COUNT(*) FROM attempt_states") == static_cast<int64_t>(std::size(kAttemptStates))) {
    return Status::Ok();
  }
  for (TrialState st : kTrialStates) {
    const std::string sql = std::string("INSERT OR IGNORE INTO trial_states (name) VALUES ('") + to_string(st) + "')";
    HPCTUNE_TRY(exec(sql.c_str(), "cannot record the trial state names"));
  }
  for (const char* name : kAttemptStates) {
    const std::string sql = std::string("INSERT OR IGNORE INTO attempt_states (name) VALUES ('") + name + "')";
    HPCTUNE_TRY(exec(sql.c_str(), "cannot record the attempt state names"));
  }
  return Status::Ok();
}

Status Store::migrate(int target) {
  if (version_ >= target) return Status::Ok();
  HPCTUNE_TRY(exec("BEGIN IMMEDIATE", "cannot start the schema migration"));
  auto body = [&]() -> Status {
    // Another process may have migrated between check_identity() and our write lock.
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_.get(), "PRAGMA user_version", -1, &raw, nullptr);
    Statement stmt(raw);
    if (rc != SQLITE_OK || (rc = sqlite3_step(raw)) != SQLITE_ROW) return sql_error(rc, "cannot read user_version");
    int current = sqlite3_column_int(raw, 0);
    (void)stmt.close();
    if (current > schema::kLatestVersion) {
      return err(Errc::kUnavailable, "database schema version " + std::to_string(current) +
                                         " is newer than this hpctune (" +
                                         std::to_string(schema::kLatestVersion) + "); upgrade hpctune");
    }
    for (const schema::Migration& m : schema::kMigrations) {
      if (m.version <= current || m.version > target) continue;
      HPCTUNE_TRY(exec(m.sql, "cannot apply schema migration " + std::to_string(m.version) + " (" +
                                  m.description + ")"));
      std::string set_version = "PRAGMA user_version = " + std::to_string(m.version);
      HPCTUNE_TRY(exec(set_version.c_str(), "cannot record schema version " + std::to_string(m.version)));
      current = m.version;
    }
    if (current >= schema::kStateTablesVersion) HPCTUNE_TRY(fill_state_tables());
    // Rebuilt tables (foreign keys are off while migrating): every reference must still hold.
    {
      sqlite3_stmt* check = nullptr;
      int frc = sqlite3_prepare_v2(db_.get(), "PRAGMA foreign_key_check", -1, &check, nullptr);
      Statement check_stmt(check);
      if (frc != SQLITE_OK) return sql_error(frc, "cannot check the foreign keys after migrating");
      frc = sqlite3_step(check);
      if (frc == SQLITE_ROW) {
        return err(Errc::kIo, std::string("schema migration left a broken reference in table ") + col_text(check, 0) +
                                  " (row " + std::to_string(col_i64(check, 1)) + " -> " + col_text(check, 2) + ")");
      }
      if (frc != SQLITE_DONE) return sql_error(frc, "cannot check the foreign keys after migrating");
    }
    version_ = std::max(version_, current);
    return Status::Ok();
  };
  const int before = version_;
  Status s = body();
  if (!s.ok()) {
    version_ = before;
    sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  Status committed = exec("COMMIT", "cannot commit the schema migration");
  if (!committed.ok()) {
    version_ = before;
    sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return committed;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& path, OpenOptions options) {
  const int target = options.migrate_to < 0 ? schema::kLatestVersion : options.migrate_to;
  if (target < 1 || target > schema::kLatestVersion) {
    return err(Errc::kInvalidArgument, "migrate_to must be between 1 and " +
                                           std::to_string(schema::kLatestVersion) + ", not " +
                                           std::to_string(options.migrate_to));
  }
  std::unique_ptr<Store> store(new Store());
  store->path_ = path;
  store->stmts_.resize(kNumQueries);
  if (is_file_path(path)) {
    HPCTUNE_TRY(check_database_path(path));
    // The lock comes first: a second master must be refused before it reads a file the first may
    // be creating (it would see "not a database") or competes for the switch to WAL mode.
    if (options.master_lock) HPCTUNE_TRY(store->lock_database(options.file_mode));
    else HPCTUNE_TRY(create_database_file(path, options.file_mode));
  }
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  Connection conn(raw);  // owns the handle even when the open failed
  if (rc != SQLITE_OK) {
    return err(Errc::kIo, "cannot open database " + path + ": " + (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  store->db_ = std::move(conn);
  HPCTUNE_TRY(store->check_identity());
  // The migrations from here on assume the columns of the version the file says it has.
  if (store->version_ > 0) HPCTUNE_TRY(check_schema(store->db_.get(), store->version_, path));

  // foreign_keys cannot change inside a transaction: off while migrating (a migration may rebuild a
  // table, schema.h), on after it (migrate() checks every reference before it commits).
  HPCTUNE_TRY(store->exec("PRAGMA foreign_keys = OFF", "cannot disable foreign keys for the migration"));
  if (path != ":memory:" && !path.empty()) {
    HPCTUNE_TRY(store->exec("PRAGMA synchronous = NORMAL", "cannot set synchronous=NORMAL"));
    std::string mode = store->journal_mode();
    if (mode != "wal") {
      sqlite3_stmt* s = nullptr;
      rc = sqlite3_prepare_v2(store->db_.get(), "PRAGMA journal_mode = WAL", -1, &s, nullptr);
      Statement stmt(s);
      if (rc == SQLITE_OK) rc = sqlite3_step(s);
      if (rc != SQLITE_ROW) return store->sql_error(rc, "cannot switch to WAL mode");
      mode = col_text(s, 0);
      if (mode != "wal") {
        return err(Errc::kIo, "cannot switch " + path + " to WAL mode (journal_mode is '" + mode +
                                  "'; is it on a network file system?)");
      }
    }
  }
  HPCTUNE_TRY(store->migrate(target));
  HPCTUNE_TRY(store->exec("PRAGMA foreign_keys = ON", "cannot enable foreign keys"));
  HPCTUNE_TRY(check_numeric_cells(store->db_.get(), store->version_, path));
  // A state named in code since the last open needs only its row in the lookup table.
  if (store->version_ >= schema::kStateTablesVersion) HPCTUNE_TRY(store->fill_state_tables());
  return store;
}

Result<std::unique_ptr<Store>> Store::open_readonly(const std::string& path, OpenOptions options) {
  struct stat st {};
  if (path == ":memory:" || path.empty()) {
    return err(Errc::kInvalidArgument, "a read-only store needs a database file, not '" + path + "'");
  }
  if (::stat(path.c_str(), &st) != 0) {
    return err(Errc::kNotFound, "no hpctune database at " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return err(Errc::kInvalidArgument, path + " is " + file_kind(st.st_mode) + ", not a database file");
  }
  // A reader of a WAL database needs its -shm file, and creates it when missing: impossible in a
  // directory we cannot write (a finished campaign copied to a read-only place). No master can be
  // writing there either (it could not create its -wal), so the file is opened immutable, without
  // side files, unless a -wal beside it still holds transactions that are not in the file.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const bool dir_writable = ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
  struct stat wal {};
  const bool wal_pending = ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0;
  const bool immutable = !dir_writable && !wal_pending;
  const std::string name = immutable ? "file:" + uri_path(path) + "?immutable=1" : path;
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), &raw,
                           SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | (immutable ? SQLITE_OPEN_URI : 0), nullptr);
  Connection conn(raw);
  if (rc != SQLITE_OK) {
    return err(Errc::kIo, "cannot open database " + path + " read-only: " +
                              (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);

  std::unique_ptr<Store> store(new Store());
  store->path_ = path;
  store->read_only_ = true;
  store->db_ = std::move(conn);
  store->stmts_.resize(kNumQueries);
  Status identity = store->check_identity();
  if (!identity.ok() && !dir_writable && wal_pending) {
    return std::move(identity).error().with_context(
        "the directory of " + path + " is not writable and " + path +
        "-wal holds transactions not yet in the database file; copy the database with `sqlite3 " + path +
        " \".backup COPY\"` to a writable place, or make the directory writable");
  }
  HPCTUNE_TRY(std::move(identity));
  if (store->version_ == 0) {
    return err(Errc::kInvalidArgument, path + " is not an hpctune database (it has no hpctune schema)");
  }
  // Version 2 is read as it is (migration 3 only adds attempts.charged, which attempts() derives),
  // so that a finished campaign of the previous version, possibly read-only, needs no writer.
  if (store->version_ < 2) {
    return err(Errc::kUnavailable, "database schema version " + std::to_string(store->version_) +
                                       " is older than this hpctune (" + std::to_string(schema::kLatestVersion) +
                                       "); open it once with a writer (hpctune resume) to migrate it (database " +
                                       path + ")");
  }
  HPCTUNE_TRY(check_schema(store->db_.get(), store->version_, path));
  HPCTUNE_TRY(check_numeric_cells(store->db_.get(), store->version_, path));
  return store;
}

std::string Store::journal_mode() {
  if (!db_) return {};
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_.get(), "PRAGMA journal_mode", -1, &raw, nullptr);
  Statement stmt(raw);
  if (rc != SQLITE_OK || sqlite3_step(raw) != SQLITE_ROW) return {};
  return col_text(raw, 0);
}

Status Store::acquire_master_lock() {
  HPCTUNE_TRY(check_open());
  if (read_only_) return err(Errc::kInvalidArgument, "a read-only store cannot hold the master lock of " + path_);
  if (!is_file_path(path_) || lock_fd_ >= 0) return Status::Ok();
  return lock_database(0600);
}

Status Store::lock_database(unsigned file_mode) {
  if (lock_fd_ >= 0) return Status::Ok();
  HPCTUNE_ASSIGN(int fd, database_fd(path_, file_mode));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    park_lock_fd(fd);
    if (e != EWOULDBLOCK) {
      // ENOLCK / EOPNOTSUPP: e.g. Lustre mounted without -o flock.
      return err(Errc::kIo, "cannot lock " + path_ + ": " + std::strerror(e) +
                                " (does this file system support flock? keep the database on a local disk "
                                "or a file system mounted with flock support)");
    }
    return err(Errc::kBusy, lock_holder());
  }
  lock_fd_ = fd;
  // The identity is for the refusal message only; the flock above is the lock.
  const std::string id_path = identity_path(path_);
  // Not through a link, and only a regular file: it is truncated, and the folder may be shared.
  int id = ::open(id_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, static_cast<mode_t>(file_mode));
  if (id < 0) return err(Errc::kIo, "cannot open " + id_path + ": " + std::strerror(errno));
  struct stat id_st {};
  if (::fstat(id, &id_st) != 0 || !S_ISREG(id_st.st_mode)) {
    ::close(id);
    return err(Errc::kInvalidArgument, id_path + " is not a regular file; remove it");
  }
  identity_fd_ = id;
  const std::string identity = std::to_string(::getpid()) + " " + host_name() + "\n";
  if (::fchmod(id, static_cast<mode_t>(file_mode)) != 0 || ::ftruncate(id, 0) != 0 ||
      ::pwrite(id, identity.data(), identity.size(), 0) != static_cast<ssize_t>(identity.size())) {
    return err(Errc::kIo, "cannot write " + id_path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<bool> master_lock_held(const std::string& path) {
  if (!is_file_path(path)) return false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;  // no file, no master
  // A descriptor of our own (parked, never closed: closing one would drop SQLite's POSIX locks).
  HPCTUNE_ASSIGN(int fd, database_fd(path, 0600));
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    park_lock_fd(fd);  // drops the shared lock at once
    return false;
  }
  const int e = errno;
  park_lock_fd(fd);
  if (e == EWOULDBLOCK) return true;
  return err(Errc::kIo, "cannot probe the master lock of " + path + ": " + std::strerror(e));
}

std::string Store::lock_holder() const {
  // The holder writes "pid host" right after locking: an empty file means we caught it in between.
  // A pid on this host that no longer exists was left by a master killed before it cleared the file.
  std::string pid, host;
  if (int fd = ::open(identity_path(path_).c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buf[512] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (n > 0) {
      std::istringstream in(std::string(buf, static_cast<std::size_t>(n)));
      if (!(in >> pid >> host)) pid.clear();
    }
  }
  if (!pid.empty() && host == host_name()) {
    char* end = nullptr;
    const long p = std::strtol(pid.c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || p <= 0 || (::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH)) pid.clear();
  }
  if (!pid.empty()) {
    return "another hpctune master (pid " + pid + " on host " + host + ") is running a campaign on " + path_ +
           "; stop it first";
  }
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_nlink > 1) {
    return "another hpctune master is running a campaign on " + path_ + " (through another of its " +
           std::to_string(st.st_nlink) + " hard links); stop it first";
  }
  return "another hpctune master is starting on " + path_ + "; stop it first";
}

Status Store::begin() {
  HPCTUNE_TRY(check_open());
  if (in_transaction()) return err(Errc::kInvalidArgument, "begin(): a transaction is already open on " + path_);
  return run(kBegin, "cannot begin a transaction");
}

Status Store::commit() {
  HPCTUNE_TRY(check_open());
  if (!in_transaction()) return err(Errc::kInvalidArgument, "commit(): no transaction is open on " + path_);
  return run(kCommit, "cannot commit");
}

Status Store::rollback() {
  HPCTUNE_TRY(check_open());
  if (!in_transaction()) return Status::Ok();
  return run(kRollback, "cannot roll back");
}

bool Store::in_transaction() const noexcept { return db_ && sqlite3_get_autocommit(db_.get()) == 0; }

Result<std::pair<std::string, int64_t>> Store::state_and_attempt(int64_t trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kTrialStateAttempt));
  Bind b(s);
  b.i64(1, trial_id);
  int rc = b.step();
  if (rc == SQLITE_DONE) return std::pair<std::string, int64_t>{"", 0};
  if (rc != SQLITE_ROW) return sql_error(rc, "cannot read trial " + std::to_string(trial_id));
  return std::pair<std::string, int64_t>{col_text(s, 0), col_i64(s, 1)};
}

// ---------------------------------------------------------------------------------------------
// Campaigns and stages

Result<int64_t> Store::create_campaign(const CampaignRow& row) {
  if (!is_campaign_state(row.state)) {
    return err(Errc::kInvalidArgument, "unknown campaign state '" + row.state + "'");
  }
  return atomically([&]() -> Result<int64_t> {
    {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kFirstCampaign));
      Bind b(s);
      int rc = b.step();
      if (rc == SQLITE_ROW) {
        return err(Errc::kInvalidArgument, "database " + path_ + " already holds campaign '" + col_text(s, 1) +
                                               "' (id " + std::to_string(col_i64(s, 0)) +
                                               "); resume it or use a new database");
      }
      if (rc != SQLITE_DONE) return sql_error(rc, "cannot read campaigns");
    }
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertCampaign));
    Bind b(s);
    b.text(1, row.name).text(2, row.config_text).text(3, row.config_source).json(4, row.config_json);
    b.u64(5, row.seed).text(6, row.state).f64(7, row.created_at).time(8, row.finished_at);
    b.json(9, row.search_state).text(10, row.master_host).i64(11, row.master_pid);
    int rc = b.step();
    if (rc != SQLITE_DONE) return sql_error(rc, "cannot create campaign '" + row.name + "'");
    return static_cast<int64_t>(sqlite3_last_insert_rowid(db_.get()));
  });
}

Result<std::optional<CampaignRow>> Store::load_campaign() {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(version_ >= schema::kHeartbeatVersion ? kLoadCampaign : kLoadCampaignV8));
  Bind b(s);
  int rc = b.step();
  if (rc == SQLITE_DONE) return std::optional<CampaignRow>();
  if (rc != SQLITE_ROW) return sql_error(rc, "cannot load the campaign");
  HPCTUNE_ASSIGN(CampaignRow row, read_campaign(s));
  return std::optional<CampaignRow>(std::move(row));
}

namespace {
// An UPDATE by id that must hit exactly one row.
Status expect_one_row(sqlite3* db, const std::string& table, int64_t id) {
  if (sqlite3_changes(db) == 1) return Status::Ok();
  return err(Errc::kNotFound, "no " + table + " with id " + std::to_string(id));
}
}  // namespace

Status Store::set_campaign_state(int64_t id, const std::string& state, double finished_at) {
  if (!is_campaign_state(state)) return err(Errc::kInvalidArgument, "unknown campaign state '" + state + "'");
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetCampaignState));
  Bind b(s);
  b.i64(1, id).text(2, state).time(3, finished_at);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot set the state of campaign " + std::to_string(id));
  return expect_one_row(db_.get(), "campaign", id);
}

Status Store::set_search_state(int64_t id, const nlohmann::json& state) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetSearchState));
  Bind b(s);
  b.i64(1, id).json(2, state);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot save the search state of campaign " + std::to_string(id));
  return expect_one_row(db_.get(), "campaign", id);
}

Status Store::set_campaign_master(int64_t id, const std::string& host, int64_t pid) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetCampaignMaster));
  Bind b(s);
  b.i64(1, id).text(2, host).i64(3, pid);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record the master of campaign " + std::to_string(id));
  return expect_one_row(db_.get(), "campaign", id);
}

Status Store::set_campaign_heartbeat(int64_t id, double t) {
  if (version_ < schema::kHeartbeatVersion) return Status::Ok();
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetCampaignHeartbeat));
  Bind b(s);
  b.i64(1, id).time(2, t);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record the heartbeat of campaign " + std::to_string(id));
  return expect_one_row(db_.get(), "campaign", id);
}

Status Store::set_campaign_config_json(int64_t id, const nlohmann::json& config_json) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetCampaignConfigJson));
  Bind b(s);
  b.i64(1, id).json(2, config_json);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot update the config of campaign " + std::to_string(id));
  return expect_one_row(db_.get(), "campaign", id);
}

Result<int64_t> Store::create_stage(int64_t campaign_id, const std::string& kind, const std::string& name,
                                    const nlohmann::json& config, double t, const std::string& state) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertStage));
  Bind b(s);
  b.i64(1, campaign_id).text(2, kind).text(3, name).json(4, config).f64(5, t).text(6, state);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot create " + kind + " stage '" + name + "'");
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_.get()));
}

Status Store::set_stage_state(int64_t stage_id, const std::string& state, double finished_at,
                              const std::string& reason) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetStageState));
  Bind b(s);
  b.i64(1, stage_id).text(2, state).time(3, finished_at).text(4, reason);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot set the state of stage " + std::to_string(stage_id));
  return expect_one_row(db_.get(), "stage", stage_id);
}

Status Store::start_stage(int64_t stage_id, double t) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kStartStage));
  Bind b(s);
  b.i64(1, stage_id).f64(2, t);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot start stage " + std::to_string(stage_id));
  return expect_one_row(db_.get(), "stage", stage_id);
}

Status Store::complete_stage(int64_t stage_id, const nlohmann::json& result, double t) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kCompleteStage));
  Bind b(s);
  b.i64(1, stage_id).json(2, result).f64(3, t);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record the result of stage " + std::to_string(stage_id));
  return expect_one_row(db_.get(), "stage", stage_id);
}

Result<std::vector<StageRow>> Store::stages(int64_t campaign_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s,
                 prepared(version_ >= 6 ? kSelectStages : version_ >= 5 ? kSelectStagesV5 : kSelectStagesV4));
  Bind b(s);
  b.i64(1, campaign_id);
  return collect<StageRow>(
      b,
      [](sqlite3_stmt* s) -> Result<StageRow> {
        StageRow r;
        r.id = col_i64(s, 0);
        r.campaign_id = col_i64(s, 1);
        r.kind = col_text(s, 2);
        r.name = col_text(s, 3);
        r.state = col_text(s, 4);
        HPCTUNE_ASSIGN(r.config_json, col_json(s, 5, "stages.config_json"));
        r.created_at = col_time(s, 6);
        r.finished_at = col_time(s, 7);
        HPCTUNE_ASSIGN(r.result, col_json(s, 8, "stages.result"));
        r.started_at = col_time(s, 9);
        r.reason = col_text(s, 10);
        return r;
      },
      "cannot read the stages");
}

// ---------------------------------------------------------------------------------------------
// Trials

Result<int64_t> Store::insert_trial(const TrialRow& row) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertTrial));
  Bind b(s);
  b.i64(1, row.campaign_id).id_or_null(2, row.stage_id).i64(3, row.seq).json(4, row.params).json(5, row.meta);
  b.text(6, to_string(row.state)).i64(7, row.attempt).i64(8, row.group_id).f64(9, row.created_at);
  b.time(10, row.started_at).time(11, row.finished_at).i64(12, row.step).json_or_null(13, row.metrics);
  b.opt_f64(14, row.objective).text(15, row.error).opt_i64(16, row.parent_trial_id).i64(17, row.generation);
  int rc = b.step();
  if (rc != SQLITE_DONE) {
    return sql_error(rc, "cannot insert trial seq " + std::to_string(row.seq) + " of campaign " +
                             std::to_string(row.campaign_id) +
                             (row.stage_id > 0 ? " stage " + std::to_string(row.stage_id) : std::string()));
  }
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_.get()));
}

Status Store::mark_assigned(int64_t trial_id, int64_t attempt, int64_t group_id, uint64_t incarnation, double t,
                            const std::string& devices) {
  return atomically([&]() -> Status {
    {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kAssignTrial));
      Bind b(s);
      b.i64(1, trial_id).i64(2, attempt).i64(3, group_id);
      int rc = b.step();
      if (rc != SQLITE_DONE) return sql_error(rc, "cannot assign trial " + std::to_string(trial_id));
    }
    if (sqlite3_changes(db_.get()) != 1) {
      HPCTUNE_ASSIGN(auto current, state_and_attempt(trial_id));
      if (current.first.empty()) return err(Errc::kNotFound, "no trial with id " + std::to_string(trial_id));
      return err(Errc::kInvalidArgument, "cannot assign trial " + std::to_string(trial_id) + " attempt " +
                                             std::to_string(attempt) + ": it is " + current.first + " at attempt " +
                                             std::to_string(current.second) + ", not queued or paused");
    }
    const bool with_devices = version_ >= schema::kDevicesVersion;
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(with_devices ? kInsertAttempt : kInsertAttemptV6));
    Bind b(s);
    b.i64(1, trial_id).i64(2, attempt).i64(3, group_id).u64(4, incarnation).f64(5, t);
    if (with_devices) b.text(6, devices);
    int rc = b.step();
    if (rc != SQLITE_DONE) {
      return sql_error(rc, "cannot record attempt " + std::to_string(attempt) + " of trial " + std::to_string(trial_id));
    }
    return Status::Ok();
  });
}

Status Store::mark_running(int64_t trial_id, int64_t attempt, double t) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kRunTrial));
  Bind b(s);
  b.i64(1, trial_id).i64(2, attempt).f64(3, t);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot mark trial " + std::to_string(trial_id) + " running");
  return Status::Ok();
}

Result<bool> Store::finish_trial(int64_t trial_id, int64_t attempt, TrialState final_state,
                                 const nlohmann::json& metrics, std::optional<double> objective, int64_t step,
                                 const std::string& error, double t) {
  if (!is_final(final_state)) {
    return err(Errc::kInvalidArgument, std::string("finish_trial: ") + to_string(final_state) +
                                           " is not a final state (done, pruned or failed)");
  }
  return atomically([&]() -> Result<bool> {
    {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kFinishTrial));
      Bind b(s);
      b.i64(1, trial_id).i64(2, attempt).text(3, to_string(final_state)).json_or_null(4, metrics);
      b.opt_f64(5, objective).i64(6, step).text(7, error).f64(8, t);
      int rc = b.step();
      if (rc != SQLITE_DONE) return sql_error(rc, "cannot finish trial " + std::to_string(trial_id));
    }
    if (sqlite3_changes(db_.get()) == 0) return false;  // stale attempt, already final, or unknown trial
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kUpsertFinalAttempt));
    Bind b(s);
    b.i64(1, trial_id).i64(2, attempt).text(3, to_string(final_state)).f64(4, t).text(5, error);
    int rc = b.step();
    if (rc != SQLITE_DONE) {
      return sql_error(rc, "cannot close attempt " + std::to_string(attempt) + " of trial " + std::to_string(trial_id));
    }
    return true;
  });
}

Result<TrialState> Store::requeue_trial(int64_t trial_id, int64_t attempt, const std::string& attempt_state,
                                        const std::string& error, int64_t max_attempts, double t, bool charged) {
  if (attempt_state != "lost" && attempt_state != "interrupted") {
    return err(Errc::kInvalidArgument, "requeue_trial: attempt state must be lost or interrupted, not '" +
                                           attempt_state + "'");
  }
  if (max_attempts < 1) return err(Errc::kInvalidArgument, "requeue_trial: max_attempts must be >= 1");
  if (attempt_state == "interrupted") charged = false;  // an interruption is the user's doing
  return atomically([&]() -> Result<TrialState> {
    HPCTUNE_ASSIGN(auto current, state_and_attempt(trial_id));
    if (current.first.empty()) return err(Errc::kNotFound, "no trial with id " + std::to_string(trial_id));
    auto state = trial_state_from_string(current.first);
    if (!state) return err(Errc::kIo, "unknown trial state '" + current.first + "' of trial " + std::to_string(trial_id));
    if (current.second != attempt || is_final(*state) || *state == TrialState::kQueued) return *state;
    {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kCloseAttempt));
      Bind b(s);
      b.i64(1, trial_id).i64(2, attempt).text(3, attempt_state).f64(4, t).text(5, error).i64(6, charged ? 1 : 0);
      int rc = b.step();
      if (rc != SQLITE_DONE) {
        return sql_error(rc, "cannot close attempt " + std::to_string(attempt) + " of trial " + std::to_string(trial_id));
      }
    }
    // Only the losses that were the trial's (or its group's) doing count: the attempt number also
    // counts master restarts and interruptions.
    int64_t losses = 0;
    if (charged) {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kCountChargedLosses));
      Bind b(s);
      b.i64(1, trial_id);
      int rc = b.step();
      if (rc != SQLITE_ROW) return sql_error(rc, "cannot count the lost attempts of trial " + std::to_string(trial_id));
      losses = col_i64(s, 0);
    }
    const bool give_up = charged && losses >= max_attempts;
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(give_up ? kFailTrial : kRequeueTrial));
    Bind b(s);
    if (give_up) b.i64(1, trial_id).i64(2, attempt).f64(3, t).text(4, error);
    else b.i64(1, trial_id).i64(2, attempt).text(3, error);
    int rc = b.step();
    if (rc != SQLITE_DONE) return sql_error(rc, "cannot requeue trial " + std::to_string(trial_id));
    return give_up ? TrialState::kFailed : TrialState::kQueued;
  });
}

Result<bool> Store::pause_trial(int64_t trial_id, int64_t attempt, const nlohmann::json& params,
                                const std::string& resume_from, const std::string& reason, double t) {
  return atomically([&]() -> Result<bool> {
    {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kPauseTrial));
      Bind b(s);
      b.i64(1, trial_id).i64(2, attempt).json(3, params).text(4, path_to_record(trials_dir(), resume_from));
      int rc = b.step();
      if (rc != SQLITE_DONE) return sql_error(rc, "cannot pause trial " + std::to_string(trial_id));
    }
    if (sqlite3_changes(db_.get()) == 0) return false;  // stale
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kPauseAttempt));
    Bind b(s);
    b.i64(1, trial_id).i64(2, attempt).f64(3, t).text(4, reason);
    int rc = b.step();
    if (rc != SQLITE_DONE) {
      return sql_error(rc, "cannot close attempt " + std::to_string(attempt) + " of trial " + std::to_string(trial_id) +
                               " as paused");
    }
    return true;
  });
}

Status Store::mark_interrupted(int64_t trial_id, int64_t attempt, double t) {
  return atomically([&]() -> Status {
    {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInterruptTrial));
      Bind b(s);
      b.i64(1, trial_id).i64(2, attempt);
      int rc = b.step();
      if (rc != SQLITE_DONE) return sql_error(rc, "cannot mark trial " + std::to_string(trial_id) + " interrupted");
    }
    if (sqlite3_changes(db_.get()) == 0) return Status::Ok();
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInterruptAttempt));
    Bind b(s);
    b.i64(1, trial_id).i64(2, attempt).f64(3, t);
    int rc = b.step();
    if (rc != SQLITE_DONE) {
      return sql_error(rc, "cannot mark attempt " + std::to_string(attempt) + " of trial " +
                               std::to_string(trial_id) + " interrupted");
    }
    return Status::Ok();
  });
}

Status Store::mark_waiting_interrupted(int64_t trial_id, int64_t attempt) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInterruptWaiting));
  Bind b(s);
  b.i64(1, trial_id).i64(2, attempt);
  const int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot mark trial " + std::to_string(trial_id) + " interrupted");
  return Status::Ok();
}

Status Store::add_metrics(int64_t trial_id, int64_t attempt, int64_t step,
                          const std::map<std::string, double>& metrics, double t) {
  return atomically([&]() -> Status {
    if (!metrics.empty()) {
      HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertMetric));
      for (const auto& [name, value] : metrics) {
        Bind b(s);
        b.i64(1, trial_id).i64(2, attempt).i64(3, step).text(4, name).f64(5, value).f64(6, t);
        int rc = b.step();
        if (rc != SQLITE_DONE) {
          return sql_error(rc, "cannot record metric '" + name + "' of trial " + std::to_string(trial_id));
        }
      }
    }
    HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kAdvanceStep));
    Bind b(s);
    b.i64(1, trial_id).i64(2, attempt).i64(3, step);
    int rc = b.step();
    if (rc != SQLITE_DONE) return sql_error(rc, "cannot advance the step of trial " + std::to_string(trial_id));
    return Status::Ok();
  });
}

Status Store::add_event(int64_t campaign_id, const std::string& kind, int64_t trial_id, int64_t attempt,
                        int64_t group_id, const nlohmann::json& detail, double t) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertEvent));
  Bind b(s);
  b.i64(1, campaign_id).f64(2, t).text(3, kind).id_or_null(4, trial_id).id_or_null(5, attempt);
  if (group_id >= 0) b.i64(6, group_id);
  else b.null(6);
  b.json(7, detail.is_null() ? nlohmann::json::object() : detail);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record event '" + kind + "'");
  return Status::Ok();
}

Status Store::add_artifact(int64_t trial_id, int64_t attempt, const std::string& kind, const std::string& path,
                           int64_t bytes, double t) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertArtifact));
  Bind b(s);
  // Below the trial's directory: relative to it (a moved campaign reads it where it is now).
  const std::string dir = trials_dir();
  const std::string recorded = dir.empty() ? path : path_to_record(dir + "/" + std::to_string(trial_id), path);
  b.i64(1, trial_id).i64(2, attempt).text(3, kind).text(4, recorded).i64(5, bytes).f64(6, t);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record " + kind + " artifact " + path);
  return Status::Ok();
}

Status Store::add_lineage(int64_t child, int64_t parent, const std::string& relation) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kInsertLineage));
  Bind b(s);
  b.i64(1, child).i64(2, parent).text(3, relation);
  int rc = b.step();
  if (rc != SQLITE_DONE) {
    return sql_error(rc, "cannot record lineage " + std::to_string(parent) + " -> " + std::to_string(child) +
                             " (" + relation + ")");
  }
  return Status::Ok();
}

Status Store::upsert_group(int64_t campaign_id, int64_t group_id, const std::string& backend, int64_t ranks_data,
                           int64_t ranks_model, const std::string& state, uint64_t incarnation, int64_t restarts,
                           double t, const nlohmann::json& hosts) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kUpsertGroup));
  Bind b(s);
  b.i64(1, campaign_id).i64(2, group_id).text(3, backend).i64(4, ranks_data).i64(5, ranks_model);
  b.json(6, hosts.is_null() ? nlohmann::json::array() : hosts).text(7, state).u64(8, incarnation);
  b.i64(9, restarts).f64(10, t);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record trainer group " + std::to_string(group_id));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Reads

Result<TrialRow> Store::read_checked_trial(sqlite3_stmt* s) const {
  HPCTUNE_ASSIGN(TrialRow row, read_trial(s));
  const std::string dir = trials_dir();
  if (row.resume_from.empty() || dir.empty()) return row;  // in memory: no trial directory
  const std::string at = recorded_path_at(dir, row.resume_from);
  if (const std::string problem = resume_from_problem(dir, at); !problem.empty()) {
    return err(Errc::kIo, "column trials.resume_from: " + shown_text(row.resume_from) + " " + problem +
                              " (the file was edited, damaged or crafted)")
        .with_context("while reading trial " + std::to_string(row.id));
  }
  row.resume_from = at;
  return row;
}

std::string Store::trials_dir() const {
  if (!is_file_path(path_)) return "";
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(path_, ec).lexically_normal().string();
  return ec ? std::string() : dir + ".trials";
}

Result<std::vector<TrialRow>> Store::trials(int64_t campaign_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(version_ >= schema::kStateTablesVersion ? kSelectTrials : kSelectTrialsV3));
  Bind b(s);
  b.i64(1, campaign_id);
  return collect<TrialRow>(b, [this](sqlite3_stmt* st) { return read_checked_trial(st); },
                           "cannot read the trials of campaign " + std::to_string(campaign_id));
}

Result<std::optional<TrialRow>> Store::trial(int64_t trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(version_ >= schema::kStateTablesVersion ? kSelectTrial : kSelectTrialV3));
  Bind b(s);
  b.i64(1, trial_id);
  int rc = b.step();
  if (rc == SQLITE_DONE) return std::optional<TrialRow>();
  if (rc != SQLITE_ROW) return sql_error(rc, "cannot read trial " + std::to_string(trial_id));
  HPCTUNE_ASSIGN(TrialRow row, read_checked_trial(s));
  return std::optional<TrialRow>(std::move(row));
}

Result<std::vector<MetricRow>> Store::metrics(int64_t trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectMetrics));
  Bind b(s);
  b.i64(1, trial_id);
  return collect<MetricRow>(b, read_metric, "cannot read the metrics of trial " + std::to_string(trial_id));
}

namespace {

// A row of the lineage queries (child, parent, relation).
LineageRow read_lineage(sqlite3_stmt* s) { return LineageRow({col_i64(s, 0), col_i64(s, 1), col_text(s, 2)}); }

// A row of kSelectEvents or kSelectTrialEvents (the same columns).
Result<EventRow> read_event(sqlite3_stmt* s) {
  EventRow e;
  e.id = col_i64(s, 0);
  e.campaign_id = col_i64(s, 1);
  e.t = col_time(s, 2);
  e.kind = col_text(s, 3);
  e.trial_id = col_i64_or(s, 4, 0);
  e.attempt = col_i64_or(s, 5, 0);
  e.group_id = col_i64_or(s, 6, -1);
  {
    auto detail = col_json(s, 7, "events.detail");
    if (!detail.ok())
      return std::move(detail).error().with_context("while reading event " + std::to_string(e.id) +
                                                    (e.trial_id > 0 ? " of trial " + std::to_string(e.trial_id) : ""));
    e.detail = std::move(detail).value();
  }
  return e;
}

}  // namespace

Result<std::vector<EventRow>> Store::events(int64_t campaign_id, int64_t limit) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectEvents));
  Bind b(s);
  b.i64(1, campaign_id).i64(2, limit > 0 ? limit : -1);
  return collect<EventRow>(
      b, read_event,
      "cannot read the events of campaign " + std::to_string(campaign_id));
}

Result<std::vector<EventRow>> Store::events_of_kind(int64_t campaign_id, const std::string& kind, int64_t limit) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectEventsOfKind));
  Bind b(s);
  b.i64(1, campaign_id).text(2, kind).i64(3, limit > 0 ? limit : -1);
  return collect<EventRow>(b, read_event,
                           "cannot read the " + kind + " events of campaign " + std::to_string(campaign_id));
}

Result<std::map<std::string, int64_t>> Store::count_by_state(int64_t campaign_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kCountByState));
  Bind b(s);
  b.i64(1, campaign_id);
  std::map<std::string, int64_t> out;
  for (auto st : kTrialStates) out[to_string(st)] = 0;
  int rc;
  while ((rc = b.step()) == SQLITE_ROW) out[col_text(s, 0)] = col_i64(s, 1);
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot count the trials of campaign " + std::to_string(campaign_id));
  return out;
}

Result<std::map<std::string, AttemptTime>> Store::attempt_time(int64_t campaign_id, double until) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kAttemptTime));
  Bind b(s);
  b.i64(1, campaign_id);
  b.f64(2, until);
  std::map<std::string, AttemptTime> out;
  int rc;
  while ((rc = b.step()) == SQLITE_ROW) out[col_text(s, 0)] = AttemptTime{col_i64(s, 1), sqlite3_column_double(s, 2)};
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot sum the attempts' times of campaign " + std::to_string(campaign_id));
  return out;
}

Result<std::vector<nlohmann::json>> Store::attempts(int64_t trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(version_ >= schema::kDevicesVersion ? kSelectAttempts
                                            : version_ >= 3                    ? kSelectAttemptsV6
                                                                               : kSelectAttemptsV2));
  Bind b(s);
  b.i64(1, trial_id);
  return collect<nlohmann::json>(
      b,
      [](sqlite3_stmt* s) {
        return nlohmann::json({{"trial_id", col_i64(s, 0)},
                               {"attempt", col_i64(s, 1)},
                               {"group_id", col_i64(s, 2)},
                               {"worker_incarnation", std::bit_cast<uint64_t>(col_i64(s, 3))},
                               {"state", col_text(s, 4)},
                               {"started_at", col_time(s, 5)},
                               {"finished_at", col_time(s, 6)},
                               {"error", col_text(s, 7)},
                               {"charged", col_i64(s, 8) != 0},
                               {"devices", col_text(s, 9)}});
      },
      "cannot read the attempts of trial " + std::to_string(trial_id));
}

Result<std::vector<ArtifactRow>> Store::artifacts(int64_t trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectArtifacts));
  Bind b(s);
  b.i64(1, trial_id);
  const std::string dir = trials_dir();
  return collect<ArtifactRow>(
      b,
      [&dir](sqlite3_stmt* s) -> Result<ArtifactRow> {
        ArtifactRow a;
        a.id = col_i64(s, 0);
        a.trial_id = col_i64(s, 1);
        a.attempt = col_i64(s, 2);
        a.kind = col_text(s, 3);
        // Absolute, where it is now: a relative path is relative to the trial's directory (as
        // workflow/trial_files.h reads one), an absolute one mapped as recorded_path_at does. The
        // readers check where it is (workflow/trial_files.h, report/trial_detail.cpp).
        a.path = col_text(s, 4);
        if (!dir.empty() && !a.path.empty() && a.path.front() != '/')
          a.path = dir + "/" + std::to_string(a.trial_id) + "/" + a.path;
        else a.path = recorded_path_at(dir, a.path);
        a.bytes = col_i64(s, 5);
        a.created_at = col_time(s, 6);
        return a;
      },
      "cannot read the artifacts of trial " + std::to_string(trial_id));
}

Result<std::vector<LineageRow>> Store::lineage(int64_t child_trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectLineage));
  Bind b(s);
  b.i64(1, child_trial_id);
  return collect<LineageRow>(
      b, read_lineage,
      "cannot read the lineage of trial " + std::to_string(child_trial_id));
}

Result<std::vector<GroupRow>> Store::groups(int64_t campaign_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectGroups));
  Bind b(s);
  b.i64(1, campaign_id);
  return collect<GroupRow>(
      b,
      [](sqlite3_stmt* s) -> Result<GroupRow> {
        GroupRow g;
        g.campaign_id = col_i64(s, 0);
        g.group_id = col_i64(s, 1);
        g.backend = col_text(s, 2);
        g.ranks_data = col_i64(s, 3);
        g.ranks_model = col_i64(s, 4);
        HPCTUNE_ASSIGN(g.hosts, col_json(s, 5, "groups.hosts"));
        g.state = col_text(s, 6);
        g.incarnation = std::bit_cast<uint64_t>(col_i64(s, 7));
        g.restarts = col_i64(s, 8);
        g.started_at = col_time(s, 9);
        g.updated_at = col_time(s, 10);
        return g;
      },
      "cannot read the trainer groups of campaign " + std::to_string(campaign_id));
}

Result<std::vector<MetricRow>> Store::campaign_metrics(int64_t campaign_id, const std::string& name) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectCampaignMetric));
  Bind b(s);
  b.i64(1, campaign_id).text(2, name);
  return collect<MetricRow>(b, read_metric,
                            "cannot read the '" + name + "' reports of campaign " + std::to_string(campaign_id));
}

Result<int64_t> Store::data_version() {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kDataVersion));
  Bind b(s);
  int rc = b.step();
  if (rc != SQLITE_ROW) return sql_error(rc, "cannot read the data version");
  return col_i64(s, 0);
}

Status Store::begin_read() {
  HPCTUNE_TRY(check_open());
  if (in_transaction()) return err(Errc::kInvalidArgument, "begin_read(): a transaction is already open on " + path_);
  return run(kBeginRead, "cannot begin a read transaction");
}

namespace {
std::string ids_json(const std::vector<int64_t>& ids) { return nlohmann::json(ids).dump(); }
}  // namespace

Result<std::vector<TrialRow>> Store::trials_changed(int64_t campaign_id, int64_t after_id,
                                                    const std::vector<int64_t>& ids) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(version_ >= schema::kStateTablesVersion ? kSelectTrialsChanged
                                                                                    : kSelectTrialsChangedV3));
  Bind b(s);
  b.i64(1, campaign_id).i64(2, after_id).text(3, ids_json(ids));
  return collect<TrialRow>(b, [this](sqlite3_stmt* st) { return read_checked_trial(st); },
                           "cannot read the changed trials of campaign " + std::to_string(campaign_id));
}

Result<std::vector<AttemptRow>> Store::attempts_changed(int64_t after_id, const std::vector<int64_t>& ids) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(version_ >= schema::kDevicesVersion ? kSelectAttemptsChanged
                                            : version_ >= 3                    ? kSelectAttemptsChangedV6
                                                                               : kSelectAttemptsChangedV2));
  Bind b(s);
  b.i64(1, after_id).text(2, ids_json(ids));
  return collect<AttemptRow>(
      b,
      [](sqlite3_stmt* s) {
        AttemptRow a;
        a.trial_id = col_i64(s, 0);
        a.attempt = col_i64(s, 1);
        a.group_id = col_i64(s, 2);
        a.state = col_text(s, 3);
        a.started_at = col_time(s, 4);
        a.finished_at = col_time(s, 5);
        a.charged = col_i64(s, 6) != 0;
        a.devices = col_text(s, 7);
        return a;
      },
      "cannot read the changed attempts");
}

Result<std::vector<LineageRow>> Store::lineage_changed(int64_t after_id, const std::vector<int64_t>& ids) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectLineageChanged));
  Bind b(s);
  b.i64(1, after_id).text(2, ids_json(ids));
  return collect<LineageRow>(
      b, read_lineage,
      "cannot read the changed lineage");
}

Result<std::vector<LineageRow>> Store::lineage_children(int64_t parent_trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectLineageOfParent));
  Bind b(s);
  b.i64(1, parent_trial_id);
  return collect<LineageRow>(
      b, read_lineage,
      "cannot read the children of trial " + std::to_string(parent_trial_id));
}

Result<std::vector<EventRow>> Store::trial_events(int64_t trial_id) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectTrialEvents));
  Bind b(s);
  b.i64(1, trial_id);
  return collect<EventRow>(
      b, read_event,
      "cannot read the events of trial " + std::to_string(trial_id));
}

Result<std::optional<EventRow>> Store::first_event(int64_t campaign_id, const std::string& kind) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectFirstEventOfKind));
  Bind b(s);
  b.i64(1, campaign_id).text(2, kind);
  HPCTUNE_ASSIGN(std::vector<EventRow> rows, collect<EventRow>(b, read_event, "cannot read the events of kind " + kind));
  if (rows.empty()) return std::optional<EventRow>();
  return std::optional<EventRow>(std::move(rows.front()));
}

Result<std::vector<MetricRow>> Store::metrics_of(const std::vector<int64_t>& trial_ids) {
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectMetricsOf));
  Bind b(s);
  b.text(1, ids_json(trial_ids));
  return collect<MetricRow>(b, read_metric, "cannot read the metrics of " + std::to_string(trial_ids.size()) + " trials");
}

Status Store::set_sync_mode(int64_t trial_id, const std::string& mode) {
  if (version_ < schema::kSyncModeVersion) return Status::Ok();  // a read-only look at an older database
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSetSyncMode));
  Bind b(s);
  b.i64(1, trial_id).text(2, mode);
  int rc = b.step();
  if (rc != SQLITE_DONE) return sql_error(rc, "cannot record the sync mode of trial " + std::to_string(trial_id));
  return Status::Ok();
}

Result<std::string> Store::sync_mode(int64_t trial_id) {
  if (version_ < schema::kSyncModeVersion) return std::string();
  HPCTUNE_ASSIGN(sqlite3_stmt * s, prepared(kSelectSyncMode));
  Bind b(s);
  b.i64(1, trial_id);
  int rc = b.step();
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return sql_error(rc, "cannot read the sync mode of trial " + std::to_string(trial_id));
  return col_text(s, 0);
}

}  // namespace hpctune::store
