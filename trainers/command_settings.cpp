// The settings of the `command` trainer kind (command_trainer.h). The space's parameters are not
// settings of it: the command gets every one of them.
#include "trainers/internal_params.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

const std::vector<SettingDecl>& command_setting_specs() {
  using T = SettingType;
  // Not const: tests change a declaration through mutable_setting_specs_for_testing().
  static std::vector<SettingDecl> specs = {
      {.key = "command", .type = T::kCommandLine,
       .help = "The command line run for each trial; as a list [program, arg, \"{name}\"] it runs without a shell, "
               "each item one argument.",
       .aliases = {"cmd", "run", "exec", "program"},
       .required = true,
       .example = "python3 train.py"},
      {.key = "timeout", .type = T::kDuration, .default_value = 0.0, .min = 0, .max = 365 * kDay,
       .help = "Stop the command after this long (0 = no limit).", .aliases = {"time_limit", "max_time"}},
      {.key = "workdir", .type = T::kString, .default_value = "",
       .help = "Working directory of the command (\"\" = the current directory).",
       .aliases = {"cwd", "dir", "working_directory"}},
      {.key = "env", .type = T::kStringMap, .default_value = nlohmann::json::object(),
       .help = "Extra environment variables of the command.", .aliases = {"environment", "vars"}},
      {.key = "grace", .type = T::kDuration, .default_value = 5.0, .min = 0, .max = 3600,
       .help = "After a stop request, how long the command has to exit before it is killed.",
       .aliases = {"grace_period", "kill_timeout"}},
      {.key = "log_limit", .type = T::kInt, .default_value = 10'000'000, .min = 0,
       .help = "Bytes kept of each of the trial's stdout.log and stderr.log: the first half, a line saying how much "
               "was cut, and the last half (0 = no limit).", .aliases = {"max_log_bytes", "log_size"}},
      {.key = "provides", .type = T::kValueList, .default_value = nlohmann::json::array(),
       .help = "What the program writes for a workflow's later stages: predictions (for an ensemble), checkpoints "
               "(for transfer and pbt); [] = neither. hpctune validate checks each stage's inputs against it.",
       .aliases = {"capabilities", "writes", "outputs"},
       .example = "[predictions, checkpoints]"},
      {.key = kMaxStepParam, .type = T::kInt, .default_value = 0, .min = 0, .max = 1'000'000'000,
       .help = "The step the program trains to, then saves its checkpoint and exits 0 (HPCTUNE_MAX_STEP, {max_step}; "
               "0 = no limit). A pbt stage sets it for each interval.",
       .aliases = {"max_steps"}},
      {.key = "persistent", .type = T::kBool, .default_value = false,
       .help = "One program process serves the trials of a group in turn (Python and its imports start once): "
               "the program loops over hp.trials() (tools/python/hpctune_report.py). The command may then hold "
               "only {ranks}; the program reads the rest from hp.params() or HPCTUNE_PARAMS.",
       .aliases = {"reuse", "keep_alive", "reuse_process"}},
      // As the classifier kinds' data_seed: the campaign's seed unless given (CampaignConfig::set_seed).
      {.key = "data_seed", .type = T::kInt, .default_value = 0, .min = 0,
       .help = "Given to the program as HPCTUNE_DATA_SEED: the seed to draw the data split with (which rows "
               "are held out for validation). The same for every trial of a campaign, so that row i of every "
               "trial's val_probs.npy is the same example, as an ensemble stage requires; HPCTUNE_SEED, the "
               "trial's own, is for initialisation and shuffling.", .aliases = {"split_seed", "data_split_seed"},
       .default_note = "seed (the campaign's, --seed included)"},
  };
  return specs;
}

// The program counts its own steps (the `step` of its reports) and trains to max_step when it is
// set, starts its own ranks (mpirun, torchrun, ... in its command), takes every parameter, and
// writes what `provides` declares: its checkpoint in <trial_dir>/checkpoint (HPCTUNE_CHECKPOINT_DIR).
TrainerCapabilities command_capabilities() {
  TrainerCapabilities can;
  can.step_setting = kMaxStepParam;
  can.checkpoints.directory = "checkpoint";
  can.provides_setting = "provides";
  can.starts_own_ranks = true;
  can.params = TrainerParams::kAny;
  can.command_setting = "command";
  can.persistent_setting = "persistent";
  // A checkpoint is the directory HPCTUNE_CHECKPOINT_DIR names, <trial dir>/checkpoint.
  can.checkpoints.directory = "checkpoint";
  // A transfer stage's target gets these two parameters; the trainer takes them out of the
  // program's parameters (HPCTUNE_PARAMS, the placeholders) and exports them as
  // HPCTUNE_SOURCE_CHECKPOINT and HPCTUNE_SOURCE_TRIAL (command_trainer.cpp: workflow_env).
  can.init_setting = kSourceCheckpointParam;
  can.source_trial_setting = kSourceTrialParam;
  // A command line that names something to run: a string with more than blanks, a list whose first
  // item (the program) is more than blanks (command_trainer.cpp and `hpctune validate` ask this).
  can.setting_rules.problem = [](const nlohmann::json& s) -> std::optional<std::pair<std::string, std::string>> {
    if (!s.contains("command")) return std::nullopt;
    const nlohmann::json& c = s["command"];
    auto blank = [](const nlohmann::json& v) {
      return v.is_string() && v.get_ref<const std::string&>().find_first_not_of(" \t\n") == std::string::npos;
    };
    if (blank(c)) return std::make_pair(std::string("command"), std::string("a non-empty command line"));
    if (c.is_array() && !c.empty() && blank(c[0]))
      return std::make_pair(std::string("command"), std::string("a list whose first item names the program to run"));
    return std::nullopt;
  };
  can.setting_rules.reads = {"command"};
  return can;
}

}  // namespace hpctune::trainers
