// The campaign simulator (`hpctune simulate`, issue 24): the campaign's real Master, scheduler,
// search, stoppers and stages, driven on a simulated clock with the in-process transport, a
// simulated launcher and simulated trainer groups. No socket, no process, no sleep: time moves
// only when the simulator advances its clock, from one event (a group's hello, a trial's step, a
// heartbeat) to the next.
//
// What a simulated group does with an assign is the TrialModel's answer (the caller's: the CLI
// gives the `function` trainer's own curve, trainers/function_trainer.h, since the master's side
// never links trainers). A group runs it as a worker would: a "started" report at once, then one
// report per step, every seconds_per_step simulated seconds, a done with the last step's
// metrics; a stop ends it at once with the metrics of its last report. The master is stepped at
// every event and woken at least every half heartbeat timeout; a live group's heartbeats are
// coalesced into one per wake (so a silent group is found lost up to half a timeout late).
//
// Cost model (for now): a group starts `startup_seconds` after the master launches it; every step
// of every trial costs `step_seconds` (or, unset, the trial's own seconds_per_step); each message
// takes `message_seconds` to arrive. Not modelled yet: data/model-parallel cost (ranks are ignored:
// one group is one node), allreduce, pipeline bubbles, checkpoints, the master's decision time.
//
// The simulated campaign is an ordinary one in an ordinary store (status, trials, export read it),
// marked by a `campaign_simulated` event whose details name the cost model. Timestamps start at the
// real time of the call and run on simulated time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "protocol/messages.h"
#include "scheduler/master.h"

namespace hpctune::scheduler {

// A simulated trial: the metrics of steps 1..n, the done's metrics, its own time per step; or an
// error (the group answers the assign with a failure naming it).
struct SimulatedTrial {
  std::vector<protocol::Metrics> reports;
  protocol::Metrics final_metrics;
  double seconds_per_step = 0;
  std::string error;
};
using TrialModel = std::function<SimulatedTrial(const protocol::Assign&)>;

struct SimulateOptions {
  MasterOptions master;         // config, db_path, groups (--nodes), seed, make_stage, log
  TrialModel model;             // required
  // Where the model's outcomes come from, for the campaign_simulated event (scheduler/simulated_outcomes.h).
  nlohmann::json outcomes = nlohmann::json::object();
  double step_seconds = -1;     // > 0: every step costs this; else the trial's own seconds_per_step
  double startup_seconds = 1;   // from a launch to the group's hello
  double message_seconds = 0.001;
  // Bounds: the simulation fails with kTimeout past either.
  double max_simulated_seconds = 10.0 * 365 * 86400;
  int64_t max_turns = 200'000'000;
  // Failure injection (tests, what-if): group `first` goes silent (no heartbeat, no result) at
  // simulated second `second` after the start; its next launch behaves normally again.
  std::vector<std::pair<int64_t, double>> silence;
};

struct SimulationOutcome {
  CampaignOutcome campaign;
  double simulated_s = 0;  // from start to the campaign's end, simulated
  double wall_s = 0;       // real seconds the simulation took
  int64_t turns = 0;       // master steps
  int64_t launches = 0;    // group launches (restarts included)
};

Result<SimulationOutcome> simulate_campaign(const SimulateOptions& options);

}  // namespace hpctune::scheduler
