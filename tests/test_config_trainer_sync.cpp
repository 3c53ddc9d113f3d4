// The config's trainer settings (config/settings.cpp) against the tables the trainers read
// (trainer_setting_specs): the same keys, of compatible types, for every kind this build has.
// The config declares its own copy because it needs bounds, enums and aliases the trainer tables
// do not carry, and because hpctune_config does not link the trainers; this test keeps the two
// from drifting apart.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "config/config.h"
#include "config/settings.h"
#include "trainers/trainer_factory.h"
#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

namespace config = hpctune::config;
namespace trainers = hpctune::trainers;

namespace {

bool compatible(const std::string& trainer_type, config::Type type) {
  if (trainer_type == "int") return type == config::Type::kInt;
  if (trainer_type == "float") return type == config::Type::kNumber || type == config::Type::kDuration;
  if (trainer_type == "bool") return type == config::Type::kBool;
  if (trainer_type == "string") return type == config::Type::kString || type == config::Type::kEnum;
  if (trainer_type == "int|list[int]") return type == config::Type::kIntList;
  if (trainer_type == "list[layer]") return type == config::Type::kValueList;
  if (trainer_type == "map[string]string") return type == config::Type::kStringMap;
  return false;
}

}  // namespace

TEST_CASE("every trainer kind of this build has the same settings in the config table") {
  const auto kind_setting = config::find_settings("trainer.kind");
  REQUIRE(kind_setting.size() == 1);
  for (const auto& kind : trainers::trainer_kinds()) {
    CAPTURE(kind);
    const auto& choices = kind_setting[0]->choices;
    CHECK(std::count(choices.begin(), choices.end(), kind) == 1);

    auto specs = trainers::trainer_setting_specs(kind);
    REQUIRE(specs.ok());
    std::set<std::string> trainer_names, config_names;
    for (const auto& spec : *specs.value()) trainer_names.insert(spec.name);
    for (const auto* s : config::children("trainer")) {
      if (!s->scope.contains(kind)) continue;
      const std::string name(config::leaf_name(s->path));
      config_names.insert(name);
      for (const auto& spec : *specs.value()) {
        if (name != spec.name) continue;
        CHECK_MESSAGE(compatible(spec.type, s->type),
                      "trainer." << name << ": the trainer reads " << spec.type << ", the config declares "
                                 << config::type_name(s->type));
      }
    }
    std::string only_trainer, only_config;
    for (const auto& n : trainer_names)
      if (!config_names.count(n)) only_trainer += " " + n;
    for (const auto& n : config_names)
      if (!trainer_names.count(n)) only_config += " " + n;
    CHECK_MESSAGE(only_trainer.empty(), "read by the trainer, not declared in config/settings.cpp:" << only_trainer);
    CHECK_MESSAGE(only_config.empty(), "declared in config/settings.cpp, unknown to the trainer:" << only_config);
  }
}

TEST_CASE("the trainer accepts the settings the config produces") {
  // The normalized trainer section of a config (every default applied) passes the trainer's own
  // check of unknown keys and types.
  for (const auto& kind : trainers::trainer_kinds()) {
    CAPTURE(kind);
    // Required settings without a default get a value; every other one comes from the defaults.
    const std::string required = kind == "command" ? ", command: 'true'" : "";
    // The function trainer takes exactly its x1..xd (branin: 2) from the space.
    const std::string space = kind == "function" ? "space: {x1: 0, x2: 1}\n" : "";
    const std::string text = "name: t\nobjective: {metric: m}\nsearch: {max_trials: 1}\n" + space +
                             "trainer: {kind: " + kind + required + "}\n";
    auto parsed = config::parse_config(text, "sync.yaml");
    REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
    auto specs = trainers::trainer_setting_specs(kind);
    REQUIRE(specs.ok());
    trainers::SettingsReader reader(kind, parsed->trainer, *specs.value());
    const auto known = reader.check_known();
    CHECK_MESSAGE(known.ok(), known.error().message());
  }
}
