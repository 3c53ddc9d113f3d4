// `hpctune simulate CONFIG`: the campaign run by its real master on simulated time
// (scheduler/simulator.h), with the `function` trainer's outcomes computed without a process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace hpctune::cli {

struct SimulateArgs {
  std::string config;
  std::string db;                 // "" = "<campaign name>.sim.db" in the current directory
  std::optional<int64_t> nodes;   // trainer groups (one node each, for now); else resources.groups
  std::optional<uint64_t> seed;
  double step_seconds = -1;       // > 0: the cost of every step; else the trainer's seconds_per_step
  double startup_seconds = 1;     // from a group's launch to its hello
  std::string format = "table";   // table | json
  std::string outcomes;  // "" or function | replay:DB | surrogate:DB (scheduler/simulated_outcomes.h)
  std::vector<std::pair<int64_t, double>> silence;  // test only: group G goes silent at simulated second S
};

// kUsage for a trainer whose outcomes cannot be simulated yet (only a test-function trainer's can),
// and for an existing database; else as `run`.
Status cmd_simulate(const SimulateArgs& args);

}  // namespace hpctune::cli
