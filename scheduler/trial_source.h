// TrialSource: what a stage of a campaign runs. It produces the trials (ask) and decides on every
// report of a running trial (on_report): continue, stop (pruned) or pause (end this attempt, and
// resume the trial later, on any free group, with new parameters from a checkpoint).
//
// The Scheduler owns the trial lifecycle (queue, attempts, groups, the store); a source only
// proposes and judges. SearchSource (a searcher plus its early stopper, search/) is the one kind
// that exists; population-based training and the workflow stages (issue 11) are other sources,
// and PBT is built on pause: a member pauses at the end of its interval and resumes from the chosen
// member's checkpoint with the perturbed parameters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "search/early_stopping.h"
#include "search/searcher.h"

namespace hpctune::scheduler {

// Suggestion::meta keys the scheduler acts on, beyond "generation" and "parents" (seq numbers in
// the same stage, lineage relation "parent"):
//   "seed"     the trial's seed (an unsigned integer), instead of the one derived from its stage
//              and seq: a transfer baseline runs under its target trial's seed, a retrained
//              ensemble member under a new one;
//   "lineage"  [{"trial": id, "relation": "transfer_source"}, ...]: parents by trial id, in any
//              stage (the first one is also the trial's parent_trial_id).
// The meta is stored with the trial, so a resumed master dispatches it the same way.

// A decision on a report.
struct Verdict {
  enum class Kind { kContinue, kStop, kPause };
  Kind kind = Kind::kContinue;
  // kPause: the parameters the trial resumes with (the whole set, not a patch), and the checkpoint
  // its next attempt starts from ("" = from scratch; protocol::Assign::resume_from).
  nlohmann::json params;
  std::string resume_from;
  // kPause: the step that checkpoint was taken at, where the next attempt's count goes on (-1: the
  // step the trial paused at, its own checkpoint's; PBT's exploit of an older snapshot: that one's).
  int64_t resume_step = -1;
  // kPause: what the source wants recorded with the decision, merged into the detail of the
  // `pause_requested` event (PBT: {"exploit": {...}, "explore": {...}}), and the trial the weights
  // come from when another (lineage row child = this trial, relation `lineage_relation`).
  nlohmann::json note = nlohmann::json::object();
  int64_t lineage_parent = 0;  // a trial id; 0 = none
  std::string lineage_relation;

  static Verdict carry_on() { return {}; }
  static Verdict stop() {
    Verdict v;
    v.kind = Kind::kStop;
    return v;
  }
  static Verdict pause(nlohmann::json params, std::string resume_from) {
    Verdict v;
    v.kind = Kind::kPause;
    v.params = std::move(params);
    v.resume_from = std::move(resume_from);
    return v;
  }
};

// What the scheduler knows of a trial when it asks a source to judge it.
struct TrialView {
  int64_t trial_id = 0;
  int64_t seq = 0;
  int64_t attempt = 1;
  const nlohmann::json* params = nullptr;
  std::string trial_dir;  // where the attempt writes its checkpoints ("" = none)
};

// The integer `key` of the trial's params (a stage's step setting: the step its attempt trains
// to); nullopt when the params lack it or hold another type there.
inline std::optional<int64_t> int_param(const TrialView& trial, const std::string& key) {
  if (trial.params == nullptr || !trial.params->is_object()) return std::nullopt;
  const auto it = trial.params->find(key);
  if (it == trial.params->end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

class TrialSource {
 public:
  virtual ~TrialSource() = default;
  // The stage kind it implements ("search", later "pbt", ...).
  virtual std::string kind() const = 0;
  // Up to n new trials; fewer (even none) when it must wait, and exhausted() once it never will
  // again. An error (the algorithm failed) ends the campaign: nothing is recorded for it.
  virtual Result<std::vector<search::Suggestion>> ask(std::size_t n) = 0;
  virtual bool exhausted() const = 0;
  // A report of a running trial with the primary objective's raw value at `step`.
  virtual Verdict on_report(const TrialView& trial, int64_t step, double value) = 0;
  // An attempt of trial `seq` ended without a result (lost, paused): it will report from step 1 again.
  virtual void on_attempt_end(int64_t seq) = 0;
  // Whether this source decides when its paused trials run again. true: a paused trial is held
  // aside (once its pause is committed) until resume_next() names it; a stage whose held trials no
  // call names while none of its trials is queued or running, and which makes no new ones, ends
  // them pruned with their last report. false: a paused trial is queued again at the next tick,
  // ahead of new ones.
  virtual bool holds_paused() const { return false; }
  // A group is free: which held trial (a seq of `held`, in the order they paused) runs on it now,
  // or nullopt for none now (the group then gets a new trial from ask(), if there is one). The
  // trial named is dispatched at once: the source counts it as running from here.
  virtual std::optional<int64_t> resume_next(const std::vector<int64_t>& held) {
    (void)held;
    return std::nullopt;
  }
  // The attempt of `trial` ended on this source's pause at `step`, recorded in the store in the
  // same transaction: its trainer has returned, so the files in trial.trial_dir are the ones of
  // that step (PBT copies them into the snapshot its pause named). An error ends the campaign.
  virtual Status on_paused(const TrialView& trial, int64_t step) {
    (void)trial, (void)step;
    return {};
  }
  // A trial finished done, with its final metrics (the whole map, every metric the trainer
  // returned): a stage that stops on a metric (search.stop_when) looks here. Called before tell().
  virtual void on_result(int64_t seq, const nlohmann::json& metrics) { (void)seq, (void)metrics; }
  // The trial's final outcome (done, pruned or failed).
  virtual void tell(const search::Observation& observation) = 0;
  // After a restart: every recorded trial (final ones with their observation), in seq order.
  virtual void restore(const std::vector<search::Record>& history) = 0;
  // Whether on_report() decisions depend on earlier reports (then a resumed master replays the
  // recorded reports of finished trials through replay_report()/on_attempt_end()).
  virtual bool replays_reports() const { return false; }
  // The parameters an attempt of trial `seq` is sent with, from those recorded (`params`): a source
  // may map what was recorded where the campaign was before it moved (a transfer target's start).
  virtual void prepare_dispatch(int64_t seq, nlohmann::json& params) const { (void)seq, (void)params; }
  // The step an attempt of `trial` trains to and then ends at by itself, where this source chose
  // one short of a full training (the trial's step setting: a rung under early stopping that
  // pauses, the end of a PBT interval); nullopt for none. An attempt that ends there whose last
  // report came before it (a program that reports every few steps) is judged at that step on its
  // latest report (Scheduler::on_done), as if it had reported it there.
  virtual std::optional<int64_t> step_target(const TrialView& trial) const {
    (void)trial;
    return std::nullopt;
  }
  // What judges the objective in on_report(), for messages ("early stopping (asha)"); "" when
  // nothing does (every report carries on). A trial that ends with step reports none of which
  // carried the objective was never judged: the scheduler says so, once per stage.
  virtual std::string report_judge() const { return ""; }
  // The last step that judge looks at (early stopping's max_t); nullopt for none. A report past it
  // is in another unit than the judge's (a program that counts batches against a max_t of epochs):
  // the judge ignores it, and the scheduler says so, once per stage.
  virtual std::optional<int64_t> judged_until() const { return std::nullopt; }
  // A recorded report, shown again after a restart; true when the source would have stopped there.
  virtual bool replay_report(int64_t seq, int64_t step, double value) {
    (void)seq, (void)step, (void)value;
    return false;
  }
  // What the source records for status and the dashboard (the searcher's state).
  virtual nlohmann::json state() const { return nlohmann::json::object(); }
};

// The searcher and its early stopper as a source (neither is owned).
class SearchSource final : public TrialSource {
 public:
  SearchSource(search::Searcher& searcher, search::EarlyStopper& stopper) : searcher_(searcher), stopper_(stopper) {}
  std::string kind() const override { return "search"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override;
  bool exhausted() const override { return searcher_.exhausted() || steps_spent(); }
  Verdict on_report(const TrialView& trial, int64_t step, double value) override {
    note_step(trial.seq, step);
    searcher_.tell_report(trial.seq, step, value);
    return stopper_.on_report(trial.seq, step, value) == search::Decision::kStop ? Verdict::stop() : Verdict::carry_on();
  }
  // search.max_steps: no new trial once the trials' reported steps add up to it (each trial counts
  // its highest step); 0 = none.
  void set_max_steps(int64_t max_steps) { max_steps_ = max_steps; }
  bool steps_spent() const { return max_steps_ > 0 && steps_ >= max_steps_; }
  void on_attempt_end(int64_t seq) override { stopper_.on_finish(seq); }
  void tell(const search::Observation& observation) override {
    searcher_.tell(observation);
    stopper_.on_finish(observation.seq);
  }
  void restore(const std::vector<search::Record>& history) override { searcher_.restore(history); }
  bool replays_reports() const override { return stopper_.name() != "none"; }
  std::string report_judge() const override {
    return stopper_.name() == "none" ? std::string() : "early stopping (" + stopper_.name() + ")";
  }
  std::optional<int64_t> judged_until() const override {
    return stopper_.last_step() > 0 ? std::optional<int64_t>(stopper_.last_step()) : std::nullopt;
  }
  bool replay_report(int64_t seq, int64_t step, double value) override {
    note_step(seq, step);
    searcher_.tell_report(seq, step, value);
    return stopper_.on_report(seq, step, value) == search::Decision::kStop;
  }
  nlohmann::json state() const override { return searcher_.state(); }

 private:
  void note_step(int64_t seq, int64_t step) {
    int64_t& reached = reached_[seq];
    if (step > reached) steps_ += step - reached, reached = step;
  }
  search::Searcher& searcher_;
  search::EarlyStopper& stopper_;
  int64_t max_steps_ = 0, steps_ = 0;
  std::map<int64_t, int64_t> reached_;  // seq -> its highest reported step
};

// A source that wraps another and hands it every call: a decorator overrides only what it changes
// (workflow's stop_when). Every virtual of TrialSource is forwarded here, so a virtual added there
// must be added here too, and a decorator then forwards it without a change of its own.
class ForwardingSource : public TrialSource {
 public:
  explicit ForwardingSource(std::unique_ptr<TrialSource> inner) : inner_(std::move(inner)) {}
  std::string kind() const override { return inner_->kind(); }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override { return inner_->ask(n); }
  bool exhausted() const override { return inner_->exhausted(); }
  Verdict on_report(const TrialView& trial, int64_t step, double value) override {
    return inner_->on_report(trial, step, value);
  }
  void on_attempt_end(int64_t seq) override { inner_->on_attempt_end(seq); }
  bool holds_paused() const override { return inner_->holds_paused(); }
  std::optional<int64_t> resume_next(const std::vector<int64_t>& held) override { return inner_->resume_next(held); }
  Status on_paused(const TrialView& trial, int64_t step) override { return inner_->on_paused(trial, step); }
  void on_result(int64_t seq, const nlohmann::json& metrics) override { inner_->on_result(seq, metrics); }
  void tell(const search::Observation& observation) override { inner_->tell(observation); }
  void restore(const std::vector<search::Record>& history) override { inner_->restore(history); }
  bool replays_reports() const override { return inner_->replays_reports(); }
  void prepare_dispatch(int64_t seq, nlohmann::json& params) const override { inner_->prepare_dispatch(seq, params); }
  std::optional<int64_t> step_target(const TrialView& trial) const override { return inner_->step_target(trial); }
  std::string report_judge() const override { return inner_->report_judge(); }
  std::optional<int64_t> judged_until() const override { return inner_->judged_until(); }
  bool replay_report(int64_t seq, int64_t step, double value) override { return inner_->replay_report(seq, step, value); }
  nlohmann::json state() const override { return inner_->state(); }

 protected:
  TrialSource& inner() { return *inner_; }
  const TrialSource& inner() const { return *inner_; }

 private:
  std::unique_ptr<TrialSource> inner_;
};

}  // namespace hpctune::scheduler
