// The search stage: the stage's searcher (with the campaign's warm start) and early stopper as a
// TrialSource, ended by search.max_trials, search.max_time or search.stop_when.
//
// stop_when ("runs to threshold", the figure of Cray's HPO table): once a done trial's metric
// reaches the threshold the stage asks for no more trials; trials already running finish. Its
// result records the trial that reached it, the trials finished by then, the generations they
// span and the wall time from the stage's start.
#pragma once

#include <memory>
#include <optional>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/scheduler.h"
#include "scheduler/stages.h"

namespace hpctune::workflow {

// `cfg` is the stage's own view of the campaign (StageConfig::own, or the campaign itself).
Result<std::unique_ptr<scheduler::StageRuntime>> make_search_stage(const config::CampaignConfig& cfg,
                                                                   const std::optional<scheduler::WarmStart>& warm);

}  // namespace hpctune::workflow
