// The trials and the Pareto front as tables (tables.h).
#include "report/tables.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "report/trial_json.h"

namespace hpctune::report {

namespace {

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return format_number(v.get<double>());
  return v.dump();
}

std::vector<std::string> param_names(const std::vector<store::TrialRow>& trials) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& t : trials) {
    if (!t.params.is_object()) continue;
    for (auto it = t.params.begin(); it != t.params.end(); ++it) {
      if (seen.insert(it.key()).second) names.push_back(it.key());
    }
  }
  return names;
}

}  // namespace

std::string trials_table(const std::vector<store::TrialRow>& trials, const std::string& metric,
                         const std::set<int64_t>* pareto) {
  return trials_table(trials, std::vector<std::string>{metric}, pareto);
}

std::string trials_table(const std::vector<store::TrialRow>& trials, const std::vector<std::string>& objectives,
                         const std::set<int64_t>* pareto) {
  const auto names = param_names(trials);
  std::vector<std::string> header = {"trial", "state", "attempt"};
  header.insert(header.end(), objectives.begin(), objectives.end());
  if (objectives.empty()) header.push_back("objective");
  if (pareto) header.push_back("pareto");
  header.insert(header.end(), names.begin(), names.end());
  header.push_back("seconds");
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : trials) {
    std::vector<std::string> r = {std::to_string(t.id), store::to_string(t.state), std::to_string(t.attempt),
                                  t.objective ? format_number(*t.objective) : "-"};
    // The first objective is the trial's recorded objective; the others are read from its metrics.
    for (size_t i = 1; i < objectives.size(); ++i) {
      const auto& m = objectives[i];
      r.push_back(t.metrics.is_object() && t.metrics.contains(m) && !t.metrics[m].is_null() ? cell(t.metrics[m]) : "-");
    }
    if (pareto) r.push_back(pareto->count(t.id) ? "*" : "");
    for (const auto& n : names) r.push_back(t.params.contains(n) ? cell(t.params[n]) : "");
    r.push_back(trial_seconds(t) > 0 ? format_number(std::round(trial_seconds(t) * 10) / 10) : "-");
    rows.push_back(std::move(r));
  }
  return format_table(header, rows);
}

std::string pareto_table(const std::vector<store::TrialRow>& trials, const std::set<int64_t>& front,
                         const std::vector<std::string>& metrics) {
  std::vector<store::TrialRow> members;
  for (const auto& t : trials) {
    if (front.count(t.id)) members.push_back(t);
  }
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  const auto names = param_names(members);
  std::vector<std::string> header = {"trial"};
  header.insert(header.end(), metrics.begin(), metrics.end());
  header.insert(header.end(), names.begin(), names.end());
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : members) {
    std::vector<std::string> r = {std::to_string(t.id)};
    for (const auto& m : metrics) r.push_back(t.metrics.is_object() && t.metrics.contains(m) ? cell(t.metrics[m]) : "-");
    for (const auto& n : names) r.push_back(t.params.contains(n) ? cell(t.params[n]) : "");
    rows.push_back(std::move(r));
  }
  return format_table(header, rows);
}

}  // namespace hpctune::report
