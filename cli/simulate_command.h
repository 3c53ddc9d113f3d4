// `hpctune simulate CONFIG`: the campaign run by its real master on simulated time
// (simulate/simulator.h), with the `function` trainer's outcomes computed without a process.
#pragma once

#include <atomic>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace hpctune::cli {

inline constexpr int64_t kDefaultSimulatedTrialLimit = 100'000;

struct SimulateArgs {
  std::string config;
  std::string db;                 // "" = "<campaign name>.sim.db" in the current directory
  std::optional<int64_t> nodes;   // nodes, one rank each: groups = nodes / (data x model); else the config's
  std::optional<uint64_t> seed;
  double step_seconds = -1;       // > 0: the cost of every step; else the trainer's seconds_per_step
  double startup_seconds = -1;    // >= 0: from a group's launch to its hello; else the machine file's
  std::string format = "table";   // table | json
  std::string machine;            // the machine file; "" = configs/machines/this-machine.yaml (see below)
  std::optional<double> target;   // on the config's (first) objective, in its mode
  std::string baseline;           // a config whose time to target is the speed-up's denominator
  bool plan = false;              // rank the splits of --nodes into groups x data x model
  bool count_decision_time = false;  // the master's measured step() time moves the simulated clock (Syne Tune)
  bool calibrate = false;         // fit this machine's file from small real campaigns
  std::string machine_out;        // --calibrate's output; "" = configs/machines/this-machine.yaml
  std::string outcomes;  // "" or function | replay:DB | surrogate:DB (simulate/outcomes.h)
  std::vector<std::pair<int64_t, double>> silence;  // test only: group G goes silent at simulated second S
  // A campaign of more trials (every stage's together) is refused: its time and memory grow with
  // them (a million trials: 415 s and 1.43 GB).
  int64_t max_trials = kDefaultSimulatedTrialLimit;
  const std::atomic<int>* interrupt = nullptr;  // Ctrl-C or SIGTERM: stop, keep what was simulated
};

// kUsage for a trainer whose outcomes cannot be simulated yet (only a test-function trainer's can),
// and for an existing database; else as `run`. The machine file is --machine, else
// configs/machines/this-machine.yaml under the current directory, else under the directory above
// the binary's (build/..), else the cost model's built-in defaults (reported as "built-in").
Status cmd_simulate(const SimulateArgs& args);

// `hpctune simulate --calibrate` (cli/simulate_calibrate.cpp): small real campaigns of the built-in
// mlp on 1 rank, 2 data-parallel ranks and 2 model-parallel ranks (the last two under mpirun, skipped
// with a message when it is absent), their measured seconds per epoch and start-up fitted into a
// machine file written to `machine_out`.
Status cmd_simulate_calibrate(const SimulateArgs& args);

}  // namespace hpctune::cli
