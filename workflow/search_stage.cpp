// The search stage (search_stage.h).
#include "workflow/search_stage.h"

#include <algorithm>
#include <cmath>

#include "config/trainer_kinds.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "store/store.h"
#include "workflow/promotion_source.h"

namespace hpctune::workflow {
namespace {

bool reaches(const config::StopWhen& w, const nlohmann::json& metrics) {
  if (!metrics.is_object()) return false;
  auto it = metrics.find(w.metric);
  if (it == metrics.end() || !it->is_number()) return false;
  const double v = it->get<double>();
  return std::isfinite(v) && (w.maximize ? v >= w.reaches : v <= w.reaches);
}

// The searcher as a source (stopping or pausing: promotion_source.h), and search.stop_when: no
// trial is asked for once one reached it.
class StopWhenSource final : public scheduler::ForwardingSource {
 public:
  StopWhenSource(std::unique_ptr<scheduler::TrialSource> inner, std::optional<config::StopWhen> stop_when)
      : ForwardingSource(std::move(inner)), stop_when_(std::move(stop_when)) {}
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override {
    if (reached_) return std::vector<search::Suggestion>{};
    return inner().ask(n);
  }
  bool exhausted() const override { return reached_ || inner().exhausted(); }
  std::optional<int64_t> resume_next(const std::vector<int64_t>& held) override {
    // Once reached, nothing paused goes on: the held trials end pruned.
    return reached_ ? std::nullopt : inner().resume_next(held);
  }
  void on_result(int64_t seq, const nlohmann::json& metrics) override {
    if (stop_when_ && reaches(*stop_when_, metrics)) reached_ = true;
    inner().on_result(seq, metrics);
  }
  void set_reached() { reached_ = true; }

 private:
  std::optional<config::StopWhen> stop_when_;
  bool reached_ = false;
};

class SearchStage final : public scheduler::StageRuntime {
 public:
  SearchStage(std::unique_ptr<search::Searcher> searcher, std::unique_ptr<search::EarlyStopper> stopper,
              const config::CampaignConfig& cfg)
      : searcher_(std::move(searcher)),
        stopper_(std::move(stopper)),
        source_(inner_source(*searcher_, *stopper_, cfg), cfg.stop_when),
        max_trials_(cfg.max_trials),
        trainer_(cfg.trainer),
        stop_when_(cfg.stop_when),
        pauses_(stopper_->pauses()) {}
  scheduler::TrialSource* source() override { return &source_; }
  int64_t max_trials() const override { return max_trials_; }
  nlohmann::json trainer() const override { return trainer_; }

  // The searcher's notes for the user (a space smaller than the budget, its start-up design),
  // printed at every start and resume, recorded once as a search_notes event.
  // After a restart: a threshold already reached stays reached.
  Status begin(const scheduler::StageContext& ctx) override {
    if (pauses_ && ctx.run_dir.empty())
      return err(Errc::kInvalidArgument, "early_stopping.mode pause keeps each paused trial's checkpoint in its "
                                         "directory, and this campaign keeps none (hpctune simulate keeps no trial "
                                         "files: it does not simulate checkpoints yet; plan with mode: stop)");
    const std::vector<std::string> notes = searcher_->notes();
    if (ctx.log)
      for (const auto& line : notes) ctx.log("search: " + line);
    if (!notes.empty() && !ctx.resuming && ctx.store)
      HPCTUNE_TRY(ctx.store->add_event(ctx.campaign_id, "search_notes", 0, 0, -1,
                                       {{"stage_id", ctx.stage_id}, {"notes", notes}}, ctx.now));
    if (!stop_when_ || !ctx.resuming) return {};
    HPCTUNE_ASSIGN(nlohmann::json r, runs_to_threshold(ctx));
    if (r.value("reached", false)) source_.set_reached();
    return {};
  }

  Result<nlohmann::json> finish(const scheduler::StageContext& ctx) override {
    if (!stop_when_) return nlohmann::json::object();
    HPCTUNE_ASSIGN(nlohmann::json r, runs_to_threshold(ctx));
    return nlohmann::json{{"stop_when", std::move(r)}};
  }

 private:
  static std::unique_ptr<scheduler::TrialSource> inner_source(search::Searcher& searcher, search::EarlyStopper& stopper,
                                                              const config::CampaignConfig& cfg) {
    if (!stopper.pauses()) {
      auto source = std::make_unique<scheduler::SearchSource>(searcher, stopper);
      source->set_max_steps(cfg.max_steps);
      return source;
    }
    const std::string kind = cfg.trainer.value("kind", "");
    PromotionOptions o;
    o.step_key = config::trainer_step_setting(kind);
    o.checkpoint_directory = config::trainer_checkpoint_directory(kind);
    o.max_t = cfg.early_stopping_settings.value("max_t", int64_t{0});
    o.max_trials = cfg.max_trials;
    o.max_steps = cfg.max_steps;
    o.maximize = cfg.objectives.empty() || cfg.objectives.front().maximize;
    return std::make_unique<PromotionSource>(searcher, stopper, std::move(o));
  }

  // "Runs to threshold" from the store: the first done trial (by finish time) that reached it, the
  // stage's trials finished by then, the generations they span and the seconds since the stage
  // started. Read from the store, so a restart changes nothing.
  Result<nlohmann::json> runs_to_threshold(const scheduler::StageContext& ctx) const {
    const config::StopWhen& w = *stop_when_;
    nlohmann::json r = {{"metric", w.metric}, {"reaches", w.reaches}, {"mode", w.maximize ? "max" : "min"},
                        {"reached", false}};
    HPCTUNE_ASSIGN(auto trials, ctx.store->trials(ctx.campaign_id));
    std::vector<const store::TrialRow*> finals;
    for (const auto& t : trials) {
      if (t.stage_id == ctx.stage_id && store::is_final(t.state)) finals.push_back(&t);
    }
    std::stable_sort(finals.begin(), finals.end(), [](const store::TrialRow* a, const store::TrialRow* b) {
      return a->finished_at != b->finished_at ? a->finished_at < b->finished_at : a->id < b->id;
    });
    r["finished_trials"] = static_cast<int64_t>(finals.size());
    int64_t generations = 0;
    for (std::size_t i = 0; i < finals.size(); ++i) {
      const store::TrialRow& t = *finals[i];
      generations = std::max(generations, t.generation + 1);
      if (t.state != store::TrialState::kDone || !reaches(w, t.metrics)) continue;
      double started = 0;
      HPCTUNE_ASSIGN(auto stages, ctx.store->stages(ctx.campaign_id));
      for (const auto& s : stages) {
        if (s.id == ctx.stage_id) started = s.started_at;
      }
      r["reached"] = true;
      r["trial"] = t.id;
      r["value"] = t.metrics[w.metric];
      r["finished_trials"] = static_cast<int64_t>(i + 1);
      r["generations"] = generations;
      r["seconds"] = started > 0 ? t.finished_at - started : 0.0;
      return r;
    }
    r["generations"] = generations;
    return r;
  }

  std::unique_ptr<search::Searcher> searcher_;
  std::unique_ptr<search::EarlyStopper> stopper_;
  StopWhenSource source_;
  int64_t max_trials_;
  nlohmann::json trainer_;
  std::optional<config::StopWhen> stop_when_;
  bool pauses_ = false;
};

}  // namespace

Result<std::unique_ptr<scheduler::StageRuntime>> make_search_stage(const config::CampaignConfig& cfg,
                                                                   const std::optional<scheduler::WarmStart>& warm) {
  search::SearchSpec spec = cfg.search_spec();
  if (warm) spec.warm_start = warm->observations;
  HPCTUNE_ASSIGN(std::unique_ptr<search::Searcher> searcher, search::make_searcher(spec));
  HPCTUNE_ASSIGN(std::unique_ptr<search::EarlyStopper> stopper, search::make_stopper(cfg.stopper_spec()));
  return std::unique_ptr<scheduler::StageRuntime>(new SearchStage(std::move(searcher), std::move(stopper), cfg));
}

}  // namespace hpctune::workflow
