// The settings of the `function` trainer kind (function_trainer.h). Its parameters x1, x2, ...
// are not settings: they come from the space.
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

const std::vector<SettingDecl>& function_setting_specs() {
  using T = SettingType;
  // Not const: tests change a declaration through mutable_setting_specs_for_testing().
  static std::vector<SettingDecl> specs = {
      {.key = "name", .type = T::kString, .default_value = "branin",
       .choices = {"branin", "hartmann6", "rosenbrock", "levy", "ackley"},
       .help = "The benchmark function (to be minimised), of the parameters x1, x2, ...",
       .aliases = {"function", "fn"}},
      {.key = "dim", .type = T::kInt, .default_value = 0, .min = 0, .max = 1000,
       .help = "Number of parameters x1..xd (0 = the function's own: 2 for branin, 6 for hartmann6, 2 for the "
               "others; rosenbrock, levy and ackley take any dimension).",
       .aliases = {"dimension", "dimensions", "ndim", "n_dims"}},
      {.key = "noise", .type = T::kFloat, .default_value = 0.0, .min = 0,
       .help = "Standard deviation of Gaussian noise added to each reported value.",
       .aliases = {"sigma", "noise_std"}},
      {.key = "steps", .type = T::kInt, .default_value = 1, .min = 1, .max = 1'000'000,
       .help = "Number of reports of the value.", .aliases = {"epochs", "reports", "iterations"}},
      {.key = "seconds_per_step", .type = T::kDuration, .default_value = 0.0, .min = 0, .max = 86400,
       .help = "Time to sleep before each report, to imitate training.", .aliases = {"seconds", "sleep", "delay"}},
      // Read only by hpctune simulate's cost model (config/trial_work.h); the trainer ignores them.
      {.key = "parameters", .type = T::kInt, .default_value = 0, .min = 0, .max = 1e12,
       .help = "Parameters of the network it imitates: hpctune simulate's cost model allreduces 4 bytes of each "
               "per step across data-parallel ranks (the trainer ignores it).", .aliases = {"num_parameters", "params_count"}},
      {.key = "layers", .type = T::kInt, .default_value = 1, .min = 1, .max = 1000,
       .help = "Layers of the network it imitates: the most model-parallel stages hpctune simulate splits it into "
               "(the trainer ignores it).", .aliases = {"num_layers", "depth"}},
      {.key = "batches_per_step", .type = T::kInt, .default_value = 1, .min = 1, .max = 1e9,
       .help = "Optimizer steps (minibatches) in one report of the network it imitates: hpctune simulate's cost "
               "model allreduces and pipelines each (the trainer ignores it).", .aliases = {"minibatches_per_step"}},
  };
  return specs;
}

// It reports `steps` times, writes neither predictions nor checkpoints, and takes the parameters
// x1..x<dim> of its function besides its settings.
TrainerCapabilities function_capabilities() {
  TrainerCapabilities can;
  can.step_setting = "steps";
  can.params = TrainerParams::kTestFunctionArgs;
  can.params_hint = "x1, x2, ...";
  // hpctune simulate splits the network it imitates into at most `layers` pipeline stages.
  can.model_stages.count = [](const nlohmann::json& settings) -> int64_t {
    const auto it = settings.find("layers");
    return it != settings.end() && it->is_number_integer() ? it->get<int64_t>() : 1;
  };
  can.model_stages.what = "the layers of the network it imitates (trainer.layers)";
  can.model_stages.reads = {"layers"};
  can.metrics.always = {"value", "regret"};  // function_trainer.cpp
  can.metrics.every_step = {"value"};
  return can;
}

}  // namespace hpctune::trainers
