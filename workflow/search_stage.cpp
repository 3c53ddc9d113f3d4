// The search stage (search_stage.h).
#include "workflow/search_stage.h"

#include "search/early_stopping.h"
#include "search/searcher.h"

namespace hpctune::workflow {
namespace {

class SearchStage final : public scheduler::StageRuntime {
 public:
  SearchStage(std::unique_ptr<search::Searcher> searcher, std::unique_ptr<search::EarlyStopper> stopper,
              int64_t max_trials, nlohmann::json trainer)
      : searcher_(std::move(searcher)), stopper_(std::move(stopper)), source_(*searcher_, *stopper_),
        max_trials_(max_trials), trainer_(std::move(trainer)) {}
  scheduler::TrialSource* source() override { return &source_; }
  int64_t max_trials() const override { return max_trials_; }
  nlohmann::json trainer() const override { return trainer_; }

 private:
  std::unique_ptr<search::Searcher> searcher_;
  std::unique_ptr<search::EarlyStopper> stopper_;
  scheduler::SearchSource source_;
  int64_t max_trials_;
  nlohmann::json trainer_;
};

}  // namespace

Result<std::unique_ptr<scheduler::StageRuntime>> make_search_stage(const config::CampaignConfig& cfg,
                                                                   const std::optional<scheduler::WarmStart>& warm) {
  search::SearchSpec spec = cfg.search_spec();
  if (warm) spec.warm_start = warm->observations;
  HPCTUNE_ASSIGN(std::unique_ptr<search::Searcher> searcher, search::make_searcher(spec));
  HPCTUNE_ASSIGN(std::unique_ptr<search::EarlyStopper> stopper, search::make_stopper(cfg.stopper_spec()));
  return std::unique_ptr<scheduler::StageRuntime>(
      new SearchStage(std::move(searcher), std::move(stopper), cfg.max_trials, cfg.trainer));
}

}  // namespace hpctune::workflow
