// The settings of the `command` trainer kind (command_trainer.h). The space's parameters are not
// settings of it: the command gets every one of them.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "common/shell_template.h"
#include "trainers/internal_params.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

namespace {

// The words of a command line as the program gets them: the list form's items, or the string
// form's blank-separated words where it holds nothing the shell would read otherwise (quotes,
// expansions, operators, globs, escapes, an assignment or a builtin before the program); nullopt
// where it does.
std::optional<std::vector<std::string>> command_words(const nlohmann::json& command) {
  std::vector<std::string> words;
  if (command.is_array()) {
    for (const auto& item : command) {
      if (!item.is_string()) return std::nullopt;
      words.push_back(item.get<std::string>());
    }
    return words;
  }
  if (!command.is_string()) return std::nullopt;
  const std::string& line = command.get_ref<const std::string&>();
  if (line.find_first_of("'\"\\$`|&;<>()*?[]~#\n") != std::string::npos) return std::nullopt;
  std::string word;
  for (char c : line + " ") {
    if (c != ' ' && c != '\t') {
      word += c;
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  static const std::string_view kShellOwn[] = {".",     ":",       "alias",  "cd",    "command", "eval",  "exec",
                                               "export", "source", "time",   "trap",  "ulimit",  "umask", "set",
                                               "if",    "while",   "until",  "for",   "case",    "!",     "{"};
  if (!words.empty() && (words[0].find('=') != std::string::npos ||
                         std::find(std::begin(kShellOwn), std::end(kShellOwn), words[0]) != std::end(kShellOwn)))
    return std::nullopt;
  return words;
}

// `name` found the way execvp finds it: a path as it is (relative to `dir`), else in PATH's
// directories; "" when it is not there, or not executable.
std::string find_program(const std::string& name, const std::filesystem::path& dir, const std::string& path_list) {
  auto runnable = [](const std::filesystem::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    const std::filesystem::path p = std::filesystem::path(name).is_absolute() ? std::filesystem::path(name) : dir / name;
    return runnable(p) ? p.string() : "";
  }
  std::size_t start = 0;
  while (start <= path_list.size()) {
    const std::size_t end = std::min(path_list.find(':', start), path_list.size());
    const std::string entry = path_list.substr(start, end - start);
    const std::filesystem::path p = (entry.empty() ? dir : std::filesystem::path(entry)) / name;
    if (runnable(p)) return p.string();
    start = end + 1;
  }
  return "";
}

// A command whose program, or the script its interpreter runs, is not where the trials will look:
// every trial would fail at its start. Judged where `hpctune validate` and `run` run, for the local
// backend, as the trainer runs it: in `workdir` (else the current directory), with trainer.env's
// PATH, else this shell's. A word holding a placeholder, and a searched command, workdir or env,
// are left to the trials.
std::optional<DataProblem> command_file_problem(const nlohmann::json& settings, const std::vector<std::string>& open) {
  for (const char* key : {"command", "workdir", "env"})
    if (std::find(open.begin(), open.end(), key) != open.end()) return std::nullopt;
  const std::string workdir = settings.value("workdir", std::string());
  std::error_code ec;
  const std::filesystem::path here = std::filesystem::current_path(ec);
  const std::filesystem::path dir = workdir.empty() ? here : std::filesystem::path(workdir).is_absolute() ? std::filesystem::path(workdir) : here / workdir;
  if (!std::filesystem::is_directory(dir, ec))
    return DataProblem{"workdir", "", "'" + workdir + "' is not a directory (the trials run the command in it)"};
  const auto words = settings.contains("command") ? command_words(settings["command"]) : std::nullopt;
  if (!words || words->empty()) return std::nullopt;
  const bool list = settings["command"].is_array();
  auto place = [&](std::size_t k) {
    std::string at;
    if (list) at.append("[").append(std::to_string(k)).append("]");
    return at;
  };
  const std::string& program = (*words)[0];
  if (program.find('{') != std::string::npos) return std::nullopt;
  const nlohmann::json env = settings.value("env", nlohmann::json::object());
  const char* shell_path = std::getenv("PATH");
  const bool env_path = env.is_object() && env.contains("PATH") && env["PATH"].is_string();
  const std::string path_list = env_path ? env["PATH"].get<std::string>() : shell_path ? shell_path : "";
  auto in_dir = [&](const std::string& name) {
    if (std::filesystem::path(name).is_absolute()) return std::string();
    return " in " + dir.string() + ", where the command runs (" +
           (workdir.empty() ? "the current directory; trainer.workdir sets another" : "trainer.workdir") + ")";
  };
  if (find_program(program, dir, path_list).empty()) {
    if (program.find('/') != std::string::npos)
      return DataProblem{"command", place(0), "the program '" + program + "' is not an executable file" + in_dir(program)};
    return DataProblem{"command", place(0), "the program '" + program + "' is in none of the directories of " +
                                                (env_path ? "trainer.env's PATH" : "this shell's PATH, which the trials get") +
                                                ": give its absolute path"};
  }
  const auto script = shell_template_detail::script_index(*words);
  if (!script) return std::nullopt;
  const std::string& file = (*words)[*script];
  if (file.find('{') != std::string::npos || file == "-") return std::nullopt;
  const std::filesystem::path p = std::filesystem::path(file).is_absolute() ? std::filesystem::path(file) : dir / file;
  if (std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  return DataProblem{"command", place(*script), "the script '" + file + "' that " +
                                                    std::filesystem::path(program).filename().string() +
                                                    " runs is not a file" + in_dir(file)};
}

}  // namespace

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
  can.file_rules.problem = &command_file_problem;
  can.file_rules.reads = {"command", "workdir", "env"};
  return can;
}

}  // namespace hpctune::trainers
