// Algorithm settings: one declaration per key (name, type, default, bounds, help), from which the
// searchers and stoppers read their SearchSpec::settings / StopperSpec::settings.
//
// Each algorithm owns its table (random_search.cpp, genetic.cpp, ...); the factory exposes them
// through searcher_settings() / stopper_settings() so that the config layer, `hpctune validate`
// and configs/reference.yaml can be generated from the same list the algorithm reads.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::search {

enum class SettingType { kInt, kFloat, kBool, kString };
const char* setting_type_name(SettingType type) noexcept;

struct SettingDecl {
  std::string key;
  SettingType type = SettingType::kFloat;
  nlohmann::json default_value;  // null: "derived" (the help says from what)
  double min = -std::numeric_limits<double>::infinity();  // inclusive numeric bounds
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // kString: the allowed values (empty: any string)
  std::string help;
};

// Checks `given` (an object, or null for "nothing set") against `decls` and returns an object
// with every declared key, defaults filled in. Errors are kConfig and start with the key
// ("mutation_rate: must be in [0, 1], got 1.5"; "mutaton_rate: unknown setting of genetic ...")
// so that the config layer can prefix the file:line:col of the key.
Result<nlohmann::json> resolve_settings(std::string_view owner, const std::vector<SettingDecl>& decls,
                                        const nlohmann::json& given);

}  // namespace hpctune::search
