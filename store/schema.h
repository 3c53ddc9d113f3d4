// The SQLite schema of an hpctune database, as an ordered list of migrations.
//
// A database records the last migration applied in `PRAGMA user_version`. Store::open applies every
// migration above it, in order, inside one write transaction (all or nothing), so a crash during an
// upgrade leaves the old version intact. Rules for adding a migration:
//   - append a new entry with version = last + 1; never edit an entry that has shipped (databases
//     in the field were created by it);
//   - keep it additive where possible (ALTER TABLE ... ADD COLUMN with a default, new tables);
//   - the statements in store.cpp always target the latest version.
//
// Enumerated columns are checked with `x = 'a' OR x = 'b'`, not `x IN ('a', 'b')`: SQLite builds an
// ephemeral table to evaluate an IN list on every row written, which halves the master's write rate.
// Trial and attempt states (since v4) are not checked that way: they reference the lookup tables
// trial_states and attempt_states, which Store::open fills from the one list in code
// (store::kTrialStates, store::kAttemptStates) every time it opens a database for writing. A new
// state is a new name in that list: no migration, no table rebuild.
//
// A migration that rebuilds a table runs with foreign keys off (SQLite's documented procedure:
// create the new table, copy, drop the old one, rename); Store::migrate checks every foreign key
// (PRAGMA foreign_key_check) before it commits.
//
// Conventions of the columns: times are REAL seconds since the Unix epoch, NULL when not yet known;
// JSON is TEXT; "none" ids (no trial, no group) are NULL; a uint64 seed is stored bit-for-bit in
// INTEGER. `application_id` marks the file as an hpctune database ('HPTC'), so that opening some
// other SQLite file is refused instead of being "migrated".
#pragma once

#include <cstdint>
#include <iterator>

namespace hpctune::store::schema {

// 'HPTC' as a big-endian int32, written to PRAGMA application_id by migration 1.
inline constexpr int32_t kApplicationId = 0x48505443;

struct Migration {
  int version;              // user_version after this step
  const char* description;  // one line, for logs and errors
  const char* sql;          // one or more statements, run with sqlite3_exec
};

// v1: the core of a campaign: campaigns, trials and their attempts, per-step metrics, events.
inline constexpr const char* kMigration1 = R"sql(
PRAGMA application_id = 1213224003;

CREATE TABLE campaigns (
  id            INTEGER PRIMARY KEY,
  name          TEXT    NOT NULL,
  config_text   TEXT    NOT NULL DEFAULT '',     -- the YAML exactly as given (for resume and export)
  config_source TEXT    NOT NULL DEFAULT '',     -- where the YAML came from: a path, or "-" for stdin
  config_json   TEXT    NOT NULL DEFAULT '{}',   -- the parsed config with every default filled in
  seed          INTEGER NOT NULL DEFAULT 0,      -- uint64, stored bit-for-bit
  state         TEXT    NOT NULL DEFAULT 'running'
                CHECK (state = 'running' OR state = 'completed' OR state = 'failed' OR state = 'interrupted'),
  created_at    REAL    NOT NULL,
  finished_at   REAL,
  search_state  TEXT    NOT NULL DEFAULT 'null', -- the searcher's checkpoint, if it keeps one
  master_host   TEXT    NOT NULL DEFAULT '',
  master_pid    INTEGER NOT NULL DEFAULT 0
);

-- One row per suggestion of the searcher. `attempt` is the current attempt (1-based); each attempt
-- has its row in `attempts`. Results are accepted only for the current attempt of a non-final trial.
CREATE TABLE trials (
  id          INTEGER PRIMARY KEY,
  campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
  seq         INTEGER NOT NULL,                  -- the searcher's 0-based suggestion index
  params      TEXT    NOT NULL DEFAULT '{}',
  meta        TEXT    NOT NULL DEFAULT '{}',
  state       TEXT    NOT NULL DEFAULT 'queued'
              CHECK (state = 'queued' OR state = 'assigned' OR state = 'running' OR state = 'done' OR
                     state = 'pruned' OR state = 'failed' OR state = 'interrupted'),
  attempt     INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
  group_id    INTEGER NOT NULL DEFAULT -1,       -- the trainer group of the current attempt, -1 = none
  created_at  REAL    NOT NULL,
  started_at  REAL,                              -- when the current attempt reported running
  finished_at REAL,
  step        INTEGER NOT NULL DEFAULT 0,        -- the last step reported by the current attempt
  metrics     TEXT,                              -- the final metrics (JSON object), NULL until final
  objective   REAL,                              -- the primary objective, raw (not negated)
  error       TEXT    NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX trials_campaign_seq ON trials (campaign_id, seq);
CREATE INDEX trials_campaign_state ON trials (campaign_id, state);

CREATE TABLE attempts (
  trial_id           INTEGER NOT NULL REFERENCES trials(id),
  attempt            INTEGER NOT NULL,
  group_id           INTEGER NOT NULL DEFAULT -1,
  worker_incarnation INTEGER NOT NULL DEFAULT 0, -- of the group, to tell a restarted group's replies apart
  state              TEXT    NOT NULL DEFAULT 'running'
                     CHECK (state = 'running' OR state = 'done' OR state = 'pruned' OR state = 'failed' OR
                            state = 'lost' OR state = 'interrupted'),
  started_at         REAL,                       -- when the attempt was assigned
  finished_at        REAL,
  error              TEXT    NOT NULL DEFAULT '',
  PRIMARY KEY (trial_id, attempt)
) WITHOUT ROWID;

-- Intermediate reports. The key makes a repeated report of the same step idempotent.
CREATE TABLE metrics (
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  attempt  INTEGER NOT NULL,
  step     INTEGER NOT NULL,
  name     TEXT    NOT NULL,
  value    REAL,                                 -- NULL stands for NaN (SQLite cannot store NaN)
  t        REAL    NOT NULL,
  PRIMARY KEY (trial_id, attempt, step, name)
) WITHOUT ROWID;

CREATE TABLE events (
  id          INTEGER PRIMARY KEY,
  campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
  t           REAL    NOT NULL,
  kind        TEXT    NOT NULL,
  trial_id    INTEGER,
  attempt     INTEGER,
  group_id    INTEGER,
  detail      TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX events_campaign ON events (campaign_id, id);
CREATE INDEX events_trial ON events (trial_id) WHERE trial_id IS NOT NULL;
)sql";

// v2: multi-stage workflows (search -> ensemble, transfer, PBT), lineage, artifacts, trainer groups.
// Trials gain stage_id (NULL = the campaign's implicit single stage), parent_trial_id and
// generation; seq becomes unique per (campaign, stage).
inline constexpr const char* kMigration2 = R"sql(
CREATE TABLE stages (
  id          INTEGER PRIMARY KEY,
  campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
  kind        TEXT    NOT NULL CHECK (kind = 'search' OR kind = 'ensemble' OR kind = 'transfer' OR kind = 'pbt'),
  name        TEXT    NOT NULL,
  state       TEXT    NOT NULL DEFAULT 'running'
              CHECK (state = 'pending' OR state = 'running' OR state = 'completed' OR state = 'failed' OR
                     state = 'interrupted'),
  config_json TEXT    NOT NULL DEFAULT '{}',
  created_at  REAL    NOT NULL,
  finished_at REAL,
  UNIQUE (campaign_id, name)
);

ALTER TABLE trials ADD COLUMN stage_id INTEGER REFERENCES stages(id);
ALTER TABLE trials ADD COLUMN parent_trial_id INTEGER REFERENCES trials(id);
ALTER TABLE trials ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
DROP INDEX trials_campaign_seq;
CREATE UNIQUE INDEX trials_stage_seq ON trials (campaign_id, IFNULL(stage_id, 0), seq);
CREATE INDEX trials_stage ON trials (stage_id) WHERE stage_id IS NOT NULL;

-- Every parent of a trial: GA parents, the transfer source, the members of an ensemble, the PBT
-- exploit source. The parent may live in another database (a transfer source), so it is not a
-- foreign key.
CREATE TABLE lineage (
  child_trial_id  INTEGER NOT NULL REFERENCES trials(id),
  parent_trial_id INTEGER NOT NULL,
  relation        TEXT    NOT NULL,
  PRIMARY KEY (child_trial_id, parent_trial_id, relation)
) WITHOUT ROWID;
CREATE INDEX lineage_parent ON lineage (parent_trial_id);

CREATE TABLE artifacts (
  id         INTEGER PRIMARY KEY,
  trial_id   INTEGER NOT NULL REFERENCES trials(id),
  attempt    INTEGER NOT NULL,
  kind       TEXT    NOT NULL,                   -- checkpoint, model, log, ...
  path       TEXT    NOT NULL,
  bytes      INTEGER NOT NULL DEFAULT 0,
  created_at REAL    NOT NULL
);
CREATE INDEX artifacts_trial ON artifacts (trial_id);

CREATE TABLE "groups" (
  campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
  group_id    INTEGER NOT NULL,
  backend     TEXT    NOT NULL,                  -- local, mpi, slurm, ...
  ranks_data  INTEGER NOT NULL DEFAULT 1,
  ranks_model INTEGER NOT NULL DEFAULT 1,
  hosts       TEXT    NOT NULL DEFAULT '[]',
  state       TEXT    NOT NULL,
  incarnation INTEGER NOT NULL DEFAULT 0,
  restarts    INTEGER NOT NULL DEFAULT 0,
  started_at  REAL,
  updated_at  REAL,
  PRIMARY KEY (campaign_id, group_id)
) WITHOUT ROWID;
)sql";

// v3: attempts.charged: whether a lost attempt counts against search.max_attempts. A master
// restart (SIGKILL, OOM, a full disk) or an interruption is not the trial's fault; before v3 such
// attempts were recognisable only by their state and error text, which the backfill uses.
inline constexpr const char* kMigration3 = R"sql(
ALTER TABLE attempts ADD COLUMN charged INTEGER NOT NULL DEFAULT 1 CHECK (charged = 0 OR charged = 1);
UPDATE attempts SET charged = 0 WHERE state = 'interrupted' OR (state = 'lost' AND error = 'master restarted');
)sql";

// v4: trial and attempt states that can grow without rebuilding tables (the lookup tables above,
// filled from code), the `paused` state, and trials.resume_from: the checkpoint a paused trial
// resumes from. The last rebuild of trials and attempts: their CHECK lists of states go.
inline constexpr const char* kMigration4 = R"sql(
CREATE TABLE trial_states (name TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE attempt_states (name TEXT PRIMARY KEY) WITHOUT ROWID;

CREATE TABLE trials_v4 (
  id              INTEGER PRIMARY KEY,
  campaign_id     INTEGER NOT NULL REFERENCES campaigns(id),
  seq             INTEGER NOT NULL,
  params          TEXT    NOT NULL DEFAULT '{}',
  meta            TEXT    NOT NULL DEFAULT '{}',
  state           TEXT    NOT NULL DEFAULT 'queued' REFERENCES trial_states(name),
  attempt         INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
  group_id        INTEGER NOT NULL DEFAULT -1,
  created_at      REAL    NOT NULL,
  started_at      REAL,
  finished_at     REAL,
  step            INTEGER NOT NULL DEFAULT 0,
  metrics         TEXT,
  objective       REAL,
  error           TEXT    NOT NULL DEFAULT '',
  stage_id        INTEGER REFERENCES stages(id),
  parent_trial_id INTEGER REFERENCES trials(id),
  generation      INTEGER NOT NULL DEFAULT 0,
  resume_from     TEXT    NOT NULL DEFAULT ''   -- the checkpoint the next attempt starts from ('' = none)
);
INSERT INTO trials_v4 (id, campaign_id, seq, params, meta, state, attempt, group_id, created_at, started_at,
                       finished_at, step, metrics, objective, error, stage_id, parent_trial_id, generation)
  SELECT id, campaign_id, seq, params, meta, state, attempt, group_id, created_at, started_at, finished_at, step,
         metrics, objective, error, stage_id, parent_trial_id, generation FROM trials;
DROP TABLE trials;
ALTER TABLE trials_v4 RENAME TO trials;
CREATE UNIQUE INDEX trials_stage_seq ON trials (campaign_id, IFNULL(stage_id, 0), seq);
CREATE INDEX trials_campaign_state ON trials (campaign_id, state);
CREATE INDEX trials_stage ON trials (stage_id) WHERE stage_id IS NOT NULL;

CREATE TABLE attempts_v4 (
  trial_id           INTEGER NOT NULL REFERENCES trials(id),
  attempt            INTEGER NOT NULL,
  group_id           INTEGER NOT NULL DEFAULT -1,
  worker_incarnation INTEGER NOT NULL DEFAULT 0,
  state              TEXT    NOT NULL DEFAULT 'running' REFERENCES attempt_states(name),
  started_at         REAL,
  finished_at        REAL,
  error              TEXT    NOT NULL DEFAULT '',
  charged            INTEGER NOT NULL DEFAULT 1 CHECK (charged = 0 OR charged = 1),
  PRIMARY KEY (trial_id, attempt)
) WITHOUT ROWID;
INSERT INTO attempts_v4 SELECT trial_id, attempt, group_id, worker_incarnation, state, started_at, finished_at,
                               error, charged FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v4 RENAME TO attempts;
)sql";

// v5: a stage's result (an ensemble's blend, a transfer's comparison, runs to a threshold) and the
// time it started running (after the stages it consumes completed).
inline constexpr const char* kMigration5 = R"sql(
ALTER TABLE stages ADD COLUMN result TEXT NOT NULL DEFAULT '{}';
ALTER TABLE stages ADD COLUMN started_at REAL;
UPDATE stages SET started_at = created_at;
)sql";

// v6: why a stage failed (it could not start, could not finish, every trial failed, an input stage
// failed), written by the same statement as its state; '' for any other state.
inline constexpr const char* kMigration6 = R"sql(
ALTER TABLE stages ADD COLUMN reason TEXT NOT NULL DEFAULT '';
)sql";

// v7: attempts.devices: the GPUs the attempt's trainer group was given, as CUDA_VISIBLE_DEVICES
// names them ("0,1"); '' = none (no GPUs, or recorded before v7).
inline constexpr const char* kMigration7 = R"sql(
ALTER TABLE attempts ADD COLUMN devices TEXT NOT NULL DEFAULT '';
)sql";

// v8: trials.sync_mode: how the trial's data replicas combined gradients (trainer.sync), as its
// worker reported it with the result; '' for trainers without it and trials recorded before v8.
inline constexpr const char* kMigration8 = R"sql(
ALTER TABLE trials ADD COLUMN sync_mode TEXT NOT NULL DEFAULT '';
)sql";

// v9: campaigns.heartbeat_at: the unix time the running master last wrote (Store::
// set_campaign_heartbeat, every few seconds), so that `status` can tell a master that is gone from
// one that runs; NULL = none written (a campaign recorded before v9, or a master that never ran a turn).
inline constexpr const char* kMigration9 = R"sql(
ALTER TABLE campaigns ADD COLUMN heartbeat_at REAL;
)sql";

inline constexpr Migration kMigrations[] = {
    {1, "core tables: campaigns, trials, attempts, metrics, events", kMigration1},
    {2, "workflow tables: stages, lineage, artifacts, groups; trials.stage_id/parent_trial_id/generation",
     kMigration2},
    {3, "attempts.charged: master restarts and interruptions do not use up max_attempts", kMigration3},
    {4, "trial and attempt states in lookup tables filled from code; paused; trials.resume_from", kMigration4},
    {5, "stages.result and stages.started_at", kMigration5},
    {6, "stages.reason: why a stage failed", kMigration6},
    {7, "attempts.devices: the GPUs of each attempt", kMigration7},
    {8, "trials.sync_mode: how the data replicas combined gradients", kMigration8},
    {9, "campaigns.heartbeat_at: the running master's heartbeat", kMigration9},
};

// The first version whose states live in the lookup tables.
inline constexpr int kStateTablesVersion = 4;
// The first version that records each attempt's GPUs.
inline constexpr int kDevicesVersion = 7;
// The first version that records each trial's sync mode.
inline constexpr int kSyncModeVersion = 8;
// The first version that records the master's heartbeat.
inline constexpr int kHeartbeatVersion = 9;

inline constexpr int kLatestVersion = static_cast<int>(std::size(kMigrations));

}  // namespace hpctune::store::schema
