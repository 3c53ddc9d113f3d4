// The trials and the Pareto front as tables and CSV (tables.h).
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

// CSV is for machines: every number at full precision, the shortest text that reads back as the
// same double (as JSON does), not the 4 significant digits of the tables.
std::string csv_number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, end) : format_number(value);
}

// A time in seconds since the epoch, every digit; "" for 0 (not yet).
std::string csv_time(double t) { return t > 0 ? csv_number(t) : std::string(); }

std::string csv_cell(const nlohmann::json& v) {
  if (v.is_number_float()) return csv_number(v.get<double>());
  return cell(v);
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
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

std::string trials_csv(const std::vector<store::TrialRow>& trials, const std::set<int64_t>* pareto) {
  const auto names = param_names(trials);
  std::set<std::string> metric_set;
  for (const auto& t : trials) {
    if (t.metrics.is_object()) {
      for (auto it = t.metrics.begin(); it != t.metrics.end(); ++it) metric_set.insert(it.key());
    }
  }
  std::ostringstream out;
  out << "trial,seq,state,attempt,group,objective,step,started_at,finished_at";
  if (pareto) out << ",pareto";
  for (const auto& n : names) out << "," << csv_escape("param." + n);
  for (const auto& m : metric_set) out << "," << csv_escape("metric." + m);
  out << ",error\n";
  for (const auto& t : trials) {
    out << t.id << "," << t.seq << "," << store::to_string(t.state) << "," << t.attempt << "," << t.group_id << ","
        << (t.objective ? csv_number(*t.objective) : "") << "," << t.step << "," << csv_time(t.started_at)
        << "," << csv_time(t.finished_at);
    if (pareto) out << "," << (pareto->count(t.id) ? 1 : 0);
    for (const auto& n : names) out << "," << csv_escape(t.params.contains(n) ? csv_cell(t.params[n]) : "");
    for (const auto& m : metric_set) {
      out << "," << (t.metrics.is_object() && t.metrics.contains(m) ? csv_escape(csv_cell(t.metrics[m])) : "");
    }
    out << "," << csv_escape(t.error) << "\n";
  }
  return out.str();
}

}  // namespace hpctune::report
