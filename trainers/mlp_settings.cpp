// The settings of the `mlp` trainer kind (mlp_trainer.h): its layers, then the classifier loop's.
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

const std::vector<SettingDecl>& mlp_setting_specs() {
  // Not const: tests change a declaration through mutable_setting_specs_for_testing().
  static std::vector<SettingDecl> specs = [] {
    using T = SettingType;
    std::vector<SettingDecl> common = classifier_common_setting_specs();
    // data and standardize first, as in the reference; the layers; the rest of the loop's.
    std::vector<SettingDecl> out(common.begin(), common.begin() + 2);
    out.push_back({.key = "hidden",
                   .type = T::kIntList,
                   .default_value = nlohmann::json::array({256}),
                   .min = 1,
                   .max = 65536,
                   .help = "Width of each hidden layer; one integer is repeated `layers` times; [] for none (a "
                           "linear classifier).",
                   .aliases = {"hidden_size", "hidden_sizes", "hidden_units", "units", "width"}});
    out.push_back({.key = "layers",
                   .type = T::kInt,
                   .default_value = nullptr,
                   .min = 1,
                   .max = 1000,
                   .help = "Number of hidden layers when hidden is one integer (1 if not given); when hidden is a "
                           "list, its length.",
                   .aliases = {"num_layers", "n_layers", "depth", "hidden_layers"},
                   .default_note = "1, or the length of hidden"});
    out.push_back({.key = "activation",
                   .type = T::kString,
                   .default_value = "relu",
                   .choices = {"relu", "tanh", "sigmoid"},
                   .help = "Activation of the hidden layers.",
                   .aliases = {"act", "nonlinearity"}});
    // Above 0.95 almost nothing of a layer reaches the next.
    out.push_back({.key = "dropout",
                   .type = T::kFloat,
                   .default_value = 0.0,
                   .min = 0,
                   .max = 0.95,
                   .help = "Dropout probability after each hidden layer.",
                   .aliases = {"dropout_rate", "drop_rate"}});
    out.insert(out.end(), common.begin() + 2, common.end());
    return out;
  }();
  return specs;
}

TrainerCapabilities mlp_capabilities() { return classifier_capabilities(); }

}  // namespace hpctune::trainers
