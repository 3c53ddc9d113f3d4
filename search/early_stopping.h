// Early stopping: a hook on each intermediate report of a running trial.
//
// The scheduler calls on_report() for every report that carries the objective metric; when it
// returns kStop the master sends `stop` to the trial's group and records the trial as pruned with
// its last metric. on_finish() tells the stopper a trial ended (completed, pruned or failed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::search {

enum class Decision { kContinue, kStop };

struct StopperSpec {
  std::string kind = "none";  // none | asha | hyperband | median
  nlohmann::json settings = nlohmann::json::object();
  bool maximize = true;
  uint64_t seed = 0;
};

class EarlyStopper {
 public:
  virtual ~EarlyStopper() = default;
  virtual std::string name() const = 0;
  // `value` is the raw objective at `step` (1-based epochs or steps).
  virtual Decision on_report(int64_t seq, int64_t step, double value) = 0;
  virtual void on_finish(int64_t seq) { (void)seq; }
};

std::vector<std::string> stopper_names();
// kind "none" gives a stopper that never stops.
Result<std::unique_ptr<EarlyStopper>> make_stopper(const StopperSpec& spec);

}  // namespace hpctune::search
