// hpctune: the command line. This is an edge: errors that travelled up as values become an exit
// code and one message here (0 ok, 2 usage/config, 1 run-time failure, 130 after Ctrl-C).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "scheduler/config.h"

namespace {

std::atomic<int> g_interrupts{0};

// First Ctrl-C (or SIGTERM): the master stops dispatch, records running trials as interrupted and
// exits 130. A second Ctrl-C exits at once; the groups die with us (PR_SET_PDEATHSIG).
void on_signal(int sig) {
  if (g_interrupts.fetch_add(1) >= 1 && sig == SIGINT) _exit(hpctune::cli::kExitInterrupted);
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int report(const hpctune::Status& status, const char* what) {
  if (status.ok()) return hpctune::cli::kExitOk;
  std::fflush(stdout);
  std::fprintf(stderr, "hpctune %s: error: %s\n", what, status.error().to_string().c_str());
  return hpctune::cli::exit_code_for(status.error());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hpctune::cli;
  CLI::App app{"hpctune: hyperparameter search, ensembles and transfer learning on HPC clusters"};
  app.set_version_flag("--version", std::string("hpctune ") + HPCTUNE_VERSION);
  app.require_subcommand(1);

  RunArgs run;
  int64_t groups = 0;
  uint64_t seed = 0;
  auto* run_cmd = app.add_subcommand("run", "Run a campaign described by a YAML sweep config");
  run_cmd->add_option("config", run.config, "The sweep config (YAML)")->required()->check(CLI::ExistingFile);
  run_cmd->add_option("--db", run.db, "The SQLite database (default: the config's `storage`)");
  auto* groups_opt = run_cmd->add_option("--groups", groups, "Number of trainer groups (overrides resources.groups)")
                         ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  auto* seed_opt = run_cmd->add_option("--seed", seed, "Campaign seed (overrides `seed`)");
  auto* fp_opt = run_cmd->add_option("--failpoint", run.failpoint, "Test only: SIGKILL the master at a named point")
                     ->group("");
  run_cmd->add_option("--failpoint-hit", run.failpoint_hit, "Test only: on the n-th pass")->group("");
  (void)fp_opt;

  std::string resume_db;
  int64_t resume_groups = 0;
  std::string resume_fp;
  int64_t resume_fp_hit = 1;
  auto* resume_cmd = app.add_subcommand("resume", "Continue an interrupted campaign");
  resume_cmd->add_option("db", resume_db, "The campaign's database")->required();
  auto* resume_groups_opt = resume_cmd->add_option("--groups", resume_groups, "Number of trainer groups")
                                ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  resume_cmd->add_option("--failpoint", resume_fp, "Test only")->group("");
  resume_cmd->add_option("--failpoint-hit", resume_fp_hit, "Test only")->group("");

  std::string status_db;
  auto* status_cmd = app.add_subcommand("status", "The campaign, its trials by state, and the best trial");
  status_cmd->add_option("db", status_db, "The campaign's database")->required();

  std::string trials_db, trials_format = "table";
  int64_t top = 0;
  auto* trials_cmd = app.add_subcommand("trials", "List trials, best first");
  trials_cmd->add_option("db", trials_db, "The campaign's database")->required();
  trials_cmd->add_option("--top", top, "Only the best K trials (0 = all)")->check(CLI::NonNegativeNumber);
  trials_cmd->add_option("--format", trials_format, "table, csv or json")
      ->check(CLI::IsMember({"table", "csv", "json"}));

  std::string export_db, export_format, export_output;
  auto* export_cmd = app.add_subcommand("export", "Export every trial with its parameters and metrics");
  export_cmd->add_option("db", export_db, "The campaign's database")->required();
  export_cmd->add_option("--format", export_format, "csv or json")->required()->check(CLI::IsMember({"csv", "json"}));
  export_cmd->add_option("-o,--output", export_output, "Write to this file instead of standard output");

  std::string validate_config;
  bool validate_json = false, print_reference = false;
  auto* validate_cmd = app.add_subcommand("validate", "Parse and check a config without running it");
  validate_cmd->add_option("config", validate_config, "The sweep config (YAML)");
  validate_cmd->add_flag("--json", validate_json, "Print the config with every default filled in, as JSON");
  validate_cmd->add_flag("--print-reference", print_reference, "Print the commented reference of every key");

  std::string master;
  int64_t worker_group = -1;
  int worker_threads = 0;
  auto* worker_cmd = app.add_subcommand("worker", "Run a trainer-group leader (backends start it)");
  worker_cmd->add_option("--master", master, "The master's address, e.g. tcp://10.0.0.1:5555")->required();
  worker_cmd->add_option("--group", worker_group, "The group index the launcher gave this worker");
  std::string worker_campaign;
  worker_cmd->add_option("--campaign", worker_campaign, "The campaign database (shown in `ps`; informational)");
  worker_cmd->add_option("--threads", worker_threads, "Compute threads per rank (0 = automatic)")
      ->check(CLI::NonNegativeNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  install_signal_handlers();
  try {
    bool interrupted = false;
    if (*run_cmd) {
      if (*groups_opt) run.groups = groups;
      if (*seed_opt) run.seed = seed;
      int rc = report(cmd_run(run, g_interrupts, interrupted), "run");
      return rc == kExitOk && interrupted ? kExitInterrupted : rc;
    }
    if (*resume_cmd) {
      std::optional<int64_t> g;
      if (*resume_groups_opt) g = resume_groups;
      int rc = report(cmd_resume(resume_db, g, g_interrupts, interrupted, resume_fp, resume_fp_hit), "resume");
      return rc == kExitOk && interrupted ? kExitInterrupted : rc;
    }
    if (*status_cmd) return report(cmd_status(status_db), "status");
    if (*trials_cmd) return report(cmd_trials(trials_db, top, trials_format), "trials");
    if (*export_cmd) return report(cmd_export(export_db, export_format, export_output), "export");
    if (*validate_cmd) {
      if (print_reference) {
        std::fputs(hpctune::config::reference_yaml().c_str(), stdout);
        return kExitOk;
      }
      if (validate_config.empty()) {
        std::fprintf(stderr, "hpctune validate: error: a config file is required\n");
        return kExitUsage;
      }
      return report(cmd_validate(validate_config, validate_json), "validate");
    }
    if (*worker_cmd) return report(cmd_worker(master, worker_group, worker_threads, g_interrupts), "worker");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctune: internal error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}
