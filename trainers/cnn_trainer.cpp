#include "trainers/cnn_trainer.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>

namespace hpctune::trainers {

const nlohmann::json& default_cnn_layers() {
  static const nlohmann::json kNone = nlohmann::json::array();
  for (const auto& d : cnn_setting_specs())
    if (d.key == "layers") return d.default_value;  // cnn_settings.cpp
  return kNone;
}

Result<nlohmann::json> expand_cnn_blocks(const nlohmann::json& layers, const nlohmann::json& settings) {
  auto is_block = [](const std::string& name) {
    return std::any_of(std::begin(kCnnBlocks), std::end(kCnnBlocks), [&](const char* b) { return name == b; });
  };
  nlohmann::json out = nlohmann::json::array();
  std::set<std::string> placed;
  for (const auto& entry : layers) {
    if (!entry.is_string()) {
      out.push_back(entry);
      continue;
    }
    const std::string name = entry.get<std::string>();
    if (!is_block(name)) {
      return err(Errc::kInvalidArgument, "cnn trainer: layers: '" + name +
                                             "' is neither a layer map nor a block (block1, block2, block3, block4, head)");
    }
    if (!placed.insert(name).second)
      return err(Errc::kInvalidArgument, "cnn trainer: layers: the block '" + name + "' is placed twice");
    if (!settings.is_object() || !settings.contains(name)) continue;  // absent: no layers there
    if (name != "head" && settings.contains("blocks") && settings["blocks"].is_number() &&
        name[5] - '0' > settings["blocks"].get<double>())
      continue;  // beyond `blocks`
    const auto& block = settings[name];
    if (!block.is_array()) return err(Errc::kInvalidArgument, "cnn trainer: " + name + ": must be a list of layers, got " + block.dump());
    for (const auto& layer : block) out.push_back(layer);
  }
  for (const char* b : kCnnBlocks) {
    if (settings.is_object() && settings.contains(b) && !placed.count(b)) {
      return err(Errc::kInvalidArgument, std::string("cnn trainer: ") + b + " is set but layers does not place it (add '" + b +
                                             "' to layers where its layers go)");
    }
  }
  return out;
}

Result<CnnSettings> parse_cnn_settings(const nlohmann::json& json) {
  SettingsReader r("cnn", json, cnn_setting_specs());
  HPCTUNE_TRY(r.check_known());
  CnnSettings s;
  HPCTUNE_TRY(parse_classifier_common(r, s));
  HPCTUNE_ASSIGN(const nlohmann::json given, r.value("layers"));
  for (const char* b : kCnnBlocks)
    if (r.has(b)) HPCTUNE_TRY(r.value(b));  // a non-empty list (its layers are checked below)
  if (r.has("blocks")) HPCTUNE_TRY(r.value("blocks"));  // 0..4
  // Each list's entries, as `hpctune validate` checks them (cnn_settings.cpp: value_problem).
  const auto value_problem = cnn_capabilities().value_problem;
  if (auto problem = value_problem("layers", given))
    return err(Errc::kInvalidArgument, "cnn trainer: setting 'layers': layers" + problem->first + ": " + problem->second);
  for (const char* b : kCnnBlocks) {
    if (!r.has(b)) continue;
    if (auto problem = value_problem(b, json[b]))
      return err(Errc::kInvalidArgument,
                 std::string("cnn trainer: setting '") + b + "': " + b + problem->first + ": " + problem->second);
  }
  HPCTUNE_ASSIGN(const nlohmann::json layers, expand_cnn_blocks(given, json));
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
