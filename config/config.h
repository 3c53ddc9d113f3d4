// The campaign config: a YAML file parsed and checked against the settings table (settings.h).
//
// parse_config() reads the YAML into a tree that keeps the line and column of every key, walks it
// against the table (unknown keys, types, bounds, enum values, required keys, defaults), then
// checks what involves several keys: objective xor objectives, the search space (bounds, log
// ranges, choices, conditions, grid resolution, names against the trainer's settings), the
// heartbeat timeout against its interval. The first problem found is returned as Errc::kConfig
// with a one-line message
//     <source>:<line>:<column>: <key.path>: <what is wrong>
// (1-based; the location of the key, or of the list item, that is wrong; of the enclosing key for
// a missing one), e.g. "bad.yaml:7:3: search.max_trials: -3 is below the minimum 1". The CLI
// prints it as is and exits with 2.
//
// Duplicate keys are errors (yaml-cpp keeps both silently), reported at the second occurrence. The
// YAML is read through yaml-cpp's event parser so that every key keeps its mark; anchors and
// aliases and `<<` merge keys work. Scalars follow the YAML 1.2 core schema: a quoted "10" is a
// string, yes/no are strings.
//
// Every input is bounded before it can cost much: the file's size (kMaxConfigBytes), the nodes it
// expands to with aliases (kMaxConfigNodes), its nesting (64 levels); values must be UTF-8 without
// NUL. Whatever would fail every trial of `run` is refused here: a grid larger than max_trials, a
// trial's assign larger than a message, a command placeholder that names nothing, durations
// outside their ranges. A section with a `kind` takes a bare name (`early_stopping: asha`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "search/space.h"

namespace hpctune::config {

// resources.slurm: the SLURM backend's site options (launch/slurm_*; the batch script of
// `hpctune slurm submit`).
struct SlurmOptions {
  std::string partition, account, qos, constraint;
  int64_t ranks_per_node = 1;
  std::string launch = "srun";  // srun | mpirun
  std::string mpi;              // srun --mpi=; "" the site's default
  std::string gres;
  int64_t gpus_per_task = 0;
  // resources.gpus_per_rank, copied here for the SLURM backend: the steps ask for these GPUs per task
  // (--gpus-per-task, --gpu-bind) and the batch script for them on each node (--gres=gpu:N).
  int64_t gpus_per_rank = 0;
  int64_t cpus_per_task = 0;
  std::vector<std::string> setup;  // shell lines before the master and each step
  std::string master_partition, master_constraint;  // a heterogeneous job when either is set
  double signal_before_s = 120;
  bool requeue = true;
};

struct Resources {
  std::string backend = "local";
  int64_t groups = 1;
  int64_t ranks_data = 1;
  int64_t ranks_model = 1;
  int64_t threads = 0;  // 0: automatic
  double heartbeat_interval_s = 1;
  double heartbeat_timeout_s = 10;
  int64_t max_group_restarts = 3;
  double startup_timeout_s = 60;
  std::string bind = "ipc://*";  // the master's address (common/endpoint.h: the forms; ipc://* is private)
  // auto | curve | none: whether the transport uses CURVE (common/endpoint.h: transport_uses_curve).
  std::string security = "auto";
  // GPUs (launch/device_allocator.h): per rank; the node's device ids (nullopt: auto, detected when
  // the campaign starts); groups per device.
  int64_t gpus_per_rank = 0;
  std::optional<std::vector<int>> gpus;
  int64_t trials_per_gpu = 1;
  // auto | on | off: a private MPS control daemon for groups that share a GPU (resources.mps;
  // scheduler/launcher_options.h: mps_control decides, launch/mps_daemon.h runs it).
  std::string mps = "auto";
  // auto | off: trials_per_gpu groups to one worker process that trains their trials as one fused
  // model where the trainer packs (resources.pack; scheduler/launcher_options.h: pack_slots_of).
  std::string pack = "auto";
  SlurmOptions slurm;
};

struct CampaignConfig;

// search.stop_when: the stage ends once a done trial's `metric` reaches `reaches` (>= when
// maximize, <= otherwise; maximize defaults to the objective's mode when the metric is an
// objective, else to max).
struct StopWhen {
  std::string metric;
  double reaches = 0;
  bool maximize = true;
};

// One item of `stages:`. `own` is the campaign as the stage sees it: the top level's objective,
// resources and trainer with the stage's own search, space, early_stopping and trainer keys laid
// over them (a stage without a search of its own: search.max_trials 1 and an empty space there);
// stages that set none of those keys share one view. Only the campaign keeps the config's `text`.
// `settings` holds the kind's own keys, normalized with their defaults:
//   ensemble  method, max_size, bags, k, retrain ({top, seeds} or null)
//   transfer  classes, max_train_samples, freeze, baseline, sources, seeds, checkpoint
//   pbt       population, ready, steps, quantile, resample_probability, perturb
struct StageConfig {
  std::string name;
  std::string kind;  // search | ensemble | transfer | pbt
  std::vector<std::string> from;
  nlohmann::json settings = nlohmann::json::object();
  bool own_search = false;  // the stage gave `search` (or, for pbt/transfer, `space`) itself
  std::shared_ptr<const CampaignConfig> own;
  // The trainer keys the stage sets itself (its `trainer:` over the top-level one). A transfer
  // stage's win over the searched values of the trial it starts from: they are its fine-tuning.
  std::set<std::string> trainer_keys;
  // The program's own keys the stage's `trainer:` gives (a stage kind with trainer_program_keys
  // over a trainer kind that takes any parameter: a command's lr, epochs), apart from the kind's
  // settings: parameters of every trial of the stage, over those of the trial it starts from
  // (their keys are in trainer_keys too). An object, empty when none.
  nlohmann::json trainer_params = nlohmann::json::object();
};

struct CampaignConfig {
  std::string source;  // the file path, or the name given to parse_config
  std::string text;    // the original YAML text (stored with the campaign so resume can re-parse it)

  std::string name;
  std::string storage;  // "<name>.db" unless given
  std::string storage_access = "owner";  // owner | group | all: who may read what the campaign creates
  uint64_t seed = 0;
  std::vector<search::Objective> objectives;  // one for `objective`, in order for `objectives`
  bool noisy = false;  // objective.noisy (any objective's): repeated configurations allowed
  search::Space space;

  std::string algorithm;
  int64_t max_trials = 0;
  int64_t max_steps = 0;  // search.max_steps, 0: none
  int64_t full_step = 0;  // a full training's last step (the trainer's step setting), 0: unknown
  double max_time_s = 0;  // 0: unlimited
  int64_t max_attempts = 3;
  int64_t max_failures = 5;  // 0: never stop on failures
  std::string init;  // also in search_settings["init"] when the algorithm has that setting
  std::string warm_start;
  nlohmann::json search_settings = nlohmann::json::object();  // algorithm-specific, defaults applied
  std::optional<StopWhen> stop_when;

  std::string early_stopping = "none";
  nlohmann::json early_stopping_settings = nlohmann::json::object();  // without "kind"

  nlohmann::json trainer = nlohmann::json::object();  // {"kind": ..., fixed settings with defaults}
  // trainer.data_seed was in the file; otherwise the trainer's data_seed (mlp, cnn) is the
  // campaign's seed, kept so by set_seed.
  bool data_seed_given = false;
  Resources resources;

  // `stages:` in the config's order, which need not be a dependency order: a stage may be listed
  // before a stage of its `from` (the parser checked names, kinds, that each `from` names a stage,
  // and that `from` forms no cycle; the master starts a stage once its `from` completed). Empty =
  // the one search stage of the fields above. With stages, the fields above are those of the first
  // stage that has a search of its own (its `own`).
  std::vector<StageConfig> stages;
  std::size_t main_stage = 0;  // the stage whose view the fields above are

  // The whole config as JSON with every default applied, `objective` turned into `objectives`,
  // durations in seconds and every space parameter as a full spec (for `validate --json` and the
  // store).
  nlohmann::json normalized = nlohmann::json::object();

  // Sets the campaign's seed (a `--seed` override, or the seed a resumed campaign was started with)
  // and with it the data seed of the trainer (trainer.data_seed, in `trainer` and `normalized`)
  // unless the config gives one: every trial of the campaign then holds out the same validation
  // images. Assign `seed` only through this.
  void set_seed(uint64_t campaign_seed);

  // The SearchSpec of this campaign: algorithm, settings, space, objectives, seed, max_trials.
  // warm_start observations are left empty (the scheduler loads them from the other store).
  search::SearchSpec search_spec() const;
  // The StopperSpec: kind, settings, the objective's direction, seed.
  search::StopperSpec stopper_spec() const;
};

// The largest config file load_config reads (a config is a few kilobytes).
inline constexpr std::size_t kMaxConfigBytes = 16u << 20;

// The most YAML nodes a config may expand to, aliases counted at every use: a few aliases nested
// a few levels deep (an "alias bomb") would otherwise expand a 600-byte file into gigabytes. A
// real config has hundreds; this bounds the parser's memory to some tens of megabytes.
inline constexpr std::size_t kMaxConfigNodes = 100'000;

// The most YAML nodes the stages' own views of a workflow may hold together (StageConfig::own):
// each stage with a search, space, early_stopping or trainer of its own is parsed over a copy of the
// top level, so a large top level times many such stages could cost far more than the file's
// kMaxConfigNodes. Stages without such keys share one view and cost nothing here. 3,000 search
// stages under a top level of 100 nodes take a third of it.
inline constexpr std::size_t kMaxStageViewNodes = 1'000'000;

// The most ranks (data x model) one trainer group may have.
inline constexpr int64_t kMaxRanksPerGroup = 65536;

// The random start-up of the algorithms that fit a model (tpe: n_startup, bayesian: n_initial):
// `text` says how many trials are random and from which trial the model suggests, or that it
// never does within max_trials and what to change. nullopt for the other algorithms.
struct ModelStartup {
  int64_t random_trials = 0;
  bool model_used = true;
  std::string text;
};
std::optional<ModelStartup> model_startup(const CampaignConfig& config);

// What `validate` and `run` warn of before a campaign starts: each generation-based search that
// keeps only some of `groups` trainer groups busy (a searching stage whose algorithm runs a
// generation at a time, search::generation_size, or a stage kind that runs its population at once,
// workflow::StageKind::trials_setting: pbt) below 90% of the groups' time, on trials of equal length:
// fewer trials a generation than groups ("file:line:col: search.settings.population: population 10
// keeps 9 of 2048 groups busy (0.4%; 1 elite carried over unrun); population: 2049 would fill them"),
// or, in step, a last wave that leaves groups waiting ("population 10: each generation's 9 trials (1
// elite carried over unrun) run in 2 waves on 8 groups, 56% of their time busy, ...; population: 9 or
// 17 would fill them").
std::vector<std::string> idle_group_warnings(const CampaignConfig& config, int64_t groups);

// What `validate` and `run` warn of in the files a trial needs that the trainer's settings name,
// where the trials run on this machine (resources.backend local): a command's program that is not
// an executable file or on PATH, the script its interpreter runs that is not a file
// (TrainerCapabilities::file_rules), for the top level's trainer and each stage's own:
// "file:line:col: trainer.command[1]: the script 'trian.py' that python3 runs is not a file in
// /home/me/run, where the command runs (...); every trial would fail".
std::vector<std::string> trainer_file_warnings(const CampaignConfig& config);

// What `validate` and `run` warn of in the objectives: a metric named as a loss or an error
// (`val_loss`, `test_error`, `rmse`, ...) whose `mode` was left out, so it is maximised, the default:
// "file:line:col: objective.metric: 'val_loss' is maximised (mode: max, the default), and a loss or
// an error is minimised: set mode: min".
std::vector<std::string> objective_direction_warnings(const CampaignConfig& config);

// How a config is checked beyond its own text.
struct ParseOptions {
  // The files its trials will read (a trainer's data set, init_from, a transfer stage's checkpoint)
  // are judged by what is on this machine: for `validate` and `run`, whose trials read them here.
  // Off for a config read where its trials will not run (`slurm` submits from a login node;
  // `simulate` reads none), and never applied to a campaign whose backend is not local.
  bool local_files = true;
};

// Reads and parses a config file. A missing file is kNotFound; one that is not a readable regular
// file of at most kMaxConfigBytes (a directory, /dev/zero, no permission) is kConfig, with the
// path; everything else is as parse_config.
Result<CampaignConfig> load_config(const std::string& path, const ParseOptions& options = {});

// Parses YAML text; `source_name` names it in messages ("<source_name>:line:col: ...").
Result<CampaignConfig> parse_config(const std::string& yaml_text, const std::string& source_name,
                                    const ParseOptions& options = {});

// configs/reference.yaml: every key with its help, type and default, rendered from the settings
// table; itself a valid config. `hpctune validate --print-reference` prints it.
std::string reference_yaml();

}  // namespace hpctune::config
