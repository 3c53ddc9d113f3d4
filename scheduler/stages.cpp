// The stage-kind registry (stages.h): each kind's name and builder, in one table.
#include "scheduler/stages.h"

namespace hpctune::scheduler {
namespace {

// The search stage: the config's searcher (with its warm start) and early stopper.
class SearchStage final : public StageRuntime {
 public:
  SearchStage(std::unique_ptr<search::Searcher> searcher, std::unique_ptr<search::EarlyStopper> stopper,
              int64_t max_trials)
      : searcher_(std::move(searcher)), stopper_(std::move(stopper)), source_(*searcher_, *stopper_),
        max_trials_(max_trials) {}
  TrialSource& source() override { return source_; }
  int64_t max_trials() const override { return max_trials_; }

 private:
  std::unique_ptr<search::Searcher> searcher_;
  std::unique_ptr<search::EarlyStopper> stopper_;
  SearchSource source_;
  int64_t max_trials_;
};

Result<std::unique_ptr<StageRuntime>> make_search_stage(const config::CampaignConfig& cfg,
                                                        const std::optional<WarmStart>& warm) {
  search::SearchSpec spec = cfg.search_spec();
  if (warm) spec.warm_start = warm->observations;
  HPCTUNE_ASSIGN(std::unique_ptr<search::Searcher> searcher, search::make_searcher(spec));
  HPCTUNE_ASSIGN(std::unique_ptr<search::EarlyStopper> stopper, search::make_stopper(cfg.stopper_spec()));
  return std::unique_ptr<StageRuntime>(new SearchStage(std::move(searcher), std::move(stopper), cfg.max_trials));
}

struct StageKind {
  const char* name;
  Result<std::unique_ptr<StageRuntime>> (*make)(const config::CampaignConfig&, const std::optional<WarmStart>&);
};

constexpr StageKind kStageKinds[] = {
    {"search", make_search_stage},
};

}  // namespace

std::vector<StagePlan> stage_plan(const config::CampaignConfig&) { return {{"search", "search"}}; }

std::vector<std::string> stage_kind_names() {
  std::vector<std::string> out;
  for (const StageKind& k : kStageKinds) out.push_back(k.name);
  return out;
}

Result<std::unique_ptr<StageRuntime>> make_stage(const std::string& kind, const config::CampaignConfig& cfg,
                                                 const std::optional<WarmStart>& warm) {
  std::string known;
  for (const StageKind& k : kStageKinds) {
    if (kind == k.name) return k.make(cfg, warm);
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  return err(Errc::kConfig, "unknown stage kind '" + kind + "' (known: " + known + ")");
}

}  // namespace hpctune::scheduler
