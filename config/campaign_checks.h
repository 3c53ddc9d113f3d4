// The checks across keys of one campaign (or one stage's view of it), after the settings walker
// (settings_walker.h) checked each key alone: objective xor objectives, the search and its space
// (bounds, log ranges, choices, conditions, the grid's size, names against the trainer's
// settings), early stopping, the trainer (classes, command placeholders, a trial's assign size),
// resources; and the CampaignConfig built from them. Internal to hpctune_config: not part of the
// public API (config.h).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "config/config.h"
#include "config/settings.h"
#include "config/settings_walker.h"

namespace hpctune::config {

// The campaign `c` from the tree the walker walked into `root`, checked across keys; the first
// problem at its key's file:line:column. `root` gets the keys filled in from others (storage,
// objectives, early_stopping.max_t, search.init), to become the campaign's normalized config.
Status build_campaign(Walker& walker, nlohmann::json& root, CampaignConfig& c);

// The setting of trainer `kind` that a parameter `name` sets (a space's, a pbt schedule's); nullptr
// when there is none, with what to say in `*what` ("not a setting of trainer 'mlp'; did you mean
// 'lr'?"). Names a command or function trainer takes freely (free_space_name) are the caller's.
const Setting* trainer_setting_of(const std::string& kind, const std::string& name, std::string* what);

// A list of class labels (trainer.classes, a transfer stage's classes): [] or at least two distinct
// ones, as the classifier trainers take them (trainers::classes_problem; a lone label is a list of
// one). `path` names the list.
std::optional<std::pair<std::string, std::string>> classes_problem_at(const nlohmann::json& classes, const std::string& path);

// The trainer kind's rules between settings that each pass their declaration
// (trainers::TrainerCapabilities::setting_rules: precision with device, head_epochs against
// epochs, ...) over `c`'s trainer settings (defaults filled in) with its space's fixed values,
// leaving out what the space searches and the keys in `unknown` (a stage's: what the trials of its
// `from` carry over), with the values of `given` over the trainer's (a stage's settings that its trials
// take as trainer settings, workflow::StageKind::trial_settings; the space's fixed values win over
// them). The setting that breaks one, whether the space fixes it, and what to say; nullopt when none.
// Without this every trial of run fails with the trainer's same message.
struct SettingRuleProblem {
  std::string key;
  bool in_space = false;
  std::string what;
  std::string below;  // the place in the setting's value ("[2].kernel"); "" for the value as a whole
};
std::optional<SettingRuleProblem> setting_rules_problem(const CampaignConfig& c, const std::set<std::string>& unknown,
                                                        const nlohmann::json& given = nlohmann::json::object());
// The same for the kind's rules between its settings and the group's layout (TrainerCapabilities::
// layout_rules, with resources.ranks).
std::optional<SettingRuleProblem> layout_rules_problem(const CampaignConfig& c, const std::set<std::string>& unknown,
                                                       const nlohmann::json& given = nlohmann::json::object());
// The same for the kind's rules against the data its settings name (TrainerCapabilities::data_rules:
// a classifier's `data` read where validate runs, relative to the current directory as the trainer
// reads it; its `classes` against the data's labels; a cnn's layers against its images), with `below`
// the place in the setting's value. A setting that the space searches or that is in `unknown` is open:
// nothing that depends on it is judged.
std::optional<SettingRuleProblem> data_rules_problem(const CampaignConfig& c, const std::set<std::string>& unknown,
                                                     const nlohmann::json& given = nlohmann::json::object());
// resources.ranks.model against what a trial of `c`'s trainer kind can be split into
// (TrainerCapabilities::model_stages: each pipeline stage needs a layer of its network), the space's
// fixed values over the trainer's settings; a space that searches a setting the count reads, or one
// of them in `unknown`, leaves it to each trial. What to say at resources.ranks.model; nullopt when fine.
std::optional<std::string> model_split_problem(const CampaignConfig& c, const std::set<std::string>& unknown);
// Whether the files `c`'s trials read may be judged here: the walk reads local files
// (ParseOptions::local_files) and the trials run on this machine (resources.backend local).
bool judges_local_files(const Walker& walker, const CampaignConfig& c);
// The objectives' metrics against those a trial of `c`'s trainer kind reports at its end
// (TrainerCapabilities::metrics): the first that it never reports, as its path ("objective.metric",
// "objectives[1].metric": `single` says which form the config has) and what to say, naming `stage`
// when not ""; nullopt when each is reported or the kind's metrics are not known. `judge`: what judges
// the first objective in the report of every step while a trial runs (early_stopping_judge(c), a
// stage kind's StageKind::judges_reports), "" for nothing; the first objective must then be one of
// the metrics the kind reports every step (ReportedMetrics::every_step), or the judge never judges.
std::optional<std::pair<std::string, std::string>> objective_metric_problem(const CampaignConfig& c, bool single,
                                                                            const std::string& stage = "",
                                                                            const std::string& judge = "");
// search.stop_when's metric against those a trial of `c`'s trainer kind reports at its end: what to
// say when it never does (naming `stage` when not ""), nullopt when it does, when there is no
// stop_when, or when the kind's metrics are not known.
std::optional<std::string> stop_when_metric_problem(const CampaignConfig& c, const std::string& stage = "");
// "early stopping (asha)" where `c` stops trials early, else "".
std::string early_stopping_judge(const CampaignConfig& c);
// The trainer's freeze setting (TrainerCapabilities::freeze_setting) against the layers before the
// output layer of its network (model_stages.count less one), the space's fixed values over the
// trainer's; a space that searches the freeze or a setting the count reads, or one of them in
// `unknown`, leaves it to each trial. The problem is at the freeze setting.
std::optional<SettingRuleProblem> freeze_problem(const CampaignConfig& c, const std::set<std::string>& unknown);

}  // namespace hpctune::config
