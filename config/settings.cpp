// The settings table of a campaign config, its helpers, and the reference rendered from it.
#include "config/settings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <cmath>
#include <limits>

#include "common/settings.h"
#include "config/config.h"
#include "launch/backends.h"
#include "search/early_stopping.h"
#include "search/algorithms.h"
#include "search/searcher.h"
#include "trainers/trainer_settings.h"
#include "workflow/stage_settings.h"

namespace hpctune::config {

namespace {

using nlohmann::json;

// search.algorithm's values: the default first, then the others in the registry's order.
std::vector<std::string> algorithm_choices() {
  std::vector<std::string> out{search::default_algorithm()};
  for (const auto& name : search::searcher_names())
    if (name != out.front()) out.push_back(name);
  return out;
}

// --- the declarations ----------------------------------------------------------------------------
//
// In reference order; a section before its keys. Keys of search.settings and the stopper keys of
// early_stopping are imported from the search library by build_table().

// Durations are bounded (issue 9, item 16; kDay in common/settings.h): 1e300 s overflows the
// millisecond clocks, and a deadline of days is already a mistake; a non-zero duration under 1 ms
// is refused by check_value, as it would truncate to 0 ms.
Scope param_type(std::vector<std::string> types) { return {"space.*.type", std::move(types)}; }

const char* const kSpaceExample =
    "lr: {type: float, low: 0.001, high: 0.3, log: true}\n"
    "batch_size: {type: int, low: 32, high: 256, log: true}\n"
    "hidden: {type: choice, values: [[128], [256], [256, 128]]}\n"
    "activation: {type: choice, values: [relu, tanh]}\n"
    "nesterov: {type: choice, values: [false, true]}\n"
    "momentum: {type: float, low: 0.5, high: 0.99, when: {nesterov: true}}\n"
    "epochs: 5";

const char* const kStagesExample =
    "- {name: tune, kind: search, search: {algorithm: genetic, max_trials: 64, stop_when: {metric: val_accuracy, "
    "reaches: 0.9}}, space: {lr: {type: float, low: 0.001, high: 0.3, log: true}}}\n"
    "- {name: blend, kind: ensemble, from: tune, method: greedy}\n"
    "- {name: move, kind: transfer, from: tune, classes: [5, 6, 7, 8, 9], max_train_samples: 500, freeze: 1, "
    "baseline: true}";

// Each entry names only the fields it sets and leaves the rest at their defaults, on purpose;
// -Wextra's missing-field-initializers would flag every entry.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// The campaign: name, storage, storage_access, seed.
std::vector<Setting> campaign_declarations() {
  return {
      {.path = "name", .type = Type::kString,
       .help = "Name of the campaign: it names the default store file and appears in every report. Letters, digits, "
               "'.', '_' and '-', at most 200 of them.", .required = true, .aliases = {"campaign", "study", "experiment"},
       .example = "fashion-mlp"},
      {.path = "storage", .type = Type::kString,
       .help = "SQLite database file that records the campaign (its trials, reports and results); a relative path is "
               "relative to the current directory.", .aliases = {"db", "database", "store", "storage_path"},
       .example = "fashion-mlp.db",
       .default_note = "<name>.db",
       .reference_commented = true},
      {.path = "storage_access", .type = Type::kEnum,
       .help = "Who may read the database and the trial directory (<storage>.trials: logs, checkpoints, parameters, "
               "trainer.env values) that a new campaign creates: owner (files 0600, directories 0700), group (0640, "
               "0750) or all local users (0644, 0755). Set whatever the umask.", .default_value = "owner",
       .choices = {"owner", "group", "all"},
       .aliases = {"storage_mode", "storage_permissions"}},
      {.path = "seed", .type = Type::kInt,
       .help = "Seed of every random choice (the search, the trials' seeds, data shuffling): the same config and "
               "seed give the same trials.", .default_value = 0, .min = 0, .aliases = {"random_seed", "rng_seed"}},
  };
}

// objective and objectives.
std::vector<Setting> objective_declarations() {
  return {
      {.path = "objective", .type = Type::kSection,
       .help = "The metric to optimise. Give either objective or objectives."},
      {.path = "objective.metric", .type = Type::kString,
       .help = "Name of a metric the trainer reports, e.g. val_accuracy.", .required = true,
       .aliases = {"name", "metric_name", "key"},
       .example = "val_accuracy"},
      {.path = "objective.mode", .type = Type::kEnum,
       .help = "Whether larger (max) or smaller (min) values are better.", .default_value = "max",
       .choices = {"max", "min"},
       .aliases = {"direction", "goal", "order"}},
      {.path = "objective.noisy", .type = Type::kBool,
       .help = "The metric varies between runs of the same configuration: a configuration may then be tried again. "
               "Otherwise no configuration is suggested twice, and a space with fewer points than max_trials ends "
               "the search once every point was tried.", .default_value = false,
       .aliases = {"stochastic"}},
      {.path = "objectives", .type = Type::kList,
       .help = "Several metrics optimised together, whose result is a Pareto front; instead of objective. Each item "
               "has the keys of objective:", .aliases = {"metrics"},
       .example = "- {metric: val_accuracy, mode: max}\n- {metric: val_loss, mode: min}",
       .reference_commented = true},
      {.path = "objectives[].metric", .type = Type::kString, .help = "Name of a metric the trainer reports.",
       .required = true, .aliases = {"name", "metric_name", "key"}},
      {.path = "objectives[].mode", .type = Type::kEnum, .help = "max or min.", .default_value = "max",
       .choices = {"max", "min"},
       .aliases = {"direction", "goal", "order"}},
      {.path = "objectives[].noisy", .type = Type::kBool,
       .help = "The metric varies between runs of the same configuration (any noisy objective allows repeats).",
       .default_value = false, .aliases = {"stochastic"}},
  };
}

// space: the keys of a parameter's spec.
std::vector<Setting> space_declarations() {
  return {
      {.path = "space", .type = Type::kSpace,
       .help = "The search space: parameter name -> spec. A plain value (or a list) fixes the parameter; a map with "
               "`type` is searched. Parameters are settings of the trainer and override its fixed settings of the "
               "same name (any name for the command trainer; x1, x2, ... for the function trainer). A spec has these "
               "keys:", .default_value = json::object(),
       .aliases = {"search_space", "params", "parameters", "hyperparameters"},
       .example = kSpaceExample},
      {.path = "space.*.type", .type = Type::kEnum, .help = "The kind of parameter.",
       .choices = {"float", "int", "choice", "fixed"},
       .required = true,
       .aliases = {"kind"}},
      {.path = "space.*.low", .type = Type::kNumber, .help = "Smallest value, inclusive (a whole number for int).",
       .required = true, .scope = param_type({"float", "int"}), .aliases = {"min", "lower", "lo", "minimum"}},
      {.path = "space.*.high", .type = Type::kNumber, .help = "Largest value, inclusive; above low.", .required = true,
       .scope = param_type({"float", "int"}), .aliases = {"max", "upper", "hi", "maximum"}},
      {.path = "space.*.log", .type = Type::kBool, .help = "Search on a log scale (low must be above 0).",
       .default_value = false, .scope = param_type({"float", "int"}),
       .aliases = {"log_scale", "logscale", "log_uniform"}},
      {.path = "space.*.step", .type = Type::kInt, .help = "Spacing of the values low, low + step, ...",
       .default_value = 1, .min = 1, .scope = param_type({"int"}), .aliases = {"q", "increment"}},
      {.path = "space.*.resolution", .type = Type::kInt,
       .help = "Number of grid points from low to high; the grid search needs it on every float.", .min = 2,
       .scope = param_type({"float"}), .aliases = {"points", "grid_points", "num"}},
      {.path = "space.*.values", .type = Type::kValueList,
       .help = "The values to choose from (numbers, strings, booleans or lists).", .required = true,
       .scope = param_type({"choice"}), .aliases = {"choices", "options", "categories"}},
      {.path = "space.*.ordered", .type = Type::kBool,
       .help = "The values are ordered (ascending), so that numeric algorithms may treat the choice as an ordinal.",
       .default_value = false, .scope = param_type({"choice"}), .aliases = {"ordinal"}},
      {.path = "space.*.value", .type = Type::kValue, .help = "The value.", .required = true,
       .scope = param_type({"fixed"})},
      {.path = "space.*.when", .type = Type::kCondition,
       .help = "Search the parameter only while another one has one of some values: {parent: value} or {parent: "
               "[values]}; otherwise it is left out of the trial.", .aliases = {"condition", "if", "depends_on"}},
  };
}

// search (its algorithm's settings are imported by build_table()).
std::vector<Setting> search_declarations() {
  return {
      {.path = "search", .type = Type::kSection, .help = "How to search and for how long.",
       .default_value = json::object(), .aliases = {"searcher", "tuner", "optimizer"}},
      {.path = "search.algorithm", .type = Type::kEnum,
       .help = "The search algorithm: random sampling, a full grid, a genetic algorithm, aging (regularized) "
               "evolution, Gaussian-process Bayesian optimisation, a tree-structured Parzen estimator, CMA-ES "
               "(continuous and ordinal spaces, one objective) or a REINFORCE controller (rl, Zoph & Le's "
               "architecture search); auto (the default) picks one from the space and the budget and says which "
               "and why at the start.",
       .default_value = search::default_algorithm(),
       .choices = algorithm_choices(),
       .aliases = {"method", "strategy", "sampler", "type", "kind"}},
      {.path = "search.max_trials", .type = Type::kInt, .help = "Number of trials to run: the campaign's budget.",
       .min = 1, .required = true, .aliases = {"trials", "n_trials", "num_trials", "budget", "max_evals"},
       .example = "20"},
      {.path = "search.max_steps", .type = Type::kInt,
       .help = "Budget in training steps: the sum of the steps every trial trained (each (trial, step) counted once); "
               "no trial starts or resumes once it is spent (0 = none). Under early_stopping.mode pause the search "
               "continues its most promising paused trials when it has nothing new to propose, until it is spent "
               "(0 there: every trial's full training).", .default_value = 0, .min = 0,
       .aliases = {"step_budget", "max_epochs", "budget_steps"}},
      {.path = "search.max_time", .type = Type::kDuration,
       .help = "Wall-clock budget: no trial starts after it (0 = unlimited).", .default_value = 0, .min = 0,
       .max = 365 * kDay, .aliases = {"timeout", "time_limit", "time_budget", "max_duration"}},
      {.path = "search.max_attempts", .type = Type::kInt,
       .help = "Attempts per trial when its trainer group is lost (the group's process dies, or it is silent past "
               "heartbeat_timeout): the trial is run again until it has been attempted this often, then recorded as "
               "failed. A trial whose trainer reports an error (a command that exits non-zero, a diverged loss) "
               "fails at once; it is not retried.", .default_value = 3, .min = 1, .max = 100,
       .aliases = {"attempts", "retries", "max_retries"}},
      {.path = "search.max_failures", .type = Type::kInt,
       .help = "Stop the campaign (exit 1) once this many trials have failed before any trial succeeded: a broken "
               "trainer or a misspelt metric fails every trial alike, so running the whole budget would only repeat "
               "it; a trial whose training diverged (its objective NaN) counts a quarter (0 = never stop).",
       .default_value = 5, .min = 0,
       .aliases = {"max_failed_trials", "failure_limit"}},
      {.path = "search.init", .type = Type::kEnum,
       .help = "Initial design of the algorithms that have one (random search: all its points): independent uniform "
               "draws, a scrambled Sobol sequence or a Latin hypercube. It is that algorithm's `init` setting; the "
               "default is the algorithm's.", .choices = {"uniform", "sobol", "lhs"},
       .aliases = {"initial_design", "design", "sampling"},
       .example = "uniform",
       .default_note = "per algorithm",  // build_table() lists them
       .reference_commented = true},
      {.path = "search.warm_start", .type = Type::kString,
       .help = "Store file of an earlier campaign whose finished trials seed the search (trials outside this space "
               "are ignored); \"\" for none.", .default_value = "", .aliases = {"warmstart", "resume_from"}},
      {.path = "search.stop_when", .type = Type::kSection,
       .help = "End the search once a finished trial's metric reaches a threshold (\"runs to threshold\"): no new "
               "trials start, the running ones finish, and the stage records the trials, generations and time it "
               "took.", .aliases = {"stop_at", "target", "until"},
       .example = "{metric: val_accuracy, reaches: 0.9}", .reference_commented = true},
      {.path = "search.stop_when.metric", .type = Type::kString, .help = "The metric, as the trainer reports it.",
       .required = true, .aliases = {"name", "objective"}},
      {.path = "search.stop_when.reaches", .type = Type::kNumber,
       .help = "The threshold: reached at >= (mode max) or <= (mode min).", .required = true,
       .aliases = {"value", "threshold", "target"}},
      {.path = "search.stop_when.mode", .type = Type::kEnum,
       .help = "max or min; by default the mode of the objective of that metric, else max.", .choices = {"max", "min"},
       .aliases = {"direction"}, .default_note = "the objective's"},
      {.path = "search.settings", .type = Type::kSection,
       .help = "Settings of the search algorithm; each algorithm's keys are listed here (those of the other "
               "algorithms commented out).", .default_value = json::object(),
       .aliases = {"options", "params", "config"},
       .open = true},
  };
}

// early_stopping (its kind's settings are imported by build_table()).
std::vector<Setting> early_stopping_declarations() {
  return {
      {.path = "early_stopping", .type = Type::kSection,
       .help = "Stop unpromising trials early, judged on the objective in their intermediate reports (needs a single "
               "objective).", .default_value = json::object(),
       .aliases = {"pruner", "pruning", "scheduler", "early_stop"}},
      {.path = "early_stopping.kind", .type = Type::kEnum,
       .help = "The stopping rule: none, asynchronous successive halving, Hyperband, or the median stopping rule. "
               "The other keys depend on it.", .default_value = "none",
       .choices = {"none", "asha", "hyperband", "median"},
       .aliases = {"type", "algorithm", "rule"}},
  };
}

// trainer (its kinds' settings are imported by build_table()).
std::vector<Setting> trainer_declarations() {
  return {
      {.path = "trainer", .type = Type::kSection,
       .help = "What each trial runs: `kind` picks the trainer and the other keys are its fixed settings (a space "
               "parameter of the same name overrides one).", .default_value = json::object(),
       .aliases = {"model", "training", "objective_function"}},
      {.path = "trainer.kind",
       .type = Type::kEnum,
       .help = "The trainer; the other keys of this section are its settings.",  // build_table() lists the kinds
       .choices = {},  // build_table(): the kinds of trainers/trainer_settings.h
       .required = true,
       .aliases = {"type", "name"},
       .example = "mlp"},
  };
}

// resources, resources.ranks and resources.slurm.
std::vector<Setting> resources_declarations() {
  return {
      {.path = "resources", .type = Type::kSection, .help = "Where and how the trials run.",
       .default_value = json::object(), .aliases = {"resource", "cluster", "compute"}},
      {.path = "resources.backend",
       .type = Type::kEnum,
       .help = "How trainer groups are started: local (processes on this machine) or slurm (job steps of the SLURM "
               "allocation the master runs in: `hpctune slurm submit`, or `hpctune run` inside salloc). With slurm, the "
               "default resources.bind becomes tcp://<the batch host's address>:* (the first non-loopback IPv4 "
               "address its host name resolves to), so that the compute nodes reach the master.",
       .default_value = "local",
       // The launch registry's names, declared once (launch/backends.h).
       .choices = std::vector<std::string>(std::begin(launch::kBackendNames), std::end(launch::kBackendNames)),
       .aliases = {"launcher", "executor"}},
      {.path = "resources.groups", .type = Type::kInt,
       .help = "Number of trainer groups, i.e. of trials running at the same time.", .default_value = 1, .min = 1,
       .max = 4096, .aliases = {"workers", "parallel", "parallelism", "concurrency", "n_jobs"}},
      {.path = "resources.ranks", .type = Type::kSection, .help = "Processes per trainer group.",
       .default_value = json::object(), .aliases = {"processes", "procs"}},
      {.path = "resources.ranks.data", .type = Type::kInt,
       .help = "Data-parallel ranks: processes that train one trial together.", .default_value = 1, .min = 1,
       .max = 65536, .aliases = {"data_parallel", "dp"}},
      {.path = "resources.ranks.model", .type = Type::kInt, .help = "Model-parallel ranks per data-parallel rank.",
       .default_value = 1, .min = 1, .max = 1024, .aliases = {"model_parallel", "mp", "tensor"}},
      {.path = "resources.threads", .type = Type::kInt,
       .help = "Compute threads per rank (0 = the machine's cores shared among the ranks).", .default_value = 0,
       .min = 0, .max = 1024, .aliases = {"num_threads", "omp_threads", "cpus"}},
      {.path = "resources.gpus_per_rank", .type = Type::kInt,
       .help = "GPUs each rank of a trainer group gets (0 = none: the groups run as if there were no GPU). The local "
               "backend hands each rank its devices in CUDA_VISIBLE_DEVICES (the group's in HPCTUNE_GPUS) and starts a "
               "group only once its gpus_per_rank x ranks devices are free; SLURM allocates them (--gpus-per-task).",
       .default_value = 0, .min = 0, .max = 64, .aliases = {"gpus_per_task", "gpus_per_trial", "gpu", "gpus_per_worker"}},
      {.path = "resources.gpus", .type = Type::kValue,
       .help = "The node's GPUs that the groups share: auto (the indices `nvidia-smi --query-gpu=index` lists, none "
               "when it is absent, fails or takes over 10 s) or a list of distinct device ids, e.g. [0, 1, 2, 3].",
       .default_value = "auto", .aliases = {"devices", "gpu_ids", "cuda_visible_devices"}},
      {.path = "resources.trials_per_gpu", .type = Type::kInt,
       .help = "Trainer groups (so trials) that may share one GPU at once; a group waits for a device with room.",
       .default_value = 1, .min = 1, .max = 1024, .aliases = {"groups_per_gpu", "gpu_sharing", "packing"}},
      // Read by config/campaign_checks.cpp into Resources::pack (scheduler/launcher_options.cpp: pack_slots_of).
      {.path = "resources.pack", .type = Type::kEnum,
       .help = "auto: with trials_per_gpu k > 1, the local backend, one-rank groups with GPUs and a trainer kind "
               "that packs (mlp with device: gpu), k groups share one worker process that trains their mlp trials' epochs as one fused "
               "model on its GPU (trials that do not fit train alone, the log says why); off: one process per group.",
       .default_value = "auto", .choices = {"auto", "off"}, .aliases = {"packed", "packed_trials", "fuse_trials"}},
      {.path = "resources.mps", .type = Type::kEnum,
       .help = "NVIDIA MPS for the groups that share a GPU (the local backend): auto starts a private MPS control "
               "daemon (nvidia-cuda-mps-control -d, found in PATH) before the first group when trials_per_gpu > 1 "
               "and the groups get GPUs (not when they are packed: resources.pack), with its pipe and log directories in a fresh directory of this user's "
               "(0700), passes CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY to every group (and so to the "
               "programs they run), and sends it quit when the campaign ends (also when it fails or is stopped); "
               "without the program it warns and runs without MPS. on: always (with the local backend), an error "
               "without the program. off: never. Not started with backend slurm (README: MPS).",
       .default_value = "auto", .choices = {"auto", "on", "off"}, .aliases = {"cuda_mps", "multi_process_service"}},
      {.path = "resources.heartbeat_interval", .type = Type::kDuration,
       .help = "How often a trainer group tells the master it is alive.", .default_value = 1, .min = 0.01, .max = 3600,
       .aliases = {"heartbeat", "heartbeat_period"}},
      {.path = "resources.heartbeat_timeout", .type = Type::kDuration,
       .help = "A group silent for this long is lost and its trial is run again; must be greater than "
               "heartbeat_interval.", .default_value = 10, .min = 0.1, .max = 7 * kDay,
       .aliases = {"heartbeat_deadline", "liveness_timeout"}},
      {.path = "resources.max_group_restarts", .type = Type::kInt,
       .help = "How often a lost trainer group is started again before the campaign stops.", .default_value = 3,
       .min = 0, .max = 1000, .aliases = {"restarts", "max_restarts", "group_restarts"}},
      {.path = "resources.startup_timeout", .type = Type::kDuration,
       .help = "How long a new trainer group may take to connect to the master.", .default_value = 60, .min = 0.1,
       .max = 7 * kDay, .aliases = {"start_timeout", "connect_timeout", "launch_timeout"}},
      {.path = "resources.bind", .type = Type::kString,
       .help = "The address the master listens on for its trainer groups: tcp://HOST:PORT (HOST an address, a host "
               "or interface name, [IPv6] or * for every interface; PORT 1..65535 or * for a free one) or "
               "ipc://PATH. The default, ipc://*, is a Unix socket in a fresh directory (0700) that only this user "
               "can reach, made when the master starts and removed when it stops; any other address, loopback "
               "included (every local user can reach a TCP port), gets ZeroMQ CURVE encryption and authentication "
               "(resources.security). `hpctune run --bind` and `resume --bind` override it.",
       .default_value = "ipc://*",
       .aliases = {"listen", "address", "master_address", "endpoint", "bind_address"}},
      {.path = "resources.security", .type = Type::kEnum,
       .help = "How the master's transport is protected: auto (ZeroMQ CURVE on every address but the default "
               "private ipc socket, which the file system already keeps from other users), curve (always) or none "
               "(no CURVE: on any address but the private ipc socket the workers then prove themselves with the "
               "campaign secret in clear text at the handshake (ZeroMQ PLAIN), the traffic is not encrypted, and "
               "every run says so). With CURVE the "
               "campaign's keys are kept in <storage>.keys/ (0700, its files 0600; created on the first run, "
               "reused on resume) and only the campaign's workers are admitted.",
       .default_value = "auto", .choices = {"auto", "curve", "none"},
       .aliases = {"encryption", "curve", "auth", "authentication", "transport_security"}},
      {.path = "resources.slurm", .type = Type::kSection,
       .help = "backend slurm: how trainer groups run as job steps of a SLURM allocation (`hpctune slurm submit` "
               "writes the batch script; `hpctune run` inside an allocation uses its nodes).",
       .default_value = json::object(), .aliases = {"sbatch", "cluster"}},
      {.path = "resources.slurm.partition", .type = Type::kString, .help = "sbatch --partition (\"\" = the site's default).",
       .default_value = "", .aliases = {"queue", "p"}},
      {.path = "resources.slurm.account", .type = Type::kString, .help = "sbatch --account (\"\" = the user's default).",
       .default_value = "", .aliases = {"project", "allocation", "A"}},
      {.path = "resources.slurm.qos", .type = Type::kString, .help = "sbatch --qos (\"\" = none).", .default_value = ""},
      {.path = "resources.slurm.constraint", .type = Type::kString,
       .help = "sbatch --constraint: node features the compute nodes must have (\"\" = none).", .default_value = "",
       .aliases = {"features", "C"}},
      {.path = "resources.slurm.ranks_per_node", .type = Type::kInt,
       .help = "Ranks of a trainer group on one node: a group of data x model ranks takes ceil(ranks / "
               "ranks_per_node) whole nodes.", .default_value = 1, .min = 1, .max = 4096,
       .aliases = {"tasks_per_node", "ntasks_per_node"}},
      {.path = "resources.slurm.launch", .type = Type::kEnum,
       .help = "How a job step starts a group's ranks: srun (srun --mpi=<mpi> starts them) or mpirun (srun starts "
               "one process that runs mpirun over the step's nodes: for an MPI that the site's srun cannot start, "
               "such as Debian's Open MPI).", .default_value = "srun", .choices = {"srun", "mpirun"},
       .aliases = {"launcher", "starter"}},
      {.path = "resources.slurm.mpi", .type = Type::kString,
       .help = "srun --mpi= for the steps (cray_shasta on HPE Cray EX, pmix, pmi2; \"\" = the site's default).",
       .default_value = "", .aliases = {"mpi_type", "pmi"}},
      {.path = "resources.slurm.gres", .type = Type::kString, .help = "sbatch and srun --gres, e.g. gpu:4 (\"\" = none).",
       .default_value = ""},
      {.path = "resources.slurm.gpus_per_task", .type = Type::kInt,
       .help = "srun --gpus-per-task (0 = none); resources.gpus_per_rank says the same for every backend (both "
               "given: the same number).",
       .default_value = 0, .min = 0, .max = 1024},
      {.path = "resources.slurm.cpus_per_task", .type = Type::kInt, .help = "srun --cpus-per-task (0 = SLURM's default).",
       .default_value = 0, .min = 0, .max = 65536},
      {.path = "resources.slurm.setup", .type = Type::kValueList,
       .help = "Shell lines run before the master and before each job step, in order (module load ..., export ...).",
       .default_value = json::array(), .aliases = {"modules", "prologue", "before"}},
      {.path = "resources.slurm.master", .type = Type::kSection,
       .help = "A master node of another type: a heterogeneous job whose first component is one node of this "
               "partition or constraint, for the master alone.", .default_value = json::object(),
       .aliases = {"batch_host", "head"}},
      {.path = "resources.slurm.master.partition", .type = Type::kString, .help = "The master node's partition.",
       .default_value = ""},
      {.path = "resources.slurm.master.constraint", .type = Type::kString, .help = "The master node's features.",
       .default_value = ""},
      {.path = "resources.slurm.signal_before", .type = Type::kDuration,
       .help = "How long before the time limit (or on pre-emption) SLURM sends the batch script USR1 "
               "(--signal=B:USR1@<s>): the master stops dispatching, lets trials checkpoint and records everything.",
       .default_value = 120, .min = 10, .max = 7 * kDay, .aliases = {"warning", "signal"}},
      {.path = "resources.slurm.requeue", .type = Type::kBool,
       .help = "On the warning signal, requeue the job (scontrol requeue): the requeued job resumes the campaign.",
       .default_value = true, .aliases = {"resubmit"}},
  };
}

// stages (the workflow: scheduler/stages.h, workflow/).
std::vector<Setting> stages_declarations() {
  return {
      {.path = "stages", .type = Type::kList,
       .help = "A workflow of stages instead of one search: each stage has a name, a kind and the stages it "
               "consumes (from); objective, trainer and resources above are every stage's defaults, and a stage may "
               "override trainer keys. Stages run in dependency order, independent ones at the same time on the same "
               "trainer groups. Each item has these keys:",
       .aliases = {"workflow", "pipeline", "steps"},
       .example = kStagesExample, .reference_commented = true},
      {.path = "stages[].name", .type = Type::kString,
       .help = "The stage's name, unique in the campaign (letters, digits, '.', '_', '-').", .required = true},
      {.path = "stages[].kind", .type = Type::kEnum,
       .choices = {},  // build_table(): the kinds of workflow/stage_settings.h, with their help
       .required = true, .aliases = {"type"}},
      {.path = "stages[].from", .type = Type::kValue,
       .help = "The stage, or list of stages, whose trials this one consumes; it starts once they completed.",
       .aliases = {"after", "inputs", "depends_on", "needs"}},
      {.path = "stages[].trainer", .type = Type::kValue,
       .help = "Trainer keys laid over the top-level trainer for this stage's trials (with another kind: the whole "
               "trainer). A transfer stage's are its fine-tuning settings: they win over the values its source "
               "trial was searched with (lr, batch_size, ...), which it keeps otherwise."},
      {.path = "stages[].search", .type = Type::kValue,
       .help = "search: the stage's search, with the keys of the top-level search (transfer: an optional nested "
               "search over the fine-tuning settings).",
       .scope = {"stages[].kind", {}}},  // build_table(): the kinds with a search (workflow/stage_settings.h)
      {.path = "stages[].space", .type = Type::kValue,
       .help = "The stage's space, as the top-level space (pbt: the hyperparameters it explores).",
       .scope = {"stages[].kind", {}}},  // build_table(): the kinds with a search or a space
      {.path = "stages[].early_stopping", .type = Type::kValue, .help = "The stage's early stopping, as the top level's.",
       .scope = {"stages[].kind", {}}},  // build_table(): the kinds with a search of their own
      // The keys of each kind (method, max_size, ..., population, ...) are declared beside the stages
      // (workflow/stage_settings.h) and imported by build_table() after stages[].early_stopping; the
      // sections below are the config's: their keys are the kinds' too (retrain.top) or are read by
      // a reader of their own (schedule: config/pbt_schedule.h).
      {.path = "stages[].retrain", .type = Type::kSection,
       .help = "ensemble: new members trained as trials in parallel, {top: k, seeds: n}: the k best configurations "
               "of `from`, each under n new seeds; the members are then these and the trials of `from`.",
       .scope = {"stages[].kind", {"ensemble"}}},
      {.path = "stages[].schedule", .type = Type::kValue,
       .help = "pbt: replay a schedule of hyperparameters instead of exploring: a list of {from_step, to_step, "
               "params}, as `hpctune schedule DB --format yaml` prints a PBT stage's best member's; every member "
               "trains through its intervals in turn (population: how many seeds).",
       .scope = {"stages[].kind", {"pbt"}}},
  };
}

// The table's own declarations, section by section in reference order.
std::vector<Setting> declarations() {
  std::vector<Setting> out;
  for (auto* section : {&campaign_declarations, &objective_declarations, &space_declarations, &search_declarations,
                        &early_stopping_declarations, &trainer_declarations, &resources_declarations,
                        &stages_declarations}) {
    std::vector<Setting> part = section();
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}
#pragma GCC diagnostic pop

// --- imported declarations -----------------------------------------------------------------------

// "the first rung, in steps" -> "The first rung, in steps."
// Identifiers stay as they are: "ucb: minimize ..." is not turned into "Ucb: ...".
std::string sentence(std::string text) {
  const std::string first_word = text.substr(0, text.find(' '));
  const bool word = !first_word.empty() && first_word.back() != ':' &&
                    std::all_of(first_word.begin(), first_word.end() - 1,
                                [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
  if (word) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  if (!text.empty() && text.back() != '.' && text.back() != '?') text += '.';
  return text;
}

// A declaration of common/settings.h as a key of the table. The algorithms' help texts are
// fragments ("members per island"), made sentences here; the trainers' are sentences already.
Setting imported(const SettingDecl& d, std::string path, Scope scope, bool make_sentence) {
  Setting s;
  s.path = std::move(path);
  switch (d.type) {
    case SettingType::kInt: s.type = Type::kInt; break;
    case SettingType::kFloat: s.type = Type::kNumber; break;
    case SettingType::kBool: s.type = Type::kBool; break;
    case SettingType::kString: s.type = d.choices.empty() ? Type::kString : Type::kEnum; break;
    case SettingType::kDuration: s.type = Type::kDuration; break;
    case SettingType::kIntList: s.type = Type::kIntList; break;
    case SettingType::kValueList: s.type = Type::kValueList; break;
    case SettingType::kStringMap: s.type = Type::kStringMap; break;
    case SettingType::kCommandLine: s.type = Type::kCommandLine; break;
  }
  s.help = make_sentence ? sentence(d.help) : d.help;
  s.default_value = d.default_value;
  if ((s.type == Type::kNumber || s.type == Type::kDuration) && s.default_value.is_number())
    s.default_value = s.default_value.get<double>();
  if (std::isfinite(d.min)) s.min = d.min;
  if (std::isfinite(d.max)) s.max = d.max;
  s.min_exclusive = d.min_exclusive;
  s.max_exclusive = d.max_exclusive;
  s.choices = d.choices;
  s.required = d.required;
  s.aliases = d.aliases;
  s.example = d.example;
  s.default_note = d.default_note;
  s.scope = std::move(scope);
  // A default computed from other keys (trainer.data_seed: the campaign's seed) or none at all
  // (derived): the reference shows the key commented out, with the note.
  if (!s.required && (s.default_value.is_null() || !s.default_note.empty())) {
    if (s.default_note.empty()) s.default_note = "derived";
    s.reference_commented = true;
  }
  return s;
}

bool same_declaration(const Setting& a, const Setting& b) {
  return a.path == b.path && a.type == b.type && a.help == b.help && a.default_value == b.default_value &&
         a.min == b.min && a.max == b.max && a.min_exclusive == b.min_exclusive && a.max_exclusive == b.max_exclusive &&
         a.choices == b.choices && a.required == b.required && a.aliases == b.aliases && a.example == b.example &&
         a.default_note == b.default_note;
}

// The settings of each value of `selector` (an enum), imported under `prefix`; a declaration
// identical for several values becomes one entry scoped to all of them. Keys named in `skip` are
// set elsewhere (search.init). Values the build does not know are left out of `known`.
template <typename Lookup>
std::vector<Setting> import_scoped(const Setting& selector, const std::string& prefix,
                                   const std::vector<std::string>& skip, Lookup lookup,
                                   std::vector<std::string>& known, bool make_sentences = true) {
  std::vector<Setting> out;
  for (const auto& value : selector.choices) {
    auto decls = lookup(value);
    if (!decls.ok()) continue;
    known.push_back(value);
    for (const auto& d : decls.value()) {
      if (std::find(skip.begin(), skip.end(), d.key) != skip.end()) continue;
      Setting s = imported(d, prefix + d.key, Scope{selector.path, {value}}, make_sentences);
      bool merged = false;
      for (auto& existing : out) {
        if (same_declaration(existing, s)) {
          existing.scope.values.push_back(value);
          merged = true;
          break;
        }
      }
      if (!merged) out.push_back(std::move(s));
    }
  }
  return out;
}


std::vector<Setting> build_table() {
  std::vector<Setting> table;
  std::vector<Setting> decls = declarations();
  // search.<key> declarations (init) win over an algorithm's setting of the same name: the value
  // of search.init is handed to the algorithm as its setting (campaign_checks.cpp).
  std::vector<std::string> search_keys;
  for (const auto& d : decls)
    if (d.path.rfind("search.", 0) == 0 && d.path.find('.', 7) == std::string::npos)
      search_keys.push_back(d.path.substr(7));
  for (auto& s : decls) {
    const std::string path = s.path;
    table.push_back(std::move(s));
    if (path == "search.settings") {
      const Setting* algorithm = nullptr;
      for (const auto& d : table)
        if (d.path == "search.algorithm") algorithm = &d;
      std::vector<std::string> known;
      auto imports = import_scoped(*algorithm, "search.settings.", search_keys,
                                   [](const std::string& a) { return search::searcher_settings(a); }, known);
      table.back().closed_when = Scope{"search.algorithm", known};
      // search.init's default: each algorithm's own.
      std::vector<std::string> defaults;
      for (const auto& a : known) {
        const auto algorithm_decls = search::searcher_settings(a);
        for (const auto& d : algorithm_decls.value())
          if (d.key == "init" && d.default_value.is_string())
            defaults.push_back(d.default_value.get<std::string>() + " (" + a + ")");
      }
      for (auto& d : table)
        if (d.path == "search.init") d.default_note = defaults.empty() ? "none" : join(defaults, ", ");
      for (auto& i : imports) table.push_back(std::move(i));
    } else if (path == "trainer.kind") {
      // The kinds and their settings, declared beside each trainer (trainers/trainer_settings.h).
      Setting& kind = table.back();
      std::vector<std::string> kinds;
      for (const auto& k : trainers::trainer_catalog()) {
        kind.choices.push_back(k.kind);
        kinds.push_back(k.kind + " (" + k.help + ")");
      }
      const std::string last = kinds.empty() ? "" : kinds.back();
      if (!kinds.empty()) kinds.pop_back();
      kind.help = "The trainer: " + (kinds.empty() ? last : join(kinds, ", ") + " or " + last) +
                  ". The other keys of this section are its settings.";
      std::vector<std::string> known;
      auto imports = import_scoped(
          kind, "trainer.", {"kind"},
          [](const std::string& k) -> Result<std::vector<SettingDecl>> {
            HPCTUNE_ASSIGN(const std::vector<SettingDecl>* decls, trainers::trainer_setting_specs(k));
            return *decls;
          },
          known, /*make_sentences=*/false);
      for (auto& i : imports) table.push_back(std::move(i));
    } else if (path == "stages[].kind") {
      // The stage kinds, declared beside the stages (workflow/stage_settings.h).
      Setting& kind = table.back();
      std::vector<std::string> kinds;
      for (const auto& k : workflow::stage_kinds()) {
        kind.choices.push_back(k.kind);
        kinds.push_back(k.kind + " (" + k.help + ")");
      }
      const std::string last = kinds.empty() ? "" : kinds.back();
      if (!kinds.empty()) kinds.pop_back();
      kind.help = (kinds.empty() ? last : join(kinds, ", ") + " or " + last) + ".";
    } else if (path == "stages[].early_stopping") {
      // Which kinds have the keys search, space and early_stopping (workflow/stage_settings.h).
      using workflow::StageSearch;
      for (auto& d : table) {
        for (const auto& k : workflow::stage_kinds()) {
          const bool has = d.path == "stages[].search"
                               ? k.search == StageSearch::kRequired || k.search == StageSearch::kOptional
                           : d.path == "stages[].space"          ? k.search != StageSearch::kNone
                           : d.path == "stages[].early_stopping" ? k.search == StageSearch::kRequired
                                                                 : false;
          if (has) d.scope.values.push_back(k.kind);
        }
      }
      // Each stage kind's own keys (a key "a.b" is imported below its section stages[].a).
      const Setting* kind = nullptr;
      for (const auto& d : table)
        if (d.path == "stages[].kind") kind = &d;
      std::vector<std::string> known;
      auto imports = import_scoped(
          *kind, "stages[].", {},
          [](const std::string& k) -> Result<std::vector<SettingDecl>> {
            const workflow::StageKind* decl = workflow::find_stage_kind(k);
            if (decl == nullptr) return err(Errc::kNotFound, "no stage kind " + k);
            std::vector<SettingDecl> top;
            for (const auto& d : decl->settings)
              if (d.key.find('.') == std::string::npos) top.push_back(d);
            return top;
          },
          known, /*make_sentences=*/false);
      for (auto& i : imports) table.push_back(std::move(i));
    } else if (path.rfind("stages[].", 0) == 0 && table.back().type == Type::kSection) {
      // A stage kind's section (retrain): its keys, declared with the kind.
      const std::string section = path.substr(9) + ".";
      for (const auto& k : workflow::stage_kinds())
        for (const auto& d : k.settings)
          if (d.key.rfind(section, 0) == 0) table.push_back(imported(d, "stages[]." + d.key, Scope{}, false));
    } else if (path == "early_stopping.kind") {
      std::vector<std::string> known;
      auto imports = import_scoped(table.back(), "early_stopping.", {"kind"},
                                   [](const std::string& k) { return search::stopper_settings(k); }, known);
      for (auto& i : imports) table.push_back(std::move(i));
    }
  }
  return table;
}

std::string parent_path(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(path.substr(0, dot));
}

bool is_whole(double x) { return std::isfinite(x) && std::floor(x) == x; }

std::string bounds_text(const Setting& s) {
  const std::string lo = s.min ? format_number(*s.min) : "";
  const std::string hi = s.max ? format_number(*s.max) : "";
  if (s.min && s.max && !s.min_exclusive && !s.max_exclusive) return lo + ".." + hi;
  std::string out;
  if (s.min) out += (s.min_exclusive ? "> " : ">= ") + lo;
  if (s.max) out += (out.empty() ? "" : " and ") + std::string(s.max_exclusive ? "< " : "<= ") + hi;
  return out;
}

// How a JSON value reads in a message: 'text' for strings, a list, a map, nothing.
std::string shown(const json& v) {
  if (v.is_string()) return "'" + v.get<std::string>() + "'";
  if (v.is_null()) return "nothing";
  if (v.is_object()) return "a map";
  if (v.is_array()) return "a list";
  return to_yaml_flow(v);
}

Error problem(std::string what) { return err(Errc::kConfig, std::move(what)); }

Status check_bounds(const Setting& s, double x, const std::string& text) {
  if (s.min && (s.min_exclusive ? x <= *s.min : x < *s.min))
    return s.min_exclusive ? problem(text + " must be greater than " + format_number(*s.min))
                           : problem(text + " is below the minimum " + format_number(*s.min));
  if (s.max && (s.max_exclusive ? x >= *s.max : x > *s.max))
    return s.max_exclusive ? problem(text + " must be less than " + format_number(*s.max))
                           : problem(text + " is above the maximum " + format_number(*s.max));
  return Status::Ok();
}

std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (is_whole(x) && std::fabs(x) < 9.2e18) return static_cast<int64_t>(x);
  }
  return std::nullopt;
}

Result<json> check_int(const Setting& s, const json& v) {
  const auto i = as_int(v);
  if (!i) {
    if (v.is_number_float() && is_whole(v.get<double>()))
      return problem(shown(v) + " is too large for a 64-bit integer");
    return problem("expected an integer, got " + shown(v));
  }
  HPCTUNE_TRY(check_bounds(s, static_cast<double>(*i), std::to_string(*i)));
  return json(*i);
}

}  // namespace

// --- public helpers ------------------------------------------------------------------------------

const char* type_name(Type type) noexcept {
  switch (type) {
    case Type::kSection: return "section";
    case Type::kList: return "list";
    case Type::kSpace: return "space";
    case Type::kString: return "string";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kNumber: return "number";
    case Type::kDuration: return "duration";
    case Type::kEnum: return "enum";
    case Type::kIntList: return "int list";
    case Type::kStringMap: return "string map";
    case Type::kCommandLine: return "command line";
    case Type::kValue: return "value";
    case Type::kValueList: return "value list";
    case Type::kCondition: return "condition";
  }
  return "unknown";
}

bool Scope::contains(std::string_view value) const {
  return std::find(values.begin(), values.end(), value) != values.end();
}

namespace {
std::vector<Setting>& table_storage() {
  static std::vector<Setting> table = build_table();
  return table;
}
}  // namespace

const std::vector<Setting>& settings() { return table_storage(); }

void reload_settings_for_testing() { table_storage() = build_table(); }

std::vector<const Setting*> children(std::string_view section) {
  std::vector<const Setting*> out;
  for (const auto& s : settings())
    if (parent_path(s.path) == section) out.push_back(&s);
  return out;
}

std::vector<const Setting*> find_settings(std::string_view path) {
  std::vector<const Setting*> out;
  for (const auto& s : settings())
    if (s.path == path) out.push_back(&s);
  return out;
}

std::string_view leaf_name(std::string_view path) noexcept {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string describe_type(const Setting& s) {
  const std::string bounds = bounds_text(s);
  auto with_bounds = [&](std::string base) { return bounds.empty() ? base : base + " " + bounds; };
  switch (s.type) {
    case Type::kSection: return "section";
    case Type::kList: {
      std::vector<std::string> keys;
      for (const auto* c : children(s.path + "[]")) keys.emplace_back(leaf_name(c->path));
      return "list of {" + join(keys, ", ") + "}";
    }
    case Type::kSpace: return "map of name -> spec or value";
    case Type::kString: return "string";
    case Type::kBool: return "true | false";
    case Type::kInt: return with_bounds("integer");
    case Type::kNumber: return with_bounds("number");
    case Type::kDuration:
      return "seconds or a duration such as 90s, 10m, 2h" + (bounds.empty() ? "" : "; " + bounds);
    case Type::kEnum: return join(s.choices, " | ");
    case Type::kIntList:
      return "integer or list of integers" + (bounds.empty() ? "" : ", each " + bounds);
    case Type::kStringMap: return "map of strings";
    case Type::kCommandLine: return "a string, or a list of strings";
    case Type::kValue: return "any value";
    case Type::kValueList: return "list of values";
    case Type::kCondition: return "{parameter: value or [values]}";
  }
  return "";
}

std::string describe(const Setting& s) {
  std::string out = describe_type(s);
  if (s.required) return out + ", required";
  if (!s.default_note.empty()) return out + ", default: " + s.default_note;
  if (!s.default_value.is_null() && s.type != Type::kSection && s.type != Type::kSpace)
    return out + ", default: " + to_yaml_flow(s.default_value);
  return out;
}

Result<json> check_value(const Setting& s, const json& v) {
  switch (s.type) {
    case Type::kSection:
    case Type::kList:
    case Type::kSpace:
      return err(Errc::kInternal, "check_value: " + s.path + " is not a leaf setting");
    case Type::kString:
      if (!v.is_string()) return problem("expected a string, got " + shown(v));
      return v;
    case Type::kBool:
      if (!v.is_boolean()) return problem("expected true or false, got " + shown(v));
      return v;
    case Type::kInt: return check_int(s, v);
    case Type::kNumber: {
      if (!v.is_number()) return problem("expected a number, got " + shown(v));
      const double x = v.get<double>();
      if (!std::isfinite(x)) return problem("expected a finite number, got " + shown(v));
      HPCTUNE_TRY(check_bounds(s, x, to_yaml_flow(v)));
      return json(x);
    }
    case Type::kDuration: {
      double x = 0;
      std::string text;
      if (v.is_number()) {
        x = v.get<double>();
        text = to_yaml_flow(v);
        if (!std::isfinite(x)) return problem("expected a finite number of seconds, got " + text);
      } else if (v.is_string()) {
        HPCTUNE_ASSIGN(x, parse_duration(v.get<std::string>()));
        text = "'" + v.get<std::string>() + "'";
      } else {
        return problem("expected seconds or a duration such as 90s, 10m, 2h, got " + shown(v));
      }
      if (auto bounded = check_bounds(s, x, text); !bounded.ok())
        return problem(bounded.error().message() + " s (the range is " + bounds_text(s) + " s)");
      if (x > 0 && x < 1e-3) return problem(text + " s is less than 1 ms, the shortest duration (0 or at least 0.001)");
      return json(x);
    }
    case Type::kEnum: {
      const std::string valid = join(s.choices, ", ");
      if (!v.is_string()) return problem("expected one of " + valid + ", got " + shown(v));
      const auto text = v.get<std::string>();
      if (std::find(s.choices.begin(), s.choices.end(), text) != s.choices.end()) return v;
      std::vector<Candidate> candidates;
      for (const auto& c : s.choices) candidates.push_back({c, c});
      std::string message = "unknown value '" + text + "'; expected one of " + valid;
      if (auto near = did_you_mean(text, candidates)) message += " (did you mean '" + *near + "'?)";
      return problem(std::move(message));
    }
    case Type::kIntList: {
      if (v.is_array()) {
        // An empty list is a value too: mlp's hidden: [] is a network without hidden layers.
        json out = json::array();
        for (const auto& item : v) {
          HPCTUNE_ASSIGN(auto i, check_int(s, item));
          out.push_back(i);
        }
        return out;
      }
      if (!v.is_number()) return problem("expected an integer or a list of integers, got " + shown(v));
      return check_int(s, v);
    }
    case Type::kStringMap: {
      if (!v.is_object()) return problem("expected a map of strings, got " + shown(v));
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (const std::string bad = string_map_name_problem(it.key()); !bad.empty()) return problem(it.key() + ": " + bad);
        if (!it.value().is_string()) return problem(it.key() + ": expected a string, got " + shown(it.value()));
      }
      return v;
    }
    case Type::kValue: return v;
    case Type::kCommandLine: {
      const bool list = v.is_array() && !v.empty() &&
                        std::all_of(v.begin(), v.end(), [](const json& item) { return item.is_string(); });
      if (!(v.is_string() && !v.get_ref<const std::string&>().empty()) && !list)
        return problem("expected a command line: a string, or a non-empty list of strings, got " + shown(v));
      return v;
    }
    case Type::kValueList:
      if (!v.is_array()) return problem("expected a list of values, got " + shown(v));
      // Empty only where the setting's default is the empty list (resources.slurm.setup: no lines);
      // without that, every config failed on the default ("the default of ... is invalid").
      if (v.empty() && !(s.default_value.is_array() && s.default_value.empty()))
        return problem("the list is empty; give at least one value");
      return v;
    case Type::kCondition: {
      if (!v.is_object() || v.size() != 1)
        return problem("expected {parameter: value} or {parameter: [values]}, got " + shown(v));
      json values = v.begin().value();
      if (!values.is_array()) values = json::array({values});
      if (values.empty()) return problem("the condition lists no values");
      return json{{v.begin().key(), values}};
    }
  }
  return err(Errc::kInternal, "check_value: unknown type");
}

Result<double> parse_duration(std::string_view text) {
  auto bad = [&] {
    return err(Errc::kConfig, "bad duration '" + std::string(text) +
                                  "' (expected seconds or a number with a unit: 90s, 10m, 2h, 1h30m, 500ms, 1d)");
  };
  std::size_t i = 0;
  auto skip_spaces = [&] {
    while (i < text.size() && text[i] == ' ') ++i;
  };
  skip_spaces();
  if (i == text.size()) return bad();
  double total = 0;
  bool first = true;
  while (i < text.size()) {
    const std::size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == start) return bad();
    double number = 0;
    const auto [end, ec] = std::from_chars(text.data() + start, text.data() + i, number);
    if (ec != std::errc() || end != text.data() + i) return bad();
    skip_spaces();
    const std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    double scale = 0;
    if (unit.empty()) {
      // A bare number is seconds, but only on its own: "1h30" is more likely a typo than 1h+30s.
      if (!first) return bad();
      scale = 1;
    } else if (unit == "ms") scale = 1e-3;
    else if (unit == "s" || unit == "sec" || unit == "secs") scale = 1;
    else if (unit == "m" || unit == "min" || unit == "mins") scale = 60;
    else if (unit == "h" || unit == "hr" || unit == "hrs") scale = 3600;
    else if (unit == "d") scale = 86400;
    else return bad();
    total += number * scale;
    skip_spaces();
    if (unit.empty() && i < text.size()) return bad();
    first = false;
  }
  if (!std::isfinite(total)) return bad();
  return total;
}

std::vector<Candidate> candidates_of(const std::vector<const Setting*>& decls) {
  std::vector<Candidate> out;
  for (const auto* s : decls) out.push_back({std::string(leaf_name(s->path)), std::string(leaf_name(s->path))});
  for (const auto* s : decls)
    for (const auto& alias : s->aliases) out.push_back({alias, std::string(leaf_name(s->path))});
  return out;
}

json resolve_plain_scalar(std::string_view t) {
  if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") return nullptr;
  if (t == "true" || t == "True" || t == "TRUE") return true;
  if (t == "false" || t == "False" || t == "FALSE") return false;
  std::string_view body = t;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF")
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (t == ".nan" || t == ".NaN" || t == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  auto all_of = [](std::string_view s, auto pred) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)); });
  };
  // Integers: decimal (signed), 0x hex and 0o octal (unsigned), as in the YAML 1.2 core schema.
  int base = 10;
  std::string_view digits = body;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'o')) {
    base = t[1] == 'x' ? 16 : 8;
    digits = t.substr(2);
    negative = false;
    if (!all_of(digits, [&](unsigned char c) { return base == 16 ? std::isxdigit(c) != 0 : (c >= '0' && c <= '7'); }))
      return std::string(t);
  }
  if (base != 10 || all_of(body, [](unsigned char c) { return std::isdigit(c) != 0; })) {
    uint64_t magnitude = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
    if (ec == std::errc() && end == digits.data() + digits.size()) {
      if (!negative && magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return static_cast<int64_t>(magnitude);
      if (negative && magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1)
        return magnitude == static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1
                   ? std::numeric_limits<int64_t>::min()
                   : -static_cast<int64_t>(magnitude);
    }
    if (base != 10) return std::string(t);
    // Too large for 64 bits: falls through to a double.
  }
  // Floats: [-+]? ( . digits | digits ( . digits? )? ) ( [eE] [-+]? digits )?
  std::size_t i = 0;
  const std::size_t n = body.size();
  std::size_t mantissa_digits = 0;
  while (i < n && std::isdigit(static_cast<unsigned char>(body[i]))) ++i, ++mantissa_digits;
  if (i < n && body[i] == '.') {
    ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(body[i]))) ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return std::string(t);
  if (i < n && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < n && (body[i] == '+' || body[i] == '-')) ++i;
    const std::size_t exponent_start = i;
    while (i < n && std::isdigit(static_cast<unsigned char>(body[i]))) ++i;
    if (i == exponent_start) return std::string(t);
  }
  if (i != n) return std::string(t);
  double x = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + n, x);
  if (end != body.data() + n || (ec != std::errc() && ec != std::errc::result_out_of_range)) return std::string(t);
  if (ec == std::errc::result_out_of_range) {
    // Overflow reads as infinity, underflow as zero, as strtod does.
    x = (body.find_first_of("eE") != std::string_view::npos && body[body.find_first_of("eE") + 1] == '-')
            ? 0.0
            : std::numeric_limits<double>::infinity();
  }
  return negative ? -x : x;
}

namespace {

bool plain_safe(const std::string& s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ') return false;
  if (std::string_view("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string_view::npos) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f || std::string_view(",[]{}").find(static_cast<char>(c)) != std::string_view::npos)
      return false;
  if (s.find(": ") != std::string::npos || s.find(" #") != std::string::npos || s.back() == ':') return false;
  return resolve_plain_scalar(s).is_string();
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string to_yaml_flow(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float: return format_number(v.get<double>());
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      return plain_safe(s) ? s : quoted(s);
    }
    case json::value_t::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + to_yaml_flow(v[i]);
      return out + "]";
    }
    case json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        out += (first ? "" : ", ") + to_yaml_flow(json(it.key())) + ": " + to_yaml_flow(it.value());
        first = false;
      }
      return out + "}";
    }
    default: return quoted(v.dump());
  }
}

bool free_space_name(std::string_view trainer_kind, std::string_view name) {
  const auto* can = trainers::trainer_capabilities(trainer_kind);
  if (can == nullptr) return false;
  if (can->params == trainers::TrainerParams::kAny) return true;
  if (can->params == trainers::TrainerParams::kTestFunctionArgs)
    return name.size() >= 2 && name[0] == 'x' && std::all_of(name.begin() + 1, name.end(), [](char c) {
             return std::isdigit(static_cast<unsigned char>(c)) != 0;
           });
  return false;
}

// --- the reference -------------------------------------------------------------------------------

namespace {

constexpr std::size_t kWidth = 100;

// `text` as comment lines of at most kWidth columns: `first` before the first line, `rest`
// before the others (both include the "# ").
void wrap(std::string& out, const std::string& text, const std::string& first, const std::string& rest) {
  std::string line = first;
  bool empty = true;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j == i) break;
    const std::string word = text.substr(i, j - i);
    if (!empty && line.size() + 1 + word.size() > kWidth) {
      out += line + "\n";
      line = rest;
      empty = true;
    }
    line += (empty ? "" : " ") + word;
    empty = false;
    i = j;
  }
  out += line + "\n";
}

class ReferenceWriter {
 public:
  std::string render() {
    out_ +=
        "# hpctune campaign configuration: the reference.\n"
        "#\n"
        "# Every key hpctune reads, with what it accepts, its default and what it does; keys that have\n"
        "# a default may be left out. This file is itself a valid config (an MLP on Fashion-MNIST);\n"
        "# keys that only apply to another choice (another trainer kind, say) are commented out.\n"
        "# Durations are seconds or a number with a unit: 90s, 10m, 2h, 1h30m.\n"
        "#\n"
        "# Generated from the settings table in config/settings.cpp; do not edit. Regenerate with\n"
        "#   hpctune validate --print-reference > configs/reference.yaml\n";
    section("", 0, false);
    return std::move(out_);
  }

 private:
  // The value the reference config gives the selector `path` (its example, else its default).
  static std::string reference_value(const std::string& path) {
    for (const auto* s : find_settings(path)) {
      if (!s->example.empty()) return s->example;
      if (s->default_value.is_string()) return s->default_value.get<std::string>();
    }
    return "";
  }

  static bool in_reference(const Scope& scope) {
    return scope.always() || scope.contains(reference_value(scope.key));
  }

  static std::string indent(int depth) { return std::string(static_cast<std::size_t>(2 * depth), ' '); }

  void comment(int depth, const std::string& text) {
    const std::string prefix = indent(depth) + "# ";
    wrap(out_, text, prefix, prefix);
  }

  // `key: value` or a block of example lines, commented out when `commented`.
  void line(int depth, bool commented, const std::string& text) {
    out_ += indent(depth) + (commented ? "# " : "") + text + "\n";
  }

  // The keys of a wildcard section ("space.*", "objectives[]"), documented as comment lines.
  void fields(int depth, const std::string& section) {
    for (const auto* f : children(section)) {
      std::string facts = describe(*f);
      if (!f->scope.always()) facts += "; type " + join(f->scope.values, ", ");
      const std::string prefix = indent(depth) + "#   ";
      wrap(out_, std::string(leaf_name(f->path)) + ": " + f->help + " [" + facts + "]", prefix, prefix + "    ");
    }
  }

  void block(int depth, bool commented, const std::string& key, const std::string& example) {
    if (example.empty()) {
      line(depth, commented, key + ": {}");
      return;
    }
    line(depth, commented, key + ":");
    std::size_t start = 0;
    while (start <= example.size()) {
      const auto end = example.find('\n', start);
      line(depth + 1, commented, example.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }

  void section(const std::string& path, int depth, bool commented) {
    const Scope* previous_scope = nullptr;
    bool first = true;
    for (const auto* s : children(path)) {
      const bool off = commented || s->reference_commented || !in_reference(s->scope);
      const std::string key(leaf_name(s->path));
      if (!s->scope.always() && (previous_scope == nullptr || previous_scope->key != s->scope.key ||
                                 previous_scope->values != s->scope.values)) {
        out_ += "\n";
        comment(depth, "--- " + std::string(leaf_name(s->scope.key)) + ": " + join(s->scope.values, ", ") + " ---");
      } else if (!first || depth == 0) {
        out_ += "\n";
      }
      if (s->scope.always()) previous_scope = nullptr;
      else previous_scope = &s->scope;
      first = false;

      comment(depth, s->help);
      switch (s->type) {
        case Type::kSection: {
          if (s->open) comment(depth, "[map; keys of algorithms this build does not know are passed on as given]");
          if (children(s->path).empty()) {
            line(depth, off, key + ": {}");
          } else {
            line(depth, off, key + ":");
            section(s->path, depth + 1, off);
          }
          break;
        }
        case Type::kSpace:
          fields(depth, s->path + ".*");
          block(depth, off, key, s->example);
          break;
        case Type::kList:
          fields(depth, s->path + "[]");
          comment(depth, "[" + describe(*s) + "]");
          block(depth, off, key, s->example);
          break;
        default: {
          comment(depth, "[" + describe(*s) + "]");
          const std::string value = !s->example.empty()         ? s->example
                                    : !s->default_value.is_null() ? to_yaml_flow(s->default_value)
                                                                  : std::string();
          const bool no_value = value.empty();
          line(depth, off || no_value, key + ":" + (no_value ? "" : " " + value));
        }
      }
    }
  }

  std::string out_;
};

}  // namespace

std::string reference_yaml() { return ReferenceWriter().render(); }

}  // namespace hpctune::config
