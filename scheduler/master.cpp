#include "scheduler/master.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <filesystem>
#include <random>
#include <set>

#include "common/clock.h"
#include "common/device_list.h"
#include "common/endpoint.h"
#include "common/limits.h"
#include "common/system.h"
#include "config/trainer_kinds.h"
#include "launch/device_allocator.h"
#include "launch/launcher.h"
#include "launch/slurm_launcher.h"
#include "protocol/messages.h"
#include "store/store.h"
#include "protocol/curve_keys.h"
#include "protocol/transport.h"


namespace hpctune::scheduler {
namespace {

namespace fs = std::filesystem;

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

// Creates `path` with exactly `mode` (whatever the umask) if it does not exist; an existing
// directory keeps the modes its owner gave it, but must be the user's own and not a link: a
// <db>.trials planted in a shared folder would receive the trials' files (issue 21, finding 3).
Status make_dir(const std::string& path, unsigned mode) {
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    struct stat st {};
    if (errno == EEXIST && ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid()) return {};
    if (errno == EEXIST) {
      return err(Errc::kInvalidArgument, path + " exists and is not a directory of this user's own (a symbolic link, "
                                                "a file or another user's directory): not used; remove it");
    }
    return err(Errc::kIo, "cannot create " + path + ": " + std::strerror(errno));
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return err(Errc::kIo, "cannot set the permissions of " + path + ": " + std::strerror(errno));
  }
  return {};
}

void log_line(const MasterOptions& options, const std::string& line) {
  if (options.log) options.log(line);
}

Status in_context(Status s, const std::string& line) {
  if (s.ok()) return s;
  return std::move(s).error().with_context(line);
}

}  // namespace

store::CampaignRow campaign_row(const config::CampaignConfig& cfg, double created_at) {
  store::CampaignRow row;
  row.name = cfg.name;
  row.config_text = cfg.text;
  row.config_source = cfg.source;
  row.config_json = cfg.normalized;
  row.config_json["seed"] = cfg.seed;
  row.config_json["resources"]["groups"] = cfg.resources.groups;
  row.seed = cfg.seed;
  row.state = "running";
  row.created_at = created_at;
  return row;
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

Result<PreparedCampaign> prepare_campaign(const MasterOptions& options, store::Store& db, const std::string& db_path,
                                          double t0) {
  const bool resuming = !options.config.has_value();
  HPCTUNE_ASSIGN(auto existing, db.load_campaign());
  PreparedCampaign out;
  out.resuming = resuming;
  out.db_path = db_path;
  config::CampaignConfig& cfg = out.cfg;
  int64_t& campaign_id = out.campaign_id;
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  if (resuming) {
    if (!existing) return err(Errc::kNotFound, db_path + " holds no campaign to resume");
    auto parsed = config::parse_config(existing->config_text, existing->config_source);
    if (!parsed.ok()) return std::move(parsed).error().with_context("while re-reading the config stored in " + db_path);
    cfg = std::move(parsed).value();
    cfg.set_seed(existing->seed);
    const auto& cj = existing->config_json;
    if (cj.contains("resources") && cj["resources"].contains("groups")) {
      cfg.resources.groups = cj["resources"]["groups"].get<int64_t>();
    }
    // A budget extended by an earlier `resume --max-trials` (the config text keeps the first one).
    if (cj.contains("search") && cj["search"].is_object() && cj["search"].contains("max_trials") &&
        cj["search"]["max_trials"].is_number_integer()) {
      cfg.max_trials = cj["search"]["max_trials"].get<int64_t>();
    }
    campaign_id = existing->id;
    HPCTUNE_ASSIGN(auto so_far, db.trials(campaign_id));
    const auto recorded = static_cast<int64_t>(so_far.size());
    if (options.max_trials && !cfg.stages.empty()) {
      return err(Errc::kUsage, "--max-trials: campaign '" + existing->name +
                                   "' is a workflow of stages, each with its own budget; --max-trials extends a "
                                   "campaign of one search");
    }
    if (options.max_trials) {
      if (*options.max_trials <= recorded) {
        return err(Errc::kUsage, "--max-trials " + std::to_string(*options.max_trials) + ": campaign '" +
                                     existing->name + "' already has " + std::to_string(recorded) +
                                     " trials; give a larger budget (at least " + std::to_string(recorded + 1) + ")");
      }
    } else if (existing->state == "completed") {
      return err(Errc::kInvalidArgument, "campaign '" + existing->name + "' in " + db_path + " is already completed (" +
                                             std::to_string(recorded) + " trials); extend it with `hpctune resume " +
                                             db_path + " --max-trials N` (N > " + std::to_string(recorded) + ")");
    }
  } else {
    if (existing && existing->state == "completed") {
      return err(Errc::kInvalidArgument, db_path + " already holds the completed campaign '" + existing->name +
                                             "'; run more trials with `hpctune resume " + db_path +
                                             " --max-trials N`, or choose another --db");
    }
    if (existing) {
      return err(Errc::kInvalidArgument, db_path + " already holds campaign '" + existing->name +
                                             "'; continue it with `hpctune resume " + db_path +
                                             "` or choose another --db");
    }
    cfg = *options.config;
    if (options.seed) cfg.set_seed(*options.seed);
  }
  if (options.groups) cfg.resources.groups = *options.groups;

  if (!resuming) {
    HPCTUNE_ASSIGN(campaign_id, db.create_campaign(campaign_row(cfg, t0)));
    HPCTUNE_TRY(db.add_event(campaign_id, "campaign_started", 0, 0, -1, {{"groups", cfg.resources.groups}}, t0));
  }
  HPCTUNE_TRY(db.set_campaign_master(campaign_id, host_name(), getpid()));
  if (resuming) {
    HPCTUNE_TRY(db.set_campaign_state(campaign_id, "running", 0));
    HPCTUNE_TRY(db.add_event(campaign_id, "campaign_resumed", 0, 0, -1, {{"groups", cfg.resources.groups}}, t0));
    if (options.max_trials && *options.max_trials != cfg.max_trials) {
      // Kept in the store, so that a later plain `resume` runs to the new budget too.
      nlohmann::json cj = existing->config_json;
      if (!cj.contains("search") || !cj["search"].is_object()) cj["search"] = nlohmann::json::object();
      cj["search"]["max_trials"] = *options.max_trials;
      HPCTUNE_TRY(db.set_campaign_config_json(campaign_id, cj));
      HPCTUNE_TRY(db.add_event(campaign_id, "budget_changed", 0, 0, -1,
                               {{"max_trials", *options.max_trials}, {"was", cfg.max_trials}}, t0));
      log("budget: " + std::to_string(cfg.max_trials) + " -> " + std::to_string(*options.max_trials) + " trials");
      cfg.max_trials = *options.max_trials;
      // The one search stage runs again, to the new budget (a completed stage is otherwise never run again).
      HPCTUNE_ASSIGN(auto stages, db.stages(campaign_id));
      for (const auto& st : stages) HPCTUNE_TRY(db.set_stage_state(st.id, "interrupted", 0));
    }
    if (!cfg.warm_start.empty()) {
      // The searcher is rebuilt from the same warm-start trials, as in the first run (if the other
      // store has not changed since).
      HPCTUNE_ASSIGN(out.warm, load_warm_start(cfg.warm_start, cfg.space, cfg.objectives, db_path));
    }
  }
  return out;
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
    log("warning: the database " + c_.db_path + " is on " + fs +
        ", a network file system: SQLite's locks and its WAL's shared memory do not span nodes there, so a "
        "process on another node (a resume, a status) can corrupt it. Keep `storage:` on the batch host's local "
        "disk or a node-local path and copy the file back when the campaign ends (README: Storage on a cluster)");
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
      std::string failed_input;
      for (std::size_t i : stages_[k].inputs) {
        if (stages_[i].state == "failed" && failed_input.empty()) failed_input = stages_[i].name;
      }
      if (!failed_input.empty()) {
        HPCTUNE_TRY(fail_stage(k, "its input stage '" + failed_input + "' failed", now));
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
  if (auto s = db.commit(); !s.ok()) return fail(std::move(s).error(), now);
  failpoint_->point.pass("after-commit");
  // The trial source failed in this turn: recorded (event, log) and committed; the campaign fails.
  if (sched_->fatal()) return fail(*sched_->fatal(), now);
  return sched_->finished();
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
  const auto startup = std::chrono::milliseconds(static_cast<int64_t>(cfg.resources.startup_timeout_s * 1000));
  bool alive = false, all_late = true;
  std::vector<int64_t> late;
  for (auto& [id, g] : groups_) {
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
  const std::string stage_failures = failed_stages();
  const bool gave_up = !sched_->gave_up().empty();
  const char* final_state = sched_->interrupted()              ? "interrupted"
                            : gave_up || !stage_failures.empty() ? "failed"
                                                                 : "completed";
  HPCTUNE_TRY(db.begin());
  HPCTUNE_TRY(db.set_campaign_state(c_.campaign_id, final_state, t1));
  // Every stage that ran ends with the campaign (`status` reads each stage's state from the store);
  // a completed or failed one keeps its result or reason, a pending one stays pending for a resume.
  for (const HeldStage& st : stages_) {
    if (st.state == "running") {
      HPCTUNE_TRY(db.set_stage_state(st.id, final_state, t1, gave_up && !sched_->interrupted() ? sched_->gave_up() : ""));
    }
  }
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

// --- the driver ------------------------------------------------------------------------------

namespace {

// resources.gpus_per_rank, gpus, trials_per_gpu into the launcher's options; gpus: auto resolved
// here (nvidia-smi, with a deadline) for the local backend, which assigns the devices itself. A
// group that could never get its GPUs fails the campaign now, before any group waits for them.
Status place_gpus(const config::Resources& r, launch::GroupResources& out,
                  const std::function<void(const std::string&)>& log) {
  out.gpus_per_rank = r.gpus_per_rank;
  out.trials_per_gpu = r.trials_per_gpu;
  if (r.gpus_per_rank == 0 || r.backend != "local") return {};
  std::string found = "resources.gpus lists " + std::to_string(r.gpus ? r.gpus->size() : 0);
  if (r.gpus) {
    out.gpus = *r.gpus;
  } else {
    std::string why;
    out.gpus = launch::detect_gpus(std::chrono::seconds(10), &why);
    found = "resources.gpus: auto found " + (out.gpus.empty() ? "none (" + why + ")"
                                                               : std::to_string(out.gpus.size()) + " GPU(s): " +
                                                                     format_device_list(out.gpus));
    log(found);
  }
  const int64_t per_group = r.gpus_per_rank * r.ranks_data * r.ranks_model;
  launch::DeviceAllocator devices(out.gpus, r.trials_per_gpu, per_group);
  if (!devices.satisfiable().ok()) {
    return err(Errc::kConfig, "resources.gpus_per_rank: " + std::to_string(r.gpus_per_rank) + " GPU(s) per rank x " +
                                  std::to_string(r.ranks_data * r.ranks_model) + " rank(s) = " + std::to_string(per_group) +
                                  " GPUs per group, more than this node has (" + found + ")");
  }
  // How many groups hold their GPUs at once: the others wait until one of them ends.
  int64_t at_once = 0;
  while (at_once < r.groups && devices.acquire(at_once)) ++at_once;
  if (at_once < r.groups) {
    log("resources.groups: " + std::to_string(r.groups) + " groups, of which " + std::to_string(at_once) +
        " hold GPUs at once (" + std::to_string(out.gpus.size()) + " GPUs x trials_per_gpu " +
        std::to_string(r.trials_per_gpu) + ", " + std::to_string(per_group) + " per group); the others wait for one to end");
  }
  return {};
}

}  // namespace

Result<CampaignOutcome> run_master(const MasterOptions& options) {
  const bool resuming = !options.config.has_value();
  std::string db_path = options.db_path;
  if (db_path.empty() && options.config) db_path = options.config->storage;

  if (resuming && !fs::exists(db_path)) return err(Errc::kNotFound, "no campaign database at " + db_path);
  // A key directory others can read is refused before the store is opened, so nothing is recorded.
  const std::string key_dir = protocol::key_dir_for(db_path);
  HPCTUNE_TRY(protocol::check_key_dir(key_dir));
  // A new campaign that needs CURVE checks libzmq first too (a resumed one once its config is read).
  if (!resuming && transport_uses_curve(options.config->resources.security,
                                        options.bind.value_or(options.config->resources.bind))) {
    HPCTUNE_TRY(in_context(protocol::check_libzmq_for_curve(), "resources.security: the master's transport needs CURVE"));
  }
  // Backend slurm outside an allocation: said before anything is created (a resume, whose config
  // is in the store, checks once it has read it).
  if (!resuming && options.config->resources.backend == "slurm") {
    if (auto job = launch::slurm_allocation({}); !job.ok()) return std::move(job).error();
  }
  // A new campaign checks its warm-start store before creating anything; a resumed one once its
  // config has been read back (prepare_campaign).
  std::optional<WarmStart> warm;
  if (!resuming && !options.config->warm_start.empty()) {
    HPCTUNE_ASSIGN(warm, load_warm_start(options.config->warm_start, options.config->space,
                                         options.config->objectives, db_path));
  }
  // A new campaign creates its files with the modes of its storage_access; a resumed one's
  // database exists (its directories are created below, once its config has been read back).
  store::OpenOptions open_options;
  open_options.master_lock = true;
  if (!resuming) {
    HPCTUNE_ASSIGN(store::AccessModes modes, store::access_modes(options.config->storage_access));
    open_options.file_mode = modes.file;
  }
  HPCTUNE_ASSIGN(std::unique_ptr<store::Store> db, store::Store::open(db_path, open_options));
  const WallClock wall = WallClock::real();
  HPCTUNE_ASSIGN(PreparedCampaign campaign, prepare_campaign(options, *db, db_path, wall.unix_s));
  if (!resuming) campaign.warm = std::move(warm);
  const config::CampaignConfig& cfg = campaign.cfg;

  if (resuming && cfg.resources.backend == "slurm") {
    if (auto job = launch::slurm_allocation({}); !job.ok()) return std::move(job).error();
  }

  // Backend slurm: the compute nodes must reach the master, so the default private socket
  // becomes the batch host's own (slurm_default_bind); a port chosen at bind time either way.
  std::string bind = options.bind.value_or(cfg.resources.bind);
  // (tcp://127.0.0.1:* was the default before issue 21: a campaign recorded with it resumes the same.)
  if (!options.bind && cfg.resources.backend == "slurm" &&
      (bind == config::Resources{}.bind || bind == "tcp://127.0.0.1:*")) {
    bind = launch::slurm_default_bind();
  }
  // The campaign secret: only in this process's memory (a resumed master draws a new one; it
  // relaunches every group anyway). Each launch gets it with its own token (launch_credential).
  HPCTUNE_ASSIGN(const std::string secret, protocol::random_hex(16));
  // resources.security: CURVE with the campaign's keys (created on the first run, reused on resume)
  // everywhere but the private ipc socket (the default, which only this user can reach), unless
  // the config says none: then ZeroMQ PLAIN with the campaign secret, so that a connection without
  // it never becomes a peer (common/endpoint.h, protocol/transport.h).
  protocol::TransportOptions transport = options.transport;
  std::map<std::string, std::string> worker_env;
  if (transport_uses_curve(cfg.resources.security, bind)) {
    HPCTUNE_TRY(in_context(protocol::check_libzmq_for_curve(), "resources.security: the master's transport needs CURVE"));
    HPCTUNE_ASSIGN(protocol::CampaignKeys keys, protocol::load_or_create_keys(key_dir));
    protocol::use_curve_server(transport, keys);
    worker_env = protocol::worker_key_environment(keys);
    if (options.log) options.log("transport: CURVE encryption, only the campaign's workers admitted (keys in " + key_dir + ")");
  } else if (!private_ipc_endpoint(bind)) {
    transport.security = protocol::TransportOptions::Security::kPlain;
    transport.plain_secret = secret;
    worker_env[protocol::kPlainAuthEnv] = "1";
    if (options.warn) options.warn(network_bind_warning(bind));
  }
  // One TCP connection per group, plus ZeroMQ's and SQLite's own descriptors (and, with the local
  // backend, each group's log): past the soft limit of open files (often 1024) new connections
  // would be refused. Raised to the hard limit; below what the groups need, said once.
  const int64_t open_files = raise_open_files_limit();
  if (const int64_t wanted = 2 * cfg.resources.groups + 64; open_files >= 0 && open_files < wanted) {
    log_line(options, "warning: the limit of open files is " + std::to_string(open_files) + ", below the " +
                          std::to_string(wanted) + " that " + std::to_string(cfg.resources.groups) +
                          " trainer groups may need; raise the hard limit (ulimit -Hn, limits.conf; README: limits)");
  }
  HPCTUNE_ASSIGN(std::unique_ptr<protocol::ServerTransport> server, protocol::bind_zmq(bind, transport));

  // The trial directory holds the groups' logs, the trials' parameters, checkpoints and output:
  // with storage_access owner (the default) it is 0700, so nothing below it is reachable by other
  // users whatever modes the trainers give their files.
  const std::string run_dir = db_path + ".trials";
  HPCTUNE_ASSIGN(store::AccessModes modes, store::access_modes(cfg.storage_access));
  HPCTUNE_TRY(make_dir(run_dir, modes.dir));
  HPCTUNE_TRY(make_dir(run_dir + "/logs", modes.dir));
  campaign.run_dir = fs::absolute(run_dir).string();

  launch::LocalLauncherOptions lopt;
  lopt.program = options.worker_program;
  lopt.master_endpoint = server->endpoint();
  lopt.log_dir = run_dir + "/logs";
  lopt.resources.ranks_data = cfg.resources.ranks_data;
  lopt.resources.ranks_model = cfg.resources.ranks_model;
  lopt.resources.threads = cfg.resources.threads;
  lopt.resources.trainer_starts_ranks = config::trainer_starts_ranks(cfg.trainer.value("kind", std::string()));
  // Names the campaign in `ps` output, so a user (and the orphan tests) can tell whose worker it is.
  lopt.extra_args = {"--campaign", fs::absolute(db_path).string()};
  // The workers' CURVE keys: in the environment of every group (never on a command line).
  for (auto& [name, value] : worker_env) lopt.environment[name] = std::move(value);
  HPCTUNE_TRY(place_gpus(cfg.resources, lopt.resources, [&](const std::string& line) { log_line(options, line); }));
  const config::SlurmOptions& so = cfg.resources.slurm;
  lopt.slurm.ranks_per_node = so.ranks_per_node;
  lopt.slurm.launch = so.launch;
  lopt.slurm.mpi = so.mpi;
  lopt.slurm.gres = so.gres;
  lopt.slurm.gpus_per_task = so.gpus_per_task;
  lopt.slurm.gpus_per_rank = so.gpus_per_rank;
  lopt.slurm.cpus_per_task = so.cpus_per_task;
  lopt.slurm.setup = so.setup;
  HPCTUNE_ASSIGN(std::unique_ptr<launch::Launcher> launcher, launch::make_launcher(cfg.resources.backend, lopt));

  MasterParts parts;
  parts.transport = server.get();
  parts.store = db.get();
  parts.launcher = launcher.get();
  parts.wall = wall;
  parts.log_dir = lopt.log_dir;
  parts.log = options.log;
  parts.failpoint = options.failpoint;
  parts.failpoint_hit = options.failpoint_hit;
  parts.make_stage = options.make_stage;
  parts.master_incarnation = make_incarnation();
  parts.secret = secret;

  // What the loop below needs of the config: `campaign` (and `cfg` with it) moves into the master.
  const bool slurm_backend = cfg.resources.backend == "slurm";
  const config::SlurmOptions slurm = cfg.resources.slurm;
  Master master(std::move(campaign), std::move(parts));
  const auto start = Clock::now();
  HPCTUNE_TRY(master.start(start));
  auto last_progress = Clock::time_point{};
  bool preempted = false;
  // Backend slurm: the allocation's time limit, as SLURM says now (asked again every minute: a
  // limit may be changed). The master stops as on SIGUSR1 resources.slurm.signal_before ahead of
  // it, in case the warning signal never comes (`hpctune run` inside salloc, a script without
  // --signal).
  const char* job = std::getenv("SLURM_JOB_ID");
  const bool watch_time = slurm_backend && job && *job;
  std::optional<Clock::time_point> stop_by;
  auto next_time_check = Clock::now();
  // Connections the transport refused at the handshake: one line per 10 s at most, with the count.
  int64_t refused_logged = 0;
  auto next_refused_line = Clock::now();
  while (true) {
    if (Clock::now() >= next_refused_line) {
      next_refused_line = Clock::now() + std::chrono::seconds(10);
      if (const int64_t refused = server->refused_connections(); refused > refused_logged) {
        log_line(options, "refused " + std::to_string(refused - refused_logged) +
                              " connection(s) that did not authenticate (" + std::to_string(refused) + " so far)");
        refused_logged = refused;
      }
    }
    if (watch_time && Clock::now() >= next_time_check) {
      next_time_check = Clock::now() + std::chrono::seconds(60);
      if (auto left = launch::slurm_time_left(job)) {
        stop_by = Clock::now() + std::chrono::milliseconds(
                                     static_cast<int64_t>((*left - slurm.signal_before_s) * 1000));
      }
    }
    const bool out_of_time = stop_by && Clock::now() >= *stop_by;
    if (((options.preempt && options.preempt->load() > 0) || out_of_time) && !master.interrupted()) {
      preempted = true;
      if (options.log) {
        options.log(out_of_time ? "the allocation's time limit is less than resources.slurm.signal_before away"
                                : "SIGUSR1: the allocation ends soon (pre-emption or its time limit)");
      }
      HPCTUNE_TRY(master.interrupt(Clock::now()));
    }
    if (options.interrupt && options.interrupt->load() > 0 && !master.interrupted()) {
      HPCTUNE_TRY(master.interrupt(Clock::now()));
    }
    if (master.scheduler().finished()) break;
    HPCTUNE_TRY(in_context(master.wait(master.poll_interval()), "while waiting for workers"));
    const auto now = Clock::now();
    HPCTUNE_ASSIGN(bool finished, master.step(now));
    if (options.progress && now - last_progress >= std::chrono::milliseconds(100)) {
      last_progress = now;
      options.progress(master.progress(), std::chrono::duration<double>(now - start).count());
    }
    if (finished) break;
  }
  HPCTUNE_ASSIGN(CampaignOutcome out, master.stop(Clock::now()));
  if (options.progress) options.progress(out.progress, out.elapsed_s);
  out.preempted = preempted && out.interrupted;
  if (out.preempted && slurm.requeue) {
    if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) out.requeue_job = job;
  }
  return out;
}

}  // namespace hpctune::scheduler
