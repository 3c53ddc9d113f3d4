// A pbt stage's `schedule:` (a replay of hyperparameters, as `hpctune schedule DB --format yaml`
// prints a PBT stage's best member's), read and checked in one place: `hpctune validate` (workflow_config.cpp,
// which names the place of a problem as file:line:column and key path) and the pbt stage that
// replays it (workflow/pbt_policy.cpp: replay_schedule) both call read_pbt_schedule. Pure: no files.
//
// A schedule is a non-empty list of intervals {from_step, to_step, params[, trial]}: integer steps
// that chain from step 0 (each from_step the previous to_step), each to_step after its from_step and
// at most kMaxPbtSteps; params a map whose numbers are all finite and without the trainer's step
// setting (the interval's to_step is its value: mlp's epochs); trial (as `hpctune schedule` prints it) an integer, not read.
// Any other key of an interval is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/space.h"

namespace hpctune::config {

// The most steps (epochs) a pbt stage's member trains: stages[].steps and a schedule's last to_step.
inline constexpr int64_t kMaxPbtSteps = 1'000'000;

struct PbtSchedule {
  // Each interval's params in order, with the step setting: its to_step (what a member trains it
  // with).
  std::vector<search::Params> replay;
  // Empty when the schedule is valid. Otherwise where the first problem is, relative to the
  // schedule ("" the list itself, "[2]" an interval, "[2].to_step", "[0].params.lr"), and what.
  std::string problem_at;
  std::string problem;
  bool ok() const { return problem.empty(); }
};

// `step_key`: the trainer's step setting (config/trainer_kinds.h: trainer_step_setting); "" checks
// the schedule without adding it (`hpctune schedule` checks what it prints).
PbtSchedule read_pbt_schedule(const nlohmann::json& schedule, const std::string& step_key);

}  // namespace hpctune::config
