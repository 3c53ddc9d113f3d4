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

// Its network (mlp_trainer.cpp): a dense layer per hidden width, each followed by a dropout layer
// when dropout > 0, and the output layer; a pipeline stage needs one of them.
TrainerCapabilities mlp_capabilities() {
  TrainerCapabilities can = classifier_capabilities();
  // A checkpoint's layers: their widths and count, activation (in each dense layer) and dropout
  // (a layer of its own when above 0).
  can.network_settings = {{"hidden"}, {"layers"}, {"activation"}, {"dropout", true}};
  can.model_stages.count = [](const nlohmann::json& settings) -> int64_t {
    const nlohmann::json& hidden = settings.contains("hidden") ? settings["hidden"] : nlohmann::json();
    int64_t widths = 0;
    if (hidden.is_array()) widths = static_cast<int64_t>(hidden.size());
    else if (hidden.is_number_integer())
      widths = settings.contains("layers") && settings["layers"].is_number_integer() ? settings["layers"].get<int64_t>() : 1;
    else return 0;
    const bool dropout = settings.contains("dropout") && settings["dropout"].is_number() && settings["dropout"].get<double>() > 0;
    return widths * (dropout ? 2 : 1) + 1;
  };
  can.model_stages.what = "the layers of its network: a dense layer per hidden width (and its dropout layer when "
                          "dropout > 0), and the output layer";
  can.model_stages.reads = {"hidden", "layers", "dropout"};
  // The packed model (gpu/gpu_packed_mlp.h) is this kind's network on a GPU; each trial is checked
  // again when it starts (pack_refusal: optimizer, dropout, ...) and trains alone if it does not fit.
  can.packs = [](const nlohmann::json& settings) -> std::string {
    const bool gpu = settings.contains("device") && settings["device"].is_string() && settings["device"] == "gpu";
    return gpu ? "" : "its trials train on the CPU (trainer.device is not gpu)";
  };
  return can;
}

}  // namespace hpctune::trainers
