// The `function` trainer: a benchmark function with a known optimum (search/test_functions.h)
// in place of a training run, so searches and early stopping run end to end in seconds.
//
// Parameters x1 .. xd come from the searched space (or fixed values); all d must be present and
// inside the function's box. Settings: `name` (branin, hartmann6, rosenbrock, levy, ackley), `dim`
// (0 = the function's natural dimension), `noise`, `steps`, `seconds_per_step`.
//
// The run imitates training: for s = 1..steps it waits seconds_per_step (polling stop requests at
// least every kSliceMs), then reports {value: learning_curve(f(x), initial, s, steps) + noise}.
// `initial` is the same for every configuration of a function (the largest value of f over a fixed
// set of kInitialProbes points of the box), so curves start together and keep the order of their
// final values, as early stopping assumes. The noise is Gaussian with standard deviation `noise`,
// drawn from an Rng seeded by the trial's seed: the same trial gives the same reports.
//
// The final metrics are {value, regret} with value the last reported value (step = steps, the
// function's value plus noise) and regret = value - the function's optimum. A stopped run returns
// stopped = true with the metrics of its last report ({} when it was stopped before the first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

struct FunctionSettings {
  std::string name = "branin";
  int64_t dim = 0;  // 0: the natural dimension of `name`
  double noise = 0.0;
  int64_t steps = 1;
  double seconds_per_step = 0.0;
  std::vector<double> x;  // x1 .. xd, checked against the function's box
};

// kInvalidArgument naming the problem: an unknown setting or function name, a dimension the
// function does not allow, a missing, non-numeric, extra (x7 for a 6-d function) or out-of-box xi.
Result<FunctionSettings> parse_function_settings(const nlohmann::json& settings);

// What run() reports, computed at once without waiting (run() and `hpctune simulate` share it):
// the metrics of steps 1..steps for `settings` (the trainer's settings overlaid with the params)
// and the trial's seed. Errors as parse_function_settings.
struct FunctionCurve {
  std::vector<protocol::Metrics> reports;  // reports[s - 1]: {value} at step s
  protocol::Metrics final_metrics;         // {value, regret} of the last step
  double seconds_per_step = 0.0;
  double optimum = 0.0;                    // the function's minimum (regret = value - optimum)
};
Result<FunctionCurve> function_curve(const nlohmann::json& settings, uint64_t seed);

class FunctionTrainer final : public Trainer {
 public:
  static constexpr int kSliceMs = 5;
  static constexpr int kInitialProbes = 256;

  std::string kind() const override { return "function"; }
  Result<TrialResult> run(const TrialContext& ctx) override;
};

}  // namespace hpctune::trainers
