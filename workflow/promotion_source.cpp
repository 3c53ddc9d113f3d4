// Early stopping that pauses (promotion_source.h).
#include "workflow/promotion_source.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "config/trainer_kinds.h"
#include "store/store.h"
#include "workflow/checkpoint_snapshot.h"

namespace hpctune::workflow {

std::string rung_snapshot_dir(const std::string& trial_dir, int64_t step) {
  return trial_dir + "/rungs/step-" + std::to_string(step);
}

PromotionSource::PromotionSource(search::Searcher& searcher, search::EarlyStopper& stopper, PromotionOptions options)
    : searcher_(searcher), stopper_(stopper), opt_(std::move(options)) {}

template <typename Change>
void PromotionSource::change_entry(int64_t seq, Change change) {
  Entry& e = entries_[seq];
  consumed_ -= e.reached;
  reserved_ -= owed(e);
  change(e);
  consumed_ += e.reached;
  reserved_ += owed(e);
}

int64_t PromotionSource::step_budget() const {
  return opt_.max_steps > 0 ? opt_.max_steps : opt_.max_trials * opt_.max_t;
}

int64_t PromotionSource::next_stop(int64_t seq, int64_t step) const {
  for (int64_t m : stopper_.milestones(seq))
    if (m > step && m < opt_.max_t) return m;
  return opt_.max_t;
}

search::Params PromotionSource::without_step(search::Params p) const {
  if (p.is_object()) p.erase(opt_.step_key);
  return p;
}

Result<std::vector<search::Suggestion>> PromotionSource::ask(std::size_t n) {
  // As many new trials as the budget left holds, each reserving its first rung's steps (the last
  // one may pass it).
  int64_t left = step_budget() - steps_consumed() - steps_reserved();
  std::size_t fit = 0;
  for (; fit < n && left > 0; ++fit) left -= next_stop(issued_ + static_cast<int64_t>(fit), 0);
  if (fit == 0) return std::vector<search::Suggestion>{};
  HPCTUNE_ASSIGN(std::vector<search::Suggestion> out, searcher_.ask(fit));
  for (search::Suggestion& s : out) {
    // The first attempt trains to the trial's first rung.
    s.params[opt_.step_key] = next_stop(s.seq, 0);
    s.meta[trainers::kStageStepMeta] = opt_.step_key;  // the views show it as the run setting max_step
    change_entry(s.seq, [&](Entry& e) { e.target = next_stop(s.seq, 0); });
    issued_ = std::max(issued_, s.seq + 1);
  }
  return out;
}

void PromotionSource::note_report(int64_t seq, int64_t step, double value) {
  change_entry(seq, [&](Entry& e) { e.reached = std::max(e.reached, step); });
  searcher_.tell_report(seq, step, value);  // a partial value (search/searcher.h: Fidelity)
  (void)stopper_.on_report(seq, step, value);  // records the rung; promotion is asked in resume_next
}

scheduler::Verdict PromotionSource::on_report(const scheduler::TrialView& trial, int64_t step, double value) {
  note_report(trial.seq, step, value);
  const std::optional<int64_t> target = scheduler::int_param(trial, opt_.step_key);
  if (!target || trial.trial_dir.empty()) return scheduler::Verdict::carry_on();
  // The attempt ends at its rung by itself: below max_t it pauses there, whatever the rung says
  // (resume_next decides when it goes on).
  if (step < *target || step >= opt_.max_t) return scheduler::Verdict::carry_on();
  search::Params next = *trial.params;
  next[opt_.step_key] = next_stop(trial.seq, step);
  scheduler::Verdict v = scheduler::Verdict::pause(std::move(next), rung_snapshot_dir(trial.trial_dir, step));
  const auto standing = stopper_.standing(trial.seq);
  v.note = {{"rung_paused",
             {{"step", step}, {"value", value}, {"in_top", standing && standing->in_top},
              {"next_step", next_stop(trial.seq, step)},
              // relative to the trial directory, as every recorded path below it (store::path_to_record)
              {"checkpoint", store::path_to_record(std::filesystem::path(trial.trial_dir).parent_path().string(),
                                                   v.resume_from)}}}};
  return v;
}

std::optional<int64_t> PromotionSource::step_target(const scheduler::TrialView& trial) const {
  const std::optional<int64_t> step = scheduler::int_param(trial, opt_.step_key);
  if (!step || *step <= 0 || *step >= opt_.max_t) return std::nullopt;  // the last leg, to max_t, ends done
  return step;
}

Status PromotionSource::on_paused(const scheduler::TrialView& trial, int64_t step) {
  const std::string what = "trial " + std::to_string(trial.trial_id) + " paused at step " + std::to_string(step) + ": ";
  return snapshot_trial_checkpoint(trial.trial_dir, opt_.checkpoint_directory, rung_snapshot_dir(trial.trial_dir, step),
                                   what);
}

std::optional<int64_t> PromotionSource::resume_next(const std::vector<int64_t>& held) {
  if (budget_spent()) return std::nullopt;
  struct Candidate {
    int64_t seq = 0, rung = 0;
    double value = 0;
    bool in_top = false;
  };
  std::vector<Candidate> candidates;
  for (int64_t seq : held) {
    const auto standing = stopper_.standing(seq);
    if (standing) candidates.push_back({seq, standing->rung, standing->value, standing->in_top});
  }
  // The highest rung first, then the best value, then the lower seq.
  auto ahead = [&](const Candidate& a, const Candidate& b) {
    if (a.rung != b.rung) return a.rung > b.rung;
    const double la = opt_.maximize ? -a.value : a.value, lb = opt_.maximize ? -b.value : b.value;
    if (!(std::isnan(la) && std::isnan(lb)) && la != lb) return std::isnan(lb) || la < lb;
    return a.seq < b.seq;
  };
  std::optional<Candidate> best;
  for (const Candidate& c : candidates)
    if (c.in_top && (!best || ahead(c, *best))) best = c;
  if (!best && nothing_new()) {
    // Nothing new to try: the most promising waiting trial goes on rather than leave budget unused.
    for (const Candidate& c : candidates)
      if (!best || ahead(c, *best)) best = c;
  }
  if (!best) return std::nullopt;
  // Its attempt trains to where its pause set its step setting.
  change_entry(best->seq, [&](Entry& e) { e.target = next_stop(best->seq, e.reached); });
  return best->seq;
}

void PromotionSource::tell(const search::Observation& observation) {
  change_entry(observation.seq, [](Entry& e) { e.final = true; });
  search::Observation obs = observation;
  obs.params = without_step(obs.params);
  searcher_.tell(obs);
  stopper_.on_finish(observation.seq);
}

void PromotionSource::restore(const std::vector<search::Record>& history) {
  std::vector<search::Record> stripped = history;
  for (search::Record& r : stripped) {
    issued_ = std::max(issued_, r.suggestion.seq + 1);
    change_entry(r.suggestion.seq, [&](Entry& e) { e.final = r.observation.has_value(); });
    r.suggestion.params = without_step(r.suggestion.params);
    if (r.observation) r.observation->params = without_step(r.observation->params);
  }
  searcher_.restore(stripped);
}

bool PromotionSource::replay_report(int64_t seq, int64_t step, double value) {
  note_report(seq, step, value);
  return false;
}

nlohmann::json PromotionSource::state() const {
  nlohmann::json s = searcher_.state();
  if (!s.is_object()) s = nlohmann::json::object();
  s["steps_consumed"] = steps_consumed();
  s["steps_reserved"] = steps_reserved();
  s["step_budget"] = step_budget();
  return s;
}

}  // namespace hpctune::workflow
