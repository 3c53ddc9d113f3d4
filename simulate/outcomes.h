// Where a simulated trial's outcome comes from when it is not computed by the `function` trainer
// (`hpctune simulate --outcomes replay:DB | surrogate:DB`, issue 24): a campaign recorded earlier,
// read read-only from its database.
//
// replay: each configuration runs the learning curve its trial recorded (its reports by step, its
// final metrics, its seconds per step). A configuration the database does not have takes the curve
// of its nearest recorded neighbour. Distance: Euclidean over the search space's parameters, each
// normalised to [0, 1] by its range (through log for a log parameter, search::Space::to_unit), a
// categorical one 0 when equal and 1 when not, a parameter present on one side only 1.
// surrogate: k-nearest-neighbour regression with inverse-distance weights: the final metrics are
// the weighted mean of the k nearest recorded trials' (k = 5, or fewer recorded), the curve has the
// nearest trial's number of steps and at each step the weighted mean of the neighbours' curves
// taken at the same fraction of their length; seconds per step the weighted mean. No randomness:
// the same configuration and database always give the same prediction (ties broken by trial id).
//
// Either way the final metrics carry where they came from: `simulated_from_trial` (the recorded
// trial replayed, or the nearest one for the surrogate) and `simulated_distance` (its distance; 0
// for a configuration the database has), and for the surrogate `simulated_neighbours` (k). So
// `hpctune trial` and `status` show them.
//
// Only the recorded campaign's done trials are sources (a pruned one's curve ends early). A
// configuration whose recorded trial failed (training diverged, say) fails again in replay, at once
// and with the recorded message, so that the search sees what it saw; an unseen one near it does not. Nothing
// read is trusted: sizes are bounded, types and numbers checked; a database that is not a campaign,
// has no done trial, or no done trial with the config's objective metric is refused, naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "protocol/messages.h"
#include "simulate/simulator.h"
#include "search/space.h"

namespace hpctune::simulate {

struct RecordedTrial {
  int64_t id = 0;
  nlohmann::json params = nlohmann::json::object();
  std::vector<protocol::Metrics> reports;  // by step, in step order
  protocol::Metrics final_metrics;
  double seconds_per_step = 0;
};

struct RecordedCampaign {
  std::string path;
  std::string name;
  std::vector<RecordedTrial> trials;  // done trials only, by id
  // Configurations whose trial failed (and none of the same configuration finished), by the
  // params' JSON text: the failure's message (bounded), replayed for the same configuration.
  std::unordered_map<std::string, std::string> failures;
};

// Bounds on what is read.
inline constexpr int64_t kMaxRecordedTrials = 200'000;
inline constexpr int64_t kMaxRecordedSteps = 100'000;       // per trial
inline constexpr int64_t kMaxRecordedValues = 20'000'000;   // metric values in all

// Reads the done trials of the campaign in `path` (read-only). `objective` is the config's
// objective metric: at least one done trial must record it. Errors name the path and, for a bad
// field, the trial and the field.
Result<RecordedCampaign> load_recorded_campaign(const std::string& path, const std::string& objective);

// The distance between two configurations over `space` (see above).
double config_distance(const search::Space& space, const nlohmann::json& a, const nlohmann::json& b);

// The trial models. `space` is the config's search space.
TrialModel replay_model(std::shared_ptr<const RecordedCampaign> recorded, search::Space space);
TrialModel surrogate_model(std::shared_ptr<const RecordedCampaign> recorded, search::Space space, int64_t k = 5);

// `--outcomes`' name for the outcomes the config's trainer computes itself (a test-function
// trainer's curve): the name a user types, not a comparison of the config's trainer kind (that is
// the CLI's, through trainers::trainer_capabilities).
inline constexpr const char* kComputedOutcomes = "function";

// `--outcomes` as given ("function", "replay:DB", "surrogate:DB"): the model, with `function` the
// caller's (the master's side never links the trainers), and a text for the campaign_simulated event.
struct OutcomeSource {
  TrialModel model;
  nlohmann::json detail;  // {"outcomes": "function" | "replay" | "surrogate", "from": DB, "recorded_trials": N}
};
Result<OutcomeSource> outcome_source(const std::string& spec, const search::Space& space, const std::string& objective,
                                     TrialModel function_model);

}  // namespace hpctune::simulate
