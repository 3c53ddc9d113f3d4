#include "search/settings.h"
#include "search/space.h"

#include <cmath>
#include <cstdio>

#include "common/text.h"

namespace hpctune::search {

const char* setting_type_name(SettingType type) noexcept {
  switch (type) {
    case SettingType::kInt: return "int";
    case SettingType::kFloat: return "float";
    case SettingType::kBool: return "bool";
    case SettingType::kString: return "string";
  }
  return "unknown";
}

namespace {

std::string bounds_text(const SettingDecl& d) {
  const bool has_min = std::isfinite(d.min), has_max = std::isfinite(d.max);
  if (has_min && has_max) return "in [" + format_number(d.min) + ", " + format_number(d.max) + "]";
  if (has_min) return ">= " + format_number(d.min);
  return "<= " + format_number(d.max);
}

}  // namespace

Result<nlohmann::json> resolve_settings(std::string_view owner, const std::vector<SettingDecl>& decls,
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
    switch (d.type) {
      case SettingType::kInt: {
        double x = 0;
        if (v.is_number_integer()) x = static_cast<double>(v.get<int64_t>());
        else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) x = v.get<double>();
        else return err(Errc::kConfig, d.key + ": expected an integer, got " + v.dump());
        if (x < d.min || x > d.max) return err(Errc::kConfig, d.key + ": must be " + bounds_text(d) + ", got " + format_number(x));
        out[d.key] = static_cast<int64_t>(x);
        break;
      }
      case SettingType::kFloat: {
        if (!v.is_number()) return err(Errc::kConfig, d.key + ": expected a number, got " + v.dump());
        const double x = v.get<double>();
        if (!std::isfinite(x) || x < d.min || x > d.max)
          return err(Errc::kConfig, d.key + ": must be " + bounds_text(d) + ", got " + format_number(x));
        out[d.key] = x;
        break;
      }
      case SettingType::kBool:
        if (!v.is_boolean()) return err(Errc::kConfig, d.key + ": expected true or false, got " + v.dump());
        out[d.key] = v;
        break;
      case SettingType::kString: {
        if (!v.is_string()) return err(Errc::kConfig, d.key + ": expected a string, got " + v.dump());
        const auto s = v.get<std::string>();
        if (!d.choices.empty()) {
          bool ok = false;
          std::string valid;
          for (const auto& c : d.choices) {
            ok = ok || c == s;
            valid += (valid.empty() ? "" : ", ") + c;
          }
          if (!ok) return err(Errc::kConfig, d.key + ": '" + s + "' is not one of " + valid);
        }
        out[d.key] = s;
        break;
      }
    }
  }
  return out;
}

}  // namespace hpctune::search
