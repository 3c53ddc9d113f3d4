#include "trainers/mlp_trainer.h"

namespace hpctune::trainers {

Result<MlpSettings> parse_mlp_settings(const nlohmann::json& json) {
  SettingsReader r("mlp", json, mlp_setting_specs());
  HPCTUNE_TRY(r.check_known());
  MlpSettings s;
  HPCTUNE_TRY(parse_classifier_common(r, s));

  // hidden's type and bounds are checked against its declaration (mlp_settings.cpp); what is left
  // is how it combines with layers.
  HPCTUNE_ASSIGN(const nlohmann::json hidden, r.value("hidden"));
  s.hidden.clear();
  if (hidden.is_array()) {
    if (r.has("layers")) {
      HPCTUNE_ASSIGN(int64_t layers, r.integer("layers"));
      if (layers != static_cast<int64_t>(hidden.size())) {
        return r.bad("layers", r.raw("layers"), "absent or the length of `hidden` when `hidden` is a list");
      }
    }
    for (const auto& h : hidden) s.hidden.push_back(h.get<int64_t>());
  } else {
    int64_t layers = 1;
    if (r.has("layers")) {
      HPCTUNE_ASSIGN(layers, r.integer("layers"));
    }
    s.hidden.assign(static_cast<size_t>(layers), hidden.get<int64_t>());
  }

  HPCTUNE_ASSIGN(s.activation, r.string("activation"));
  HPCTUNE_ASSIGN(s.dropout, r.number("dropout"));

  s.layers.clear();
  for (int64_t width : s.hidden) {
    nn::LayerSpec dense;
    dense.kind = "dense";
    dense.units = width;
    dense.activation = s.activation;
    s.layers.push_back(dense);
    if (s.dropout > 0.0) {
      nn::LayerSpec drop;
      drop.kind = "dropout";
      drop.rate = s.dropout;
      s.layers.push_back(drop);
    }
  }
  return s;
}

Result<TrialResult> train_mlp(const MlpSettings& s, const ImageClassificationData& data, const TrialContext& ctx) {
  return train_classifier("mlp", s, data, ctx);
}

Result<TrialResult> MlpTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(MlpSettings s, parse_mlp_settings(ctx.settings()));
  return run_classifier_trial("mlp", s, datasets_.get(), ctx);
}

}  // namespace hpctune::trainers
