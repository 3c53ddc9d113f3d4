#include "scheduler/master.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <random>
#include <set>

#include "common/clock.h"
#include "common/limits.h"
#include "common/system.h"
#include "launch/launcher.h"
#include "protocol/messages.h"
#include "store/store.h"
#include "protocol/transport.h"

static_assert(hpctune::kMaxMessageBytes == hpctune::protocol::kMaxMessageBytes,
              "common/limits.h and the protocol must agree on the message limit (config.cpp checks against it)");

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
// directory keeps the modes its owner gave it.
Status make_dir(const std::string& path, unsigned mode) {
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    if (errno == EEXIST && fs::is_directory(path)) return {};
    return err(Errc::kIo, "cannot create " + path + ": " + std::strerror(errno));
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return err(Errc::kIo, "cannot set the permissions of " + path + ": " + std::strerror(errno));
  }
  return {};
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

Result<CampaignOutcome> run_master(const MasterOptions& options) {
  const bool resuming = !options.config.has_value();
  std::string db_path = options.db_path;
  if (db_path.empty() && options.config) db_path = options.config->storage;

  if (resuming && !fs::exists(db_path)) return err(Errc::kNotFound, "no campaign database at " + db_path);
  // A new campaign checks its warm-start store before creating anything; a resumed one once its
  // config has been read back.
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
  HPCTUNE_ASSIGN(auto existing, db->load_campaign());

  config::CampaignConfig cfg;
  int64_t campaign_id = 0;
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
    HPCTUNE_ASSIGN(auto so_far, db->trials(campaign_id));
    const auto recorded = static_cast<int64_t>(so_far.size());
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
    if (options.groups) cfg.resources.groups = *options.groups;
  }
  if (options.groups) cfg.resources.groups = *options.groups;

  const double t0 = unix_now();
  int64_t stage_id = 0;
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  if (!resuming) {
    HPCTUNE_ASSIGN(campaign_id, db->create_campaign(campaign_row(cfg, t0)));
    HPCTUNE_ASSIGN(stage_id, db->create_stage(campaign_id, "search", "search", nlohmann::json::object(), t0));
    HPCTUNE_TRY(db->add_event(campaign_id, "campaign_started", 0, 0, -1, {{"groups", cfg.resources.groups}}, t0));
  }
  HPCTUNE_TRY(db->set_campaign_master(campaign_id, host_name(), getpid()));
  if (resuming) {
    HPCTUNE_ASSIGN(auto stages, db->stages(campaign_id));
    for (const auto& st : stages) {
      if (st.kind == "search") stage_id = st.id;
    }
    HPCTUNE_TRY(db->set_campaign_state(campaign_id, "running", 0));
    if (stage_id > 0) HPCTUNE_TRY(db->set_stage_state(stage_id, "running", 0));
    HPCTUNE_TRY(db->add_event(campaign_id, "campaign_resumed", 0, 0, -1, {{"groups", cfg.resources.groups}}, t0));
    if (options.max_trials && *options.max_trials != cfg.max_trials) {
      // Kept in the store, so that a later plain `resume` runs to the new budget too.
      nlohmann::json cj = existing->config_json;
      if (!cj.contains("search") || !cj["search"].is_object()) cj["search"] = nlohmann::json::object();
      cj["search"]["max_trials"] = *options.max_trials;
      HPCTUNE_TRY(db->set_campaign_config_json(campaign_id, cj));
      HPCTUNE_TRY(db->add_event(campaign_id, "budget_changed", 0, 0, -1,
                                {{"max_trials", *options.max_trials}, {"was", cfg.max_trials}}, t0));
      log("budget: " + std::to_string(cfg.max_trials) + " -> " + std::to_string(*options.max_trials) + " trials");
      cfg.max_trials = *options.max_trials;
    }
    if (!cfg.warm_start.empty()) {
      // The searcher is rebuilt from the same warm-start trials, as in the first run (if the other
      // store has not changed since).
      HPCTUNE_ASSIGN(warm, load_warm_start(cfg.warm_start, cfg.space, cfg.objectives, db_path));
    }
  }

  search::SearchSpec spec = cfg.search_spec();
  if (warm) {
    spec.warm_start = warm->observations;
    HPCTUNE_TRY(db->add_event(campaign_id, "warm_start", 0, 0, -1, warm->summary(), t0));
    log("warm start from " + warm->path + ": " + std::to_string(warm->observations.size()) + " of " +
        std::to_string(warm->read) + " trials loaded, " + std::to_string(warm->skipped_total()) + " skipped");
  }
  HPCTUNE_ASSIGN(std::unique_ptr<search::Searcher> searcher, search::make_searcher(spec));
  HPCTUNE_ASSIGN(std::unique_ptr<search::EarlyStopper> stopper, search::make_stopper(cfg.stopper_spec()));

  HPCTUNE_ASSIGN(std::unique_ptr<protocol::ServerTransport> server,
                 protocol::bind_zmq(options.bind.value_or(cfg.resources.bind), options.transport));

  // The trial directory holds the groups' logs, the trials' parameters, checkpoints and output:
  // with storage_access owner (the default) it is 0700, so nothing below it is reachable by other
  // users whatever modes the trainers give their files.
  const std::string run_dir = db_path + ".trials";
  HPCTUNE_ASSIGN(store::AccessModes modes, store::access_modes(cfg.storage_access));
  HPCTUNE_TRY(make_dir(run_dir, modes.dir));
  HPCTUNE_TRY(make_dir(run_dir + "/logs", modes.dir));

  SchedulerOptions sopt = scheduler_options(cfg, campaign_id, stage_id);
  sopt.trials_dir = fs::absolute(run_dir).string();
  sopt.master_incarnation = make_incarnation();
  // The campaign secret: only in this process's memory (a resumed master draws a new one; it
  // relaunches every group anyway). Each launch gets it with its own token (launch_credential).
  HPCTUNE_ASSIGN(sopt.secret, protocol::random_hex(16));

  Scheduler sched(sopt, *server, *db, *searcher, *stopper);
  sched.set_log(log);
  FailPoint failpoint(options.failpoint, options.failpoint_hit);
  sched.set_failpoint([&](const char* name) { failpoint.pass(name); });

  const auto start = Clock::now();
  HPCTUNE_TRY(db->begin());
  HPCTUNE_TRY(sched.restore(start));
  HPCTUNE_TRY(db->commit());

  launch::LocalLauncherOptions lopt;
  lopt.program = options.worker_program;
  lopt.master_endpoint = server->endpoint();
  lopt.log_dir = run_dir + "/logs";
  lopt.resources.ranks_data = cfg.resources.ranks_data;
  lopt.resources.ranks_model = cfg.resources.ranks_model;
  lopt.resources.threads = cfg.resources.threads;
  lopt.resources.trainer_starts_ranks = cfg.trainer.value("kind", std::string()) == "command";
  // Names the campaign in `ps` output, so a user (and the orphan tests) can tell whose worker it is.
  lopt.extra_args = {"--campaign", fs::absolute(db_path).string()};
  lopt.credential = [&sched](int64_t group) { return sched.launch_credential(group); };
  std::unique_ptr<launch::Launcher> launcher = launch::make_local_launcher(lopt);
  const int64_t groups = cfg.resources.groups;
  for (int64_t g = 0; g < groups; ++g) HPCTUNE_TRY(launcher->start(g));
  log("campaign '" + cfg.name + "': " + std::to_string(groups) + " trainer group(s), master at " + server->endpoint() +
      ", database " + db_path);
  if (auto startup = config::model_startup(cfg)) log(startup->text);

  std::map<int64_t, int64_t> restarts;
  std::set<int64_t> died_before_hello;
  auto fail = [&](Error e) -> Result<CampaignOutcome> {
    // The campaign fails with `e`; a store that also refuses these writes is said in the log (the
    // state then stays `running`, and resume treats it as a crashed master).
    if (auto s = db->rollback(); !s.ok()) log("could not roll back the open transaction: " + s.error().to_string());
    sched.shutdown_workers("master failed");
    launcher->stop_all(std::chrono::milliseconds(2000));
    if (auto s = db->set_campaign_state(campaign_id, "failed", unix_now()); !s.ok()) {
      log("could not record the campaign as failed: " + s.error().to_string());
    }
    if (stage_id > 0) {
      if (auto s = db->set_stage_state(stage_id, "failed", unix_now()); !s.ok()) {
        log("could not record the stage as failed: " + s.error().to_string());
      }
    }
    return e;
  };

  constexpr int kMaxBatch = 512;
  const auto poll_interval = std::chrono::milliseconds(std::clamp<int64_t>(sopt.heartbeat_interval.count() / 4, 5, 50));
  const auto startup_deadline =
      start + std::chrono::milliseconds(static_cast<int64_t>(cfg.resources.startup_timeout_s * 1000));
  auto last_tick = Clock::now();
  auto last_progress = Clock::time_point{};
  bool any_registered = false;

  while (true) {
    if (options.interrupt && options.interrupt->load() > 0 && !sched.interrupted()) {
      log("interrupted: stopping dispatch; running trials are recorded as interrupted");
      HPCTUNE_TRY(db->begin());
      auto s = sched.interrupt(Clock::now());
      if (!s.ok()) return fail(std::move(s).error());
      HPCTUNE_TRY(db->commit());
    }
    if (sched.finished()) break;

    auto first = server->recv(poll_interval);
    if (!first.ok()) return fail(std::move(first).error().with_context("while waiting for workers"));
    if (auto s = db->begin(); !s.ok()) return fail(std::move(s).error());
    if (first.value()) {
      int n = 0;
      std::optional<protocol::Envelope> env = std::move(*first.value());
      while (env) {
        auto s = sched.handle(env->peer, env->bytes, Clock::now());
        if (!s.ok()) return fail(std::move(s).error());
        if (++n >= kMaxBatch) break;
        auto next = server->recv(std::chrono::milliseconds(0));
        if (!next.ok()) return fail(std::move(next).error());
        env = std::move(next.value());
      }
    }
    const auto now = Clock::now();
    if (now - last_tick >= poll_interval) {
      last_tick = now;
      if (auto s = sched.tick(now); !s.ok()) return fail(std::move(s).error());
      for (int64_t g : sched.take_silent_groups()) {
        log("group " + std::to_string(g) + " is killed: it was silent past the heartbeat timeout");
        launcher->kill(g);
      }
      for (const launch::GroupExit& e : launcher->poll_exits()) {
        const bool registered = sched.group_ever_registered(e.group);
        log("group " + std::to_string(e.group) + " exited: " + e.how);
        if (auto s = sched.on_group_exit(e.group, "process " + e.how, now); !s.ok()) return fail(std::move(s).error());
        if (auto s = db->add_event(campaign_id, "group_exited", 0, 0, e.group, {{"how", e.how}}, unix_now()); !s.ok()) {
          return fail(std::move(s).error().with_context("while recording that group " + std::to_string(e.group) + " exited"));
        }
        if (!registered) died_before_hello.insert(e.group);
        if (!registered && static_cast<int64_t>(died_before_hello.size()) == groups && !any_registered) {
          return fail(err(Errc::kFailed, "every trainer group (" + std::to_string(groups) +
                                             ") exited at start-up; the last one: " + e.how +
                                             (e.log_tail.empty() ? "" : "\n--- its log (" + lopt.log_dir + ") ---\n" + e.log_tail)));
        }
        if (sched.finished() || sched.interrupted()) continue;
        if (restarts[e.group] >= cfg.resources.max_group_restarts) {
          log("group " + std::to_string(e.group) + " is not restarted: it used its " +
              std::to_string(cfg.resources.max_group_restarts) + " restarts");
          continue;
        }
        ++restarts[e.group];
        if (auto s = launcher->start(e.group); !s.ok()) return fail(std::move(s).error());
        if (auto s = db->add_event(campaign_id, "group_restarted", 0, 0, e.group, {{"restart", restarts[e.group]}},
                                   unix_now());
            !s.ok()) {
          return fail(std::move(s).error().with_context("while recording the restart of group " + std::to_string(e.group)));
        }
      }
      if (launcher->pids().empty() && !sched.finished()) {
        if (auto s = db->commit(); !s.ok()) return fail(std::move(s).error());
        return fail(err(Errc::kFailed, "every trainer group has exited and none may be restarted (max_group_restarts = " +
                                           std::to_string(cfg.resources.max_group_restarts) + ")"));
      }
      if (!any_registered) {
        for (int64_t g = 0; g < groups; ++g) any_registered = any_registered || sched.group_ever_registered(g);
        if (!any_registered && now > startup_deadline) {
          return fail(err(Errc::kTimeout, "no trainer group connected within resources.startup_timeout (" +
                                              std::to_string(cfg.resources.startup_timeout_s) + " s); see " + lopt.log_dir));
        }
      }
    }
    if (auto s = db->commit(); !s.ok()) return fail(std::move(s).error());
    failpoint.pass("after-commit");
    if (options.progress && now - last_progress >= std::chrono::milliseconds(100)) {
      last_progress = now;
      options.progress(sched.progress(), std::chrono::duration<double>(now - start).count());
    }
  }

  sched.shutdown_workers(sched.interrupted() ? "interrupted" : "campaign complete");
  launcher->stop_all(std::chrono::milliseconds(3000));
  const double t1 = unix_now();
  // The algorithm's own record (generations, Pareto front, best) for status and the dashboard.
  HPCTUNE_TRY(sched.save_search_state(Clock::now()));
  // Stopped by search.max_failures: recorded failed (a resume may try again).
  const char* final_state = sched.interrupted() ? "interrupted" : !sched.gave_up().empty() ? "failed" : "completed";
  HPCTUNE_TRY(db->set_campaign_state(campaign_id, final_state, t1));
  // The search stage ends with the campaign (`status` reads each stage's state from the store).
  if (stage_id > 0) HPCTUNE_TRY(db->set_stage_state(stage_id, final_state, t1));
  nlohmann::json detail = {{"seconds", t1 - t0}};
  if (!sched.gave_up().empty()) detail["reason"] = sched.gave_up();
  HPCTUNE_TRY(db->add_event(campaign_id, std::string("campaign_") + (sched.interrupted() ? "interrupted"
                                                                      : sched.gave_up().empty() ? "completed" : "stopped"),
                            0, 0, -1, detail, t1));

  CampaignOutcome out;
  out.campaign_id = campaign_id;
  out.name = cfg.name;
  out.db_path = db_path;
  out.interrupted = sched.interrupted();
  out.gave_up = sched.gave_up();
  out.progress = sched.progress();
  out.counters = sched.counters();
  out.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.progress) options.progress(out.progress, out.elapsed_s);
  return out;
}

}  // namespace hpctune::scheduler
