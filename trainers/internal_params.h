// The keys hpctune itself puts in a trial's params beside the searched values, declared once: the
// trainer receives them as they are (command_trainer.cpp exports some as HPCTUNE_* variables), and
// the views (report/, the dashboard) show them apart from the parameters, as the trial's lineage
// (where it started from) or its run settings (how far a stage let it train).
//
// Who adds them: a transfer stage gives a target its source's checkpoint and the source trial's id
// through the target kind's init_setting and source_trial_setting (transfer/transfer_plan.h); a pbt
// stage, and a search that pauses trials at rungs, set the command kind's step setting per interval
// (workflow/pbt_stage.cpp, workflow/promotion_source.cpp). The capabilities of each kind
// (command_settings.cpp, classifier_settings.cpp) name them through the constants below, and a test
// (test_report: "the keys hpctune adds to params: ...") keeps the two lists together. report/ reads
// the list through config/trainer_kinds.h (internal_param), as it reads the kinds' capabilities.
#pragma once

#include <string_view>

namespace hpctune::trainers {

// The command kind's reserved parameters of a transfer target (exported as HPCTUNE_SOURCE_CHECKPOINT
// and HPCTUNE_SOURCE_TRIAL, taken out of HPCTUNE_PARAMS).
inline constexpr const char* kSourceCheckpointParam = "hpctune_source_checkpoint";
inline constexpr const char* kSourceTrialParam = "hpctune_source_trial";
// The classifier kinds' setting that a transfer target starts from (a checkpoint file).
inline constexpr const char* kInitFromParam = "init_from";
// The command kind's step setting (HPCTUNE_MAX_STEP): the step a stage lets an attempt train to.
inline constexpr const char* kMaxStepParam = "max_step";

enum class InternalParamRole {
  kLineage,     // where the trial started from: a source trial, a checkpoint
  kRunSetting,  // how the stage ran it: the step it trains to
};

struct InternalParam {
  std::string_view key;   // as it is in the trial's params
  InternalParamRole role;
  std::string_view name;  // as the views show it (JSON key, CSV column after "lineage." / "run_settings.")
};

inline constexpr InternalParam kInternalParams[] = {
    {kSourceTrialParam, InternalParamRole::kLineage, "source_trial"},
    {kSourceCheckpointParam, InternalParamRole::kLineage, "source_checkpoint"},
    {kInitFromParam, InternalParamRole::kLineage, "source_checkpoint"},
    {kMaxStepParam, InternalParamRole::kRunSetting, "max_step"},
};

// A trial meta key: the name of the params key through which a stage set the step the trial trains to
// (the kind's step setting: epochs, steps, max_step; a pbt stage and a search that pauses trials at
// rungs set it). The views show that key as the run setting max_step, whatever the kind calls it,
// and never as a parameter: the stage chose its value, the search did not.
inline constexpr const char* kStageStepMeta = "stage_step_setting";
// A trial meta key: the params keys a stage set from its own settings rather than searched (a
// transfer stage's freeze, its `trainer:` keys for a program, the target data's classes and
// max_train_samples where they are parameters). The views show them as run settings under their
// own names.
inline constexpr const char* kStageSettingsMeta = "stage_settings";

// The declaration of `key`, or nullptr when it is a searched (or user-given) parameter.
inline const InternalParam* find_internal_param(std::string_view key) {
  for (const InternalParam& p : kInternalParams)
    if (p.key == key) return &p;
  return nullptr;
}

}  // namespace hpctune::trainers
