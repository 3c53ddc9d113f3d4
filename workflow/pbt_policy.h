// The pure part of population-based training (pbt_stage.h; Jaderberg et al. 2017): the stage's
// settings, the explore step (each hyperparameter resampled from the space with a probability,
// otherwise multiplied by one of two factors and clipped to the space), the size of the top and
// bottom quantiles of a ranking, and a member's schedule of hyperparameters as JSON with its replay
// (the params of each interval, to train one model from scratch along it). No files, no store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/rng.h"
#include "search/space.h"

namespace hpctune::workflow {

// A pbt stage's `settings` (config::StageConfig::settings, normalized by the config parser).
struct PbtSettings {
  int64_t population = 8;   // members, trained at the same time
  int64_t ready = 2;        // steps (epochs) per interval: every member is judged at multiples of it
  int64_t steps = 0;        // the total steps of every member
  double quantile = 0.25;   // the bottom quantile exploits the top one
  double resample_probability = 0.25;
  double perturb_low = 0.8, perturb_high = 1.2;  // the two factors of a perturbation
  // A member starts its next interval only while it is less than max_lead intervals ahead of the
  // slowest member (0 = no limit); the least advanced paused member runs first (PbtSource::resume_next).
  int64_t max_lead = 1;
  // Whether an exploit may take a top member's snapshot older than the target's step (the target's
  // step goes back to the snapshot's); false: never backwards.
  bool older_snapshots = true;
  // `schedule`: a replay. Every member trains through these intervals, each interval's params (with
  // the step setting, mlp's "epochs", its end, replay_schedule()) in turn, continuing from its own
  // weights: no exploit, no explore. Empty = PBT. With a schedule, `steps` is its end.
  std::vector<search::Params> replay;
  // The trainer's setting that counts its steps (mlp's epochs), from the catalog of trainer kinds
  // (config/trainer_kinds.h): each attempt's params set it to the end of its interval.
  std::string step_key;
  // Where the trainer's checkpoint is (the catalog's checkpoints.directory, config/trainer_kinds.h):
  // "checkpoint" = the tree of <trial_dir>/checkpoint that a command's program writes, snapshotted
  // whole (checkpoint_snapshot.h); "" = the built-ins' checkpoint-stage*.bin files in the trial dir.
  std::string checkpoint_directory;
  // Whether `step` ends an interval (is judged).
  bool boundary(int64_t step) const;
};

// The settings from a stage's `settings` object, defaults for the missing keys (`steps`: the
// trainer's step setting, mlp's `epochs`). kConfig naming the stage and the key for a value out of
// range, or when the trainer's kind has no step setting.
Result<PbtSettings> pbt_settings(const std::string& stage, const nlohmann::json& settings,
                                 const nlohmann::json& trainer);

// The explore step on `params` (an exploited member's new hyperparameters). Parameters of the
// space are perturbed or resampled in the space's (parents-first) order, one draw sequence per
// call: float and int ones resampled with settings.resample_probability, otherwise multiplied by
// perturb_low or perturb_high (an even draw) and clipped to [low, high] (ints rounded to their
// step); choices resampled with that probability, otherwise kept; fixed ones kept. A parameter
// that a changed choice activates is drawn, one it deactivates dropped. Keys of `params` outside
// the space (the trainer's `epochs`) are kept as they are.
struct Explored {
  search::Params params;                      // the whole new set
  nlohmann::json old_values = nlohmann::json::object();  // the space's parameters before and after
  nlohmann::json new_values = nlohmann::json::object();
  std::vector<std::string> resampled;         // the names drawn anew rather than perturbed/kept
};
Explored explore(const search::Space& space, const search::Params& params, const PbtSettings& settings, Rng& rng);

// How many members make the top (and the bottom) quantile of a ranking of n: ceil(n * quantile),
// at most n / 2 so that the two never overlap (0 for a ranking of one).
int64_t quantile_size(int64_t n, double quantile);

// One interval of a member's schedule: the steps (from_step, to_step] were trained with `params`
// (the hyperparameters, without the step setting) by trial `trial`.
struct ScheduleEntry {
  int64_t from_step = 0, to_step = 0;
  search::Params params;
  int64_t trial = 0;
};
nlohmann::json schedule_to_json(const std::vector<ScheduleEntry>& schedule);

// Replays a schedule (the JSON list of a pbt stage's result, "schedule"): the params of each
// interval in order, each with the step setting (step_key): its to_step; interval i resumes from the checkpoint that
// interval i-1 ended with; an empty list replays nothing. Otherwise kInvalidArgument where
// config::read_pbt_schedule (the reader `hpctune validate` uses) finds a problem: a malformed
// interval, intervals that do not chain from step 0, a step past config::kMaxPbtSteps.
// `step_key` as read_pbt_schedule takes it.
Result<std::vector<search::Params>> replay_schedule(const nlohmann::json& schedule, const std::string& step_key);

}  // namespace hpctune::workflow
