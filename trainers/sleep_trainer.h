// The `sleep` trainer: waits, reports a fixed metric, and does nothing else.
//
// It exists to measure hpctune itself (master overhead, dispatch latency) without training cost:
// for s = 1..steps it waits until start + seconds * s / steps (absolute deadlines, so sleep
// overshoot does not accumulate) and reports {metric: value} at step s; the final metrics are
// {metric: value} at step = steps. With seconds = 0 it never sleeps and returns at once.
//
// Stop requests are polled at least every kSliceMs milliseconds while waiting and before each
// step; a stopped run returns stopped = true with the last reported step and metrics.
#pragma once

#include <string>
#include <vector>

#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

struct SleepSettings {
  double seconds = 0.0;
  int64_t steps = 1;
  std::string metric = "value";
  double value = 0.0;
};

// kInvalidArgument naming the setting on a bad value or an unknown key.
Result<SleepSettings> parse_sleep_settings(const nlohmann::json& settings);

class SleepTrainer final : public Trainer {
 public:
  static constexpr int kSliceMs = 5;

  std::string kind() const override { return "sleep"; }
  Result<TrialResult> run(const TrialContext& ctx) override;
};

}  // namespace hpctune::trainers
