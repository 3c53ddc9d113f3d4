#include "scheduler/master.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <set>

#include "common/clock.h"
#include "common/system.h"
#include "launch/launcher.h"
#include "protocol/messages.h"
#include "store/store.h"
#include "protocol/transport.h"

namespace hpctune::scheduler {
namespace {

class FailPoint {
 public:
  FailPoint(std::string name, int64_t hit) : name_(std::move(name)), left_(hit) {}
  void pass(const char* name) {
    if (name_.empty() || name_ != name) return;
    if (--left_ <= 0) raise(SIGKILL);
  }

 private:
  std::string name_;
  int64_t left_;
};

Status in_context(Status s, const std::string& line) {
  if (s.ok()) return s;
  return std::move(s).error().with_context(line);
}

}  // namespace

Status record_master_warning(store::Store& store, int64_t campaign_id, const std::string& text, double t) {
  return store.add_event(campaign_id, "master_warning", 0, 0, -1, {{"text", text}}, t);
}

SchedulerOptions scheduler_options(const config::CampaignConfig& cfg, int64_t campaign_id, int64_t stage_id) {
  SchedulerOptions sopt;
  sopt.campaign_id = campaign_id;
  sopt.stage_id = stage_id;
  sopt.seed = cfg.seed;
  sopt.objectives = cfg.objectives;
  sopt.max_trials = cfg.max_trials;
  sopt.max_time_s = cfg.max_time_s;
  sopt.max_attempts = cfg.max_attempts;
  sopt.max_failures = cfg.max_failures;
  sopt.trainer = cfg.trainer;
  sopt.heartbeat_interval = std::chrono::milliseconds(static_cast<int64_t>(cfg.resources.heartbeat_interval_s * 1000));
  sopt.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.resources.heartbeat_timeout_s * 1000));
  return sopt;
}

// --- Master ----------------------------------------------------------------------------------

struct Master::FailPointState {
  FailPoint point;
};

Master::Master(PreparedCampaign campaign, MasterParts parts)
    : c_(std::move(campaign)),
      p_(std::move(parts)),
      failpoint_(std::make_unique<FailPointState>(FailPointState{FailPoint(p_.failpoint, p_.failpoint_hit)})) {}

Master::~Master() = default;

void Master::log(const std::string& line) const {
  if (p_.log) p_.log(line);
}

bool Master::interrupted() const { return sched_ && sched_->interrupted(); }

Progress Master::progress() const { return sched_ ? sched_->progress() : Progress{}; }

std::vector<int64_t> Master::stage_ids() const {
  std::vector<int64_t> ids;
  for (const HeldStage& st : stages_) ids.push_back(st.id);
  return ids;
}

launch::GroupState Master::group_state(int64_t group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? launch::GroupState::kExited : it->second.state;
}

Status Master::start(Clock::time_point now) {
  // A campaign that cannot start is recorded failed like one that fails later: never left running.
  if (auto s = start_stages(now); !s.ok()) return fail(std::move(s).error(), now);
  return {};
}

Status Master::start_stages(Clock::time_point now) {
  const config::CampaignConfig& cfg = c_.cfg;
  store::Store& db = *p_.store;
  start_ = last_tick_ = now;
  const double t0 = p_.wall.unix_at(now);
  if (c_.warm) {
    const WarmStart& warm = *c_.warm;
    HPCTUNE_TRY(db.add_event(c_.campaign_id, "warm_start", 0, 0, -1, warm.summary(), t0));
    log("warm start from " + warm.path + ": " + std::to_string(warm.observations.size()) + " of " +
        std::to_string(warm.read) + " trials loaded, " + std::to_string(warm.skipped_total()) + " skipped");
  }
  // Each stage of the plan with its row: found by name on resume, else created (pending until the
  // stages it consumes have completed). A completed stage keeps its result and runs nothing again.
  std::vector<store::StageRow> rows;
  if (c_.resuming) {
    HPCTUNE_ASSIGN(rows, db.stages(c_.campaign_id));
  }
  const std::vector<StagePlan> plan = stage_plan(cfg);
  std::vector<StageSource> sources;
  for (const StagePlan& sp : plan) {
    HeldStage held;
    held.name = sp.name;
    held.kind = sp.kind;
    for (const std::string& input : sp.from) {
      for (std::size_t k = 0; k < plan.size(); ++k) {
        if (plan[k].name == input) held.inputs.push_back(k);
      }
    }
    for (const auto& row : rows) {
      if (row.name == sp.name && row.kind == sp.kind) {
        // Whatever is not completed runs again, a failed stage included (stages.h: Stage failures).
        held.id = row.id;
        held.state = row.state == "completed" ? "completed" : "pending";
        held.begun_before = row.state != "pending";
      }
    }
    if (held.id == 0) {
      HPCTUNE_ASSIGN(held.id, db.create_stage(c_.campaign_id, sp.kind, sp.name, nlohmann::json::object(), t0, "pending"));
      held.state = "pending";
    }
    if (!p_.make_stage) return err(Errc::kInvalidArgument, "the master was given no stage builder");
    StageSource source{held.id, nullptr, 0, false, nullptr};
    std::string unbuilt;
    if (held.state != "completed") {
      auto runtime = p_.make_stage(sp, cfg, c_.warm);
      if (runtime.ok()) {
        held.runtime = std::move(runtime).value();
        source.source = held.runtime->source();
        source.max_trials = held.runtime->max_trials();
        source.trainer = held.runtime->trainer();
      } else {
        unbuilt = "could not be built: " + runtime.error().to_string();
      }
    }
    sources.push_back(std::move(source));
    stages_.push_back(std::move(held));
    if (!unbuilt.empty()) HPCTUNE_TRY(fail_stage(stages_.size() - 1, unbuilt, now));
  }
  // Stages whose inputs are complete begin now, before the scheduler restores their trials; one
  // that cannot begin is recorded failed in the same transaction (its source stays inactive).
  HPCTUNE_TRY(db.begin());
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    HeldStage& st = stages_[k];
    if (st.state != "pending" || !inputs_complete(st)) continue;
    HPCTUNE_TRY(begin_stage(k, now, /*before_scheduler=*/true));
    sources[k].active = st.state == "running";
  }
  HPCTUNE_TRY(db.commit());
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    if (stages_[k].state == "completed") sources[k].active = true;
  }

  SchedulerOptions sopt = scheduler_options(cfg, c_.campaign_id, stages_.empty() ? 0 : stages_[0].id);
  sopt.trials_dir = c_.run_dir;
  sopt.best_stage = cfg.stages.empty() ? 0 : cfg.main_stage;
  sopt.master_incarnation = p_.master_incarnation;
  sopt.secret = p_.secret;
  sopt.wall = p_.wall;
  sopt.backend = p_.launcher->name();
  sopt.group_devices = [launcher = p_.launcher](int64_t group) { return launcher->devices(group); };
  // Packed groups (the first process holds the most groups): packed dispatch (scheduler.h).
  if (p_.launcher->process_groups(0).size() > 1)
    sopt.process_groups = [launcher = p_.launcher](int64_t group) { return launcher->process_groups(group); };
  sopt.vouched_liveness = p_.vouched_liveness;
  sopt.search_state_every = p_.search_state_every;
  sched_ = std::make_unique<Scheduler>(sopt, *p_.transport, db, std::move(sources));
  sched_->set_log(p_.log);
  sched_->set_failpoint([this](const char* name) { failpoint_->point.pass(name); });
  poll_interval_ = std::chrono::milliseconds(std::clamp<int64_t>(sopt.heartbeat_interval.count() / 4, 5, 50));

  HPCTUNE_TRY(db.begin());
  HPCTUNE_TRY(sched_->restore(now));
  // The trials a failed stage had queued (restored above) are recorded interrupted.
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    if (stages_[k].state == "failed") HPCTUNE_TRY(sched_->close_stage(k, now));
  }
  HPCTUNE_TRY(advance_stages(now));
  HPCTUNE_TRY(db.commit());

  for (int64_t g = 0; g < cfg.resources.groups; ++g) HPCTUNE_TRY(launch(g, now));
  log("campaign '" + cfg.name + "': " + std::to_string(cfg.resources.groups) + " trainer group(s) (" +
      p_.launcher->name() + "), master at " + p_.transport->endpoint() + ", database " + c_.db_path);
  if (const std::string fs = network_filesystem(c_.db_path); !fs.empty()) {
    // Not refused: one process on one node is safe; a second on another node is not, nor a crash
    // of the file server. Said every start, since a campaign may have been moved there.
    const std::string text = "the database " + c_.db_path + " is on " + fs +
        ", a network file system: SQLite's locks and its WAL's shared memory do not span nodes there, so a "
        "process on another node (a resume, a status) can corrupt it. Keep `storage:` on the batch host's local "
        "disk or a node-local path and copy the file back when the campaign ends (README: Storage on a cluster)";
    log("warning: " + text);
    // Recorded too: `status` shows it to whoever looks later, not only to the log's reader.
    HPCTUNE_TRY(record_master_warning(*p_.store, c_.campaign_id, text, t0));
  }
  return {};
}

bool Master::inputs_complete(const HeldStage& st) const {
  for (std::size_t k : st.inputs) {
    if (stages_[k].state != "completed") return false;
  }
  return true;
}

StageContext Master::stage_context(std::size_t k, Clock::time_point now) const {
  StageContext ctx;
  ctx.store = p_.store;
  ctx.campaign_id = c_.campaign_id;
  ctx.stage_id = stages_[k].id;
  for (std::size_t i : stages_[k].inputs) ctx.inputs.push_back(stages_[i].id);
  ctx.run_dir = c_.run_dir;
  ctx.now = p_.wall.unix_at(now);
  ctx.resuming = stages_[k].begun_before;
  ctx.log = p_.log;
  return ctx;
}

Status Master::begin_stage(std::size_t k, Clock::time_point now, bool before_scheduler) {
  HeldStage& st = stages_[k];
  const StageContext ctx = stage_context(k, now);
  if (auto s = st.runtime->begin(ctx); !s.ok()) {
    // Its inputs lack what it needs (no done trial, a damaged prediction file, a deleted
    // checkpoint): this stage fails, the others go on.
    return fail_stage(k, "could not start: " + s.error().to_string(), now);
  }
  HPCTUNE_TRY(p_.store->start_stage(st.id, ctx.now));
  // A stage an earlier master began is resumed, not started again.
  HPCTUNE_TRY(p_.store->add_event(c_.campaign_id, st.begun_before ? "stage_resumed" : "stage_started", 0, 0, -1,
                                  {{"stage", st.name}, {"kind", st.kind}}, ctx.now));
  st.state = "running";
  if (!before_scheduler) sched_->activate_stage(k);
  if (stages_.size() > 1) log("stage '" + st.name + "' (" + st.kind + (st.begun_before ? ") resumed" : ") started"));
  return {};
}

// Completes every running stage whose trials are done (its result recorded), then begins every
// pending stage whose inputs are now complete, until nothing changes (a stage without trials
// completes in the same turn it begins).
Status Master::advance_stages(Clock::time_point now) {
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      HeldStage& st = stages_[k];
      if (st.state != "running" || !sched_->stage_complete(k)) continue;
      changed = true;
      HPCTUNE_ASSIGN(const std::string none_succeeded, no_trial_succeeded(k));
      if (!none_succeeded.empty()) {
        HPCTUNE_TRY(fail_stage(k, none_succeeded, now));
        continue;
      }
      const StageContext ctx = stage_context(k, now);
      auto result = st.runtime->finish(ctx);
      if (!result.ok()) {
        HPCTUNE_TRY(fail_stage(k, "could not finish: " + result.error().to_string(), now));
        continue;
      }
      HPCTUNE_TRY(p_.store->complete_stage(st.id, *result, ctx.now));
      HPCTUNE_TRY(p_.store->add_event(c_.campaign_id, "stage_completed", 0, 0, -1,
                                      {{"stage", st.name}, {"kind", st.kind}, {"result", *result}}, ctx.now));
      st.state = "completed";
      if (stages_.size() > 1) log("stage '" + st.name + "' (" + st.kind + ") completed");
      failpoint_->point.pass("stage-completed");
    }
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      if (stages_[k].state != "pending") continue;
      if (const std::string why = failed_input_reason(k); !why.empty()) {
        HPCTUNE_TRY(fail_stage(k, why, now));
      } else if (inputs_complete(stages_[k])) {
        HPCTUNE_TRY(begin_stage(k, now, /*before_scheduler=*/false));
      } else {
        continue;
      }
      changed = true;
    }
  }
  return {};
}

std::string Master::failed_input_reason(std::size_t k) const {
  for (std::size_t i : stages_[k].inputs) {
    const HeldStage& in = stages_[i];
    if (in.state == "failed") return "stage '" + in.name + "' it depends on failed" + (in.reason.empty() ? "" : ": " + in.reason);
  }
  return {};
}

Status Master::fail_stage(std::size_t k, const std::string& reason, Clock::time_point now) {
  HeldStage& st = stages_[k];
  const double t = p_.wall.unix_at(now);
  // State and reason in one statement; the event beside them in the caller's transaction.
  HPCTUNE_TRY(p_.store->set_stage_state(st.id, "failed", t, reason));
  HPCTUNE_TRY(p_.store->add_event(c_.campaign_id, "stage_failed", 0, 0, -1,
                                  {{"stage", st.name}, {"kind", st.kind}, {"reason", reason}}, t));
  st.state = "failed";
  st.reason = reason;
  log("stage '" + st.name + "' (" + st.kind + ") failed: " + reason);
  if (sched_) HPCTUNE_TRY(sched_->close_stage(k, now));
  return {};
}

Result<std::string> Master::no_trial_succeeded(std::size_t k) const {
  HPCTUNE_ASSIGN(std::vector<store::TrialRow> trials, p_.store->trials(c_.campaign_id));
  const int64_t id = stages_[k].id;
  int64_t total = 0, succeeded = 0, failed = 0;
  const store::TrialRow* last_failed = nullptr;
  for (const store::TrialRow& t : trials) {
    // The implicit single stage's trials may be recorded without a stage (stage_id 0).
    if (t.stage_id != id && !(t.stage_id == 0 && stages_.size() == 1)) continue;
    ++total;
    if (t.state == store::TrialState::kDone || t.state == store::TrialState::kPruned) ++succeeded;
    if (t.state == store::TrialState::kFailed) {
      ++failed;
      last_failed = &t;
    }
  }
  if (total == 0 || succeeded > 0) return std::string();
  std::string why = "none of its " + std::to_string(total) + " trials succeeded (" + std::to_string(failed) + " failed";
  if (last_failed && !last_failed->error.empty()) {
    const std::string& e = last_failed->error;
    why += "; trial " + std::to_string(last_failed->id) + ": " + e.substr(0, std::min(e.find('\n'), std::size_t{300}));
  }
  return why + ")";
}

std::string Master::failed_stages() const {
  std::string out;
  for (const HeldStage& st : stages_) {
    if (st.state != "failed") continue;
    out += (out.empty() ? "" : "; ") + ("stage '" + st.name + "' (" + st.kind + ") failed: " + st.reason);
  }
  return out;
}

Status Master::launch(int64_t group, Clock::time_point now) {
  HPCTUNE_ASSIGN(std::string credential, sched_->launch_credential(group));
  HPCTUNE_TRY(p_.launcher->start(group, credential));
  Group& g = groups_[group];
  g.state = launch::GroupState::kPending;
  unsettled_.insert(group);
  g.died_before_hello = false;
  g.deadline = Clock::time_point::max();
  // A backend that starts it at once (local) begins its start-up deadline now.
  if (p_.launcher->state(group) == launch::GroupState::kStarting) {
    g.state = launch::GroupState::kStarting;
    g.deadline = now + std::chrono::milliseconds(static_cast<int64_t>(c_.cfg.resources.startup_timeout_s * 1000));
  }
  return {};
}

Status Master::wait(std::chrono::milliseconds timeout) {
  if (pending_) return {};
  HPCTUNE_ASSIGN(auto env, p_.transport->recv(timeout));
  pending_ = std::move(env);
  return {};
}

Error Master::fail(Error e, Clock::time_point now) {
  // The campaign fails with `e`; a store that also refuses these writes is said in the log (the
  // state then stays `running`, and resume treats it as a crashed master).
  failed_ = true;
  store::Store& db = *p_.store;
  if (auto s = db.rollback(); !s.ok()) log("could not roll back the open transaction: " + s.error().to_string());
  if (sched_) sched_->shutdown_workers("master failed");
  p_.launcher->stop_all(std::chrono::milliseconds(2000));
  const double t = p_.wall.unix_at(now);
  // No trial is left running with no process behind it: those in flight are recorded interrupted
  // (a resume runs them again).
  if (sched_) {
    Status s = db.begin();
    if (s.ok()) s = sched_->interrupt(now);
    if (s.ok()) s = db.commit();
    if (!s.ok()) {
      log("could not record the running trials as interrupted: " + s.error().to_string());
      (void)db.rollback();
    }
  }
  if (auto s = db.set_campaign_state(c_.campaign_id, "failed", t); !s.ok()) {
    log("could not record the campaign as failed: " + s.error().to_string());
  }
  if (auto s = db.add_event(c_.campaign_id, "campaign_failed", 0, 0, -1, {{"error", e.to_string()}}, t); !s.ok()) {
    log("could not record why the campaign failed: " + s.error().to_string());
  }
  for (const HeldStage& st : stages_) {
    if (st.state != "running") continue;
    if (auto s = db.set_stage_state(st.id, "failed", t, "the campaign failed: " + e.message()); !s.ok()) {
      log("could not record stage '" + st.name + "' as failed: " + s.error().to_string());
    }
  }
  return e;
}

Status Master::interrupt(Clock::time_point now) {
  if (failed_) return err(Errc::kFailed, "the master has failed");
  if (sched_->interrupted()) return {};
  log("interrupted: stopping dispatch; running trials are recorded as interrupted");
  HPCTUNE_TRY(p_.store->begin());
  if (auto s = sched_->interrupt(now); !s.ok()) return fail(std::move(s).error(), now);
  HPCTUNE_TRY(p_.store->commit());
  return {};
}

bool Master::signalled() const {
  return (p_.interrupt != nullptr && p_.interrupt->load() > 0) || (p_.preempt != nullptr && p_.preempt->load() > 0);
}

Result<bool> Master::step(Clock::time_point now) {
  if (failed_) return err(Errc::kFailed, "the master has failed");
  if (sched_->finished()) return true;
  store::Store& db = *p_.store;
  if (auto s = db.begin(); !s.ok()) return fail(std::move(s).error(), now);
  constexpr int kMaxBatch = 512;
  std::optional<protocol::Envelope> env = std::exchange(pending_, std::nullopt);
  if (!env) {
    auto first = p_.transport->recv(std::chrono::milliseconds(0));
    if (!first.ok()) return fail(std::move(first).error().with_context("while waiting for workers"), now);
    env = std::move(first.value());
  }
  for (int n = 0; env;) {
    // After a signal the step goes on with dispatch held: the results received are recorded, and
    // none of them costs an ask (minutes on thousands of groups with a model-based search).
    if (signalled()) sched_->hold_dispatch();
    if (auto s = sched_->handle(env->peer, env->bytes, now); !s.ok()) return fail(std::move(s).error(), now);
    if (++n >= kMaxBatch) break;
    auto next = p_.transport->recv(std::chrono::milliseconds(0));
    if (!next.ok()) return fail(std::move(next).error(), now);
    env = std::move(next.value());
  }
  if (now - last_tick_ >= poll_interval_) {
    last_tick_ = now;
    if (auto s = sched_->tick(now); !s.ok()) return fail(std::move(s).error(), now);
    if (auto s = follow_groups(now); !s.ok()) return fail(std::move(s).error(), now);
  }
  // Stage transitions with the tick, not every turn (finding a stage complete scans the live
  // trials), and in the turn its last trial ends: a finished scheduler with a stage still running
  // has a result to record, or a stage to begin, before the campaign may end.
  if ((last_tick_ == now || sched_->finished()) && !sched_->interrupted() && !sched_->fatal()) {
    if (auto s = advance_stages(now); !s.ok()) return fail(std::move(s).error(), now);
  }
  // The heartbeat `status` tells a live master from a dead one by (with the master lock).
  if (!last_heartbeat_ || now - *last_heartbeat_ >= std::chrono::duration<double>(store::kMasterHeartbeatEvery_s)) {
    last_heartbeat_ = now;
    if (auto s = db.set_campaign_heartbeat(c_.campaign_id, p_.wall.unix_at(now)); !s.ok())
      return fail(std::move(s).error(), now);
  }
  if (auto s = db.commit(); !s.ok()) return fail(std::move(s).error(), now);
  failpoint_->point.pass("after-commit");
  // The trial source failed in this turn: recorded (event, log) and committed; the campaign fails.
  if (sched_->fatal()) return fail(*sched_->fatal(), now);
  return sched_->finished();
}

std::optional<Clock::time_point> Master::next_deadline() const {
  std::optional<Clock::time_point> next = sched_ ? sched_->next_deadline() : std::nullopt;
  for (int64_t g : unsettled_) {  // only they can change state (follow_groups)
    auto grp = groups_.find(g);
    if (grp == groups_.end() || grp->second.state != launch::GroupState::kStarting) continue;
    if (grp->second.deadline == Clock::time_point::max()) continue;
    const Clock::time_point late = grp->second.deadline + std::chrono::milliseconds(1);  // killed once past it
    next = next ? std::min(*next, late) : late;
  }
  return next;
}

// Group exits and restarts, each group's state and start-up deadline. Errors end the campaign.
Status Master::follow_groups(Clock::time_point now) {
  const config::CampaignConfig& cfg = c_.cfg;
  store::Store& db = *p_.store;
  const double tw = p_.wall.unix_at(now);
  const int64_t groups = cfg.resources.groups;
  for (int64_t g : sched_->take_silent_groups()) {
    log("group " + std::to_string(g) + " is killed: it was silent past the heartbeat timeout");
    p_.launcher->kill(g);
  }
  for (const launch::GroupExit& e : p_.launcher->poll_exits()) {
    Group& grp = groups_[e.group];
    const bool registered = sched_->group_ever_registered(e.group);
    grp.state = launch::GroupState::kExited;
    unsettled_.insert(e.group);
    log("group " + std::to_string(e.group) + " exited: " + e.how);
    HPCTUNE_TRY(sched_->on_group_exit(e.group, "process " + e.how, now));
    HPCTUNE_TRY(in_context(db.add_event(c_.campaign_id, "group_exited", 0, 0, e.group, {{"how", e.how}}, tw),
                           "while recording that group " + std::to_string(e.group) + " exited"));
    if (!registered) grp.died_before_hello = true;
    int64_t died = 0;
    for (const auto& [id, other] : groups_) died += other.died_before_hello ? 1 : 0;
    if (!registered && died == groups && !any_registered_) {
      return err(Errc::kFailed, "every trainer group (" + std::to_string(groups) + ") exited at start-up; the last one: " +
                                    e.how + (e.log_tail.empty() ? "" : "\n--- its log (" + p_.log_dir + ") ---\n" + e.log_tail));
    }
    if (sched_->finished() || sched_->interrupted()) continue;
    if (grp.restarts >= cfg.resources.max_group_restarts) {
      log("group " + std::to_string(e.group) + " is not restarted: it used its " +
          std::to_string(cfg.resources.max_group_restarts) + " restarts");
      continue;
    }
    ++grp.restarts;
    HPCTUNE_TRY(launch(e.group, now));
    HPCTUNE_TRY(in_context(db.add_event(c_.campaign_id, "group_restarted", 0, 0, e.group, {{"restart", grp.restarts}}, tw),
                           "while recording the restart of group " + std::to_string(e.group)));
  }

  // States: pending -> starting (the backend started it: its start-up deadline begins) -> running
  // (it said hello). A group still starting past its deadline is killed (its exit then takes the
  // restart path above); when no group has ever connected, the campaign fails instead.
  // Only the unsettled groups can change state (not running, or running with a worker the
  // scheduler lost since): a running group is alive and not late, so a tick costs what the
  // unsettled ones cost, not what every group does (issue 36: 2,048 groups, 10 of them busy).
  const auto startup = std::chrono::milliseconds(static_cast<int64_t>(cfg.resources.startup_timeout_s * 1000));
  for (int64_t g : sched_->take_lost_groups())
    if (groups_.contains(g)) unsettled_.insert(g);
  const bool some_running = groups_.size() > unsettled_.size();
  bool alive = some_running, all_late = !some_running;
  std::vector<int64_t> late;
  for (auto it = unsettled_.begin(); it != unsettled_.end();) {
    const int64_t id = *it;
    auto found = groups_.find(id);
    if (found == groups_.end()) {  // not one of this master's groups
      it = unsettled_.erase(it);
      continue;
    }
    Group& g = found->second;
    if (g.state == launch::GroupState::kPending && p_.launcher->state(id) == launch::GroupState::kStarting) {
      g.state = launch::GroupState::kStarting;
      g.deadline = now + startup;
    }
    if (g.state == launch::GroupState::kStarting && sched_->group_registered(id)) {
      g.state = launch::GroupState::kRunning;
      any_registered_ = true;
    }
    if (g.state == launch::GroupState::kRunning && !sched_->group_registered(id) &&
        p_.launcher->state(id) == launch::GroupState::kStarting) {
      // Lost (silent) but its process lives on until the kill lands: starting again for the master.
      g.state = launch::GroupState::kStarting;
      g.deadline = now + startup;
    }
    if (g.state != launch::GroupState::kExited) alive = true;
    if (g.state != launch::GroupState::kExited && !(g.state == launch::GroupState::kStarting && now > g.deadline)) {
      all_late = false;
    }
    if (g.state == launch::GroupState::kStarting && now > g.deadline) late.push_back(id);
    it = g.state == launch::GroupState::kRunning && sched_->group_registered(id) ? unsettled_.erase(it) : std::next(it);
  }
  if (!alive && !sched_->finished()) {
    HPCTUNE_TRY(db.commit());
    return err(Errc::kFailed, "every trainer group has exited and none may be restarted (max_group_restarts = " +
                                  std::to_string(cfg.resources.max_group_restarts) + ")");
  }
  if (!any_registered_ && all_late) {
    return err(Errc::kTimeout, "no trainer group connected within resources.startup_timeout (" +
                                   std::to_string(cfg.resources.startup_timeout_s) + " s); see " + p_.log_dir);
  }
  for (int64_t id : late) {
    log("group " + std::to_string(id) + " is killed: it did not connect within resources.startup_timeout (" +
        std::to_string(cfg.resources.startup_timeout_s) + " s) of its start");
    HPCTUNE_TRY(db.add_event(c_.campaign_id, "group_startup_timeout", 0, 0, id,
                             {{"startup_timeout_s", cfg.resources.startup_timeout_s}}, tw));
    groups_[id].deadline = Clock::time_point::max();  // once per launch
    p_.launcher->kill(id);
  }
  return {};
}

Result<CampaignOutcome> Master::stop(Clock::time_point now) {
  if (failed_) return err(Errc::kFailed, "the master has failed");
  store::Store& db = *p_.store;
  sched_->shutdown_workers(sched_->interrupted() ? "interrupted" : "campaign complete");
  p_.launcher->stop_all(std::chrono::milliseconds(3000));
  const double t0 = p_.wall.unix_at(start_);
  const double t1 = p_.wall.unix_at(now);
  // The algorithm's own record (generations, Pareto front, best) for status and the dashboard.
  HPCTUNE_TRY(sched_->save_search_state(now));
  // Stopped by search.max_failures, or a stage failed: recorded failed (a resume may try again).
  const bool gave_up = !sched_->gave_up().empty();
  const bool stopped = gave_up && !sched_->interrupted();
  HPCTUNE_TRY(db.begin());
  // Every stage that ran ends with the campaign (`status` reads each stage's state from the store);
  // a completed or failed one keeps its result or reason. Stopped by search.max_failures, a running
  // stage fails with that reason, and so does every pending stage that depends on a failed one
  // (it can never run); another pending one stays pending for a resume.
  const bool failures = gave_up || !failed_stages().empty();
  for (HeldStage& st : stages_) {
    if (st.state == "running") {
      if (stopped) {
        HPCTUNE_TRY(db.set_stage_state(st.id, "failed", t1, sched_->gave_up()));
        st.state = "failed";
        st.reason = sched_->gave_up();
      } else {
        HPCTUNE_TRY(db.set_stage_state(st.id, sched_->interrupted() ? "interrupted" : failures ? "failed" : "completed", t1, ""));
      }
    }
  }
  // Until nothing changes: a stage two steps downstream fails once its input has.
  for (bool changed = stopped; changed;) {
    changed = false;
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      if (stages_[k].state != "pending") continue;
      if (const std::string why = failed_input_reason(k); !why.empty()) {
        HPCTUNE_TRY(fail_stage(k, why, now));
        changed = true;
      }
    }
  }
  const std::string stage_failures = failed_stages();
  const char* final_state = sched_->interrupted()              ? "interrupted"
                            : gave_up || !stage_failures.empty() ? "failed"
                                                                 : "completed";
  HPCTUNE_TRY(db.set_campaign_state(c_.campaign_id, final_state, t1));
  nlohmann::json detail = {{"seconds", t1 - t0}};
  if (gave_up) {
    detail["reason"] = sched_->gave_up();
  } else if (!stage_failures.empty()) {
    detail["reason"] = stage_failures;
  }
  HPCTUNE_TRY(db.add_event(c_.campaign_id,
                           std::string("campaign_") + (sched_->interrupted() ? "interrupted"
                                                       : gave_up               ? "stopped"
                                                       : stage_failures.empty() ? "completed"
                                                                                : "failed"),
                           0, 0, -1, detail, t1));
  HPCTUNE_TRY(db.commit());

  CampaignOutcome out;
  out.campaign_id = c_.campaign_id;
  out.name = c_.cfg.name;
  out.db_path = c_.db_path;
  out.interrupted = sched_->interrupted();
  out.gave_up = sched_->gave_up();
  out.failed_stages = stage_failures;
  out.progress = sched_->progress();
  out.counters = sched_->counters();
  out.elapsed_s = std::chrono::duration<double>(now - start_).count();
  return out;
}

}  // namespace hpctune::scheduler
