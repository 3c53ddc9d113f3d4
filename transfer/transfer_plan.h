// Transfer learning without the master: which trials are the sources, what a target trial and its
// baseline twin train with, and how the targets compare with their twins. Pure functions over
// values (the transfer stage, workflow/transfer_stage.cpp, reads the store and the files and calls
// these), so each rule is tested on its own (tests/test_transfer_plan.cpp).
//
// A transfer target starts from a source trial's checkpoint: it keeps the source's params (its
// architecture above all), except the keys the stage itself sets (`pinned`: its trainer's
// fine-tuning settings) and the values of the stage's nested search; the trainer setting that
// names the checkpoint to start from (`init_setting`, a capability of the trainer kind) gets the
// source's checkpoint, and the setting that keeps the first layers fixed (`freeze_setting`) the
// stage's `freeze` unless the nested search sets it. Its baseline twin has the same params without
// the start: no checkpoint, nothing frozen, and the target's transfer refinements (`twin_resets`:
// settings a from-scratch run leaves at a plain value, such as head-only epochs) reset.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hpctune::transfer {

// --- the sources -------------------------------------------------------------------------------

// A done trial of the stages a transfer starts from, with its objective's value.
struct Candidate {
  int64_t trial = 0;
  double objective = 0;
};

// The candidates best first (by objective, in its direction), ties to the lower trial id. The
// stage then takes the first `sources` of them that have a checkpoint.
std::vector<Candidate> rank_candidates(std::vector<Candidate> candidates, bool maximize);

// --- a target's and its twin's params -----------------------------------------------------------

// How a trainer kind starts from a checkpoint (its capabilities, trainers/trainer_settings.h).
struct StartSettings {
  std::string init_setting;          // names the checkpoint a trial starts from ("init_from")
  std::string source_trial_setting;  // names the source trial's id; "" = none
  std::string freeze_setting = "freeze";  // how many leading layers stay fixed; "" = none
  // Settings a from-scratch twin sets to these values where the target has them (an object).
  nlohmann::json twin_resets = nlohmann::json::object();
};

// Where one target starts.
struct Start {
  std::string checkpoint;    // the source's checkpoint (a file or a directory)
  int64_t source_trial = 0;  // 0 = a checkpoint file the config names, no trial
  int64_t freeze = 0;        // the stage's `freeze`
};

// A target's params: the source's, less `pinned` and the start, overlaid by `nested` (the nested
// search's values, or null) and then by `data` (the target data's params: classes and
// max_train_samples where the kind takes them as params); then init_setting = the checkpoint,
// source_trial_setting = the source trial (when both are given), and freeze_setting = `freeze`
// unless `nested` has it.
nlohmann::json target_params(const nlohmann::json& source_params, const std::set<std::string>& pinned,
                             const nlohmann::json& nested, const nlohmann::json& data, const Start& start,
                             const StartSettings& how);

// Its baseline twin's params: the target's without the start (init_setting, source_trial_setting),
// with freeze_setting 0, and each twin_resets key at its value where the target's params or the
// stage's trainer settings have it.
nlohmann::json twin_params(const nlohmann::json& target, const nlohmann::json& trainer, const StartSettings& how);

// --- the comparison ------------------------------------------------------------------------------

// One target and its twin, by the stage's compare_metric.
struct Pair {
  double target = 0;
  double baseline = 0;
};

// Every target against its twin (same data, epochs and seed), averaged: choosing one pair by a
// small validation split is noisy; the mean over the pairs says whether starting from the source
// helped. Better is larger when `maximize`, smaller otherwise; gain is positive when the targets
// are better.
struct PairSummary {
  int64_t pairs = 0;
  int64_t wins = 0;  // targets better than their own twin
  double target_mean = 0;
  double baseline_mean = 0;
  double gain = 0;   // how much better the targets' mean is than the twins'
};
// nullopt when there is no pair.
std::optional<PairSummary> summarize_pairs(const std::vector<Pair>& pairs, bool maximize);

// How much `a` is better than `b` in the objective's direction.
inline double gain_of(double a, double b, bool maximize) { return maximize ? a - b : b - a; }

}  // namespace hpctune::transfer
