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

// The searched parameters' names (shown_params: not the keys hpctune adds), in order of appearance.
std::vector<std::string> param_names(const std::vector<ShownParams>& shown) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& p : shown) {
    for (auto it = p.params.begin(); it != p.params.end(); ++it) {
      if (seen.insert(it.key()).second) names.push_back(it.key());
    }
  }
  return names;
}

std::vector<ShownParams> shown_of(const std::vector<store::TrialRow>& trials) {
  std::vector<ShownParams> out;
  out.reserve(trials.size());
  for (const auto& t : trials) out.push_back(shown_params(t.params, t.meta));
  return out;
}

// The trial a trial started from: its lineage's source trial, else its parent (a transfer's source,
// an ensemble member's retrained trial); "" for none.
std::string from_cell(const store::TrialRow& t, const ShownParams& p) {
  if (p.lineage.contains("source_trial")) return cell(p.lineage["source_trial"]);
  return t.parent_trial_id ? std::to_string(*t.parent_trial_id) : "";
}

}  // namespace

std::string trials_table(const std::vector<store::TrialRow>& trials, const std::string& metric,
                         const std::set<int64_t>* pareto, const std::vector<store::StageRow>* stages) {
  return trials_table(trials, std::vector<std::string>{metric}, pareto, stages);
}

std::string trials_table(const std::vector<store::TrialRow>& trials, const std::vector<std::string>& objectives,
                         const std::set<int64_t>* pareto, const std::vector<store::StageRow>* stages) {
  const auto shown = shown_of(trials);
  const auto names = param_names(shown);
  const bool stage_column = stages != nullptr && stages->size() > 1;
  bool from_column = false;
  for (size_t i = 0; i < trials.size() && !from_column; ++i) from_column = !from_cell(trials[i], shown[i]).empty();
  std::vector<std::string> header = {"trial"};
  if (stage_column) header.push_back("stage");
  header.insert(header.end(), {"state", "attempt"});
  header.insert(header.end(), objectives.begin(), objectives.end());
  if (objectives.empty()) header.push_back("objective");
  if (pareto) header.push_back("pareto");
  header.insert(header.end(), names.begin(), names.end());
  if (from_column) header.push_back("from");
  header.push_back("seconds");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    std::vector<std::string> r = {std::to_string(t.id)};
    if (stage_column) r.push_back(stage_name(t, *stages));
    r.insert(r.end(), {store::to_string(t.state), std::to_string(t.attempt), t.objective ? format_number(*t.objective) : "-"});
    // The first objective is the trial's recorded objective; the others are read from its metrics.
    for (size_t k = 1; k < objectives.size(); ++k) {
      const auto& m = objectives[k];
      r.push_back(t.metrics.is_object() && t.metrics.contains(m) && !t.metrics[m].is_null() ? cell(t.metrics[m]) : "-");
    }
    if (pareto) r.push_back(pareto->count(t.id) ? "*" : "");
    const auto& params = shown[i].params;
    for (const auto& n : names) r.push_back(params.contains(n) ? cell(params[n]) : "");
    if (from_column) r.push_back(from_cell(t, shown[i]));
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
  const auto shown = shown_of(members);
  const auto names = param_names(shown);
  std::vector<std::string> header = {"trial"};
  header.insert(header.end(), metrics.begin(), metrics.end());
  header.insert(header.end(), names.begin(), names.end());
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < members.size(); ++i) {
    const auto& t = members[i];
    std::vector<std::string> r = {std::to_string(t.id)};
    for (const auto& m : metrics) r.push_back(t.metrics.is_object() && t.metrics.contains(m) ? cell(t.metrics[m]) : "-");
    for (const auto& n : names) r.push_back(shown[i].params.contains(n) ? cell(shown[i].params[n]) : "");
    rows.push_back(std::move(r));
  }
  return format_table(header, rows);
}

}  // namespace hpctune::report
