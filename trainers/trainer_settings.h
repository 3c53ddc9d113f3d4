// Trainer settings: one declaration per setting, and typed readers that check it.
//
// Each built-in trainer declares its settings (name, type, default, help) in a table beside its
// code (mlp_trainer.h, sleep_trainer.h). The trainer reads ctx.settings() through that table, so an
// unknown key (a misspelled searched parameter would otherwise be ignored silently for a whole
// campaign) and every bad value come back as kInvalidArgument naming the setting. These tables are
// NOT yet the config's: the config layer declares the same settings again in its own table
// (config/settings.cpp, `trainer.*`), and test_config_trainer_sync checks that the two agree
// (trainer_setting_specs(), trainer_factory.cpp, hands these tables to it).
//
// Header-only on purpose: small, and shared by every trainer kind.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::trainers {

struct SettingSpec {
  const char* name;
  const char* type;             // "int", "float", "bool", "string", "int|list[int]"
  nlohmann::json default_value;  // null: no default (documented in help)
  const char* help;
};

// The settings table of a trainer kind; kInvalidArgument listing the kinds when unknown.
Result<const std::vector<SettingSpec>*> trainer_setting_specs(const std::string& kind);

namespace settings_detail {

inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

inline const SettingSpec* find(std::span<const SettingSpec> specs, std::string_view name) {
  for (const auto& spec : specs)
    if (name == spec.name) return &spec;
  return nullptr;
}

}  // namespace settings_detail

// Reads typed settings of one trainer kind from a settings object, with the table's defaults.
class SettingsReader {
 public:
  SettingsReader(std::string kind, const nlohmann::json& settings, std::span<const SettingSpec> specs)
      : kind_(std::move(kind)), settings_(settings), specs_(specs) {}

  // kInvalidArgument for a key that is neither "kind" nor declared, with a "did you mean".
  Status check_known() const {
    if (!settings_.is_object()) return err(Errc::kInvalidArgument, kind_ + " trainer: settings must be an object");
    for (auto it = settings_.begin(); it != settings_.end(); ++it) {
      if (it.key() == "kind" || settings_detail::find(specs_, it.key()) != nullptr) continue;
      std::string message = kind_ + " trainer: unknown setting '" + it.key() + "'";
      const SettingSpec* best = nullptr;
      size_t best_distance = 3;  // suggest only close names
      for (const auto& spec : specs_) {
        const size_t d = settings_detail::edit_distance(it.key(), spec.name);
        if (d < best_distance) best_distance = d, best = &spec;
      }
      if (best != nullptr) message += ", did you mean '" + std::string(best->name) + "'?";
      else message += " (known: " + known_names() + ")";
      return err(Errc::kInvalidArgument, std::move(message));
    }
    return Status::Ok();
  }

  // The value of `name`, or its declared default; null when neither exists.
  const nlohmann::json& raw(const char* name) const {
    static const nlohmann::json kNull;
    if (settings_.is_object()) {
      auto it = settings_.find(name);
      if (it != settings_.end()) return *it;
    }
    const SettingSpec* spec = settings_detail::find(specs_, name);
    return spec != nullptr ? spec->default_value : kNull;
  }
  bool has(const char* name) const { return settings_.is_object() && settings_.contains(name); }

  Result<double> number(const char* name, double lo = -std::numeric_limits<double>::infinity(),
                        double hi = std::numeric_limits<double>::infinity()) const {
    const auto& v = raw(name);
    if (!v.is_number()) return bad(name, v, "a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) return bad(name, v, range_text(lo, hi));
    return x;
  }

  // Integers; an integral float (256.0, as a float search may produce) is accepted.
  Result<int64_t> integer(const char* name, int64_t lo = std::numeric_limits<int64_t>::min(),
                          int64_t hi = std::numeric_limits<int64_t>::max()) const {
    return integer_value(name, raw(name), lo, hi);
  }

  Result<int64_t> integer_value(const char* name, const nlohmann::json& v, int64_t lo, int64_t hi) const {
    int64_t x = 0;
    if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
               std::fabs(v.get<double>()) < 9.0e15) {
      x = static_cast<int64_t>(v.get<double>());
    } else {
      return bad(name, v, "an integer");
    }
    if (x < lo || x > hi) return bad(name, v, range_text(static_cast<double>(lo), static_cast<double>(hi)));
    return x;
  }

  Result<bool> boolean(const char* name) const {
    const auto& v = raw(name);
    if (!v.is_boolean()) return bad(name, v, "true or false");
    return v.get<bool>();
  }

  Result<std::string> string(const char* name) const {
    const auto& v = raw(name);
    if (!v.is_string()) return bad(name, v, "a string");
    return v.get<std::string>();
  }

  // kInvalidArgument "<kind> trainer: setting 'name' = <value>: <what>".
  Error bad(const char* name, const nlohmann::json& v, const std::string& what) const {
    return err(Errc::kInvalidArgument, kind_ + " trainer: setting '" + name + "' = " + v.dump() + ": must be " + what);
  }

  const std::string& kind() const { return kind_; }

 private:
  static std::string range_text(double lo, double hi) {
    auto fmt = [](double x) {
      nlohmann::json j = x;
      if (std::floor(x) == x && std::fabs(x) < 1e15) j = static_cast<int64_t>(x);
      return j.dump();
    };
    const bool has_lo = std::isfinite(lo) && lo > -9.0e18;
    const bool has_hi = std::isfinite(hi) && hi < 9.0e18;
    if (has_lo && has_hi) return "in [" + fmt(lo) + ", " + fmt(hi) + "]";
    if (has_lo) return ">= " + fmt(lo);
    if (has_hi) return "<= " + fmt(hi);
    return "finite";
  }
  std::string known_names() const {
    std::string out;
    for (const auto& spec : specs_) out += (out.empty() ? "" : ", ") + std::string(spec.name);
    return out;
  }

  std::string kind_;
  const nlohmann::json& settings_;
  std::span<const SettingSpec> specs_;
};

}  // namespace hpctune::trainers
