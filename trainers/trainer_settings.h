// Trainer settings: the catalog of the trainer kinds' declarations, and the reader that checks
// a trial's settings against them.
//
// Each kind declares its settings once, beside its code, in trainers/<kind>_settings.cpp (the
// classifier loop's own in classifier_settings.cpp, shared by mlp and cnn), in the shape of
// common/settings.h that the search algorithms use too: type, default, bounds, choices, help,
// aliases. From that one declaration
//   - the config table (config/settings.cpp) imports `trainer.*`, scoped by trainer.kind: parsing,
//     `hpctune validate`, the messages and configs/reference.yaml;
//   - the trainer reads ctx.settings() through a SettingsReader: unknown keys (with a "did you
//     mean"), types, bounds and choices are checked against the same declaration, and absent keys
//     get its default.
// The declarations are compiled into hpctune_trainer_api, a small library with no BLAS, oneDNN or
// MPI (zlib only, to read a data set's headers: idx_header.h), so that the master's config layer
// links them without the trainers' code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/settings.h"
#include "common/text.h"

namespace hpctune::trainers {

// The declarations of each kind (the <kind>_settings.cpp files).
const std::vector<SettingDecl>& sleep_setting_specs();
const std::vector<SettingDecl>& mlp_setting_specs();
const std::vector<SettingDecl>& cnn_setting_specs();
// The cnn's named blocks (settings block1..block4 and head): an entry of `layers` that is one of
// these names stands for that setting's layers, or for nothing when the setting is absent. A space
// can then search the network block by block, with conditions on the setting `blocks` (block3 only
// when blocks is 3); a block beyond `blocks` adds no layers.
inline constexpr const char* kCnnBlocks[] = {"block1", "block2", "block3", "block4", "head"};
const std::vector<SettingDecl>& function_setting_specs();
const std::vector<SettingDecl>& command_setting_specs();
// The settings of the classifier loop (classifier_training.h) that mlp and cnn both declare.
std::vector<SettingDecl> classifier_common_setting_specs();

// trainer.classes of the classifier kinds (a transfer stage's `classes` become its trials'): [] for
// every class, or at least two distinct labels. The first item that breaks that (the second of a
// repeated label, or the only one) and what the list must be; nullopt when it is fine. The trainer
// (classifier_training.cpp) and `hpctune validate` (config/campaign_checks.cpp) both ask this.
struct ClassesProblem {
  std::size_t index = 0;
  std::string must_be;  // "distinct classes (1 is listed twice)"
};
std::optional<ClassesProblem> classes_problem(const std::vector<int64_t>& classes);

// The dataset of the classifier kinds when `data` is not given.
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

// What is wrong with a trainer's settings against the data they name (TrainerCapabilities::data_rules):
// the setting (`key`), the place in its value (`below`: "[2]", "[3].kernel"; "" for the value as a
// whole) and what is wrong there.
struct DataProblem {
  std::string key;
  std::string below;
  std::string what;
};

// What a trainer kind can give a workflow, declared beside its settings (<kind>_settings.cpp).
// config/, scheduler/, workflow/ and report/ ask this; none of them compares a kind's name
// (tools/check-trainer-names, the test_trainer_names ctest).
struct TrainerOutput {
  bool written = false;         // the kind can write it
  const char* switch_setting = nullptr;  // a bool setting that turns it off (false: not written); or none
  // Predictions only: the task its prediction files serve (an ensemble stage's `task`:
  // "classification" for val_probs.npy..., "regression" for val_pred.npy...); nullptr: either.
  const char* task = nullptr;
  // Checkpoints only: the subdirectory of the trial directory the kind's checkpoint is, a tree of
  // any files the program likes that a stage copies whole (command: "checkpoint", the program's
  // HPCTUNE_CHECKPOINT_DIR); nullptr: the checkpoint-stage*.bin files in the trial directory itself.
  const char* directory = nullptr;
};
// Which names a space may give that are not settings of the kind.
enum class TrainerParams {
  kSettingsOnly,         // only the kind's settings (mlp, cnn, sleep)
  kTestFunctionArgs,     // x1..x<dim> of the search::make_test_function named by its settings `name`, `dim`
  kAny,                  // any name: every parameter reaches the program (command)
};
struct TrainerCapabilities {
  // The int setting that counts its steps: the last step it reports at, and what a stage that trains
  // to a step sets (pbt). nullptr: its steps are the `step` of its own reports.
  const char* step_setting = nullptr;
  TrainerOutput predictions;   // val_probs.npy, test_probs.npy, ... in the trial directory
  TrainerOutput checkpoints;   // checkpoint-stage*.bin in the trial directory, or its `directory`
  // A list setting in which the user declares which of "predictions" and "checkpoints" the kind
  // writes (the program of a command trainer); nullptr: the two above say it.
  const char* provides_setting = nullptr;
  bool starts_own_ranks = false;  // its ranks are started by the trainer itself, not by the launcher
  TrainerParams params = TrainerParams::kSettingsOnly;
  const char* params_hint = nullptr;  // how to name them in a message ("x1, x2, ...")
  // A string setting that is a command line with {placeholders} (trainers::render_command).
  const char* command_setting = nullptr;
  // A bool setting that makes the command's program serve every trial of its group: the command
  // setting may then hold only the placeholders fixed for the program's life (kProgramPlaceholders).
  const char* persistent_setting = nullptr;
  // The parameter by which a transfer stage gives a trial its source's checkpoint (the classifier
  // kinds' setting init_from; the command kind's reserved name, exported as HPCTUNE_SOURCE_CHECKPOINT),
  // and the one that names the source trial (command: HPCTUNE_SOURCE_TRIAL); nullptr: none, and
  // a kind without an init_setting cannot be a transfer stage's target.
  const char* init_setting = nullptr;
  const char* source_trial_setting = nullptr;
  // Settings that refine a start from a checkpoint (the classifier kinds' head-only epochs, a
  // smaller rate for the loaded layers), with the value a run from scratch has: a transfer stage's
  // baseline twin sets each where its target has it (transfer/transfer_plan.h, twin_params).
  std::vector<std::pair<std::string, nlohmann::json>> twin_resets;
  // A string setting with values under which a trial survives the loss of one of its group's ranks
  // (the classifier kinds' sync: downpour and ssp go on with the other data replicas): a campaign
  // that can run such a trial starts its MPI groups with mpirun --enable-recovery
  // (launch/launcher.h, GroupResources::rank_recovery). nullptr: none.
  const char* rank_loss_setting = nullptr;
  std::vector<std::string> rank_loss_values;
  // The most model-parallel (pipeline) stages a trial can be split into (resources.ranks.model):
  // each stage needs a layer of its network. `count` of its settings (an object, defaults filled
  // in; 0 = unknown), what it counts for a message (`what`: "the layers of the network it imitates,
  // trainer.layers"), and the settings it reads (`reads`): when the space searches one of them, the
  // trainer checks each trial instead (`hpctune validate` checks a fixed value). count nullptr:
  // no limit the kind knows (a program splits itself).
  struct ModelStages {
    int64_t (*count)(const nlohmann::json& settings) = nullptr;
    const char* what = nullptr;
    std::vector<std::string> reads;
  };
  ModelStages model_stages;
  // An int setting that keeps the first N layers of the network fixed (the classifier kinds' freeze;
  // a transfer stage's `freeze` sets it in each trial): at most the layers before the output layer,
  // model_stages.count less one. nullptr: none.
  const char* freeze_setting = nullptr;
  // Whether trials of these settings (an object, defaults filled in) can train packed, k to a GPU
  // as one fused model (resources.pack, trainers/packed_engine.h): "" when they can, else why not
  // (for the master's log). nullptr: the kind never packs.
  std::string (*packs)(const nlohmann::json& settings) = nullptr;
  // What the kind refuses between settings that each pass their declaration (the classifier kinds:
  // a precision other than fp32 on device cpu, head_epochs beyond epochs, an empty data): `problem`
  // of its settings (an object, defaults filled in) is the first such setting and what it must be
  // ("fp32 with device: cpu (...)"), nullopt when none; a rule over a setting the object lacks is
  // not judged. `reads`: the settings the rules read; `hpctune validate` leaves out those the space
  // searches (the trainer then checks each trial) and takes a fixed value of the space. The trainer
  // asks the same function. problem nullptr: no such rule.
  struct SettingRules {
    std::optional<std::pair<std::string, std::string>> (*problem)(const nlohmann::json& settings) = nullptr;
    std::vector<std::string> reads;
  };
  SettingRules setting_rules;
  // What the kind refuses between its settings and its group's layout (resources.ranks: `data`
  // replicas, `model` pipeline stages; the classifier kinds' sync: hogwild on one rank only,
  // downpour and the exchanges with one model stage): `problem` of its settings (as setting_rules',
  // the same `reads`-only object) and the layout is the setting and what it must be; nullopt when
  // none. `hpctune validate` asks it as it asks setting_rules; the trainer refuses the same when it
  // picks its epoch runner. problem nullptr: no such rule.
  struct LayoutRules {
    std::optional<std::pair<std::string, std::string>> (*problem)(const nlohmann::json& settings, int64_t data,
                                                                  int64_t model) = nullptr;
    std::vector<std::string> reads;
  };
  LayoutRules layout_rules;
  // What the kind refuses of its settings against the data they name, judged where `hpctune validate`
  // runs (the classifier kinds: `data` an IDX directory, read through trainers/idx_header.h: its
  // headers and labels, not its images; `classes` labels it holds; the cnn's layers no larger than its
  // images where they get them): `problem` of its settings (the fixed values of `reads`, defaults filled
  // in) with `open`, the settings of `reads` that a trial may have otherwise (the space searches them, a
  // stage's trials carry them over): nothing that depends on one is judged. The trainer refuses the
  // same when it loads its data and builds its network. nullptr: the kind names no data a setting gives
  // (a command's program reads what it likes).
  struct DataRules {
    std::optional<DataProblem> (*problem)(const nlohmann::json& settings, const std::vector<std::string>& open) = nullptr;
    std::vector<std::string> reads;
  };
  DataRules data_rules;
  // The files a trial needs that its settings name and that may yet be made before the campaign runs
  // (a command's program and the script its interpreter runs): the same shape as data_rules, judged
  // where the trials run (the local backend), but warned of by `hpctune validate` and `run`
  // (config::trainer_file_warnings), not refused.
  DataRules file_rules;
  // The metrics a finished trial of the kind reports (its last report, which the objective is read
  // from: a trial without the objective's metric fails): `always` every trial, `sometimes` the names,
  // or the prefixes of the names, that it reports under some settings (the classifier kinds' sync_*
  // with data-parallel replicas). `hpctune validate` refuses an objective metric that is neither.
  // Both empty: the kind's metrics are not known before it runs (a command's program's own).
  // `every_step`: the metrics of every step's report while a trial runs, the ones early stopping and
  // pbt judge (`hpctune validate` refuses an objective they would never see); empty: not known.
  struct ReportedMetrics {
    std::vector<std::string> always;
    std::vector<std::string> sometimes;
    std::vector<std::string> every_step;
  };
  ReportedMetrics metrics;
  // What one setting's value must be beyond its declaration's type (the cnn's layer lists: each entry
  // a layer map as trainers/layer_spec.h reads it, or a block's name): `problem` of a value of setting
  // `key` is where in it (a suffix of the setting's path: "[0]", "[2].kernel") and what that must be
  // ("'foo' is neither a layer map nor a block; a layer is ..."); nullopt when it is fine or when `key`
  // has no such form. `hpctune validate` asks it of the trainer's value and of every value a space can
  // give the setting; the trainer refuses the same. nullptr: no setting has one.
  std::optional<std::pair<std::string, std::string>> (*value_problem)(std::string_view key,
                                                                     const nlohmann::json& value) = nullptr;
  // The settings its network's shape is built from (a checkpoint holds that network: a trial resumed
  // from another's must have the same value, or with `zero_or_not`, be 0 where it is 0: dropout is a
  // layer of its own only above 0): `hpctune validate` refuses a space that can vary them in a stage
  // whose trials resume each other (pbt). Empty: the kind knows none (a program's own).
  struct NetworkSetting {
    std::string key;
    bool zero_or_not = false;
  };
  std::vector<NetworkSetting> network_settings;
};
// The values of a provides_setting.
inline constexpr const char* kProvidesPredictions = "predictions";
inline constexpr const char* kProvidesCheckpoints = "checkpoints";

// Each kind's capabilities (the <kind>_settings.cpp files).
TrainerCapabilities sleep_capabilities();
TrainerCapabilities mlp_capabilities();
TrainerCapabilities cnn_capabilities();
TrainerCapabilities function_capabilities();
TrainerCapabilities command_capabilities();
// Those of the classifier loop, that mlp and cnn both have.
TrainerCapabilities classifier_capabilities();
// The classifier loop's data rule (data_rules: `data` and `classes`), with the shape of the data it read
// in `*shape` when it read it (the cnn's rule goes on with its layers).
struct IdxSetShape;
std::optional<DataProblem> classifier_data_problem(const nlohmann::json& settings, const std::vector<std::string>& open,
                                                   IdxSetShape* shape);

struct TrainerKindDecl {
  std::string kind;
  std::string help;  // one line for trainer.kind's help
  const std::vector<SettingDecl>* settings = nullptr;
  TrainerCapabilities can;
};

// Every trainer kind this build has, in the order of the reference (sleep, mlp, cnn, function,
// command). The worker's factory (trainer_factory.h) makes a trainer of each.
const std::vector<TrainerKindDecl>& trainer_catalog();

// The capabilities of a kind; nullptr when unknown.
const TrainerCapabilities* trainer_capabilities(std::string_view kind);

// The declarations of a kind; kInvalidArgument listing the kinds when unknown.
Result<const std::vector<SettingDecl>*> trainer_setting_specs(const std::string& kind);

// For tests only: the declarations of `kind`, to change. A test that changes one must call
// config::reload_settings() (when it parses configs) and restore the declaration afterwards;
// nothing else may hold on to a declaration across that.
std::vector<SettingDecl>* mutable_setting_specs_for_testing(const std::string& kind);

// Reads typed settings of one trainer kind from a settings object, with the declared defaults.
// Every error is kInvalidArgument "<kind> trainer: setting 'name' = <value>: must be ...".
class SettingsReader {
 public:
  SettingsReader(std::string kind, const nlohmann::json& settings, const std::vector<SettingDecl>& decls)
      : kind_(std::move(kind)), settings_(settings), decls_(decls) {}

  // kInvalidArgument for a key that is neither "kind" nor declared, with a "did you mean".
  Status check_known() const {
    if (!settings_.is_object()) return err(Errc::kInvalidArgument, kind_ + " trainer: settings must be an object");
    for (auto it = settings_.begin(); it != settings_.end(); ++it) {
      if (it.key() == "kind" || find(it.key()) != nullptr) continue;
      std::string message = kind_ + " trainer: unknown setting '" + it.key() + "'";
      std::vector<Candidate> candidates;
      for (const auto& d : decls_) candidates.push_back({d.key, d.key});
      for (const auto& d : decls_)
        for (const auto& alias : d.aliases) candidates.push_back({alias, d.key});
      if (auto near = did_you_mean(it.key(), candidates)) message += ", did you mean '" + *near + "'?";
      else message += " (known: " + known_names() + ")";
      return err(Errc::kInvalidArgument, std::move(message));
    }
    return Status::Ok();
  }

  // The value of `name`, or its declared default; null when neither exists.
  const nlohmann::json& raw(const char* name) const {
    static const nlohmann::json kNull;
    if (settings_.is_object()) {
      auto it = settings_.find(name);
      if (it != settings_.end()) return *it;
    }
    const SettingDecl* d = find(name);
    return d != nullptr ? d->default_value : kNull;
  }
  bool has(const char* name) const { return settings_.is_object() && settings_.contains(name); }

  // The value of `name` (or its default) checked against its declaration and normalized
  // (check_setting, common/settings.h).
  Result<nlohmann::json> value(const char* name) const {
    const SettingDecl* d = find(name);
    if (d == nullptr) return err(Errc::kInternal, kind_ + " trainer: reads the undeclared setting '" + name + "'");
    const auto& v = raw(name);
    auto checked = check_setting(*d, v);
    if (!checked.ok()) return bad(name, v, checked.error().message().substr(std::string_view("must be ").size()));
    return checked;
  }

  Result<double> number(const char* name) const {
    HPCTUNE_ASSIGN(nlohmann::json v, value(name));
    return v.get<double>();
  }
  Result<int64_t> integer(const char* name) const {
    HPCTUNE_ASSIGN(nlohmann::json v, value(name));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return bad(name, v, "at most " + std::to_string(INT64_MAX));
    return v.get<int64_t>();
  }
  Result<bool> boolean(const char* name) const {
    HPCTUNE_ASSIGN(nlohmann::json v, value(name));
    return v.get<bool>();
  }
  Result<std::string> string(const char* name) const {
    HPCTUNE_ASSIGN(nlohmann::json v, value(name));
    return v.get<std::string>();
  }

  // kInvalidArgument "<kind> trainer: setting 'name' = <value>: must be <what>".
  Error bad(const char* name, const nlohmann::json& v, const std::string& what) const {
    return err(Errc::kInvalidArgument, kind_ + " trainer: setting '" + name + "' = " + v.dump() + ": must be " + what);
  }

  const std::string& kind() const { return kind_; }

 private:
  const SettingDecl* find(std::string_view name) const {
    for (const auto& d : decls_)
      if (d.key == name) return &d;
    return nullptr;
  }
  std::string known_names() const {
    std::vector<std::string> names;
    for (const auto& d : decls_) names.push_back(d.key);
    return join(names, ", ");
  }

  std::string kind_;
  const nlohmann::json& settings_;
  const std::vector<SettingDecl>& decls_;
};

}  // namespace hpctune::trainers
