#include "trainers/sleep_trainer.h"

#include <chrono>
#include <thread>

namespace hpctune::trainers {

Result<SleepSettings> parse_sleep_settings(const nlohmann::json& json) {
  SettingsReader r("sleep", json, sleep_setting_specs());
  HPCTUNE_TRY(r.check_known());
  SleepSettings s;
  HPCTUNE_ASSIGN(s.seconds, r.number("seconds"));
  HPCTUNE_ASSIGN(s.steps, r.integer("steps"));
  HPCTUNE_ASSIGN(s.metric, r.string("metric"));
  if (auto problem = sleep_capabilities().setting_rules.problem({{"metric", s.metric}}))
    return r.bad(problem->first.c_str(), r.raw(problem->first.c_str()), problem->second);
  HPCTUNE_ASSIGN(s.value, r.number("value"));
  return s;
}

Result<TrialResult> SleepTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(SleepSettings s, parse_sleep_settings(ctx.settings()));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto total = std::chrono::duration<double>(s.seconds);
  const protocol::Metrics metrics{{s.metric, s.value}};

  TrialResult result;
  for (int64_t step = 1; step <= s.steps; ++step) {
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(total * (static_cast<double>(step) / static_cast<double>(s.steps)));
    if (wait_unless_stopped(ctx, deadline, std::chrono::milliseconds(kSliceMs))) {
      result.stopped = true;
      return result;
    }
    ctx.report(step, metrics);
    result.step = step;
    result.metrics = metrics;
  }
  return result;
}

}  // namespace hpctune::trainers
