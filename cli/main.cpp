// hpctune: the command line. This is an edge: errors that travelled up as values become an exit
// code and one message here (0 ok, 2 usage/config, 1 run-time failure, 130 after Ctrl-C, 143
// after SIGTERM).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <limits>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/simulate_command.h"
#include "common/bounded_json.h"
#include "common/device_list.h"
#include "common/endpoint.h"
#include "common/text.h"
#include "config/config.h"
#include "launch/backends.h"
#include "protocol/transport.h"
#include "report/format.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "trainers/trainer_factory.h"
#include "worker/group_worker.h"
#include "workflow/stages.h"
#ifdef HPCTUNE_HAVE_MPI
#include "collectives/collectives.h"
#endif

namespace {

std::atomic<int> g_interrupts{0};
std::atomic<int> g_first_signal{0};  // the signal that interrupted us: SIGINT or SIGTERM

// First Ctrl-C (or SIGTERM): the master stops dispatch, records running trials as interrupted and
// exits 130 (143 after SIGTERM: 128 + the signal, the shell's convention). A second Ctrl-C exits
// at once; the groups die with us (PR_SET_PDEATHSIG).
void on_signal(int sig) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  if (g_interrupts.fetch_add(1) >= 1 && sig == SIGINT) _exit(hpctune::cli::kExitInterrupted);
}

// SIGUSR1: SLURM's warning before pre-emption or the time limit (the batch script asks for it
// with --signal=B:USR1@<signal_before>). `run` and `resume` stop dispatching, record running trials
// as interrupted and, when resources.slurm.requeue, requeue the job (MasterOptions::preempt).
std::atomic<int> g_preempt{0};
void on_preempt(int) { g_preempt.store(1); }

// The exit code of a run that ended because we were interrupted.
int interrupted_exit_code() {
  return g_first_signal.load() == SIGTERM ? hpctune::cli::kExitTerminated : hpctune::cli::kExitInterrupted;
}

// A count or seed given on the command line: decimal digits only (no sign, exponent, hex or
// spaces), within [min, max]. CLI11's own conversion takes "-1", "2^64" or "1e23" for an unsigned
// option and wraps them, so numbers are read as text and checked here.
template <typename T>
hpctune::Result<T> parse_integer(const std::string& option, const std::string& text, T min, T max) {
  using namespace hpctune;
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  T value{};
  const char* end = text.data() + text.size();
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) return err(Errc::kUsage, option + ": '" + text + "' is not a decimal integer (expected " + range + ")");
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < min || value > max) {
    return err(Errc::kUsage, option + ": " + text + " is out of range (expected " + range + ")");
  }
  return value;
}

// --dashboard-port: 0..65535 ("" = 8080), else a usage error.
hpctune::Result<int64_t> dashboard_port(const std::string& text) {
  if (text.empty()) return int64_t{8080};
  return parse_integer<int64_t>("--dashboard-port", text, 0, 65535);
}

// --bind: an address the master can listen on (common/endpoint.h), else a usage error.
hpctune::Status check_bind(const std::string& address) {
  if (auto problem = hpctune::endpoint_problem(address)) return hpctune::err(hpctune::Errc::kUsage, "--bind: " + *problem);
  return hpctune::Status::Ok();
}

// A database path for `run` and `resume`: a file. ":memory:" would run the whole campaign and
// throw it away, and SQLite URIs ("file:...?mode=...") would bypass the lock next to the file.
hpctune::Status check_db_path(const std::string& option, const std::string& path) {
  using namespace hpctune;
  if (path.empty()) return err(Errc::kUsage, option + ": the database path is empty");
  if (path == ":memory:" || path.rfind("file:", 0) == 0 || path.find("://") != std::string::npos) {
    return err(Errc::kUsage, option + ": '" + path + "' is not a file path; the campaign must be kept in a file");
  }
  if (path.back() == '/') return err(Errc::kUsage, option + ": '" + path + "' names a directory, not a database file");
  return {};
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction usr1 {};
  usr1.sa_handler = on_preempt;
  sigemptyset(&usr1.sa_mask);
  sigaction(SIGUSR1, &usr1, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// The worker of a multi-rank group (or of a trainer that starts its own ranks): see
// worker/group_worker.h. Rank 0 talks to the master; the other ranks follow it.
struct GroupWorkerArgs {
  std::string master;
  int64_t group = -1;
  int threads = 0;
  std::string secret;
  hpctune::protocol::TransportOptions transport;  // CURVE keys from the environment, if any
  int ranks_data = 1;
  int ranks_model = 1;
  bool trainer_starts_ranks = false;
  double collective_timeout_s = 0;  // 0: $HPCTUNE_COLLECTIVE_TIMEOUT_S, else 300
};

hpctune::Status run_group_worker(const GroupWorkerArgs& a, int* argc, char*** argv) {
  using namespace hpctune;
  worker::GroupWorkerOptions o;
  o.ranks_data = a.ranks_data;
  o.ranks_model = a.ranks_model;
  o.worker.group = a.group;
  o.worker.threads = a.threads;
  o.worker.secret = a.secret;
  o.worker.terminate = &g_interrupts;
  o.worker.make = trainers::trainer_factory();
  o.worker.kinds = trainers::trainer_kinds();
  double limit_s = a.collective_timeout_s;
  if (limit_s <= 0) {
    const char* env = std::getenv("HPCTUNE_COLLECTIVE_TIMEOUT_S");
    limit_s = env && *env ? std::atof(env) : 300.0;
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

// The top of `hpctune --help`, its lists read from the registries (so a new algorithm, early
// stopper, stage kind or backend appears without editing it).
std::string app_description() {
  using hpctune::join;
  std::vector<std::string> stoppers;
  for (const std::string& s : hpctune::search::stopper_names())
    if (s != "none") stoppers.push_back(s);
  const std::vector<std::string> backends(std::begin(hpctune::launch::kBackendNames),
                                          std::end(hpctune::launch::kBackendNames));
  return "hpctune: hyperparameter search (" + join(hpctune::search::searcher_names(), ", ") +
         "; early stopping: " + join(stoppers, ", ") + ") and workflows of stages (" +
         join(hpctune::workflow::stage_kind_names(), ", ") + ") on trainer groups (backends: " +
         join(backends, ", ") + "; MPI ranks within a group), every trial recorded in SQLite";
}

int report(const hpctune::Status& status, const char* what) {
  if (status.ok()) return hpctune::cli::kExitOk;
  std::fflush(stdout);
  // An error may quote a trainer's output (the first failure, a group's log tail): escaped.
  std::fprintf(stderr, "hpctune %s: error: %s\n", what,
               hpctune::report::terminal_safe(status.error().to_string()).c_str());
  return hpctune::cli::exit_code_for(status.error());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hpctune::cli;
  // Before anything else (threads, MPI, child processes): the launch credential leaves the
  // environment, whatever the subcommand.
  const std::string worker_secret = hpctune::worker::take_worker_secret();
  // And the workers' CURVE keys (an error only matters to `worker`).
  auto worker_transport = hpctune::worker::take_worker_transport(worker_secret);
  CLI::App app{app_description()};
  app.set_version_flag("--version", std::string("hpctune ") + HPCTUNE_VERSION);
  app.require_subcommand(1);

  // Numbers are taken as text and checked by parse_integer() after parsing (see there).
  RunArgs run;
  std::string groups_text, seed_text;
  auto* run_cmd = app.add_subcommand("run", "Run a campaign described by a YAML sweep config");
  run_cmd->add_option("config", run.config, "The sweep config (YAML)")->required()->check(CLI::ExistingFile);
  auto* run_db_opt = run_cmd->add_option("--db", run.db, "The SQLite database (default: the config's `storage`)");
  auto* groups_opt = run_cmd->add_option("--groups", groups_text, "Number of trainer groups, 1..4096 (overrides resources.groups)")
      ->type_name("INT");
  auto* seed_opt = run_cmd->add_option("--seed", seed_text, "Campaign seed, 0..2^64-1 (overrides `seed`)")
      ->type_name("INT");
  std::string bind_help = "The master's address for its trainer groups, tcp://HOST:PORT or ipc://PATH (overrides "
                          "resources.bind; default ipc://*, a socket in a private directory that only this user can reach)";
  std::string run_bind;
  auto* run_bind_opt = run_cmd->add_option("--bind", run_bind, bind_help)->type_name("ADDRESS");
  const char* dashboard_help =
      "Serve the dashboard over this campaign on 127.0.0.1 while it runs (its URL, with a generated token, is printed)";
  const char* dashboard_port_help = "The dashboard's port (default 8080; 0 = a free one, printed)";
  bool run_dashboard = false;
  std::string run_dashboard_port;
  run_cmd->add_flag("--dashboard", run_dashboard, dashboard_help);
  auto* run_dashboard_port_opt = run_cmd->add_option("--dashboard-port", run_dashboard_port, dashboard_port_help)->type_name("PORT");
  auto* fp_opt = run_cmd->add_option("--failpoint", run.failpoint, "Test only: SIGKILL the master at a named point")
                     ->group("");
  run_cmd->add_option("--failpoint-hit", run.failpoint_hit, "Test only: on the n-th pass")->group("");
  (void)fp_opt;

  std::string resume_db;
  std::string resume_groups_text, resume_max_trials_text;
  std::string resume_fp;
  int64_t resume_fp_hit = 1;
  auto* resume_cmd = app.add_subcommand("resume", "Continue an interrupted campaign, or extend a finished one");
  resume_cmd->add_option("db", resume_db, "The campaign's database")->required();
  auto* resume_groups_opt = resume_cmd->add_option("--groups", resume_groups_text, "Number of trainer groups, 1..4096")
      ->type_name("INT");
  auto* resume_max_trials_opt = resume_cmd->add_option(
      "--max-trials", resume_max_trials_text,
      "A new budget: more trials than the campaign has so far (extends a completed campaign too)")->type_name("INT");
  std::string resume_bind;
  auto* resume_bind_opt = resume_cmd->add_option("--bind", resume_bind, bind_help)->type_name("ADDRESS");
  bool resume_dashboard = false;
  std::string resume_dashboard_port;
  resume_cmd->add_flag("--dashboard", resume_dashboard, dashboard_help);
  auto* resume_dashboard_port_opt =
      resume_cmd->add_option("--dashboard-port", resume_dashboard_port, dashboard_port_help)->type_name("PORT");
  resume_cmd->add_option("--failpoint", resume_fp, "Test only")->group("");
  resume_cmd->add_option("--failpoint-hit", resume_fp_hit, "Test only")->group("");

  hpctune::cli::SimulateArgs sim;
  std::string sim_nodes_text, sim_seed_text, sim_step_text, sim_startup_text;
  std::vector<std::string> sim_silence;
  auto* sim_cmd = app.add_subcommand("simulate", "Run a campaign's real master on simulated time, with simulated trainer groups; exits 1 as `run` does when the simulated campaign failed (no trial succeeded, search.max_failures, a failed stage)");
  sim_cmd->add_option("config", sim.config, "The sweep config (YAML); its trainer must be `function` unless --outcomes replays or models a recorded campaign (not with --calibrate)")
      ->check(CLI::ExistingFile);
  auto* sim_db_opt = sim_cmd->add_option("--db", sim.db, "The new database the simulated campaign is recorded in (default <name>.sim.db)");
  auto* sim_nodes_opt = sim_cmd->add_option("--nodes", sim_nodes_text, "Nodes, one trainer group each, 1..4096 (overrides resources.groups)")
      ->type_name("INT");
  auto* sim_seed_opt = sim_cmd->add_option("--seed", sim_seed_text, "Campaign seed (overrides `seed`)")->type_name("INT");
  auto* sim_step_opt = sim_cmd->add_option("--step-seconds", sim_step_text,
                                           "Simulated seconds per training step (default: the trainer's seconds_per_step)")
      ->type_name("SECONDS");
  auto* sim_startup_opt = sim_cmd->add_option("--startup-seconds", sim_startup_text, "Simulated seconds from a group's launch to its hello (default 1)")
      ->type_name("SECONDS");
  sim_cmd->add_option("--format", sim.format, "table or json")->check(CLI::IsMember({"table", "json"}));
  std::string sim_target_text;
  sim_cmd->add_option("--machine", sim.machine, "The machine file of the cost model (default configs/machines/this-machine.yaml)");
  auto* sim_target_opt = sim_cmd->add_option("--target", sim_target_text, "Target value of the objective metric (time and runs to it)")
      ->type_name("VALUE");
  sim_cmd->add_option("--baseline", sim.baseline, "A config whose simulated time to target the speed-up is over")->check(CLI::ExistingFile);
  sim_cmd->add_flag("--plan", sim.plan, "Rank the splits of --nodes into groups x data x model by predicted time");
  std::string sim_max_trials_text;
  sim_cmd->add_option("--max-trials", sim_max_trials_text,
                      "Simulate a campaign of at most this many trials (default 100000; more is refused: time and "
                      "memory grow with the trials)")
      ->type_name("INT");
  sim_cmd->add_flag("--count-decision-time", sim.count_decision_time,
                    "Add the master's measured decision time (its step() calls) to the simulated clock, as Syne Tune does");
  sim_cmd->add_flag("--calibrate", sim.calibrate, "Fit the machine file from small real campaigns on this machine");
  sim_cmd->add_option("--machine-out", sim.machine_out, "Where --calibrate writes (default configs/machines/this-machine.yaml)");
  sim_cmd->add_option("--outcomes", sim.outcomes,
                      "Where trial outcomes come from: function (the function trainer's, default), replay:DB (the curves "
                      "a recorded campaign's trials reported, the nearest one's for a new configuration) or surrogate:DB "
                      "(a nearest-neighbour model fitted over DB's trials)")
      ->type_name("SOURCE");
  sim_cmd->add_option("--silence", sim_silence, "Test only: GROUP@SECONDS, the group goes silent then")->group("");

  std::string status_db, status_format = "table";
  auto* status_cmd = app.add_subcommand(
      "status", "The campaign, its stages, its trials by state, and the best trial; a campaign whose master is gone "
                "(killed: its lock free, its heartbeat old) is shown interrupted, with the `hpctune resume` to run");
  status_cmd->add_option("db", status_db, "The campaign's database")->required();
  status_cmd->add_option("--format", status_format, "table or json")->check(CLI::IsMember({"table", "json"}));

  std::string schedule_db, schedule_stage, schedule_format = "table";
  auto* schedule_cmd = app.add_subcommand(
      "schedule", "The schedule of hyperparameters of a pbt stage's best member: the params of each interval of steps");
  schedule_cmd->add_option("db", schedule_db, "The campaign's database")->required();
  schedule_cmd->add_option("--stage", schedule_stage, "The pbt stage (default: the campaign's only pbt stage)")
      ->type_name("NAME");
  schedule_cmd->add_option("--format", schedule_format,
                           "table (for reading), json (for scripts) or yaml (a YAML list of intervals, "
                           "{from_step, to_step, params}, every digit: to keep beside the config or to replay "
                           "the schedule, each interval trained from the weights the one before ended with)")
      ->check(CLI::IsMember({"table", "json", "yaml"}));

  std::string trials_db, trials_format = "table", top_text, trials_stage;
  auto* trials_cmd = app.add_subcommand(
      "trials", "List trials, best first: stage, state, objective, searched parameters, the trial each started from");
  trials_cmd->add_option("db", trials_db, "The campaign's database")->required();
  auto* top_opt = trials_cmd->add_option("--top", top_text, "Only the best K trials (K >= 1; default: all)")
      ->type_name("INT");
  trials_cmd->add_option("--format", trials_format,
                         "table, csv or json (csv and json add each trial's lineage and run settings)")
      ->check(CLI::IsMember({"table", "csv", "json"}));
  trials_cmd->add_option("--stage", trials_stage, "Only the trials of this workflow stage (its name)")
      ->type_name("NAME");

  std::string trial_db, trial_id_text, trial_format = "table", trial_lines_text = "20";
  auto* trial_cmd = app.add_subcommand(
      "trial", "One trial: its stage, parameters, lineage and run settings, metrics by step, attempts, events, "
               "artifacts and the tail of its logs");
  trial_cmd->add_option("db", trial_db, "The campaign's database")->required();
  trial_cmd->add_option("id", trial_id_text, "The trial's id (the `trial` column of `hpctune trials`)")
      ->required()->type_name("INT");
  trial_cmd->add_option("--format", trial_format, "table or json")->check(CLI::IsMember({"table", "json"}));
  trial_cmd->add_option("--lines", trial_lines_text, "Lines of each log to show (0..10000, default 20)")
      ->type_name("INT");

  std::string export_db, export_format, export_output;
  auto* export_cmd = app.add_subcommand(
      "export", "Export every trial with its stage, parameters, lineage, run settings, metrics and events");
  export_cmd->add_option("db", export_db, "The campaign's database")->required();
  export_cmd->add_option("--format", export_format, "csv or json (default: from the -o file's extension)")
      ->check(CLI::IsMember({"csv", "json"}));
  export_cmd->add_option("-o,--output", export_output, "Write to this file instead of standard output");

  std::string validate_config;
  bool validate_json = false, print_reference = false;
  auto* validate_cmd = app.add_subcommand(
      "validate", "Parse and check a config without running it: each stage and its trials, splits the trainer cannot make, idle groups");
  validate_cmd->add_option("config", validate_config, "The sweep config (YAML)");
  validate_cmd->add_flag("--json", validate_json, "Print the config with every default filled in, as JSON");
  validate_cmd->add_flag("--print-reference", print_reference,
                         "Print the commented reference of every key (takes no CONFIG)");

  // `hpctune slurm submit`: the batch script of a campaign (cli/slurm_submit.cpp).
  SlurmSubmitArgs submit;
  std::string submit_nodes_text, submit_partition, submit_account, submit_qos;
  auto* slurm_cmd = app.add_subcommand("slurm", "Run a campaign as a SLURM batch job");
  slurm_cmd->require_subcommand(1);
  auto* submit_cmd = slurm_cmd->add_subcommand(
      "submit", "Write the campaign's sbatch script (<db>.slurm/job.sh) and submit it: the master runs on the batch host");
  submit_cmd->add_option("config", submit.config, "The sweep config (YAML)")->required()->check(CLI::ExistingFile);
  submit_cmd->add_option("--nodes", submit_nodes_text, "Nodes of the allocation (at least what the groups need at once)")
      ->required();
  submit_cmd->add_option("--time", submit.time, "The job's time limit: minutes, h:mm:ss, days-hours, ... (sbatch --time)")
      ->required();
  auto* partition_opt = submit_cmd->add_option("--partition", submit_partition, "sbatch --partition (overrides resources.slurm.partition)");
  auto* account_opt = submit_cmd->add_option("--account", submit_account, "sbatch --account (overrides resources.slurm.account)");
  auto* qos_opt = submit_cmd->add_option("--qos", submit_qos, "sbatch --qos (overrides resources.slurm.qos)");
  auto* submit_db_opt = submit_cmd->add_option("--db", submit.db, "The SQLite database (default: the config's `storage`)");
  submit_cmd->add_option("--program", submit.program, "The hpctune the job runs (default: this program's path)");
  submit_cmd->add_flag("--dry-run", submit.dry_run, "Print the script; write and submit nothing");

  DashboardArgs dash;
  std::string dash_port_text;
  auto* dash_cmd = app.add_subcommand(
      "dashboard", "Serve campaign databases read-only in the browser: the web app and its JSON API, every request with "
      "the token of the printed URL (on 127.0.0.1 unless --host)");
  dash_cmd->add_option("db", dash.databases, "Campaign databases, or directories (each *.db in them)")->required();
  dash_cmd->add_option("--host", dash.host,
                       "The address to listen on (default 127.0.0.1; 0.0.0.0 or :: = every address of this machine)");
  dash_cmd->add_option("--port", dash_port_text, "The port, 0..65535 (default 8080; 0 = a free one, printed)")
      ->type_name("INT");
  dash_cmd->add_option("--token", dash.token,
                       "The token every request must carry (default: HPCTUNE_DASHBOARD_TOKEN, else generated and "
                       "printed; 16 to 256 letters, digits, . _ ~ -). Every user sees it in `ps`: prefer --token-file");
  dash_cmd->add_option("--token-file", dash.token_file,
                       "Read the token from this file (its first line; the file must be yours and mode 0600)");
  dash_cmd->add_flag("--allow-other-owners", dash.allow_other_owners,
                     "Serve databases that another user owns (refused by default: their owner decides what is shown)");

  std::string master;
  int64_t worker_group = -1;
  int worker_threads = 0;
  auto* worker_cmd = app.add_subcommand("worker", "Run a trainer-group leader (backends start it)");
  worker_cmd->add_option("--master", master, "The master's address, e.g. tcp://10.0.0.1:5555")->required();
  worker_cmd->add_option("--group", worker_group, "The group index the launcher gave this worker");
  std::string worker_campaign;
  worker_cmd->add_option("--campaign", worker_campaign, "The campaign database (shown in `ps`; informational)");
  // The bounds of resources.threads: CLI::NonNegativeNumber printed DBL_MAX's 309 digits.
  worker_cmd->add_option("--threads", worker_threads, "Compute threads per rank, 0..1024 (0 = automatic)")
      ->check(CLI::Range(0, 1024));
  int64_t worker_slots = 1;
  worker_cmd->add_option("--slots", worker_slots,
                         "A packed group: groups --group .. --group + slots - 1 in this process, their mlp trials on "
                         "its GPU as one fused model (resources.pack; 1..1024)")
      ->check(CLI::Range(1, 1024));
  GroupWorkerArgs group_args;
  worker_cmd->add_option("--ranks-data", group_args.ranks_data, "Data-parallel replicas of the group (under mpirun)")
      ->check(CLI::Range(1, 4096));
  worker_cmd->add_option("--ranks-model", group_args.ranks_model, "Pipeline stages of the group (under mpirun)")
      ->check(CLI::Range(1, 4096));
  worker_cmd->add_flag("--trainer-starts-ranks", group_args.trainer_starts_ranks,
                       "One process: the trainer starts the group's ranks itself (command)");
  worker_cmd->add_option("--collective-timeout", group_args.collective_timeout_s,
                         "Seconds a group call may take before the group is torn down (0 = 300)")
      ->check(CLI::Range(0.0, 1e9));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  install_signal_handlers();
  try {
    bool interrupted = false;
    // Usage errors found after parsing: exit 2 with the subcommand's name.
    auto usage = [](const hpctune::Status& s, const char* what) { return report(s, what); };
    if (*run_cmd) {
      if (*run_db_opt) {
        if (auto s = check_db_path("--db", run.db); !s.ok()) return usage(s, "run");
      }
      if (*groups_opt) {
        auto g = parse_integer<int64_t>("--groups", groups_text, 1, 4096);
        if (!g.ok()) return usage(std::move(g).error(), "run");
        run.groups = *g;
      }
      if (*seed_opt) {
        auto v = parse_integer<uint64_t>("--seed", seed_text, 0, std::numeric_limits<uint64_t>::max());
        if (!v.ok()) return usage(std::move(v).error(), "run");
        run.seed = *v;
      }
      if (*run_bind_opt) {
        if (auto s = check_bind(run_bind); !s.ok()) return usage(s, "run");
        run.bind = run_bind;
      }
      if (run_dashboard || *run_dashboard_port_opt) {
        auto p = dashboard_port(run_dashboard_port);
        if (!p.ok()) return usage(std::move(p).error(), "run");
        run.dashboard_port = *p;
      }
      run.preempt = &g_preempt;
      int rc = report(cmd_run(run, g_interrupts, interrupted), "run");
      if (rc == kExitInterrupted) return interrupted_exit_code();
      return rc == kExitOk && interrupted ? interrupted_exit_code() : rc;
    }
    if (*sim_cmd) {
      if (*sim_db_opt) {
        if (auto s = check_db_path("--db", sim.db); !s.ok()) return usage(s, "simulate");
      }
      if (*sim_nodes_opt) {
        auto g = parse_integer<int64_t>("--nodes", sim_nodes_text, 1, 4096);
        if (!g.ok()) return usage(std::move(g).error(), "simulate");
        sim.nodes = *g;
      }
      if (*sim_seed_opt) {
        auto v = parse_integer<uint64_t>("--seed", sim_seed_text, 0, std::numeric_limits<uint64_t>::max());
        if (!v.ok()) return usage(std::move(v).error(), "simulate");
        sim.seed = *v;
      }
      auto seconds_of = [](const char* flag, const std::string& text) -> hpctune::Result<double> {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !(v >= 0) || v > 365.0 * 86400) {
          return hpctune::err(hpctune::Errc::kUsage, std::string(flag) + ": '" + text +
                                                         "' is not a number of seconds in [0, 31536000]");
        }
        return v;
      };
      if (*sim_step_opt) {
        auto v = seconds_of("--step-seconds", sim_step_text);
        if (!v.ok()) return usage(std::move(v).error(), "simulate");
        if (*v == 0) return usage(hpctune::err(hpctune::Errc::kUsage, "--step-seconds: must be > 0"), "simulate");
        sim.step_seconds = *v;
      }
      if (*sim_startup_opt) {
        auto v = seconds_of("--startup-seconds", sim_startup_text);
        if (!v.ok()) return usage(std::move(v).error(), "simulate");
        sim.startup_seconds = *v;
      }
      if (sim.config.empty() && !sim.calibrate) {
        return usage(hpctune::err(hpctune::Errc::kUsage, "simulate: a CONFIG is required (except with --calibrate)"), "simulate");
      }
      if (*sim_target_opt) {
        char* end = nullptr;
        const double v = std::strtod(sim_target_text.c_str(), &end);
        if (sim_target_text.empty() || end != sim_target_text.c_str() + sim_target_text.size() || !std::isfinite(v)) {
          return usage(hpctune::err(hpctune::Errc::kUsage, "--target: '" + sim_target_text + "' is not a number"), "simulate");
        }
        sim.target = v;
      }
      for (const std::string& item : sim_silence) {
        const auto at = item.find('@');
        auto g = parse_integer<int64_t>("--silence", item.substr(0, at), 0, 4095);
        if (at == std::string::npos || !g.ok()) {
          return usage(hpctune::err(hpctune::Errc::kUsage, "--silence: '" + item + "' is not GROUP@SECONDS"), "simulate");
        }
        auto v = seconds_of("--silence", item.substr(at + 1));
        if (!v.ok()) return usage(std::move(v).error(), "simulate");
        sim.silence.emplace_back(*g, *v);
      }
      if (!sim_max_trials_text.empty()) {
        auto n = parse_integer<int64_t>("--max-trials", sim_max_trials_text, 1, std::numeric_limits<int64_t>::max());
        if (!n.ok()) return usage(std::move(n).error(), "simulate");
        sim.max_trials = *n;
      }
      sim.interrupt = &g_interrupts;
      const int rc = report(hpctune::cli::cmd_simulate(sim), "simulate");
      return rc == kExitInterrupted ? interrupted_exit_code() : rc;
    }
    if (*resume_cmd) {
      if (auto s = check_db_path("db", resume_db); !s.ok()) return usage(s, "resume");
      ResumeArgs r;
      r.db = resume_db;
      r.failpoint = resume_fp;
      r.failpoint_hit = resume_fp_hit;
      if (*resume_groups_opt) {
        auto g = parse_integer<int64_t>("--groups", resume_groups_text, 1, 4096);
        if (!g.ok()) return usage(std::move(g).error(), "resume");
        r.groups = *g;
      }
      if (*resume_max_trials_opt) {
        auto n = parse_integer<int64_t>("--max-trials", resume_max_trials_text, 1, std::numeric_limits<int64_t>::max());
        if (!n.ok()) return usage(std::move(n).error(), "resume");
        r.max_trials = *n;
      }
      if (*resume_bind_opt) {
        if (auto s = check_bind(resume_bind); !s.ok()) return usage(s, "resume");
        r.bind = resume_bind;
      }
      if (resume_dashboard || *resume_dashboard_port_opt) {
        auto p = dashboard_port(resume_dashboard_port);
        if (!p.ok()) return usage(std::move(p).error(), "resume");
        r.dashboard_port = *p;
      }
      r.preempt = &g_preempt;
      int rc = report(cmd_resume(r, g_interrupts, interrupted), "resume");
      if (rc == kExitInterrupted) return interrupted_exit_code();
      return rc == kExitOk && interrupted ? interrupted_exit_code() : rc;
    }
    // The read-only commands below read what a database holds within a memory budget
    // (common/bounded_json.h): a crafted store is refused with its place, never an abort.
    hpctune::JsonReadBudget read_budget(hpctune::kJsonReadBudgetBytes);
    if (*status_cmd) return report(cmd_status(status_db, status_format), "status");
    if (*schedule_cmd) return report(cmd_schedule(schedule_db, schedule_stage, schedule_format), "schedule");
    if (*trials_cmd) {
      int64_t top = 0;  // all
      if (*top_opt) {
        auto k = parse_integer<int64_t>("--top", top_text, 1, std::numeric_limits<int64_t>::max());
        if (!k.ok()) return usage(std::move(k).error(), "trials");
        top = *k;
      }
      return report(cmd_trials(trials_db, top, trials_format, trials_stage), "trials");
    }
    if (*trial_cmd) {
      auto id = parse_integer<int64_t>("id", trial_id_text, 1, std::numeric_limits<int64_t>::max());
      if (!id.ok()) return usage(std::move(id).error(), "trial");
      auto lines = parse_integer<int64_t>("--lines", trial_lines_text, 0, 10000);
      if (!lines.ok()) return usage(std::move(lines).error(), "trial");
      return report(cmd_trial(trial_db, *id, trial_format, *lines), "trial");
    }
    if (*export_cmd) return report(cmd_export(export_db, export_format, export_output), "export");
    if (*validate_cmd) {
      if (print_reference) {
        if (!validate_config.empty() || validate_json) {
          std::fprintf(stderr, "hpctune validate: error: --print-reference takes no CONFIG and no --json; "
                               "it prints the reference of every key (run `hpctune validate CONFIG` to check a config)\n");
          return kExitUsage;
        }
        std::fputs(hpctune::config::reference_yaml().c_str(), stdout);
        return kExitOk;
      }
      if (validate_config.empty()) {
        std::fprintf(stderr, "hpctune validate: error: a config file is required\n");
        return kExitUsage;
      }
      return report(cmd_validate(validate_config, validate_json), "validate");
    }
    if (*submit_cmd) {
      if (*submit_db_opt) {
        if (auto s = check_db_path("--db", submit.db); !s.ok()) return usage(s, "slurm submit");
      }
      auto n = parse_integer<int64_t>("--nodes", submit_nodes_text, 1, 1000000);
      if (!n.ok()) return usage(std::move(n).error(), "slurm submit");
      submit.nodes = *n;
      if (*partition_opt) submit.partition = submit_partition;
      if (*account_opt) submit.account = submit_account;
      if (*qos_opt) submit.qos = submit_qos;
      return report(cmd_slurm_submit(submit), "slurm submit");
    }
    if (*dash_cmd) {
      if (!dash_port_text.empty()) {
        auto p = parse_integer<int64_t>("--port", dash_port_text, 0, 65535);
        if (!p.ok()) return usage(std::move(p).error(), "dashboard");
        dash.port = *p;
      }
      return report(cmd_dashboard(dash, g_interrupts), "dashboard");
    }
    if (*worker_cmd) {
      if (!worker_transport.ok()) return report(std::move(worker_transport).error(), "worker");
      group_args.transport = *worker_transport;
      if (group_args.ranks_data * group_args.ranks_model > 1) {
        group_args.master = master;
        group_args.group = worker_group;
        group_args.threads = worker_threads;
        group_args.secret = worker_secret;
        return report(run_group_worker(group_args, &argc, &argv), "worker");
      }
      return report(cmd_worker(master, worker_group, worker_threads, worker_secret, group_args.transport, g_interrupts,
                               worker_slots),
                    "worker");
    }
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hpctune: error: out of memory (nothing recorded was changed)\n");
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctune: internal error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}
