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
// every event and woken every half heartbeat timeout while frames move; after two turns without a
// frame, the clock goes straight to the next event or the master's own deadline
// (Master::next_deadline), so a step of a simulated year costs a few turns, not millions. No
// heartbeats travel: the simulator vouches for its groups (MasterParts::vouched_liveness), and a
// group made silent is found lost at its deadline, once silent past the heartbeat timeout. A turn touches
// only the groups the master sent frames to and those with a step due (a timeline of the groups'
// next steps), and the master looks only at the groups that are not running, so the cost of an
// event does not grow with the groups left idle (issue 36: a population of 10 on 2,048 groups).
//
// Cost: a group starts `startup_seconds` after the master launches it; its first trial first spends
// `load_seconds` (the ranks' one-time reading of the data), and every trial its setup_seconds
// (building the network, the last evaluation: what a trial costs beyond its steps),
// then every step costs `step_seconds` (or, unset, the trial's own seconds_per_step, which the
// caller prices with the cost model of simulate/cost_model.h and breaks down in its
// step_cost); each message takes `message_seconds` to arrive. Those are seconds on ranks of their
// own. With `rank_slots` set (a machine of fewer cores than the ranks asked), the ranks busy at a
// step's start share the slots: the step (or setup) takes busy / rank_slots times longer when
// that exceeds 1. Busy = the ranks of every group running a trial (an MPI rank waiting for its
// peers spins, so a running group's ranks count whole); a group waiting for work uses none. The master's own decision time (the real time of its
// step() calls) is measured, as Syne Tune counts its scheduler's time, and added to the simulated
// clock when `count_decision_time` is set.
//
// The simulated campaign is an ordinary one in an ordinary store (status, trials, export read it),
// marked by a `campaign_simulated` event whose details name the cost model. Timestamps start at the
// real time of the call and run on simulated time.
#pragma once

#include <atomic>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "protocol/messages.h"
#include "simulate/cost_model.h"
#include "scheduler/master.h"

namespace hpctune::simulate {

// A simulated trial: the metrics of steps 1..n, the done's metrics, its own time per step; or an
// error (the group answers the assign with a failure naming it).
struct SimulatedTrial {
  std::vector<protocol::Metrics> reports;
  protocol::Metrics final_metrics;
  double seconds_per_step = 0;
  double setup_seconds = 0;  // before its first step (not with step_seconds)
  StepCost step_cost;  // seconds_per_step by part (what the report's cost breakdown sums)
  std::string error;
};

// A target on a reported metric: reached when a report's `metric` is >= value (maximize) or <=.
struct SimulationTarget {
  std::string metric;
  double value = 0;
  bool maximize = true;
};
using TrialModel = std::function<SimulatedTrial(const protocol::Assign&)>;

struct SimulateOptions {
  scheduler::MasterOptions master;         // config, db_path, groups (--nodes), seed, make_stage, log
  TrialModel model;             // required
  // Where the model's outcomes come from, for the campaign_simulated event (simulate/outcomes.h).
  nlohmann::json outcomes = nlohmann::json::object();
  std::string machine;          // the cost model's machine file (its name), for the same event; "" = none
  double step_seconds = -1;     // > 0: every step costs this; else the trial's own seconds_per_step
  double startup_seconds = 1;   // from a launch to the group's hello
  double load_seconds = 0;      // before the first trial of each launch, on the group's cores
  double message_seconds = 0.001;
  int64_t ranks_per_group = 1;       // nodes a group holds (data x model, one rank per node): utilization
  int64_t rank_slots = 0;            // > 0: ranks that run at full speed at once (see Cost above)
  bool count_decision_time = false;  // add the master's measured step() time to the simulated clock
  std::optional<SimulationTarget> target;
  // Bounds: the simulation fails with kTimeout past either.
  double max_simulated_seconds = 10.0 * 365 * 86400;
  int64_t max_turns = 200'000'000;
  // > 0: stop at the next turn (Ctrl-C, SIGTERM): kCancelled, with what was simulated recorded.
  const std::atomic<int>* interrupt = nullptr;
  // Failure injection (tests, what-if): group `first` goes silent (no heartbeat, no result) at
  // simulated second `second` after the start; its next launch behaves normally again.
  std::vector<std::pair<int64_t, double>> silence;
};

struct SimulationOutcome {
  scheduler::CampaignOutcome campaign;
  double simulated_s = 0;  // from start to the campaign's end, simulated
  double wall_s = 0;       // real seconds the simulation took
  int64_t turns = 0;       // master steps
  int64_t launches = 0;    // group launches (restarts included)
  // Frames the master took from the groups and sent to them (no heartbeats: see simulate_campaign).
  int64_t frames_to_master = 0, frames_to_groups = 0;
  // Summed over every step the groups ran (by part), every launch, every master step.
  StepCost cost;
  double startup_s = 0, decision_s = 0, setup_s = 0;
  double busy_node_seconds = 0;  // steps run x their cost x ranks_per_group
  int64_t finished_trials = 0;   // dones sent (stopped ones included)
  // The target's first report: its simulated second and the trials finished up to it (itself counted).
  std::optional<double> target_reached_s;
  std::optional<int64_t> runs_to_target;
};

Result<SimulationOutcome> simulate_campaign(const SimulateOptions& options);

}  // namespace hpctune::simulate
