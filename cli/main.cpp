// hpctune: the command line. This is an edge: errors that travelled up as values become an exit
// code and one message here (0 ok, 2 usage/config, 1 run-time failure, 130 after Ctrl-C).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "scheduler/config.h"
#include "scheduler/transport.h"
#include "trainers/group_worker.h"
#ifdef HPCTUNE_HAVE_MPI
#include "trainers/collectives.h"
#endif

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

// The worker of a multi-rank group (or of a trainer that starts its own ranks): see
// trainers/group_worker.h. Rank 0 talks to the master; the other ranks follow it.
struct GroupWorkerArgs {
  std::string master;
  int64_t group = -1;
  int threads = 0;
  std::string secret;
  int ranks_data = 1;
  int ranks_model = 1;
  bool trainer_starts_ranks = false;
  double collective_timeout_s = 0;  // 0: $HPCTUNE_COLLECTIVE_TIMEOUT_S, else 300
};

hpctune::Status run_group_worker(const GroupWorkerArgs& a, int* argc, char*** argv) {
  using namespace hpctune;
  trainers::GroupWorkerOptions o;
  o.ranks_data = a.ranks_data;
  o.ranks_model = a.ranks_model;
  o.worker.group = a.group;
  o.worker.threads = a.threads;
  o.worker.secret = a.secret;
  o.worker.terminate = &g_interrupts;
  double limit_s = a.collective_timeout_s;
  if (limit_s <= 0) {
    const char* env = std::getenv("HPCTUNE_COLLECTIVE_TIMEOUT_S");
    limit_s = env && *env ? std::atof(env) : 300.0;
  }
  if (limit_s <= 0) return err(Errc::kConfig, "the collective timeout must be > 0 s");
  o.collective_limit = std::chrono::milliseconds(static_cast<int64_t>(limit_s * 1000));
  o.connect = [master = a.master] { return transport::connect_zmq(master); };
  if (a.trainer_starts_ranks) {
    o.worker.log = [group = a.group](const std::string& line) {
      std::fprintf(stderr, "worker %lld: %s\n", static_cast<long long>(group), line.c_str());
    };
    return trainers::run_single_process_worker(o);
  }
#ifdef HPCTUNE_HAVE_MPI
  // mpirun started this rank: die with it, so that a SIGKILLed master (which takes mpirun with it
  // through its own PR_SET_PDEATHSIG) leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return err(Errc::kCancelled, "mpirun is already gone");
  HPCTUNE_ASSIGN(auto mpi, trainers::MpiEnvironment::init(argc, argv, MPI_THREAD_SERIALIZED));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  o.worker.log = [group = a.group, rank](const std::string& line) {
    std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%H:%M:%S", std::localtime(&now));
    std::fprintf(stderr, "%s  worker %lld rank %d: %s\n", buf, static_cast<long long>(group), rank, line.c_str());
  };
  return trainers::run_group_rank(o);
#else
  (void)argc, (void)argv;
  return err(Errc::kConfig, "resources.ranks asks for " + std::to_string(a.ranks_data * a.ranks_model) +
                                " ranks per group, but this hpctune was built without MPI (one rank per group only)");
#endif
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
  // Before anything else (threads, MPI, child processes): the launch credential leaves the
  // environment, whatever the subcommand.
  const std::string worker_secret = hpctune::trainers::take_worker_secret();
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
  GroupWorkerArgs group_args;
  worker_cmd->add_option("--ranks-data", group_args.ranks_data, "Data-parallel replicas of the group (under mpirun)")
      ->check(CLI::Range(1, 4096));
  worker_cmd->add_option("--ranks-model", group_args.ranks_model, "Pipeline stages of the group (under mpirun)")
      ->check(CLI::Range(1, 4096));
  worker_cmd->add_flag("--trainer-starts-ranks", group_args.trainer_starts_ranks,
                       "One process: the trainer starts the group's ranks itself (command)");
  worker_cmd->add_option("--collective-timeout", group_args.collective_timeout_s,
                         "Seconds a group call may take before the group is torn down (0 = 300)")
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
    if (*worker_cmd) {
      if (group_args.ranks_data * group_args.ranks_model > 1) {
        group_args.master = master;
        group_args.group = worker_group;
        group_args.threads = worker_threads;
        group_args.secret = worker_secret;
        return report(run_group_worker(group_args, &argc, &argv), "worker");
      }
      return report(cmd_worker(master, worker_group, worker_threads, worker_secret, g_interrupts), "worker");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctune: internal error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}
