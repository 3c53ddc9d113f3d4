// What the dashboard serves from one campaign database: an immutable snapshot of its campaign,
// stages, trainer groups, trials, attempts and lineage, refreshed incrementally instead of being
// reloaded for every request.
//
// A CampaignSource holds one read-only connection to its database (guarded by a mutex: a Store is
// used by one thread at a time) and the latest Snapshot. A request asks for the snapshot; at most
// every `check_every` it first asks SQLite whether anything was committed since (PRAGMA
// data_version: no table read), and only then refreshes, in one short read transaction: the
// campaign row, stages and groups again (a few rows), and of the trials only the new ones (id
// above the largest known) and those that were not final in the last snapshot, with their
// attempts and lineage rows. A final trial never changes again, so 10,000 finished trials cost
// nothing to keep current. Readers hold a shared_ptr<const Snapshot>: a refresh builds the next
// one aside and swaps it in, and a reader that finds a refresh under way takes the current
// snapshot instead of waiting. The master (the only writer, WAL) never waits for these reads, and
// they never take more than 2% of a core from it: after a refresh that took d, the next check
// waits at least 49 d (a campaign growing at full speed is then shown a few seconds late).
//
// Every refresh that found a change bumps the source's version to the next value of a counter
// shared by all sources of a server (/api/changes tells the app what changed since it last asked).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "report/group_time.h"
#include "report/objective.h"
#include "store/store.h"

namespace hpctune::dashboard {

struct Snapshot {
  std::string db_path;
  store::CampaignRow campaign;
  std::vector<store::StageRow> stages;          // by id
  std::vector<store::GroupRow> groups;          // by group id
  // By id. Shared with the snapshots before and after: a refresh copies pointers, and replaces
  // only the rows it read again.
  std::vector<std::shared_ptr<const store::TrialRow>> trials;
  std::vector<store::AttemptRow> attempts;      // by trial, attempt
  std::vector<store::LineageRow> lineage;       // by child, parent, relation
  report::Objectives objectives;
  std::set<int64_t> pareto;                     // the recorded front (several objectives)
  std::string main_stage;                       // report::CampaignView::main_stage
  nlohmann::json simulated;                     // report::CampaignView::simulated (null: ran for real)
  std::vector<std::string> warnings;            // report::recorded_warnings: as `hpctune status` shows them
  report::GroupTime group_time;                 // where the groups' time went, as `hpctune status` says
  int64_t main_stage_id = 0;                    // its row id; 0 = every trial is a main trial
  uint64_t version = 0;                         // the source's version when this was taken
  double taken_at = 0;                          // Unix seconds

  // The trial with this id; nullptr when none.
  const store::TrialRow* find(int64_t id) const;
  // The campaign's main trials (report::CampaignView::main_trials), in id order.
  std::vector<const store::TrialRow*> main_trials() const;
  // The trials of stage row `stage_id` (a trial without a stage counts for the first stage).
  std::vector<const store::TrialRow*> stage_trials(int64_t stage_id) const;
  std::vector<const store::TrialRow*> all_trials() const;
  // The stage named `name`; nullptr when none.
  const store::StageRow* stage(const std::string& name) const;
  // [first, last) of the trial's rows in `attempts` (first == last when it has none).
  std::pair<size_t, size_t> attempts_of(int64_t trial_id) const;
  // What the trials' text filter searches, lower case: the params' JSON, the error and "#<id>"
  // ("" for a trial not in the snapshot). Computed when the row is read, not per request.
  const std::string& search_text(const store::TrialRow& t) const;
  const std::set<int64_t>* front() const { return objectives.several() ? &pareto : nullptr; }

  // What `hpctune status --format json` prints, computed once per snapshot on first use.
  const nlohmann::json& status_json() const;

 private:
  friend class CampaignSource;
  // Lookups are binary searches: trials, attempts and lineage are sorted by trial id, so a refresh
  // keeps no index to copy.
  size_t position(int64_t id) const;  // of the trial in `trials`, or trials.size()
  std::vector<std::shared_ptr<const std::string>> search_text_;  // parallel to `trials`
  mutable std::once_flag status_once_;
  mutable nlohmann::json status_;
};

class CampaignSource {
 public:
  // `counter`: the version counter shared by the sources of one server (outlives the source).
  CampaignSource(std::string db, std::atomic<uint64_t>* counter,
                 std::chrono::milliseconds check_every = std::chrono::milliseconds(200));

  // The latest snapshot, refreshed first when the database may have changed. Errors of opening or
  // reading the database (kNotFound when it holds no campaign) are returned, never a stale view of
  // a database that cannot be read.
  Result<std::shared_ptr<const Snapshot>> snapshot();
  // The version of the latest snapshot (0 before the first).
  uint64_t version() const { return version_.load(); }
  const std::string& path() const { return db_; }

  // Runs fn(store::Store&) on the held connection under its mutex, for the reads a snapshot does not
  // keep (reports, events, artifacts of a few trials). Opens the connection when needed.
  template <typename F>
  auto with_store(F&& fn) -> decltype(fn(std::declval<store::Store&>())) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto st = open_locked(); !st.ok()) return std::move(st).error();
    return fn(*store_);
  }

 private:
  Status open_locked();
  Result<std::shared_ptr<const Snapshot>> refresh_locked(std::shared_ptr<const Snapshot> previous);
  std::shared_ptr<const Snapshot> current() const;

  std::string db_;
  std::atomic<uint64_t>* counter_;
  std::chrono::milliseconds check_every_;
  std::mutex mu_;                        // the connection, and one refresh at a time
  std::unique_ptr<store::Store> store_;  // read-only
  int64_t data_version_ = -1;
  // Refreshes take at most 1 / (1 + kIdleFactor) of a core: after one that took d, the next waits d × kIdleFactor.
  static constexpr int64_t kIdleFactor = 49;
  std::atomic<int64_t> next_check_ns_{0};  // steady clock: when the database is next asked whether it changed
  std::atomic<uint64_t> version_{0};
  mutable std::mutex snap_mu_;  // guards the pointer only (swapped, never changed in place)
  std::shared_ptr<const Snapshot> snap_;
};

}  // namespace hpctune::dashboard
