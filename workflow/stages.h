// The stage kinds of a campaign and their registry: the builder the master is given
// (scheduler::MasterParts::make_stage) to make each stage of the plan (scheduler/stages.h).
//
//   search    a searcher and its early stopper over the stage's space (search_stage.h), ended by
//             search.max_trials, search.max_time or search.stop_when;
//   ensemble  a blend of an earlier stage's trials' predictions (ensemble_stage.h; ensemble/);
//   transfer  fine-tunes the best checkpoints of an earlier stage on other data, beside a baseline
//             trained from scratch (transfer_stage.h);
//   pbt       population-based training (pbt_stage.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/scheduler.h"
#include "scheduler/stages.h"

namespace hpctune::workflow {

// The kinds this build knows.
std::vector<std::string> stage_kind_names();

// Builds the stage `plan` of `cfg`; kConfig naming the known kinds for an unknown one.
Result<std::unique_ptr<scheduler::StageRuntime>> make_stage(const scheduler::StagePlan& plan,
                                                            const config::CampaignConfig& cfg,
                                                            const std::optional<scheduler::WarmStart>& warm);

}  // namespace hpctune::workflow
