// The subcommands that serve or start others: slurm submit, dashboard and worker (cli/subcommands.h).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/subcommand_support.h"
#include "cli/subcommands.h"
#include "common/device_list.h"
#include "report/format.h"
#include "trainers/trainer_factory.h"
#include "worker/group_worker.h"
#ifdef HPCTUNE_HAVE_MPI
#include "collectives/collectives.h"
#endif

namespace hpctune::cli {
namespace {

// `hpctune slurm submit CONFIG`: the batch script of a campaign (cli/slurm_submit.cpp).
class SlurmSubmitCommand final : public Subcommand {
 public:
  explicit SlurmSubmitCommand(CLI::App& app) : Subcommand(add_submit(app), true) {
    CLI::App& cmd = command();
    cmd.add_option("config", args_.config, "The sweep config (YAML)")->required()->check(CLI::ExistingFile);
    cmd.add_option("--nodes", nodes_text_, "Nodes of the allocation (at least what the groups need at once)")
        ->required();
    cmd.add_option("--time", args_.time, "The job's time limit: minutes, h:mm:ss, days-hours, ... (sbatch --time)")
        ->required();
    partition_opt_ =
        cmd.add_option("--partition", partition_, "sbatch --partition (overrides resources.slurm.partition)");
    account_opt_ = cmd.add_option("--account", account_, "sbatch --account (overrides resources.slurm.account)");
    qos_opt_ = cmd.add_option("--qos", qos_, "sbatch --qos (overrides resources.slurm.qos)");
    db_opt_ = cmd.add_option("--db", args_.db, "The SQLite database (default: the config's `storage`)");
    cmd.add_option("--program", args_.program, "The hpctune the job runs (default: this program's path)")
        ->check(not_empty("run this program"));
    cmd.add_flag("--dry-run", args_.dry_run, "Print the script; write and submit nothing");
  }

  int run() override {
    if (*db_opt_) {
      if (auto s = check_db_path("--db", args_.db); !s.ok()) return report(s, "slurm submit");
    }
    auto n = parse_integer<int64_t>("--nodes", nodes_text_, 1, 1000000);
    if (!n.ok()) return report(std::move(n).error(), "slurm submit");
    args_.nodes = *n;
    if (*partition_opt_) args_.partition = partition_;
    if (*account_opt_) args_.account = account_;
    if (*qos_opt_) args_.qos = qos_;
    return report(cmd_slurm_submit(args_), "slurm submit");
  }

 private:
  // `slurm`, which requires its one subcommand, and `submit`.
  static CLI::App* add_submit(CLI::App& app) {
    CLI::App* slurm = app.add_subcommand("slurm", "Run a campaign as a SLURM batch job");
    slurm->require_subcommand(1);
    return slurm->add_subcommand(
        "submit",
        "Write the campaign's sbatch script (<db>.slurm/job.sh) and submit it: the master runs on the batch host");
  }

  SlurmSubmitArgs args_;
  std::string nodes_text_, partition_, account_, qos_;
  CLI::Option *partition_opt_, *account_opt_, *qos_opt_, *db_opt_;
};

// `hpctune dashboard DB...` (cli/dashboard_command.cpp).
class DashboardCommand final : public Subcommand {
 public:
  explicit DashboardCommand(CLI::App& app)
      : Subcommand(app.add_subcommand("dashboard",
                                      "Serve campaign databases read-only in the browser: the web app and its JSON "
                                      "API, every request with the token of the printed URL (on 127.0.0.1 unless "
                                      "--host)"),
                   true) {
    CLI::App& cmd = command();
    cmd.add_option("db", args_.databases, "Campaign databases, or directories (each *.db in them)")->required();
    cmd.add_option("--host", args_.host,
                   "The address to listen on (default 127.0.0.1; 0.0.0.0 or :: = every address of this machine)");
    cmd.add_option("--port", port_text_, "The port, 0..65535 (default 8080; 0 = a free one, printed)")
        ->type_name("INT")
        ->check(not_empty("serve on port 8080"));
    cmd.add_option("--token", args_.token,
                   "The token every request must carry (default: HPCTUNE_DASHBOARD_TOKEN, else generated and "
                   "printed; 16 to 256 letters, digits, . _ ~ -). Every user sees it in `ps`: prefer --token-file")
        ->check(not_empty("have a token generated"));
    cmd.add_option("--token-file", args_.token_file,
                   "Read the token from this file (its first line; the file must be yours and mode 0600)")
        ->check(not_empty("have a token generated"));
    cmd.add_flag("--allow-other-owners", args_.allow_other_owners,
                 "Serve databases that another user owns (refused by default: their owner decides what is shown)");
  }

  int run() override {
    if (!port_text_.empty()) {
      auto p = parse_integer<int64_t>("--port", port_text_, 0, 65535);
      if (!p.ok()) return report(std::move(p).error(), "dashboard");
      args_.port = *p;
    }
    return report(cmd_dashboard(args_, interrupts()), "dashboard");
  }

 private:
  DashboardArgs args_;
  std::string port_text_;
};

// The worker of a multi-rank group (or of a trainer that starts its own ranks): see
// worker/group_worker.h. Rank 0 talks to the master; the other ranks follow it.
struct GroupWorkerArgs {
  std::string master;
  int64_t group = -1;
  int threads = 0;
  std::string secret;
  protocol::TransportOptions transport;  // CURVE keys from the environment, if any
  int ranks_data = 1;
  int ranks_model = 1;
  bool trainer_starts_ranks = false;
  double collective_timeout_s = 0;  // 0: $HPCTUNE_COLLECTIVE_TIMEOUT_S, else 300
};

Status run_group_worker(const GroupWorkerArgs& a, int* argc, char*** argv) {
  worker::GroupWorkerOptions o;
  o.ranks_data = a.ranks_data;
  o.ranks_model = a.ranks_model;
  o.worker.group = a.group;
  o.worker.threads = a.threads;
  o.worker.secret = a.secret;
  o.worker.terminate = &interrupts();
  o.worker.make = trainers::trainer_factory();
  o.worker.kinds = trainers::trainer_kinds();
  double limit_s = a.collective_timeout_s;
  if (limit_s <= 0) {
    const char* env = std::getenv("HPCTUNE_COLLECTIVE_TIMEOUT_S");
    if (env && *env) {
      auto seconds = parse_seconds("HPCTUNE_COLLECTIVE_TIMEOUT_S", env);  // "abc" and "nan" were 0 and NaN
      if (!seconds.ok()) return std::move(seconds).error();
      limit_s = *seconds;
    } else {
      limit_s = 300.0;
    }
  }
  if (limit_s <= 0) return err(Errc::kConfig, "the collective timeout must be > 0 s");
  o.collective_limit = std::chrono::milliseconds(static_cast<int64_t>(limit_s * 1000));
  o.connect = [master = a.master, transport = a.transport] { return protocol::connect_zmq(master, transport); };
  if (a.trainer_starts_ranks) {
    o.worker.log = [group = a.group](const std::string& line) {
      std::fprintf(stderr, "worker %lld: %s\n", static_cast<long long>(group),
                   hpctune::report::terminal_safe(line).c_str());
    };
    return worker::run_single_process_worker(o);
  }
#ifdef HPCTUNE_HAVE_MPI
  // mpirun started this rank: die with it, so that a SIGKILLed master (which takes mpirun with it
  // through its own PR_SET_PDEATHSIG) leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return err(Errc::kCancelled, "mpirun is already gone");
  // This rank's own GPUs of the group's (before MPI, which may initialise CUDA).
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    const std::string mine = narrow_visible_devices_to_rank(std::atoll(local));
    if (!mine.empty()) {
      std::fprintf(stderr, "worker %lld local rank %s: CUDA_VISIBLE_DEVICES=%s (of the group's %s)\n",
                   static_cast<long long>(a.group), local, mine.c_str(), std::getenv(kGpusEnv));
    }
  }
  HPCTUNE_ASSIGN(auto mpi, collectives::MpiEnvironment::init(argc, argv, MPI_THREAD_SERIALIZED));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  o.worker.log = [group = a.group, rank](const std::string& line) {
    std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%H:%M:%S", std::localtime(&now));
    std::fprintf(stderr, "%s  worker %lld rank %d: %s\n", buf, static_cast<long long>(group), rank,
                 hpctune::report::terminal_safe(line).c_str());
  };
  return worker::run_group_rank(o);
#else
  (void)argc, (void)argv;
  return err(Errc::kConfig, "resources.ranks asks for " + std::to_string(a.ranks_data * a.ranks_model) +
                                " ranks per group, but this hpctune was built without MPI (one rank per group only)");
#endif
}

// `hpctune worker --master ADDRESS`: a trainer-group leader, which a backend starts.
class WorkerCommand final : public Subcommand {
 public:
  WorkerCommand(CLI::App& app, WorkerLaunch launch)
      : Subcommand(app.add_subcommand("worker", "Run a trainer-group leader (backends start it)"), true),
        launch_(std::move(launch)) {
    CLI::App& cmd = command();
    cmd.add_option("--master", master_, "The master's address, e.g. tcp://10.0.0.1:5555")->required();
    group_opt_ = cmd.add_option("--group", group_text_, "The group index the launcher gave this worker (0..2147483647)")
                     ->type_name("INT");
    cmd.add_option("--campaign", campaign_, "The campaign database (shown in `ps`; informational)");
    // The bounds of resources.threads: CLI::NonNegativeNumber printed DBL_MAX's 309 digits.
    cmd.add_option("--threads", threads_, "Compute threads per rank, 0..1024 (0 = automatic)")
        ->check(CLI::Range(0, 1024));
    cmd.add_option("--slots", slots_,
                   "A packed group: groups --group .. --group + slots - 1 in this process, their mlp trials on "
                   "its GPU as one fused model (resources.pack; 1..1024)")
        ->check(CLI::Range(1, 1024));
    cmd.add_option("--ranks-data", group_args_.ranks_data, "Data-parallel replicas of the group (under mpirun)")
        ->check(CLI::Range(1, 4096));
    cmd.add_option("--ranks-model", group_args_.ranks_model, "Pipeline stages of the group (under mpirun)")
        ->check(CLI::Range(1, 4096));
    cmd.add_flag("--trainer-starts-ranks", group_args_.trainer_starts_ranks,
                 "One process: the trainer starts the group's ranks itself (command)");
    cmd.add_option("--collective-timeout", group_args_.collective_timeout_s,
                   "Seconds a group call may take before the group is torn down (0 = 300)")
        ->check(CLI::Range(0.0, 1e9));
  }

  int run() override {
    if (Status s = check_master_address(master_); !s.ok()) return report(s, "worker");
    if (*group_opt_) {
      // The range a hello carries (protocol/messages.cpp), the pack's last slot included: CLI11 read
      // "-2", "0x10" and " 5" as groups, and clamped 2^64 to 2^63-1 (whose next slot overflowed).
      auto g = parse_integer<int64_t>("--group", group_text_, 0, int64_t{INT32_MAX} - (slots_ - 1));
      if (!g.ok()) return report(std::move(g).error(), "worker");
      group_ = *g;
    }
    if (std::isnan(group_args_.collective_timeout_s)) {
      return report(err(Errc::kUsage, "--collective-timeout: 'nan' is not a number of seconds (0..1e9)"), "worker");
    }
    if (!launch_.transport.ok()) return report(std::move(launch_.transport).error(), "worker");
    group_args_.transport = *launch_.transport;
    if (group_args_.ranks_data * group_args_.ranks_model > 1) {
      group_args_.master = master_;
      group_args_.group = group_;
      group_args_.threads = threads_;
      group_args_.secret = launch_.secret;
      return report(run_group_worker(group_args_, launch_.argc, launch_.argv), "worker");
    }
    return report(cmd_worker(master_, group_, threads_, launch_.secret, group_args_.transport, interrupts(), slots_),
                  "worker");
  }

 private:
  WorkerLaunch launch_;
  std::string master_, campaign_;
  std::string group_text_;
  CLI::Option* group_opt_;
  int64_t group_ = -1;
  int threads_ = 0;
  int64_t slots_ = 1;
  GroupWorkerArgs group_args_;
};

}  // namespace

std::unique_ptr<Subcommand> add_slurm_submit(CLI::App& app) { return std::make_unique<SlurmSubmitCommand>(app); }
std::unique_ptr<Subcommand> add_dashboard(CLI::App& app) { return std::make_unique<DashboardCommand>(app); }
std::unique_ptr<Subcommand> add_worker(CLI::App& app, WorkerLaunch launch) {
  return std::make_unique<WorkerCommand>(app, std::move(launch));
}

}  // namespace hpctune::cli
