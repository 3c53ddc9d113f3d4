// The catalog of trainer kinds and their declared settings (trainer_settings.h).
#include "trainers/trainer_settings.h"

#include <algorithm>

namespace hpctune::trainers {

namespace {

std::vector<TrainerKindDecl> build_catalog() {
  // The declarations are function-local statics; the catalog holds pointers to them so that a
  // test's change (mutable_setting_specs_for_testing) is seen by every reader.
  return {
      {"sleep", "sleeps and reports a value; for tests", &sleep_setting_specs(), sleep_capabilities()},
      {"mlp", "a multilayer perceptron on an IDX dataset such as Fashion-MNIST", &mlp_setting_specs(),
       mlp_capabilities()},
      {"cnn", "a convolutional network on the same data", &cnn_setting_specs(), cnn_capabilities()},
      {"function", "a benchmark function of the parameters x1, x2, ...", &function_setting_specs(),
       function_capabilities()},
      {"command", "runs a program", &command_setting_specs(), command_capabilities()},
  };
}

}  // namespace

const std::vector<TrainerKindDecl>& trainer_catalog() {
  static const std::vector<TrainerKindDecl> catalog = build_catalog();
  return catalog;
}

const TrainerCapabilities* trainer_capabilities(std::string_view kind) {
  for (const auto& k : trainer_catalog())
    if (k.kind == kind) return &k.can;
  return nullptr;
}

Result<const std::vector<SettingDecl>*> trainer_setting_specs(const std::string& kind) {
  std::vector<std::string> known;
  for (const auto& k : trainer_catalog()) {
    if (k.kind == kind) return k.settings;
    known.push_back(k.kind);
  }
  std::sort(known.begin(), known.end());
  return err(Errc::kInvalidArgument, "unknown trainer kind '" + kind + "' (known: " + join(known, ", ") + ")");
}

std::vector<SettingDecl>* mutable_setting_specs_for_testing(const std::string& kind) {
  auto specs = trainer_setting_specs(kind);
  return specs.ok() ? const_cast<std::vector<SettingDecl>*>(specs.value()) : nullptr;
}

}  // namespace hpctune::trainers
