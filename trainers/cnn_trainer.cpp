#include "trainers/cnn_trainer.h"

#include <string>

namespace hpctune::trainers {

const nlohmann::json& default_cnn_layers() {
  static const nlohmann::json kNone = nlohmann::json::array();
  for (const auto& d : cnn_setting_specs())
    if (d.key == "layers") return d.default_value;  // cnn_settings.cpp
  return kNone;
}

Result<CnnSettings> parse_cnn_settings(const nlohmann::json& json) {
  SettingsReader r("cnn", json, cnn_setting_specs());
  HPCTUNE_TRY(r.check_known());
  CnnSettings s;
  HPCTUNE_TRY(parse_classifier_common(r, s));
  HPCTUNE_ASSIGN(const nlohmann::json layers, r.value("layers"));
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
