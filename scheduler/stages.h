// Stage kinds: a registry from a stage's `kind` to what builds its TrialSource from the campaign's
// config. The master holds one stage per source and knows kinds only through this registry.
//
// Only `search` exists (a searcher and its early stopper); issue 11 adds ensemble, transfer and
// pbt. A config without `stages:` (every config today) is the one stage {name: search, kind: search}.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/scheduler.h"
#include "scheduler/trial_source.h"

namespace hpctune::scheduler {

// A built stage: its source and whatever the source uses, owned together.
class StageRuntime {
 public:
  virtual ~StageRuntime() = default;
  virtual TrialSource& source() = 0;
  virtual int64_t max_trials() const = 0;
};

// One stage of a campaign's plan: its name (unique in the campaign; the stages row) and kind.
struct StagePlan {
  std::string name;
  std::string kind;
};

// The stages a config asks for, in order.
std::vector<StagePlan> stage_plan(const config::CampaignConfig& cfg);

// The kinds this build knows, for error messages.
std::vector<std::string> stage_kind_names();

// Builds a stage of `kind`; kConfig naming the known kinds for an unknown one. `warm` feeds the
// search stage's warm start.
Result<std::unique_ptr<StageRuntime>> make_stage(const std::string& kind, const config::CampaignConfig& cfg,
                                                 const std::optional<WarmStart>& warm);

}  // namespace hpctune::scheduler
