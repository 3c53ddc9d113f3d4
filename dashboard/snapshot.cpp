// Snapshots of a campaign database, refreshed incrementally (snapshot.h).
#include "dashboard/snapshot.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <cmath>

#include "common/clock.h"
#include "report/campaign.h"
#include "report/status.h"

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

size_t Snapshot::position(int64_t id) const {
  auto it = std::lower_bound(trials.begin(), trials.end(), id, [](const auto& t, int64_t v) { return t->id < v; });
  return it != trials.end() && (*it)->id == id ? static_cast<size_t>(it - trials.begin()) : trials.size();
}

const store::TrialRow* Snapshot::find(int64_t id) const {
  const size_t i = position(id);
  return i < trials.size() ? trials[i].get() : nullptr;
}

const std::string& Snapshot::search_text(const store::TrialRow& t) const {
  static const std::string none;
  const size_t i = position(t.id);
  return i < search_text_.size() ? *search_text_[i] : none;
}

std::vector<const store::TrialRow*> Snapshot::all_trials() const {
  std::vector<const store::TrialRow*> out;
  out.reserve(trials.size());
  for (const auto& t : trials) out.push_back(t.get());
  return out;
}

std::vector<const store::TrialRow*> Snapshot::stage_trials(int64_t stage_id) const {
  const int64_t first = stages.empty() ? 0 : stages.front().id;
  std::vector<const store::TrialRow*> out;
  for (const auto& t : trials) {
    if (t->stage_id == stage_id || (t->stage_id == 0 && stage_id == first)) out.push_back(t.get());
  }
  return out;
}

std::vector<const store::TrialRow*> Snapshot::main_trials() const {
  if (main_stage_id == 0) return all_trials();
  std::vector<const store::TrialRow*> out;
  for (const auto& t : trials) {
    if (t->stage_id == main_stage_id) out.push_back(t.get());
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
  auto first = std::lower_bound(attempts.begin(), attempts.end(), trial_id,
                                [](const store::AttemptRow& a, int64_t v) { return a.trial_id < v; });
  auto last = std::upper_bound(first, attempts.end(), trial_id,
                               [](int64_t v, const store::AttemptRow& a) { return v < a.trial_id; });
  return {static_cast<size_t>(first - attempts.begin()), static_cast<size_t>(last - attempts.begin())};
}

const nlohmann::json& Snapshot::status_json() const {
  std::call_once(status_once_, [this] {
    report::CampaignStatus st;
    st.campaign = campaign;
    st.stages = stages;
    for (auto k : store::kTrialStates) st.counts[store::to_string(k)] = 0;
    for (const auto& t : trials) ++st.counts[store::to_string(t->state)];
    for (const auto& a : attempts) st.attempts_lost += a.state == "lost";
    // status_json reads only the stage and state of each trial (trials by stage), and takes the
    // best of main_trials: light rows and the best one suffice, instead of copying every row.
    st.trials.reserve(trials.size());
    for (const auto& t : trials) {
      store::TrialRow light;
      light.id = t->id;
      light.stage_id = t->stage_id;
      light.state = t->state;
      st.trials.push_back(std::move(light));
    }
    const store::TrialRow* best = nullptr;
    for (const auto* t : main_trials()) {
      if (!t->objective || std::isnan(*t->objective) || t->state == store::TrialState::kFailed) continue;
      if (!best || (objectives.maximize ? *t->objective > *best->objective : *t->objective < *best->objective)) best = t;
    }
    if (best) st.main_trials.push_back(*best);
    st.main_stage = main_stage;
    st.simulated = simulated;
    st.objectives = objectives.columns();
    st.maximize = objectives.maximize;
    if (front()) st.front = pareto;
    st.now = taken_at;
    st.warnings = warnings;
    st.group_time = group_time;
    status_ = report::status_json(st);
  });
  return status_;
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
  if (cur && now < next_check_ns_.load()) return cur;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    // Another request refreshes (or reads through the connection): serve what there is.
    if (cur) return cur;
    lock.lock();
    if (auto again = current()) return again;
  }
  // The next check: after `check_every`, and after 49 times what this refresh took, so that the
  // refreshes of a campaign growing at full speed (7,000 new trials in 2 s: about 100 ms each)
  // take at most 2% of a core from the master they share a machine with; the views meanwhile
  // show the snapshot before, a few seconds old at worst. check_every 0: every request checks.
  next_check_ns_.store(now + std::chrono::nanoseconds(check_every_).count());
  auto next = refresh_locked(current());
  const int64_t spent = steady_ns() - now;
  if (check_every_.count() > 0) next_check_ns_.store(now + std::max(std::chrono::nanoseconds(check_every_).count(), spent * kIdleFactor));
  if (!next.ok()) {
    // Ask again at the next request, not after the interval.
    next_check_ns_.store(0);
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
    after = prev->trials.empty() ? 0 : prev->trials.back()->id;
    for (const auto& t : prev->trials) {
      if (!store::is_final(t->state)) open_ids.push_back(t->id);
    }
  }
  auto next = std::make_shared<Snapshot>();
  next->db_path = db_;
  next->campaign = std::move(*campaign);
  HPCTUNE_ASSIGN(next->stages, db.stages(next->campaign.id));
  HPCTUNE_ASSIGN(next->groups, db.groups(next->campaign.id));
  HPCTUNE_ASSIGN(auto simulated, db.first_event(next->campaign.id, "campaign_simulated"));
  if (simulated) next->simulated = simulated->detail.is_object() ? simulated->detail : nlohmann::json::object();
  HPCTUNE_ASSIGN(next->warnings, report::recorded_warnings(db, next->campaign.id));
  HPCTUNE_ASSIGN(auto trials, db.trials_changed(next->campaign.id, after, open_ids));
  HPCTUNE_ASSIGN(auto attempts, db.attempts_changed(after, open_ids));
  HPCTUNE_ASSIGN(auto lineage, db.lineage_changed(after, open_ids));
  HPCTUNE_ASSIGN(next->group_time, report::group_time(db, next->campaign, 0, report::group_time_until(next->campaign, unix_now())));
  HPCTUNE_TRY(db.commit());
  data_version_ = dv;

  // Merge: the previous rows of the trials not read again, then the rows read (both sorted by
  // trial id, so the result is too).
  const std::set<int64_t> reread(open_ids.begin(), open_ids.end());
  auto reread_id = [&](int64_t id) { return id > after || reread.count(id) > 0; };
  auto text_of = [](const store::TrialRow& t) {
    std::string text = t.params.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" + t.error + "\n#" +
                       std::to_string(t.id);
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return std::make_shared<const std::string>(std::move(text));
  };
  if (prev) {
    next->trials = prev->trials;
    next->search_text_ = prev->search_text_;
  }
  for (auto& t : trials) {
    auto text = text_of(t);
    auto row = std::make_shared<const store::TrialRow>(std::move(t));
    const size_t i = next->position(row->id);
    if (i < next->trials.size()) {
      next->trials[i] = std::move(row);
      next->search_text_[i] = std::move(text);
    } else {
      next->trials.push_back(std::move(row));  // ids above every known one: in order
      next->search_text_.push_back(std::move(text));
    }
  }
  std::vector<store::AttemptRow> kept_attempts;
  std::vector<store::LineageRow> kept_lineage;
  if (prev) {
    kept_attempts.reserve(prev->attempts.size());
    for (const auto& a : prev->attempts) {
      if (!reread_id(a.trial_id)) kept_attempts.push_back(a);
    }
    for (const auto& l : prev->lineage) {
      if (!reread_id(l.child_trial_id)) kept_lineage.push_back(l);
    }
  }
  next->attempts.reserve(kept_attempts.size() + attempts.size());
  std::merge(kept_attempts.begin(), kept_attempts.end(), attempts.begin(), attempts.end(), std::back_inserter(next->attempts),
             [](const auto& a, const auto& b) { return a.trial_id != b.trial_id ? a.trial_id < b.trial_id : a.attempt < b.attempt; });
  std::merge(kept_lineage.begin(), kept_lineage.end(), lineage.begin(), lineage.end(), std::back_inserter(next->lineage),
             [](const auto& a, const auto& b) { return a.child_trial_id < b.child_trial_id; });

  next->objectives = report::objectives_of(next->campaign.config_json);
  next->pareto = report::recorded_pareto_front(next->campaign);
  next->main_stage = report::main_stage_name(next->campaign.config_json);
  for (const auto& s : next->stages) {
    if (!next->main_stage.empty() && s.name == next->main_stage) next->main_stage_id = s.id;
  }
  for (const auto& t : next->trials) next->group_time.steps += std::max<int64_t>(0, t->step);
  next->taken_at = unix_now();
  next->version = counter_->fetch_add(1) + 1;
  version_.store(next->version);
  return std::shared_ptr<const Snapshot>(std::move(next));
}

}  // namespace hpctune::dashboard
