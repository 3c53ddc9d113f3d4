#include "trainers/mlp_trainer.h"

namespace hpctune::trainers {

const std::vector<SettingSpec>& mlp_setting_specs() {
  static const std::vector<SettingSpec> specs = [] {
    std::vector<SettingSpec> out = {
        {"hidden", "int|list[int]", nlohmann::json::array({256}), "hidden layer widths; one int repeats `layers` times"},
        {"layers", "int", nullptr, "number of hidden layers when `hidden` is one int (default 1)"},
        {"activation", "string", "relu", "hidden activation: relu, tanh or sigmoid"},
        {"dropout", "float", 0.0, "dropout probability after every hidden layer, in [0, 1)"},
    };
    for (auto& spec : classifier_common_setting_specs()) out.push_back(std::move(spec));
    return out;
  }();
  return specs;
}

Result<MlpSettings> parse_mlp_settings(const nlohmann::json& json) {
  SettingsReader r("mlp", json, mlp_setting_specs());
  HPCTUNE_TRY(r.check_known());
  MlpSettings s;
  HPCTUNE_TRY(parse_classifier_common(r, s));

  constexpr int64_t kMaxWidth = 1 << 20;
  const auto& hidden = r.raw("hidden");
  s.hidden.clear();
  if (hidden.is_array()) {
    if (r.has("layers")) {
      HPCTUNE_ASSIGN(int64_t layers, r.integer("layers", 1, 1000));
      if (layers != static_cast<int64_t>(hidden.size())) {
        return r.bad("layers", r.raw("layers"), "absent or the length of `hidden` when `hidden` is a list");
      }
    }
    for (const auto& h : hidden) {
      auto width = r.integer_value("hidden", h, 1, kMaxWidth);
      if (!width.ok()) return r.bad("hidden", hidden, "an int or a list of ints, each in [1, " + std::to_string(kMaxWidth) + "]");
      s.hidden.push_back(*width);
    }
  } else {
    auto width = r.integer_value("hidden", hidden, 1, kMaxWidth);
    if (!width.ok()) return r.bad("hidden", hidden, "an int or a list of ints, each in [1, " + std::to_string(kMaxWidth) + "]");
    int64_t layers = 1;
    if (r.has("layers")) {
      HPCTUNE_ASSIGN(layers, r.integer("layers", 1, 1000));
    }
    s.hidden.assign(static_cast<size_t>(layers), *width);
  }

  HPCTUNE_ASSIGN(s.activation, r.string("activation"));
  if (s.activation != "relu" && s.activation != "tanh" && s.activation != "sigmoid") {
    return r.bad("activation", r.raw("activation"), "relu, tanh or sigmoid");
  }
  HPCTUNE_ASSIGN(s.dropout, r.number("dropout", 0.0, 1.0));
  if (s.dropout >= 1.0) return r.bad("dropout", r.raw("dropout"), "in [0, 1)");

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
