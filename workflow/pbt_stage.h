// The population-based training stage (Jaderberg et al. 2017; Cray's "PBT mode"), built on the
// scheduler's pause (scheduler/trial_source.h).
//
// Members are the stage's trials, seq 0 .. population-1, asked at once, each with a seeded random
// draw from the stage's space plus the trainer's step setting (mlp's "epochs"): the end of its
// first interval. Every attempt trains exactly one interval: params[step_key] is the interval's end, where the trainer stops by itself,
// so the weights at a boundary are exact. A member whose program reports every few steps, not at the
// boundary itself, is judged at the boundary on its latest report (step_target;
// Scheduler::judge_at_target).
//
// At a boundary below `steps` (on_report) the member is judged against the latest boundary score
// of every member. In the bottom quantile, with a member of the top quantile that has a snapshot,
// it EXPLOITS one of them (a seeded choice): that member's latest snapshot, the weights AND the
// params they were trained with, as one thing (never the source's current params), then EXPLORES
// (pbt_policy.h: explore). The snapshot may be older than the target's own step (its step then
// goes back to the snapshot's), unless settings.older_snapshots is false. Otherwise it continues
// with its own params from its own snapshot. Either way the verdict is a pause: the trial resumes
// with the new params (epochs = the next boundary from the step its weights are at) from the
// chosen snapshot, when resume_next() names it for a free group: the population stays in step
// (Jaderberg et al. 2017) when it outnumbers the groups. At `steps` the member carries on and ends
// done.
//
// Snapshots: <trial_dir>/pbt/<nnn>-step-<k>/, a copy of the member's checkpoint-stage*.bin files
// at boundary k (for a trainer whose checkpoint is a directory of its program's files, the catalog's
// checkpoints.directory, a command's <trial_dir>/checkpoint: that whole tree, read-only,
// checkpoint_snapshot.h), made by on_paused() once the paused attempt's trainer has returned (copied to a
// temporary directory, then renamed: a snapshot exists whole or not at all; made again after a
// crash, never changed once made), then removed from the trial's directory: every attempt after a
// pause starts from its resume_from, never from a checkpoint the trial left before (the trainer
// would prefer that one when the new params happen to equal the old). <nnn> is the member's
// decision count: an exploited member takes over its source's step, so it may reach the same step
// twice with other weights. A snapshot is a source only once made.
//
// Recorded (the note of each verdict, one event per key; each holds what a restart needs):
//   pbt_exploit  {target, source, step, source_step, source_value, target_value, checkpoint, ...}
//   pbt_explore  {target, step, old, new, resampled}
//   pbt_continue {target, step, value, ...}
// and the lineage row (target, source, "pbt_exploit"). A decision seen again (the member's attempt
// was lost after its boundary report and re-ran to the same boundary) gets the same verdict, with
// no note: it was recorded the first time.
//
// Determinism: the draws come from generators seeded from the stage seed and (member, decision
// count), and ties in the ranking go to the lower seq. A restarted master (begin with resuming)
// rebuilds the state from the store: the stage's trials, their recorded reports, the pbt_* and
// trial_paused events and the snapshots that exist; the next decision is the one the
// uninterrupted run would have made on the same reports.
//
// The master never parses a checkpoint: it copies files (the trainers that save them, mlp and
// cnn, load them on resume_from, nn/checkpoint.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/stages.h"
#include "scheduler/trial_source.h"
#include "search/searcher.h"
#include "search/space.h"
#include "workflow/pbt_policy.h"

namespace hpctune::workflow {

struct PbtSpec {
  PbtSettings settings;
  search::Space space;          // the hyperparameters PBT explores
  search::Objective objective;  // ranks the members
  uint64_t seed = 0;
};

class PbtSource final : public scheduler::TrialSource {
 public:
  explicit PbtSource(PbtSpec spec);

  std::string kind() const override { return "pbt"; }
  Result<std::vector<search::Suggestion>> ask(std::size_t n) override;
  bool exhausted() const override { return next_seq_ >= spec_.settings.population; }
  scheduler::Verdict on_report(const scheduler::TrialView& trial, int64_t step, double value) override;
  void on_attempt_end(int64_t seq) override { (void)seq; }
  std::optional<int64_t> step_target(const scheduler::TrialView& trial) const override;
  // Paused members wait here: the least advanced runs first, and none starts an interval while it
  // is settings.max_lead intervals ahead of the slowest (new members, at step 0, come first).
  bool holds_paused() const override { return true; }
  std::string report_judge() const override;
  std::optional<int64_t> resume_next(const std::vector<int64_t>& held) override;
  Status on_paused(const scheduler::TrialView& trial, int64_t step) override;
  void tell(const search::Observation& observation) override;
  void restore(const std::vector<search::Record>& history) override;
  nlohmann::json state() const override;

  // The stage (re)starts: remembers where trials keep their files; after a restart
  // (ctx.resuming) rebuilds the members' state from ctx.store (see above). kInvalidArgument when
  // trials keep no files (PBT needs their checkpoints).
  Status begin(const scheduler::StageContext& ctx);
  // The stage's result: {population, steps, ready, exploits, explores, best: {trial, value,
  // test_accuracy}, schedule}, the best done member by its final objective (ctx.store).
  Result<nlohmann::json> result(const scheduler::StageContext& ctx) const;
  // The schedule of hyperparameters member `seq`'s weights were trained with: its intervals,
  // followed back through its exploits to the intervals of its sources, from step 0.
  std::vector<ScheduleEntry> schedule_of(int64_t seq) const;

  // The params member `seq` starts with (a pure function of the seed and seq).
  search::Params initial_params(int64_t seq) const;

 private:
  struct Decision {
    int64_t ordinal = 0;  // its index among the member's decisions
    int64_t step = 0, attempt = 0;
    double value = 0;
    search::Params trained;     // the params of the interval it ends
    std::string snapshot;       // where that interval's weights are kept
    bool paused = false;        // the pause was recorded (on_paused ran)
    bool snapshot_made = false;
    bool exploit = false;
    int64_t source_seq = -1, source_ordinal = -1, source_step = 0;
    double source_value = 0;
    search::Params params;      // the next interval's params (with epochs)
    std::string resume_from;    // and its checkpoint
    int64_t from_step = 0;      // the step the next interval starts at (its weights' step)
  };
  struct Member {
    int64_t seq = 0, trial_id = 0;
    std::string trial_dir;
    std::optional<double> latest;  // the latest boundary score
    std::vector<Decision> decisions;
    bool final = false;
  };

  Member& member(int64_t seq);
  const Member* find_member(int64_t seq) const;
  const Member* member_of_trial(int64_t trial_id) const;
  bool better(double a, double b) const;
  // The latest made snapshot of a member that is still there, reached without following a link
  // (snapshot_present), or nullptr.
  const Decision* latest_snapshot(const Member& m) const;
  // The step member m's weights are at (the start of its next or current interval); 0 before its
  // first decision.
  static int64_t progress(const Member& m) { return m.decisions.empty() ? 0 : m.decisions.back().from_step; }
  scheduler::Verdict decide(Member& m, const scheduler::TrialView& trial, int64_t step, double value);
  static scheduler::Verdict verdict_of(const Decision& d, int64_t lineage_parent);
  nlohmann::json decision_event(const Decision& d, const Member& m) const;
  Status load_decision(const std::string& kind, const nlohmann::json& detail,
                       const std::map<int64_t, int64_t>& seq_of_trial);

  PbtSpec spec_;
  int64_t next_seq_ = 0;
  std::map<int64_t, Member> members_;  // by seq
  std::string run_dir_;
};

// The pbt stage of a campaign: `view` is the stage's own view (StageConfig::own), `settings` its
// StageConfig::settings. kConfig for bad settings or a space that sets `epochs` (the stage does).
Result<std::unique_ptr<scheduler::StageRuntime>> make_pbt_stage(const std::string& name, const nlohmann::json& settings,
                                                                const config::CampaignConfig& view);

}  // namespace hpctune::workflow
