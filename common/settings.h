// A setting's declaration (name, type, default, bounds, choices, help, aliases), written once beside
// the code that reads it, and the check of a value against it.
//
// Who declares: each search algorithm and early stopper (search/*.cpp, through searcher_settings()
// and stopper_settings()) and each trainer kind (trainers/<kind>_settings.cpp, through
// trainers/trainer_settings.h). Who reads the same declaration:
//   - the config table (config/settings.cpp) imports them under `search.settings.*`,
//     `early_stopping.*` and `trainer.*`, scoped by the algorithm, the stopper or the trainer kind:
//     parsing, `hpctune validate`, the messages with file:line:col and configs/reference.yaml;
//   - the algorithm (resolve_settings below) and the trainer (trainers::SettingsReader) check what
//     they receive with check_setting(), so a default or a bound changed in the declaration changes
//     what the config accepts and what the code receives, together.
//
// Header-only like the rest of common/: the master (config) and the trainers both use it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/text.h"

namespace hpctune {

// A day in seconds: the unit the bounds of durations are written in.
inline constexpr double kDay = 86400;

enum class SettingType {
  kInt,        // a 64-bit integer (a whole float such as 256.0 is accepted)
  kFloat,      // a finite number
  kBool,
  kString,     // with `choices`: one of them (the config calls it an enum)
  kDuration,   // seconds; the config also reads "90s", "10m", ... and hands on the seconds
  kIntList,    // an integer or a list of integers (possibly empty), each within the bounds
  kValueList,  // a non-empty list of any values (checked by the code that reads it); [] only as the default
  kStringMap,  // a map of names to strings (numbers and booleans are taken as their text)
  kCommandLine,  // a command line: a non-empty string, or a non-empty list of strings (an argv)
};

inline const char* setting_type_name(SettingType type) noexcept {
  switch (type) {
    case SettingType::kInt: return "int";
    case SettingType::kFloat: return "float";
    case SettingType::kBool: return "bool";
    case SettingType::kString: return "string";
    case SettingType::kDuration: return "duration";
    case SettingType::kIntList: return "int list";
    case SettingType::kValueList: return "value list";
    case SettingType::kStringMap: return "string map";
    case SettingType::kCommandLine: return "command line";
  }
  return "unknown";
}

// Every field has a default member initializer, so that a declaration names only what it sets
// (positionally, as the search algorithms do, or by designated initializers, as the trainers do).
struct SettingDecl {
  std::string key{};
  SettingType type = SettingType::kFloat;
  nlohmann::json default_value{};  // null: none (required, or derived: default_note says from what)
  double min = -std::numeric_limits<double>::infinity();  // numeric bounds (of every item of a kIntList)
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices{};  // kString: the allowed values (empty: any string)
  std::string help{};
  bool min_exclusive = false;  // > min instead of >= min
  bool max_exclusive = false;  // < max instead of <= max
  std::vector<std::string> aliases{};  // other names users type for it, only for "did you mean"
  bool required = false;
  // A default computed from other values, for the reference ("the campaign's seed"); the
  // default_value is then what a reader outside a campaign gets.
  std::string default_note{};
  std::string example{};  // a value for the reference config when it has no default (YAML text)
};

// "in [0, 1]", "in (0, 0.5]", ">= 0", "> 0", "< 1"; "" without bounds.
inline std::string setting_bounds_text(const SettingDecl& d) {
  const bool has_min = std::isfinite(d.min), has_max = std::isfinite(d.max);
  if (has_min && has_max)
    return std::string("in ") + (d.min_exclusive ? "(" : "[") + format_number(d.min) + ", " + format_number(d.max) +
           (d.max_exclusive ? ")" : "]");
  if (has_min) return (d.min_exclusive ? "> " : ">= ") + format_number(d.min);
  if (has_max) return (d.max_exclusive ? "< " : "<= ") + format_number(d.max);
  return "";
}

namespace settings_detail {

inline bool in_bounds(const SettingDecl& d, double x) {
  if (d.min_exclusive ? !(x > d.min) : !(x >= d.min)) return false;
  if (d.max_exclusive ? !(x < d.max) : !(x <= d.max)) return false;
  return true;
}

// An integer value (integral floats included) as a normalized JSON integer; null if it is none.
inline nlohmann::json as_integer(const nlohmann::json& v) {
  if (v.is_number_integer()) return v;  // signed or unsigned
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && std::floor(x) == x && std::fabs(x) < 9.0e15) return static_cast<int64_t>(x);
  }
  return nullptr;
}

inline double as_double(const nlohmann::json& v) {
  return v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>()) : v.get<double>();
}

}  // namespace settings_detail

// A name of a kStringMap (trainer.env: an environment variable's): non-empty, without '=' or NUL,
// which execve would split or cut. What is wrong with `name`, or "" when it is fine. The config
// (with the key's file:line:col), check_setting and the command trainer all ask this.
inline std::string string_map_name_problem(std::string_view name) {
  if (name.empty()) return "an empty name";
  if (name.find('=') != std::string_view::npos) return "a name may not contain '=' (it would end the name)";
  if (name.find('\0') != std::string_view::npos) return "a name may not contain a NUL byte";
  return "";
}

// Checks `v` against `d` (type, bounds, choices) and returns it normalized (kInt as an integer,
// kFloat and kDuration as a double). kInvalidArgument with what it must be, alone: "must be in
// [0, 0.95]", "must be an integer", "must be one of relu, tanh, sigmoid"; the caller names the
// setting and the value in its own words (the config with file:line:col, a trainer with its kind).
inline Result<nlohmann::json> check_setting(const SettingDecl& d, const nlohmann::json& v) {
  using settings_detail::as_integer;
  auto bad = [](std::string what) { return err(Errc::kInvalidArgument, "must be " + std::move(what)); };
  auto bounded = [&](const nlohmann::json& x) -> Result<nlohmann::json> {
    if (!settings_detail::in_bounds(d, settings_detail::as_double(x))) return bad(setting_bounds_text(d));
    return x;
  };
  switch (d.type) {
    case SettingType::kInt: {
      const nlohmann::json i = as_integer(v);
      if (i.is_null()) return bad("an integer");
      return bounded(i);
    }
    case SettingType::kFloat:
    case SettingType::kDuration: {
      if (!v.is_number() || !std::isfinite(settings_detail::as_double(v)))
        return bad(d.type == SettingType::kDuration ? "a finite number of seconds" : "a finite number");
      return bounded(nlohmann::json(settings_detail::as_double(v)));
    }
    case SettingType::kBool:
      if (!v.is_boolean()) return bad("true or false");
      return v;
    case SettingType::kString: {
      if (!v.is_string()) return bad(d.choices.empty() ? "a string" : "one of " + join(d.choices, ", "));
      if (d.choices.empty()) return v;
      for (const auto& c : d.choices)
        if (c == v.get_ref<const std::string&>()) return v;
      return bad("one of " + join(d.choices, ", "));
    }
    case SettingType::kIntList: {
      const std::string each = setting_bounds_text(d);
      const std::string what = "an integer or a list of integers" + (each.empty() ? "" : ", each " + each);
      if (!v.is_array()) {
        const nlohmann::json i = as_integer(v);
        if (i.is_null() || !settings_detail::in_bounds(d, settings_detail::as_double(i))) return bad(what);
        return i;
      }
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : v) {
        const nlohmann::json i = as_integer(item);
        if (i.is_null() || !settings_detail::in_bounds(d, settings_detail::as_double(i))) return bad(what);
        out.push_back(i);
      }
      return out;
    }
    case SettingType::kValueList:
      // Empty only where the default is the empty list (a command trainer's provides: nothing), as
      // the config's table reads it (config/settings.cpp).
      if (!v.is_array() || (v.empty() && !(d.default_value.is_array() && d.default_value.empty())))
        return bad("a non-empty list");
      return v;
    case SettingType::kCommandLine: {
      const char* what = "a command line: a string, or a non-empty list of strings (run without a shell)";
      if (v.is_string()) {
        if (v.get_ref<const std::string&>().empty()) return bad(what);
        return v;
      }
      if (!v.is_array() || v.empty()) return bad(what);
      for (const auto& item : v)
        if (!item.is_string()) return bad(what);
      return v;
    }
    case SettingType::kStringMap:
      if (!v.is_object()) return bad("a map of names to strings");
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (const std::string problem = string_map_name_problem(it.key()); !problem.empty())
          return bad("a map of names to strings ('" + it.key() + "': " + problem + ")");
        if (!it.value().is_string() && !it.value().is_number() && !it.value().is_boolean())
          return bad("a map of names to strings ('" + it.key() + "' is not)");
      }
      return v;
  }
  return err(Errc::kInternal, "check_setting: unknown type");
}

// Checks `given` (an object, or null for "nothing set") against `decls` and returns an object
// with every declared key, defaults filled in. Errors are kConfig and start with the key
// ("mutation_rate: must be in [0, 1], got 1.5"; "mutaton_rate: unknown setting of genetic ...")
// so that the config layer can prefix the file:line:col of the key. (The search algorithms read
// their settings through it; the trainers through trainers::SettingsReader.)
inline Result<nlohmann::json> resolve_settings(std::string_view owner, const std::vector<SettingDecl>& decls,
                                               const nlohmann::json& given) {
  if (!given.is_null() && !given.is_object())
    return err(Errc::kConfig, std::string(owner) + ": settings must be a map");
  nlohmann::json out = nlohmann::json::object();
  if (given.is_object()) {
    for (auto it = given.begin(); it != given.end(); ++it) {
      bool known = false;
      for (const auto& d : decls) known = known || d.key == it.key();
      if (!known) {
        std::string valid;
        for (const auto& d : decls) valid += (valid.empty() ? "" : ", ") + d.key;
        return err(Errc::kConfig, it.key() + ": unknown setting of " + std::string(owner) + " (valid: " +
                                      (valid.empty() ? "none" : valid) + ")");
      }
    }
  }
  for (const auto& d : decls) {
    const bool set = given.is_object() && given.contains(d.key) && !given.at(d.key).is_null();
    if (!set) {
      out[d.key] = d.default_value;
      continue;
    }
    const nlohmann::json& v = given.at(d.key);
    auto checked = check_setting(d, v);
    if (!checked.ok()) {
      const std::string shown = v.is_number() ? format_number(settings_detail::as_double(v)) : v.dump();
      return err(Errc::kConfig, d.key + ": " + checked.error().message() + ", got " + shown);
    }
    out[d.key] = std::move(checked).value();
  }
  return out;
}

}  // namespace hpctune
