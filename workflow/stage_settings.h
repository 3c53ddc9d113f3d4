// The stage kinds of a workflow and their keys (type, default, bounds, help), declared once here in
// the shape of common/settings.h, and the one reader of a stage's keys.
//
// From these declarations
//   - the config table (config/settings.cpp) imports `stages[].kind`'s choices and each kind's keys
//     as `stages[].<key>`, scoped by the kind: parsing, `hpctune validate` (file:line:col and the
//     key path), its messages and configs/reference.yaml;
//   - each stage (ensemble_stage.cpp, transfer_stage.cpp, pbt_policy.cpp) reads its settings with
//     read_stage_settings() against the same declarations, so that a bound or a default changed
//     here changes what `validate` accepts and what the stage runs with, together.
// A key "a.b" is the key b of the map a (ensemble's retrain.top); the section a itself (its help,
// its scope) is the config's entry `stages[].a`.
//
// Header-only and depending on common/ only: config/ imports it as it imports the trainers'
// catalog (tools/layers.txt allows this one file of workflow/ to config/).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include <algorithm>

#include "common/settings.h"

namespace hpctune::workflow {

// Whether a stage kind searches with trials of its own, and with which of the keys search and space.
enum class StageSearch {
  kNone,      // no search of its own (ensemble)
  kRequired,  // its own search and space, and early_stopping (search)
  kOptional,  // an optional nested search: search and space together, or neither (transfer)
  kSpace,     // a space it explores with trials of its own, trials_setting of them at once (pbt)
};

// A stage kind as the config reads it (config/workflow_config.cpp: parse_workflow asks these, not the name).
struct StageKind {
  std::string kind{};
  std::string help{};  // what it does, for stages[].kind's help ("a search of its own")
  std::vector<SettingDecl> settings{};
  // Keys of the kind read by a reader of their own, passed through as given (pbt's schedule:
  // config/pbt_schedule.h); the config declares them.
  std::vector<std::string> read_elsewhere{};
  StageSearch search = StageSearch::kNone;
  const char* trials_setting = nullptr;  // kSpace: the setting that says how many trials run at once
  // `from` is required: what the stage does with its inputs' trials ("blends"); nullptr: optional.
  const char* needs_from = nullptr;
  const char* needs_from_unless = nullptr;  // ... unless this string setting is given (a checkpoint)
  // An int setting that each trial takes as its trainer's freeze setting (TrainerCapabilities::
  // freeze_setting), unless the stage's nested search sets that (transfer's freeze); nullptr: none.
  const char* freeze_setting = nullptr;
  // What the trainers of its inputs must provide, and what its own trainer must (the trainers'
  // catalog's words, trainers/trainer_settings.h: "predictions", "checkpoints"); nullptr: nothing.
  const char* inputs_provide = nullptr;
  const char* own_trainer_provides = nullptr;
  // Its trials resume from each other's checkpoints (pbt's exploit): its space may not search a
  // setting that shapes the network a checkpoint holds (TrainerCapabilities::network_settings).
  bool trials_resume_each_other = false;
  // Whether a stage that needs its inputs' trainers' output may take this one as an input (an
  // ensemble trains no trials that are its own results).
  bool trains_inputs = true;
  // Whether its trials run under its own view's trainer (the top level's, with its own `trainer:`
  // over it). false: what it runs runs under its inputs' trainers (an ensemble's retrained members
  // under the trainer of its first input stage, ensemble_stage.cpp), which `hpctune validate` judges
  // at their own stages; its view's trainer is never run, and no rule of it is judged there.
  bool runs_own_trainer = true;
  // Keys the config finishes for the kind (config/workflow_config.cpp), named here so that it never
  // asks a kind's name. A kind that trains its own trials to a step (pbt) names `steps_setting`,
  // the total, which defaults to the value of its trainer's step setting (trainers/trainer_settings.h);
  // the trainer must have one, and the space may not hold it (the stage sets it per interval).
  // `schedule_setting`: a replayed schedule (config/pbt_schedule.h), whose end is the total.
  // `factor_pair_setting`: two positive finite factors.
  const char* steps_setting = nullptr;
  // `interval_setting`: the steps between its decisions (pbt's ready), which must be below the total
  // unless a schedule replays them, or the stage decides nothing.
  const char* interval_setting = nullptr;
  const char* schedule_setting = nullptr;
  const char* factor_pair_setting = nullptr;
  // Settings holding a path, taken relative to the config file's directory, of what the stage reads
  // when it starts, which `hpctune validate` requires to exist (transfer's checkpoint),
  // and settings holding a list of class labels, checked as trainer.classes is (transfer's classes).
  std::vector<std::string> path_settings{};
  std::vector<std::string> class_list_settings{};
  // Settings whose value each of its trials takes as its trainer's setting of the same name, where the
  // trainer kind declares one (transfer's classes and max_train_samples: transfer_stage.cpp), over the
  // trainer's value and under its nested search's: `hpctune validate` judges the trainer's rules
  // (trainers::TrainerCapabilities::setting_rules) with them.
  std::vector<std::string> trial_settings{};
  // The stage's `trainer:` may give a program's own keys (the trainer kind takes any parameter,
  // trainers::TrainerParams::kAny): the keys that are not the kind's settings are parameters of
  // every trial the stage runs, over what the trial starts from (transfer's fine-tuning lr, epochs;
  // config::StageConfig::trainer_params).
  bool trainer_program_keys = false;
  // What of the kind judges the objective in its trials' report of every step, for messages
  // ("pbt's exploit and explore"): `hpctune validate` then requires an objective the trainer reports
  // every step, and the master says so when a trial ended without one. nullptr: nothing (beyond
  // the stage's early_stopping).
  const char* judges_reports = nullptr;
};

// What of a pbt stage judges its members' reports (StageKind::judges_reports, PbtSource).
inline constexpr const char* kPbtReportJudge = "pbt's exploit and explore";

inline std::vector<SettingDecl> ensemble_stage_settings() {
  using T = SettingType;
  return {
      {.key = "task", .type = T::kString, .default_value = "classification",
       .choices = {"classification", "regression"},
       .help = "ensemble: classification blends the members' val_probs/test_probs (rows x classes) by log loss; "
               "regression blends their val_pred/test_pred (rows x outputs) against val_targets/test_targets by "
               "mean squared error."},
      {.key = "method", .type = T::kString, .default_value = "greedy", .choices = {"greedy", "top_k", "weighted"},
       .help = "ensemble: greedy (forward selection with replacement on validation, Caruana et al. 2004), top_k "
               "(the average of the best k) or weighted (weights minimizing the validation loss: log loss, or "
               "mean squared error for regression)."},
      {.key = "max_size", .type = T::kInt, .default_value = 20, .min = 1, .max = 10000,
       .help = "ensemble greedy: picks, with replacement."},
      {.key = "bags", .type = T::kInt, .default_value = 0, .min = 0, .max = 1000,
       .help = "ensemble greedy: bags over random halves of the members (0 = no bagging)."},
      {.key = "k", .type = T::kInt, .default_value = 5, .min = 1, .max = 10000,
       .help = "ensemble top_k: how many of the best members."},
      {.key = "retrain.top", .type = T::kInt, .default_value = 3, .min = 1, .max = 1000,
       .help = "How many of the best configurations."},
      {.key = "retrain.seeds", .type = T::kInt, .default_value = 2, .min = 1, .max = 1000,
       .help = "New seeds for each."},
  };
}

inline std::vector<SettingDecl> transfer_stage_settings() {
  using T = SettingType;
  return {
      {.key = "classes", .type = T::kIntList, .default_value = nlohmann::json::array(), .min = 0, .max = 65535,
       .help = "transfer: the classes of the target task (trainer.classes for its trials); [] for all."},
      {.key = "max_train_samples", .type = T::kInt, .default_value = 0, .min = 0,
       .help = "transfer: labelled target images (trainer.max_train_samples for its trials; 0 = all)."},
      {.key = "freeze", .type = T::kInt, .default_value = 0, .min = 0, .max = 10000,
       .help = "transfer: the first N layers stay as the source's."},
      {.key = "baseline", .type = T::kBool, .default_value = false,
       .help = "transfer: beside each target trial, the same architecture trained from scratch on the same data, "
               "epochs and seed."},
      {.key = "sources", .type = T::kInt, .default_value = 1, .min = 1, .max = 1000,
       .help = "transfer: the best k trials of `from` to start from."},
      {.key = "seeds", .type = T::kInt, .default_value = 1, .min = 1, .max = 1000,
       .help = "transfer without a nested search: target trials per source."},
      {.key = "checkpoint", .type = T::kString, .default_value = "",
       .help = "transfer: a checkpoint file to start from instead of the trials of `from` (relative to the "
               "config's directory)."},
      {.key = "compare_metric", .type = T::kString, .default_value = "",
       .help = "transfer: the metric each target trial is compared with its baseline twin by (a held-out "
               "figure its trainer reports), better in the objective's direction; \"\" = the objective's "
               "metric with its val_ prefix as test_ (val_accuracy: test_accuracy).",
       .default_note = "the objective's metric, val_ as test_"},
  };
}

// The held-out figure that belongs to an objective metric: its "val_" prefix as "test_"
// (val_accuracy: test_accuracy, val_loss: test_loss); a metric without that prefix is itself.
// Where a stage reports a test-set figure beside its objective (transfer's compare_metric
// default, pbt's best), it is this one: no stage names a metric of its own.
inline std::string held_out_metric(const std::string& objective_metric) {
  const std::string val = "val_";
  if (objective_metric.rfind(val, 0) == 0) return "test_" + objective_metric.substr(val.size());
  return objective_metric;
}

inline std::vector<SettingDecl> pbt_stage_settings() {
  using T = SettingType;
  return {
      {.key = "population", .type = T::kInt, .default_value = 8, .min = 2, .max = 10000,
       .help = "pbt: members training at once."},
      {.key = "ready", .type = T::kInt, .default_value = 2, .min = 1, .max = 100000,
       .help = "pbt: steps (epochs) per interval; after each, the bottom quantile exploits the top."},
      // No default of its own: the trainer's step setting (trainer.epochs, trainer.steps), or the
      // end of the schedule (pbt_policy.cpp).
      {.key = "steps", .type = T::kInt, .min = 1, .max = 1000000,
       .help = "pbt: the steps every member trains in all.",
       .default_note = "the trainer's step setting (trainer.epochs, trainer.steps), or the schedule's end"},
      {.key = "quantile", .type = T::kFloat, .default_value = 0.25, .min = 0, .max = 0.5,
       .help = "pbt: the fraction of the population that is the bottom (and the top).", .min_exclusive = true},
      {.key = "resample_probability", .type = T::kFloat, .default_value = 0.25, .min = 0, .max = 1,
       .help = "pbt: the chance that explore draws a value afresh from the space rather than perturbing it."},
      {.key = "perturb", .type = T::kValueList, .default_value = nlohmann::json::array({0.8, 1.2}),
       .help = "pbt: the two factors explore multiplies a value by (then clipped to the space)."},
      {.key = "max_lead", .type = T::kInt, .default_value = 1, .min = 0, .max = 1000000,
       .help = "pbt: how many intervals a member may be ahead of the slowest (0 = no limit); with more members "
               "than groups, the paused member with the least progress runs first."},
      {.key = "older_snapshots", .type = T::kBool, .default_value = true,
       .help = "pbt: whether a bottom member may exploit a top member's snapshot older than its own step (its step "
               "goes back to the snapshot's); false: only snapshots at or past its step."},
  };
}

// Every stage kind, in the order the config lists them.
inline const std::vector<StageKind>& stage_kinds() {
  static const std::vector<StageKind> kinds = {
      {.kind = "search", .help = "a search of its own", .settings = {}, .search = StageSearch::kRequired},
      {.kind = "ensemble", .help = "blends the predictions of the trials of `from`",
       .settings = ensemble_stage_settings(), .needs_from = "blends", .inputs_provide = "predictions",
       .trains_inputs = false, .runs_own_trainer = false},
      {.kind = "transfer", .help = "fine-tunes the best checkpoints of `from` on other data",
       .settings = transfer_stage_settings(), .search = StageSearch::kOptional, .needs_from = "starts from",
       .needs_from_unless = "checkpoint", .freeze_setting = "freeze", .inputs_provide = "checkpoints", .path_settings = {"checkpoint"},
       .class_list_settings = {"classes"}, .trial_settings = {"classes", "max_train_samples"},
       .trainer_program_keys = true},
      {.kind = "pbt", .help = "population-based training", .settings = pbt_stage_settings(),
       .read_elsewhere = {"schedule"}, .search = StageSearch::kSpace, .trials_setting = "population",
       .own_trainer_provides = "checkpoints", .trials_resume_each_other = true, .steps_setting = "steps",
       .interval_setting = "ready", .schedule_setting = "schedule", .factor_pair_setting = "perturb",
       .judges_reports = kPbtReportJudge},
  };
  return kinds;
}

inline const StageKind* find_stage_kind(std::string_view kind) {
  for (const auto& k : stage_kinds())
    if (k.kind == kind) return &k;
  return nullptr;
}

// The one reader of a stage's keys: `given` (the stage's settings: a map, or null) checked against
// the declarations of `kind` (unknown keys, types, bounds, choices) and returned with every
// declared key, defaults filled in; a section (retrain) not given stays absent. Errors are kConfig and
// start with the key path ("retrain.top: must be in [1, 1000], got 1001"), for the caller to place.
inline Result<nlohmann::json> read_stage_settings(std::string_view kind, const nlohmann::json& given) {
  const StageKind* decl = find_stage_kind(kind);
  if (decl == nullptr) return err(Errc::kConfig, "unknown stage kind '" + std::string(kind) + "'");
  const std::string owner = "the " + std::string(kind) + " stage";
  if (!given.is_null() && !given.is_object()) return err(Errc::kConfig, "the stage's settings must be a map");
  std::vector<SettingDecl> top;
  std::vector<std::string> sections;
  for (const auto& d : decl->settings) {
    const auto dot = d.key.find('.');
    if (dot == std::string::npos) {
      top.push_back(d);
    } else if (std::find(sections.begin(), sections.end(), d.key.substr(0, dot)) == sections.end()) {
      sections.push_back(d.key.substr(0, dot));
    }
  }
  nlohmann::json rest = given.is_object() ? given : nlohmann::json::object();
  nlohmann::json held = nlohmann::json::object();
  for (const auto& key : sections) {
    if (rest.contains(key)) held[key] = rest[key];
    rest.erase(key);
  }
  for (const auto& key : decl->read_elsewhere) {
    if (rest.contains(key)) held[key] = rest[key];
    rest.erase(key);
  }
  HPCTUNE_ASSIGN(nlohmann::json out, resolve_settings(owner, top, rest));
  for (const auto& key : sections) {
    if (!held.contains(key) || held[key].is_null()) continue;  // not given: absent
    if (!held[key].is_object()) return err(Errc::kConfig, key + ": must be a map, got " + held[key].dump());
    std::vector<SettingDecl> inner;
    for (const auto& d : decl->settings)
      if (d.key.rfind(key + ".", 0) == 0) {
        inner.push_back(d);
        inner.back().key = d.key.substr(key.size() + 1);
      }
    auto section = resolve_settings(owner + "'s " + key, inner, held[key]);
    if (!section.ok()) return err(Errc::kConfig, key + "." + section.error().message());
    out[key] = std::move(section).value();
  }
  for (const auto& key : decl->read_elsewhere)
    if (held.contains(key)) out[key] = held[key];
  return out;
}

}  // namespace hpctune::workflow
