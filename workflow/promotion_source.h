// Early stopping that pauses (early_stopping.mode: pause; asha and hyperband): a search stage's
// source in which a trial below the top of a rung waits there with its checkpoint instead of being
// thrown away, and continues from that checkpoint when promoted (Syne Tune's promotion-type ASHA;
// Li et al. 2020), so no step is trained twice.
//
// Every attempt trains to the trial's next rung (its params' step setting, mlp's `epochs`, a
// command's `max_step`) and ends there by itself, so the checkpoint at the rung is exact. At the
// rung the attempt pauses: its checkpoint is moved into <trial_dir>/rungs/step-<k> (read-only,
// checkpoint_snapshot.h), and the trial is held (scheduler: holds_paused). An attempt whose last
// report came before its rung (a program that reports every few steps) is judged at the rung on
// that report (step_target; Scheduler::judge_at_target). On a free group,
// resume_next() takes, in order:
//   1. a held trial in the top of its rung now (the stopper's standing(): with more arrivals a rung
//      promotes more of its trials), the highest rung first, then the best value;
//   2. when the search has nothing new to propose (its searcher is exhausted, or the stage's
//      max_trials are all asked) and the step budget is not spent: the most promising held trial
//      all the same (the highest rung, then the best value), so a campaign never ends with budget
//      left while a paused trial could be trained further;
//   3. nothing: a new trial is asked.
// A promoted trial resumes from its rung snapshot (HPCTUNE_RESUME_FROM, the built-ins' resume_from)
// and trains to its next rung, or to max_t, where it ends done.
//
// The step budget (search.max_steps): the sum of the steps every trial trained, counted as the
// distinct (trial, step) pairs reported; 0 = max_trials x max_t. An attempt this source starts (a
// new trial to its first rung, a held one to its next stop) reserves the steps it will train until
// it reports them, and nothing new starts or resumes once the steps consumed and reserved reach the
// budget: the campaign ends past it by at most the last attempt started (before, every attempt in
// flight trained on: on 64 groups, 64 promotions of up to max_t steps each). The held trials then
// end pruned. Attempts a restarted master runs again were started before it: not reserved.
//
// The searcher is told a trial's outcome once: done at max_t, or pruned (its last rung's value)
// when it ends held. Every report also reaches it as a partial value (Searcher::tell_report).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/trial_source.h"
#include "search/early_stopping.h"
#include "search/searcher.h"

namespace hpctune::workflow {

struct PromotionOptions {
  std::string step_key;              // the trainer's step setting (config/trainer_kinds.h)
  std::string checkpoint_directory;  // the catalog's checkpoints.directory ("" = checkpoint-stage*.bin)
  int64_t max_t = 0;                 // a full training's steps (the stopper's max_t)
  int64_t max_trials = 0;            // the stage's budget of trials
  int64_t max_steps = 0;             // search.max_steps; 0 = max_trials x max_t
  bool maximize = true;              // the objective's direction
};

class PromotionSource final : public scheduler::TrialSource {
 public:
  PromotionSource(search::Searcher& searcher, search::EarlyStopper& stopper, PromotionOptions options);

  std::string kind() const override { return "search"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override;
  bool exhausted() const override { return searcher_.exhausted() || budget_spent(); }
  scheduler::Verdict on_report(const scheduler::TrialView& trial, int64_t step, double value) override;
  void on_attempt_end(int64_t seq) override { stopper_.on_finish(seq); }
  std::optional<int64_t> step_target(const scheduler::TrialView& trial) const override;
  Status on_paused(const scheduler::TrialView& trial, int64_t step) override;
  bool holds_paused() const override { return true; }
  std::optional<int64_t> resume_next(const std::vector<int64_t>& held) override;
  void tell(const search::Observation& observation) override;
  void restore(const std::vector<search::Record>& history) override;
  bool replays_reports() const override { return true; }
  std::string report_judge() const override { return "early stopping (" + stopper_.name() + ", mode pause)"; }
  std::optional<int64_t> judged_until() const override {
    return opt_.max_t > 0 ? std::optional<int64_t>(opt_.max_t) : std::nullopt;
  }
  bool replay_report(int64_t seq, int64_t step, double value) override;
  nlohmann::json state() const override;

  // The steps consumed so far (distinct (trial, step) pairs reported), those the attempts it started
  // will train beyond them, and the budget.
  int64_t steps_consumed() const { return consumed_; }
  int64_t steps_reserved() const { return reserved_; }
  int64_t step_budget() const;

 private:
  struct Entry {
    int64_t reached = 0;  // the highest step it reported
    int64_t target = 0;   // the step the attempt this source last started trains to (0: none since a restart)
    bool final = false;
  };
  // The step after `step` where trial `seq` next stops: its next rung, else max_t.
  int64_t next_stop(int64_t seq, int64_t step) const;
  bool budget_spent() const { return steps_consumed() + steps_reserved() >= step_budget(); }
  // The steps an entry's attempt will still train (0 once final).
  static int64_t owed(const Entry& e) { return e.final ? 0 : std::max<int64_t>(0, e.target - e.reached); }
  // Changes trial seq's entry by `change`, keeping consumed_ and reserved_ its sums.
  template <typename Change>
  void change_entry(int64_t seq, Change change);
  bool nothing_new() const { return searcher_.exhausted() || issued_ >= opt_.max_trials; }
  search::Params without_step(search::Params p) const;
  void note_report(int64_t seq, int64_t step, double value);

  search::Searcher& searcher_;
  search::EarlyStopper& stopper_;
  PromotionOptions opt_;
  std::map<int64_t, Entry> entries_;  // by seq
  int64_t consumed_ = 0, reserved_ = 0;  // the entries' reached and owed() steps, summed
  int64_t issued_ = 0;
};

// Where a paused trial's checkpoint at `step` is kept: <trial_dir>/rungs/step-<step>.
std::string rung_snapshot_dir(const std::string& trial_dir, int64_t step);

}  // namespace hpctune::workflow
