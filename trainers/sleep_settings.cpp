// The settings of the `sleep` trainer kind (sleep_trainer.h).
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

const std::vector<SettingDecl>& sleep_setting_specs() {
  using T = SettingType;
  // Not const: tests change a declaration through mutable_setting_specs_for_testing().
  static std::vector<SettingDecl> specs = {
      {.key = "seconds", .type = T::kDuration, .default_value = 0.0, .min = 0, .max = 7 * kDay,
       .help = "Total time to sleep, spread evenly over the steps.",
       .aliases = {"sleep", "duration", "seconds_per_step"}},
      // More steps would run for ever and overflow the counters of what it reports.
      {.key = "steps", .type = T::kInt, .default_value = 1, .min = 1, .max = 1'000'000,
       .help = "Number of steps; a report follows each.", .aliases = {"epochs", "reports", "iterations"}},
      {.key = "metric", .type = T::kString, .default_value = "value", .help = "Name of the metric it reports.",
       .aliases = {"metric_name"}},
      {.key = "value", .type = T::kFloat, .default_value = 0.0, .help = "The value it reports.",
       .aliases = {"result", "score"}},
  };
  return specs;
}

// It reports `steps` times and writes neither predictions nor checkpoints. Its metric is a name
// (setting_rules: the trainer and `hpctune validate` both ask).
TrainerCapabilities sleep_capabilities() {
  TrainerCapabilities can;
  can.step_setting = "steps";
  can.setting_rules.problem = [](const nlohmann::json& s) -> std::optional<std::pair<std::string, std::string>> {
    if (s.contains("metric") && s["metric"].is_string() && s["metric"].get_ref<const std::string&>().empty())
      return std::make_pair(std::string("metric"), std::string("a non-empty name"));
    return std::nullopt;
  };
  can.setting_rules.reads = {"metric"};
  return can;
}

}  // namespace hpctune::trainers
