// `hpctune slurm submit`: a campaign's sbatch script (launch/slurm_script.h writes the text), its
// checks against the config (enough nodes for every group at once), and the submission itself
// (`sbatch --parsable`, with a deadline).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "common/system.h"
#include "config/config.h"
#include "config/trainer_kinds.h"
#include "launch/child_process.h"
#include "launch/slurm_launcher.h"
#include "launch/slurm_script.h"
#include "store/store.h"

namespace hpctune::cli {

namespace {

// How long sbatch may take: it retries an unreachable slurmctld for a while on its own.
constexpr auto kSbatchLimit = std::chrono::seconds(120);

// The nodes the busiest part of the campaign needs (the top level, or a stage with resources of
// its own), and a sentence saying why, for the usage error.
std::pair<int64_t, std::string> nodes_for(const config::CampaignConfig& cfg, bool het) {
  int64_t best = 0;
  std::string why;
  auto consider = [&](const config::Resources& r, const std::string& where) {
    const int64_t ranks = r.ranks_data * r.ranks_model;
    const int64_t per_node = cfg.resources.slurm.ranks_per_node;
    const int64_t n = launch::nodes_needed(r.groups, ranks, per_node, het);
    if (n <= best) return;
    best = n;
    why = where + std::to_string(r.groups) + " group(s) of " + std::to_string(ranks) + " rank(s) at " +
          std::to_string(per_node) + " rank(s) per node (resources.slurm.ranks_per_node) take " +
          std::to_string(launch::nodes_per_group(ranks, per_node)) + " node(s) each" +
          (het ? ", plus the master's own node (resources.slurm.master)" : "");
  };
  consider(cfg.resources, "the config's ");
  for (const auto& stage : cfg.stages) {
    if (stage.own) consider(stage.own->resources, "stage '" + stage.name + "': ");
  }
  return {best, why};
}


// The GPUs one node of the groups needs (the busiest part of the campaign: the top level, or a
// stage with resources of its own): each rank's GPUs times the ranks of a group on one node.
int64_t gpus_per_node(const config::CampaignConfig& cfg) {
  int64_t most = 0;
  auto consider = [&](const config::Resources& r) {
    launch::SlurmStepOptions so;
    so.gpus_per_rank = r.slurm.gpus_per_rank;
    so.gpus_per_task = r.slurm.gpus_per_task;
    const int64_t ranks_on_a_node = std::min(r.ranks_data * r.ranks_model, cfg.resources.slurm.ranks_per_node);
    most = std::max(most, launch::slurm_gpus_per_rank(so) * ranks_on_a_node);
  };
  consider(cfg.resources);
  for (const auto& stage : cfg.stages) {
    if (stage.own) consider(stage.own->resources);
  }
  return most;
}

// The GPU options of the groups' steps, as the master will give them (launch/slurm_launcher.h).
std::vector<std::string> step_gpu_options(const config::CampaignConfig& cfg) {
  launch::LocalLauncherOptions o;
  o.resources.ranks_data = cfg.resources.ranks_data;
  o.resources.ranks_model = cfg.resources.ranks_model;
  o.resources.trainer_starts_ranks = config::trainer_starts_ranks(cfg.trainer.value("kind", std::string()));
  o.slurm.launch = cfg.resources.slurm.launch;
  o.slurm.gpus_per_rank = cfg.resources.slurm.gpus_per_rank;
  o.slurm.gpus_per_task = cfg.resources.slurm.gpus_per_task;
  return launch::slurm_gpu_options(o);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Runs `sbatch --parsable script` and returns the job id (its output is "id" or "id;cluster").
Result<std::string> submit(const std::string& script, const std::string& dir) {
  const std::string out_path = dir + "/sbatch.out", err_path = dir + "/sbatch.err";
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  launch::SpawnOptions o;
  o.argv = {"sbatch", "--parsable", script};
  o.stdout_path = out_path;
  o.stderr_path = err_path;
  auto child = launch::ChildProcess::spawn(o);
  if (!child.ok()) {
    return err(Errc::kUnavailable, "cannot run sbatch (is this a SLURM login node?): " + child.error().message());
  }
  auto status = child->wait_for(kSbatchLimit);
  if (!status) {
    child->terminate(std::chrono::seconds(2));
    return err(Errc::kTimeout, "sbatch did not answer within " + std::to_string(kSbatchLimit.count()) + " s");
  }
  const std::string errors = trimmed(read_text(err_path));
  if (!status->success()) {
    return err(Errc::kUnavailable, "sbatch failed (" + status->describe() + ")" + (errors.empty() ? "" : ": " + errors));
  }
  std::string id = trimmed(read_text(out_path));
  id = id.substr(0, id.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    return err(Errc::kUnavailable, "sbatch printed no job id ('" + id + "')" + (errors.empty() ? "" : ": " + errors));
  }
  return id;
}

// A job for an existing database resumes its campaign; one that is already completed has nothing
// left to do (the job would fail at once), so it is refused here with the way to extend it.
Status check_existing_db(const std::string& db_path) {
  std::error_code ec;
  if (!std::filesystem::exists(db_path, ec)) return {};
  HPCTUNE_ASSIGN(auto store, store::Store::open_readonly(db_path));
  HPCTUNE_ASSIGN(auto campaign, store->load_campaign());
  if (campaign && campaign->state == "completed") {
    return err(Errc::kUsage, "campaign '" + campaign->name + "' in " + db_path +
                                 " is already completed: a job would have nothing to do (extend it with `hpctune "
                                 "resume " + db_path + " --max-trials N`, or give another --db)");
  }
  return {};
}

}  // namespace

Status cmd_slurm_submit(const SlurmSubmitArgs& args) {
  // Submitted from a login node: its trials read their files on the allocation's nodes (the job's
  // own `run` judges them there).
  HPCTUNE_ASSIGN(auto cfg, config::load_config(args.config, {.local_files = false}));
  const config::SlurmOptions& so = cfg.resources.slurm;

  launch::BatchScriptSpec spec;
  spec.job_name = cfg.name;
  spec.nodes = args.nodes;
  spec.time = args.time;
  spec.partition = args.partition.value_or(so.partition);
  spec.account = args.account.value_or(so.account);
  spec.qos = args.qos.value_or(so.qos);
  spec.constraint = so.constraint;
  spec.gres = so.gres;
  spec.gpus_per_node = gpus_per_node(cfg);
  spec.step_gpu_options = step_gpu_options(cfg);
  spec.master_partition = so.master_partition;
  spec.master_constraint = so.master_constraint;
  spec.setup = so.setup;
  spec.signal_before_s = static_cast<int64_t>(std::ceil(so.signal_before_s));
  spec.requeue = so.requeue;
  spec.config_path = args.config;
  spec.db_path = args.db.empty() ? cfg.storage : args.db;
  spec.log_dir = launch::slurm_log_dir(spec.db_path);
  if (args.program.empty()) {
    auto self = launch::self_program();
    if (!self.ok()) return std::move(self).error().with_context("give --program");
    spec.program = *self;
  } else {
    spec.program = args.program;
  }
  for (const auto& [flag, value] : {std::pair<const char*, const std::optional<std::string>*>{"--partition", &args.partition},
                                    {"--account", &args.account}, {"--qos", &args.qos}}) {
    if (!*value) continue;
    if (auto problem = launch::sbatch_value_problem(**value)) return err(Errc::kUsage, std::string(flag) + ": " + *problem);
  }
  HPCTUNE_TRY(launch::check_slurm_time(args.time));
  const auto [needed, why] = nodes_for(cfg, launch::is_heterogeneous(spec));
  if (args.nodes < needed) {
    return err(Errc::kUsage, "--nodes " + std::to_string(args.nodes) + " is too few: " + why + ", " +
                                 std::to_string(needed) + " node(s) in all");
  }
  HPCTUNE_ASSIGN(auto script, launch::batch_script(spec));
  HPCTUNE_TRY(check_existing_db(spec.db_path));
  // Said now, not only in the job's output hours later: the master will warn at every start too.
  if (const std::string fs = network_filesystem(spec.db_path); !fs.empty()) {
    std::fprintf(stderr,
                 "hpctune slurm submit: warning: the database %s is on %s, a network file system: SQLite's locks "
                 "may not span nodes there (README: Storage on a cluster); give --db a path on the batch host's "
                 "local disk or a node-local path if your site has one that outlives the job\n",
                 spec.db_path.c_str(), fs.c_str());
  }
  if (args.dry_run) {
    std::fputs(script.c_str(), stdout);
    return {};
  }

  std::error_code ec;
  std::filesystem::create_directories(spec.log_dir, ec);
  if (ec) return err(Errc::kIo, "cannot create " + spec.log_dir + ": " + ec.message());
  const std::string script_path = spec.log_dir + "/job.sh";
  HPCTUNE_TRY(write_file_atomically(script_path, script));
  ::chmod(script_path.c_str(), 0700);
  HPCTUNE_ASSIGN(auto job_id, submit(script_path, spec.log_dir));
  std::fprintf(stderr, "hpctune slurm submit: job %s (script %s; its output goes to %s/slurm-%s.out)%s\n",
               job_id.c_str(), script_path.c_str(), spec.log_dir.c_str(), job_id.c_str(),
               std::filesystem::exists(spec.db_path) ? "; the database exists: the job resumes its campaign" : "");
  std::printf("%s\n", job_id.c_str());
  return {};
}

}  // namespace hpctune::cli
