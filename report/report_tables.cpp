#include "report/report_tables.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace hpctune::report {

std::string format_number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char buf[64];
  const double a = std::fabs(value);
  if (a != 0 && (a < 1e-3 || a >= 1e6)) {
    std::snprintf(buf, sizeof(buf), "%.4g", value);
  } else if (value == std::floor(value) && a < 1e6) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4f", value);
  }
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>((total / 60) % 60), static_cast<long long>(total % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(total / 60), static_cast<long long>(total % 60));
  }
  return buf;
}

namespace {

bool numeric(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

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

nlohmann::json time_or_null(double t) { return t > 0 ? nlohmann::json(t) : nlohmann::json(nullptr); }

namespace {

double seconds_of(const store::TrialRow& t) {
  return (t.finished_at > 0 && t.started_at > 0) ? t.finished_at - t.started_at : 0.0;
}

}  // namespace

std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r, bool is_header) {
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string v = c < r.size() ? r[c] : "";
      const size_t pad = width[c] - v.size();
      const bool right = !is_header && numeric(v);
      if (c) out << "  ";
      if (right) out << std::string(pad, ' ') << v;
      else out << v << (c + 1 < width.size() ? std::string(pad, ' ') : "");
    }
    out << "\n";
  };
  line(header, true);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule, true);
  for (const auto& r : rows) line(r, false);
  return out.str();
}

std::vector<store::TrialRow> rank_trials(std::vector<store::TrialRow> trials, bool maximize) {
  std::stable_sort(trials.begin(), trials.end(), [&](const store::TrialRow& a, const store::TrialRow& b) {
    const bool ha = a.objective.has_value() && a.state != store::TrialState::kFailed;
    const bool hb = b.objective.has_value() && b.state != store::TrialState::kFailed;
    if (ha != hb) return ha;
    if (!ha) return a.id < b.id;
    return maximize ? *a.objective > *b.objective : *a.objective < *b.objective;
  });
  return trials;
}

std::optional<store::TrialRow> best_trial(const std::vector<store::TrialRow>& trials, bool maximize) {
  auto ranked = rank_trials(trials, maximize);
  if (ranked.empty() || !ranked.front().objective || ranked.front().state == store::TrialState::kFailed) {
    return std::nullopt;
  }
  return std::move(ranked.front());
}

std::optional<double> campaign_elapsed(const store::CampaignRow& campaign, double now) {
  if (campaign.created_at <= 0) return std::nullopt;
  return (campaign.finished_at > 0 ? campaign.finished_at : now) - campaign.created_at;
}

namespace {

// A member of the campaign's normalized config ("search", "max_trials"); null when absent.
nlohmann::json config_value(const nlohmann::json& config, const char* section, const char* key) {
  if (!config.is_object() || !config.contains(section) || !config[section].is_object()) return nullptr;
  const auto& s = config[section];
  return s.contains(key) ? s[key] : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json status_json(const CampaignStatus& st) {
  const auto& c = st.campaign;
  const auto elapsed = campaign_elapsed(c, st.now);
  nlohmann::json objectives = nlohmann::json::array();
  const auto& cj = c.config_json;
  if (cj.contains("objectives") && cj["objectives"].is_array()) {
    for (const auto& o : cj["objectives"]) {
      if (o.is_object()) objectives.push_back({{"metric", o.value("metric", "")}, {"mode", o.value("mode", "")}});
    }
  }
  nlohmann::json campaign = {{"name", c.name},
                             {"state", c.state},
                             {"seed", c.seed},
                             {"algorithm", config_value(cj, "search", "algorithm")},
                             {"objectives", std::move(objectives)},
                             {"created_at", time_or_null(c.created_at)},
                             {"finished_at", time_or_null(c.finished_at)},
                             {"elapsed_s", elapsed ? nlohmann::json(*elapsed) : nlohmann::json(nullptr)},
                             {"max_trials", config_value(cj, "search", "max_trials")}};
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : st.stages) {
    stages.push_back({{"id", s.id},
                      {"name", s.name},
                      {"kind", s.kind},
                      {"state", s.state},
                      {"created_at", time_or_null(s.created_at)},
                      {"finished_at", time_or_null(s.finished_at)}});
  }
  int64_t total = 0;
  nlohmann::json by_state = nlohmann::json::object();
  for (const auto& [state, n] : st.counts) {
    by_state[state] = n;
    total += n;
  }
  nlohmann::json out = {{"campaign", std::move(campaign)},
                        {"stages", std::move(stages)},
                        {"trials", {{"total", total}, {"by_state", std::move(by_state)}}},
                        {"attempts_lost", st.attempts_lost}};
  const std::string metric = st.objectives.empty() ? "objective" : st.objectives.front();
  if (auto b = best_trial(st.trials, st.maximize)) {
    out["best"] = {{"trial", b->id},         {"metric", metric},     {"objective", *b->objective},
                   {"attempt", b->attempt},  {"params", b->params},  {"metrics", b->metrics}};
  } else {
    out["best"] = nullptr;
  }
  if (st.front) out["pareto_front"] = *st.front;  // a set: ids in increasing order
  return out;
}

std::set<int64_t> recorded_pareto_front(const store::CampaignRow& campaign) {
  std::set<int64_t> out;
  const auto& s = campaign.search_state;
  if (!s.is_object() || !s.contains("pareto_front_trials") || !s["pareto_front_trials"].is_array()) return out;
  for (const auto& id : s["pareto_front_trials"]) {
    if (id.is_number_integer()) out.insert(id.get<int64_t>());
  }
  return out;
}

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
    r.push_back(seconds_of(t) > 0 ? format_number(std::round(seconds_of(t) * 10) / 10) : "-");
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

nlohmann::json trials_json(const std::vector<store::TrialRow>& trials, const std::set<int64_t>* pareto) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : trials) {
    nlohmann::json j = {{"trial", t.id},          {"seq", t.seq},          {"state", store::to_string(t.state)},
                        {"attempt", t.attempt},   {"group", t.group_id},   {"params", t.params},
                        {"metrics", t.metrics},   {"step", t.step},        {"created_at", t.created_at},
                        {"started_at", time_or_null(t.started_at)}, {"finished_at", time_or_null(t.finished_at)},
                        {"generation", t.generation}};
    j["seconds"] = seconds_of(t) > 0 ? nlohmann::json(seconds_of(t)) : nlohmann::json(nullptr);
    j["objective"] = t.objective ? nlohmann::json(*t.objective) : nlohmann::json(nullptr);
    if (!t.error.empty()) j["error"] = t.error;
    if (t.parent_trial_id) j["parent_trial"] = *t.parent_trial_id;
    if (pareto) j["pareto"] = pareto->count(t.id) > 0;
    out.push_back(std::move(j));
  }
  return out;
}

size_t display_width(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // one column per code point (no wide glyphs here)
  return n;
}

std::string truncate_display(const std::string& text, size_t width) {
  if (display_width(text) <= width) return text;
  size_t cols = 0, i = 0;
  for (; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) {
      if (cols == width) break;  // the next code point would not fit
      ++cols;
    }
  }
  return text.substr(0, i);
}

std::string progress_line(const scheduler::Progress& p, double elapsed_s, int width) {
  const int64_t finished = p.done + p.pruned + p.failed;
  const int64_t total = std::max<int64_t>(p.max_trials, 1);
  // Each field with its importance: when the line is too wide, the least important goes first
  // (the bar, then the queue, the pruned count, the elapsed time...), and what still does not
  // fit is cut at the width.
  struct Field {
    std::string text;
    int importance;  // higher stays longer
  };
  std::vector<Field> fields;
  char count[64];
  std::snprintf(count, sizeof(count), "[%*lld/%lld]", static_cast<int>(std::to_string(total).size()),
                static_cast<long long>(finished), static_cast<long long>(total));
  fields.push_back({count, 100});
  const int bar_width = width > 0 ? std::clamp(width - 100, 10, 30) : 30;
  const int filled = static_cast<int>(bar_width * std::min<double>(1.0, static_cast<double>(finished) / total));
  std::string bar;
  for (int i = 0; i < bar_width; ++i) bar += i < filled ? "█" : "░";
  fields.push_back({bar, 10});
  fields.push_back({"done " + std::to_string(p.done), 90});
  if (p.pruned) fields.push_back({"pruned " + std::to_string(p.pruned), 40});
  if (p.failed) fields.push_back({"failed " + std::to_string(p.failed), 80});
  fields.push_back({"running " + std::to_string(p.running), 70});
  fields.push_back({"queued " + std::to_string(p.queued), 20});
  if (p.best) fields.push_back({"best " + format_number(*p.best) + " (#" + std::to_string(p.best_trial) + ")", 60});
  fields.push_back({format_duration(elapsed_s), 30});
  if (finished > 0 && finished < total) {
    fields.push_back(
        {"ETA " + format_duration(elapsed_s / static_cast<double>(finished) * static_cast<double>(total - finished)), 50});
  }
  auto compose = [&] {
    std::string out;
    for (size_t i = 0; i < fields.size(); ++i) {
      // The bar and the count are set apart by a space, the others by " · ".
      if (i > 0) out += (i == 1 || fields[i - 1].importance == 10) ? " " : " · ";
      out += fields[i].text;
    }
    return out;
  };
  std::string line = compose();
  if (width <= 0) return line;  // not a terminal: no limit
  while (display_width(line) > static_cast<size_t>(width) && fields.size() > 1) {
    auto least = std::min_element(fields.begin(), fields.end(),
                                  [](const Field& a, const Field& b) { return a.importance < b.importance; });
    fields.erase(least);
    line = compose();
  }
  return truncate_display(line, static_cast<size_t>(width));
}

}  // namespace hpctune::report
