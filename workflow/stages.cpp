// The stage-kind registry (stages.h): each kind's name and builder, in one table.
#include "workflow/stages.h"

#include "workflow/ensemble_stage.h"
#include "workflow/pbt_stage.h"
#include "workflow/search_stage.h"
#include "workflow/transfer_stage.h"

namespace hpctune::workflow {
namespace {

// The campaign as stage `plan` sees it: its own view with stages, the campaign without.
const config::CampaignConfig& view_of(const scheduler::StagePlan& plan, const config::CampaignConfig& cfg) {
  if (plan.index < cfg.stages.size() && cfg.stages[plan.index].own) return *cfg.stages[plan.index].own;
  return cfg;
}

Result<std::unique_ptr<scheduler::StageRuntime>> search_kind(const scheduler::StagePlan& plan,
                                                             const config::CampaignConfig& cfg,
                                                             const std::optional<scheduler::WarmStart>& warm) {
  // search.warm_start is the main stage's (the campaign's fields): run_master loaded it from there.
  const bool main = cfg.stages.empty() || plan.index == cfg.main_stage;
  return make_search_stage(view_of(plan, cfg), main ? warm : std::nullopt);
}

Result<std::unique_ptr<scheduler::StageRuntime>> ensemble_kind(const scheduler::StagePlan& plan,
                                                               const config::CampaignConfig& cfg,
                                                               const std::optional<scheduler::WarmStart>&) {
  if (plan.index >= cfg.stages.size())
    return err(Errc::kConfig, "stage '" + plan.name + "': an ensemble stage must be listed in `stages:`");
  return make_ensemble_stage(cfg.stages[plan.index], cfg);
}

Result<std::unique_ptr<scheduler::StageRuntime>> pbt_kind(const scheduler::StagePlan& plan,
                                                          const config::CampaignConfig& cfg,
                                                          const std::optional<scheduler::WarmStart>&) {
  const nlohmann::json settings =
      plan.index < cfg.stages.size() ? cfg.stages[plan.index].settings : nlohmann::json::object();
  return make_pbt_stage(plan.name, settings, view_of(plan, cfg));
}

Result<std::unique_ptr<scheduler::StageRuntime>> transfer_kind(const scheduler::StagePlan& plan,
                                                               const config::CampaignConfig& cfg,
                                                               const std::optional<scheduler::WarmStart>&) {
  if (plan.index >= cfg.stages.size() || cfg.stages[plan.index].name != plan.name) {
    return err(Errc::kConfig, "transfer stage '" + plan.name + "' is not among the config's stages");
  }
  return make_transfer_stage(cfg.stages[plan.index], cfg);
}

struct StageKind {
  const char* name;
  Result<std::unique_ptr<scheduler::StageRuntime>> (*make)(const scheduler::StagePlan&, const config::CampaignConfig&,
                                                           const std::optional<scheduler::WarmStart>&);
};

constexpr StageKind kStageKinds[] = {
    {"search", search_kind},
    {"ensemble", ensemble_kind},
    {"pbt", pbt_kind},
    {"transfer", transfer_kind},
};

}  // namespace

std::vector<std::string> stage_kind_names() {
  std::vector<std::string> out;
  for (const StageKind& k : kStageKinds) out.push_back(k.name);
  return out;
}

Result<std::unique_ptr<scheduler::StageRuntime>> make_stage(const scheduler::StagePlan& plan,
                                                            const config::CampaignConfig& cfg,
                                                            const std::optional<scheduler::WarmStart>& warm) {
  std::string known;
  for (const StageKind& k : kStageKinds) {
    if (plan.kind == k.name) return k.make(plan, cfg, warm);
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  return err(Errc::kConfig, "unknown stage kind '" + plan.kind + "' (known: " + known + ")");
}

}  // namespace hpctune::workflow
