// Snapshots of a campaign database, refreshed incrementally (snapshot.h).
#include "dashboard/snapshot.h"

#include <algorithm>

#include "common/clock.h"
#include "report/campaign.h"

namespace hpctune::dashboard {

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ends the read transaction whatever happens: an open one would pin the WAL snapshot and keep the
// master's checkpoints from finishing.
struct ReadTransaction {
  store::Store& db;
  ~ReadTransaction() {
    if (db.in_transaction()) (void)db.rollback();
  }
};

}  // namespace

const store::TrialRow* Snapshot::find(int64_t id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &trials[it->second];
}

std::vector<const store::TrialRow*> Snapshot::all_trials() const {
  std::vector<const store::TrialRow*> out;
  out.reserve(trials.size());
  for (const auto& t : trials) out.push_back(&t);
  return out;
}

std::vector<const store::TrialRow*> Snapshot::stage_trials(int64_t stage_id) const {
  const int64_t first = stages.empty() ? 0 : stages.front().id;
  std::vector<const store::TrialRow*> out;
  for (const auto& t : trials) {
    if (t.stage_id == stage_id || (t.stage_id == 0 && stage_id == first)) out.push_back(&t);
  }
  return out;
}

std::vector<const store::TrialRow*> Snapshot::main_trials() const {
  if (main_stage_id == 0) return all_trials();
  std::vector<const store::TrialRow*> out;
  for (const auto& t : trials) {
    if (t.stage_id == main_stage_id) out.push_back(&t);
  }
  return out;
}

const store::StageRow* Snapshot::stage(const std::string& name) const {
  for (const auto& s : stages) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::pair<size_t, size_t> Snapshot::attempts_of(int64_t trial_id) const {
  auto it = attempt_range_.find(trial_id);
  return it == attempt_range_.end() ? std::pair<size_t, size_t>{0, 0} : it->second;
}

CampaignSource::CampaignSource(std::string db, std::atomic<uint64_t>* counter, std::chrono::milliseconds check_every)
    : db_(std::move(db)), counter_(counter), check_every_(check_every) {}

std::shared_ptr<const Snapshot> CampaignSource::current() const {
  std::lock_guard<std::mutex> lock(snap_mu_);
  return snap_;
}

Status CampaignSource::open_locked() {
  if (store_) return Status::Ok();
  // A short busy timeout: a reader that finds the database locked (a checkpoint restarting the
  // WAL) answers 500 soon rather than holding a request thread for seconds.
  store::OpenOptions o;
  o.busy_timeout_ms = 1000;
  HPCTUNE_ASSIGN(store_, store::Store::open_readonly(db_, o));
  data_version_ = -1;
  return Status::Ok();
}

Result<std::shared_ptr<const Snapshot>> CampaignSource::snapshot() {
  auto cur = current();
  const int64_t now = steady_ns();
  if (cur && now - last_check_ns_.load() < std::chrono::nanoseconds(check_every_).count()) return cur;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    // Another request refreshes (or reads through the connection): serve what there is.
    if (cur) return cur;
    lock.lock();
    if (auto again = current()) return again;
  }
  last_check_ns_.store(now);
  auto next = refresh_locked(current());
  if (!next.ok()) {
    // Ask again at the next request, not after the interval.
    last_check_ns_.store(0);
    store_.reset();  // reopen: the file may have been replaced
    return std::move(next).error();
  }
  std::lock_guard<std::mutex> slock(snap_mu_);
  snap_ = *next;
  return snap_;
}

Result<std::shared_ptr<const Snapshot>> CampaignSource::refresh_locked(std::shared_ptr<const Snapshot> prev) {
  HPCTUNE_TRY(open_locked());
  store::Store& db = *store_;
  HPCTUNE_ASSIGN(int64_t dv, db.data_version());
  if (prev && dv == data_version_) return prev;

  ReadTransaction guard{db};
  HPCTUNE_TRY(db.begin_read());
  HPCTUNE_ASSIGN(auto campaign, db.load_campaign());
  if (!campaign) return err(Errc::kNotFound, db_ + " holds no campaign");
  if (prev && prev->campaign.id != campaign->id) prev.reset();  // another campaign: load it all

  // What to read again: the trials after the last known id, and those not final last time.
  int64_t after = 0;
  std::vector<int64_t> open_ids;
  if (prev) {
    after = prev->trials.empty() ? 0 : prev->trials.back().id;
    for (const auto& t : prev->trials) {
      if (!store::is_final(t.state)) open_ids.push_back(t.id);
    }
  }
  auto next = std::make_shared<Snapshot>();
  next->db_path = db_;
  next->campaign = std::move(*campaign);
  HPCTUNE_ASSIGN(next->stages, db.stages(next->campaign.id));
  HPCTUNE_ASSIGN(next->groups, db.groups(next->campaign.id));
  HPCTUNE_ASSIGN(auto trials, db.trials_changed(next->campaign.id, after, open_ids));
  HPCTUNE_ASSIGN(auto attempts, db.attempts_changed(after, open_ids));
  HPCTUNE_ASSIGN(auto lineage, db.lineage_changed(after, open_ids));
  HPCTUNE_TRY(db.commit());
  data_version_ = dv;

  // Merge: the previous rows of the trials not read again, then the rows read.
  const std::set<int64_t> reread(open_ids.begin(), open_ids.end());
  auto reread_id = [&](int64_t id) { return id > after || reread.count(id) > 0; };
  if (prev) {
    next->trials = prev->trials;
    next->index_ = prev->index_;
    for (auto& t : trials) {
      auto it = next->index_.find(t.id);
      if (it != next->index_.end()) {
        next->trials[it->second] = std::move(t);
      } else {
        next->index_[t.id] = next->trials.size();
        next->trials.push_back(std::move(t));
      }
    }
    next->attempts.reserve(prev->attempts.size() + attempts.size());
    for (const auto& a : prev->attempts) {
      if (!reread_id(a.trial_id)) next->attempts.push_back(a);
    }
    for (const auto& l : prev->lineage) {
      if (!reread_id(l.child_trial_id)) next->lineage.push_back(l);
    }
  } else {
    next->trials = std::move(trials);
    for (size_t i = 0; i < next->trials.size(); ++i) next->index_[next->trials[i].id] = i;
  }
  next->attempts.insert(next->attempts.end(), attempts.begin(), attempts.end());
  std::stable_sort(next->attempts.begin(), next->attempts.end(), [](const auto& a, const auto& b) {
    return a.trial_id != b.trial_id ? a.trial_id < b.trial_id : a.attempt < b.attempt;
  });
  for (size_t i = 0; i < next->attempts.size();) {
    size_t j = i;
    while (j < next->attempts.size() && next->attempts[j].trial_id == next->attempts[i].trial_id) ++j;
    next->attempt_range_[next->attempts[i].trial_id] = {i, j};
    i = j;
  }
  next->lineage.insert(next->lineage.end(), lineage.begin(), lineage.end());
  std::stable_sort(next->lineage.begin(), next->lineage.end(), [](const auto& a, const auto& b) {
    return a.child_trial_id < b.child_trial_id;
  });

  next->objectives = report::objectives_of(next->campaign.config_json);
  next->pareto = report::recorded_pareto_front(next->campaign);
  next->main_stage = report::main_stage_name(next->campaign.config_json);
  for (const auto& s : next->stages) {
    if (!next->main_stage.empty() && s.name == next->main_stage) next->main_stage_id = s.id;
  }
  next->taken_at = unix_now();
  next->version = counter_->fetch_add(1) + 1;
  version_.store(next->version);
  return std::shared_ptr<const Snapshot>(std::move(next));
}

}  // namespace hpctune::dashboard
