// The trials as CSV (csv.h).
#include "report/csv.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

#include "report/trial_json.h"

namespace hpctune::report {

namespace {

// What a spreadsheet reads as the start of a formula.
bool formula_start(char c) { return c == '=' || c == '+' || c == '-' || c == '@' || c == '\t' || c == '\r'; }

// A decimal number as a spreadsheet reads one: [+-]digits[.digits][e[+-]digits].
bool plain_number(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exp = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp;
    if (exp == 0) return false;
  }
  return i == s.size();
}

// A part of a cell where a spreadsheet may start a formula: the cell, or what follows a ';'.
void guard_part(std::string_view part, std::string& out) {
  if (!part.empty() && formula_start(part.front()) && !plain_number(part)) out += '\'';
  out += part;
}

std::string stage_of(const store::TrialRow& t, const std::vector<store::StageRow>* stages) {
  return stages == nullptr ? "" : stage_name(t, *stages);
}

// The keys of `part` of every trial's shown params, in order of appearance.
std::vector<std::string> keys_of(const std::vector<ShownParams>& shown, nlohmann::json ShownParams::*part) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& p : shown) {
    for (auto it = (p.*part).begin(); it != (p.*part).end(); ++it) {
      if (seen.insert(it.key()).second) out.push_back(it.key());
    }
  }
  return out;
}

std::string value_of(const nlohmann::json& object, const std::string& key) {
  return object.contains(key) ? csv_value(object[key]) : "";
}

std::string time_cell(double t) { return t > 0 ? csv_number(t) : std::string(); }

}  // namespace

std::string csv_field(std::string_view text) {
  std::string s;
  s.reserve(text.size() + 1);
  std::size_t from = 0;
  while (true) {
    const auto semi = text.find(';', from);
    guard_part(text.substr(from, semi == std::string_view::npos ? std::string_view::npos : semi - from), s);
    if (semi == std::string_view::npos) break;
    s += ';';
    from = semi + 1;
  }
  if (s.find_first_of(",;\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "" : (value > 0 ? "inf" : "-inf");
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(value);
}

std::string csv_value(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_number_float()) return csv_number(v.get<double>());
  if (v.is_number()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_string()) return csv_field(v.get<std::string>());
  return csv_field(v.dump());
}

std::string trials_csv(const std::vector<const store::TrialRow*>& trials, const TrialsCsvOptions& options) {
  std::vector<ShownParams> shown;
  shown.reserve(trials.size());
  for (const auto* t : trials) shown.push_back(shown_params(t->params, t->meta));
  const auto params = keys_of(shown, &ShownParams::params);
  const auto lineage = keys_of(shown, &ShownParams::lineage);
  const auto run_settings = keys_of(shown, &ShownParams::run_settings);
  std::vector<std::string> metrics;
  std::set<std::string> seen_m;
  for (const auto* t : trials) {
    if (t->metrics.is_object()) {
      for (auto it = t->metrics.begin(); it != t->metrics.end(); ++it) {
        if (seen_m.insert(it.key()).second) metrics.push_back(it.key());
      }
    }
  }
  std::ostringstream out;
  out << "trial,seq,stage,generation,state,attempt,group,created_at,started_at,finished_at,seconds,objective,step";
  if (options.pareto) out << ",pareto";
  for (const auto& p : params) out << "," << csv_field("params." + p);
  for (const auto& l : lineage) out << "," << csv_field("lineage." + l);
  for (const auto& r : run_settings) out << "," << csv_field("run_settings." + r);
  for (const auto& m : metrics) out << "," << csv_field("metrics." + m);
  out << ",error\n";
  for (size_t i = 0; i < trials.size(); ++i) {
    const store::TrialRow* t = trials[i];
    const double seconds = trial_seconds(*t);
    out << t->id << "," << t->seq << "," << csv_field(stage_of(*t, options.stages)) << "," << t->generation << ","
        << store::to_string(t->state) << "," << t->attempt << "," << t->group_id << "," << time_cell(t->created_at) << ","
        << time_cell(t->started_at) << "," << time_cell(t->finished_at) << "," << (seconds > 0 ? csv_number(seconds) : "")
        << "," << (t->objective ? csv_number(*t->objective) : "") << "," << t->step;
    if (options.pareto) out << "," << (options.pareto->count(t->id) ? 1 : 0);
    for (const auto& p : params) out << "," << value_of(shown[i].params, p);
    for (const auto& l : lineage) out << "," << value_of(shown[i].lineage, l);
    for (const auto& r : run_settings) out << "," << value_of(shown[i].run_settings, r);
    for (const auto& m : metrics) {
      out << "," << (t->metrics.is_object() && t->metrics.contains(m) ? csv_value(t->metrics[m]) : "");
    }
    out << "," << csv_field(t->error) << "\n";
  }
  return out.str();
}

std::string trials_csv(const std::vector<store::TrialRow>& trials, const TrialsCsvOptions& options) {
  std::vector<const store::TrialRow*> rows;
  rows.reserve(trials.size());
  for (const auto& t : trials) rows.push_back(&t);
  return trials_csv(rows, options);
}

}  // namespace hpctune::report
