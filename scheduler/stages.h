// Stages: what the master runs, one StageRuntime per stage of the campaign's plan.
//
// A campaign is a graph of stages (config `stages:`; without it, the one stage {name: search, kind:
// search}). The master holds every stage from the start and follows each through its states:
//
//   pending ──(every stage of its `from` completed)──> running ──(its trials all final and its
//   source exhausted)──> completed            (failed / interrupted with the campaign)
//
// begin() is called when a stage starts running (also again after a restart, for a stage that was
// running): it reads what its inputs recorded (their trials, metrics and files, through the
// store) and readies its source. finish() is called once, when its trials are done: it computes
// the stage's result (an ensemble's blend, a transfer's comparison with its baseline), recorded in
// the stage's row and shown by `status`. A completed stage is never begun again: its result is
// read from the store. Independent stages run at the same time on the same trainer groups.
//
// The master knows stage kinds only through a builder (MasterParts::make_stage); the kinds and
// their registry live in workflow/.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/scheduler.h"
#include "scheduler/trial_source.h"
#include "store/store.h"

namespace hpctune::scheduler {

// What a stage reads and writes beyond its trials, handed to begin() and finish().
struct StageContext {
  store::Store* store = nullptr;     // the master's connection, inside its open transaction
  int64_t campaign_id = 0;
  int64_t stage_id = 0;               // this stage's row
  std::vector<int64_t> inputs;        // the rows of the stages of its `from`, in that order
  std::string run_dir;                // "<db>.trials": trial t keeps its files in <run_dir>/<t>
  double now = 0;                     // unix seconds
  bool resuming = false;              // begun again after a restart of the master
  std::function<void(const std::string&)> log;
  // The directory of trial `trial_id` ("" when trials keep no files).
  std::string trial_dir(int64_t trial_id) const {
    return run_dir.empty() ? std::string() : run_dir + "/" + std::to_string(trial_id);
  }
};

// A built stage: its source and whatever the source uses, owned together.
class StageRuntime {
 public:
  virtual ~StageRuntime() = default;
  // The stage's trials; nullptr for a stage that runs none (an ensemble that only blends).
  virtual TrialSource* source() = 0;
  // Its budget of trials (0 with no source).
  virtual int64_t max_trials() const = 0;
  // The trainer settings of its trials ({"kind": ..., ...}); null = the campaign's.
  virtual nlohmann::json trainer() const { return nullptr; }
  // The stage starts running: its inputs are complete (see above). An error fails the campaign.
  virtual Status begin(const StageContext& ctx) {
    (void)ctx;
    return {};
  }
  // Its trials are final: the result to record ({} when it has none to show). An error fails the
  // campaign (what was recorded stays).
  virtual Result<nlohmann::json> finish(const StageContext& ctx) {
    (void)ctx;
    return nlohmann::json::object();
  }
};

// One stage of a campaign's plan: its name (unique in the campaign; the stages row), kind, the
// stages it consumes, and its index in config.stages (0 for the implicit single stage).
struct StagePlan {
  std::string name;
  std::string kind;
  std::vector<std::string> from;
  std::size_t index = 0;
};

// The stages a config asks for, in the config's order. That order need not follow `from` (a stage
// may come before a stage it consumes): the parser checked only that `from` names stages and forms
// no cycle, and the master starts each stage once every stage of its `from` completed.
std::vector<StagePlan> stage_plan(const config::CampaignConfig& cfg);

// Builds the runtime of one stage of the plan; `warm` feeds a search stage's warm start.
using MakeStage = std::function<Result<std::unique_ptr<StageRuntime>>(
    const StagePlan&, const config::CampaignConfig&, const std::optional<WarmStart>&)>;

}  // namespace hpctune::scheduler
