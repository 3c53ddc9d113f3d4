#include "scheduler/campaign_preparation.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/system.h"
#include "config/settings.h"
#include "scheduler/master.h"

namespace hpctune::scheduler {
namespace {

namespace fs = std::filesystem;

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

// An integer setting that campaigns.config_json keeps for resume (the groups of the first run, a
// budget extended by `resume --max-trials`), checked against its declaration as the config's own
// value is: the database file may have been edited or crafted (resources.groups: 100000 would
// start that many trainer groups). The store has checked its type.
Result<std::optional<int64_t>> stored_setting(const nlohmann::json& cj, const char* section, const char* key,
                                              const std::string& db_path) {
  if (!cj.is_object() || !cj.contains(section) || !cj[section].is_object() || !cj[section].contains(key)) {
    return std::optional<int64_t>();
  }
  const std::string path = std::string(section) + "." + key;
  const auto decls = config::find_settings(path);
  if (decls.empty()) return err(Errc::kInternal, "no declaration of " + path);
  auto checked = config::check_value(*decls.front(), cj[section][key]);
  if (!checked.ok()) {
    return err(Errc::kIo, db_path + ": column campaigns.config_json at " + path + ": " + checked.error().message() +
                              " (the file was edited, damaged or crafted)");
  }
  return std::optional<int64_t>(checked.value().get<int64_t>());
}

// Step 4: the campaign resolved against the store, nothing written yet.
struct Resolved {
  PreparedCampaign campaign;
  std::optional<store::CampaignRow> existing;
};

Result<Resolved> resolve_campaign(const MasterOptions& options, store::Store& db, const std::string& db_path) {
  const bool resuming = !options.config.has_value();
  Resolved r;
  HPCTUNE_ASSIGN(r.existing, db.load_campaign());
  const std::optional<store::CampaignRow>& existing = r.existing;
  PreparedCampaign& out = r.campaign;
  out.resuming = resuming;
  out.db_path = db_path;
  config::CampaignConfig& cfg = out.cfg;
  if (resuming) {
    if (!existing) return err(Errc::kNotFound, db_path + " holds no campaign to resume");
    auto parsed = config::parse_config(existing->config_text, existing->config_source);
    if (!parsed.ok()) return std::move(parsed).error().with_context("while re-reading the config stored in " + db_path);
    cfg = std::move(parsed).value();
    cfg.set_seed(existing->seed);
    const auto& cj = existing->config_json;
    HPCTUNE_ASSIGN(auto groups, stored_setting(cj, "resources", "groups", db_path));
    if (groups) cfg.resources.groups = *groups;
    // A budget extended by an earlier `resume --max-trials` (the config text keeps the first one).
    HPCTUNE_ASSIGN(auto max_trials, stored_setting(cj, "search", "max_trials", db_path));
    if (max_trials) cfg.max_trials = *max_trials;
    out.campaign_id = existing->id;
    HPCTUNE_ASSIGN(auto so_far, db.trials(out.campaign_id));
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
  return r;
}

// Step 6: the (re)start recorded at t0.
Status record_campaign_start(const MasterOptions& options, store::Store& db, Resolved& r, double t0) {
  PreparedCampaign& out = r.campaign;
  config::CampaignConfig& cfg = out.cfg;
  int64_t& campaign_id = out.campaign_id;
  if (!out.resuming) {
    HPCTUNE_ASSIGN(campaign_id, db.create_campaign(campaign_row(cfg, t0)));
    HPCTUNE_TRY(db.add_event(campaign_id, "campaign_started", 0, 0, -1, {{"groups", cfg.resources.groups}}, t0));
  }
  HPCTUNE_TRY(db.set_campaign_master(campaign_id, host_name(), getpid()));
  if (!out.resuming) return {};
  HPCTUNE_TRY(db.set_campaign_state(campaign_id, "running", 0));
  HPCTUNE_TRY(db.add_event(campaign_id, "campaign_resumed", 0, 0, -1, {{"groups", cfg.resources.groups}}, t0));
  if (options.max_trials && *options.max_trials != cfg.max_trials) {
    // Kept in the store, so that a later plain `resume` runs to the new budget too.
    nlohmann::json cj = r.existing->config_json;
    if (!cj.contains("search") || !cj["search"].is_object()) cj["search"] = nlohmann::json::object();
    cj["search"]["max_trials"] = *options.max_trials;
    HPCTUNE_TRY(db.set_campaign_config_json(campaign_id, cj));
    HPCTUNE_TRY(db.add_event(campaign_id, "budget_changed", 0, 0, -1,
                             {{"max_trials", *options.max_trials}, {"was", cfg.max_trials}}, t0));
    if (options.log) {
      options.log("budget: " + std::to_string(cfg.max_trials) + " -> " + std::to_string(*options.max_trials) + " trials");
    }
    cfg.max_trials = *options.max_trials;
    // The one search stage runs again, to the new budget (a completed stage is otherwise never run again).
    HPCTUNE_ASSIGN(auto stages, db.stages(campaign_id));
    for (const auto& st : stages) HPCTUNE_TRY(db.set_stage_state(st.id, "interrupted", 0));
  }
  if (!cfg.warm_start.empty()) {
    // The searcher is rebuilt from the same warm-start trials, as in the first run (if the other
    // store has not changed since).
    HPCTUNE_ASSIGN(out.warm, load_warm_start(cfg.warm_start, cfg.space, cfg.objectives, out.db_path));
  }
  return {};
}

}  // namespace

std::string campaign_db_path(const MasterOptions& options) {
  if (options.db_path.empty() && options.config) return options.config->storage;
  return options.db_path;
}

Result<CampaignInStore> prepare_campaign(const MasterOptions& options, double t, const CampaignPreflight& preflight) {
  const bool resuming = !options.config.has_value();
  const std::string db_path = campaign_db_path(options);
  if (resuming && !fs::exists(db_path)) return err(Errc::kNotFound, "no campaign database at " + db_path);
  std::optional<WarmStart> warm;
  store::OpenOptions open_options;
  open_options.master_lock = true;
  if (!resuming) {
    if (preflight) HPCTUNE_TRY(preflight(*options.config));
    // A new campaign checks its warm-start store before creating anything; a resumed one once its
    // config has been read back (record_campaign_start).
    if (!options.config->warm_start.empty()) {
      HPCTUNE_ASSIGN(warm, load_warm_start(options.config->warm_start, options.config->space,
                                           options.config->objectives, db_path));
    }
    // A new campaign creates its files with the modes of its storage_access; a resumed one's exist.
    HPCTUNE_ASSIGN(store::AccessModes modes, store::access_modes(options.config->storage_access));
    open_options.file_mode = modes.file;
  }
  CampaignInStore out;
  HPCTUNE_ASSIGN(out.store, store::Store::open(db_path, open_options));
  HPCTUNE_ASSIGN(Resolved r, resolve_campaign(options, *out.store, db_path));
  if (resuming && preflight) HPCTUNE_TRY(preflight(r.campaign.cfg));
  HPCTUNE_TRY(record_campaign_start(options, *out.store, r, t));
  out.campaign = std::move(r.campaign);
  if (!resuming) out.campaign.warm = std::move(warm);
  return out;
}

Result<PreparedCampaign> prepare_campaign_in(const MasterOptions& options, store::Store& db, const std::string& db_path,
                                             double t) {
  HPCTUNE_ASSIGN(Resolved r, resolve_campaign(options, db, db_path));
  HPCTUNE_TRY(record_campaign_start(options, db, r, t));
  return std::move(r.campaign);
}

Status make_trial_directories(PreparedCampaign& campaign) {
  // The trial directory holds the groups' logs, the trials' parameters, checkpoints and output:
  // with storage_access owner (the default) it is 0700, so nothing below it is reachable by other
  // users whatever modes the trainers give their files.
  const std::string run_dir = campaign.db_path + ".trials";
  HPCTUNE_ASSIGN(store::AccessModes modes, store::access_modes(campaign.cfg.storage_access));
  HPCTUNE_TRY(make_dir(run_dir, modes.dir));
  HPCTUNE_TRY(make_dir(run_dir + "/logs", modes.dir));
  campaign.run_dir = fs::absolute(run_dir).string();
  return {};
}

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

}  // namespace hpctune::scheduler
