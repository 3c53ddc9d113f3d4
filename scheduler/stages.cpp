// The plan of a campaign's stages (stages.h): the config's `stages:`, or its one search stage.
#include "scheduler/stages.h"

namespace hpctune::scheduler {

std::vector<StagePlan> stage_plan(const config::CampaignConfig& cfg) {
  if (cfg.stages.empty()) return {{"search", "search", {}, 0}};
  std::vector<StagePlan> plan;
  for (std::size_t i = 0; i < cfg.stages.size(); ++i) {
    const config::StageConfig& s = cfg.stages[i];
    plan.push_back({s.name, s.kind, s.from, i});
  }
  return plan;
}

}  // namespace hpctune::scheduler
