#include "trainers/cnn_trainer.h"

#include <string>

namespace hpctune::trainers {

const nlohmann::json& default_cnn_layers() {
  static const nlohmann::json layers = nlohmann::json::parse(R"([
    {"kind": "conv", "filters": 32, "kernel": 5},
    {"kind": "maxpool", "size": 2},
    {"kind": "conv", "filters": 64, "kernel": 5},
    {"kind": "maxpool", "size": 2},
    {"kind": "dense", "units": 1024}
  ])");
  return layers;
}

const std::vector<SettingSpec>& cnn_setting_specs() {
  static const std::vector<SettingSpec> specs = [] {
    std::vector<SettingSpec> out = {
        {"layers", "list[layer]", default_cnn_layers(),
         "hidden layers, in order: {kind: conv|maxpool|dense|dropout, ...} (network.h); the output layer is added"},
    };
    for (auto& spec : classifier_common_setting_specs()) {
      // 0.05 (the mlp's) drives the default CNN with momentum 0.9 to chance (dead ReLUs); 0.01 learns.
      if (std::string(spec.name) == "lr") spec.default_value = 0.01;
      out.push_back(std::move(spec));
    }
    return out;
  }();
  return specs;
}

Result<CnnSettings> parse_cnn_settings(const nlohmann::json& json) {
  SettingsReader r("cnn", json, cnn_setting_specs());
  HPCTUNE_TRY(r.check_known());
  CnnSettings s;
  HPCTUNE_TRY(parse_classifier_common(r, s));
  const auto& layers = r.raw("layers");
  if (!layers.is_array() || layers.empty()) return r.bad("layers", layers, "a non-empty list of layers");
  auto specs = nn::parse_layer_specs(layers);
  if (!specs.ok()) return r.bad("layers", layers, "valid layers (" + specs.error().message() + ")");
  s.layers = std::move(specs).value();
  return s;
}

Result<TrialResult> CnnTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(CnnSettings s, parse_cnn_settings(ctx.settings()));
  return run_classifier_trial("cnn", s, datasets_.get(), ctx);
}

}  // namespace hpctune::trainers
