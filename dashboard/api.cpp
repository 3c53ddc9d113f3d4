// The dashboard's routes (api.h): parse the path and parameters, take the campaign's snapshot
// (snapshot.h), and build the JSON the CLI's views build. The chart routes are in charts.cpp.
#include "dashboard/api.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "common/clock.h"
#include "common/text.h"
#include "dashboard/route_helpers.h"
#include "dashboard/snapshot.h"
#include "report/campaign.h"
#include "report/csv.h"
#include "report/format.h"
#include "report/plots.h"
#include "report/stages.h"
#include "report/status.h"
#include "report/trial_detail.h"
#include "report/trial_json.h"

namespace hpctune::dashboard {

namespace detail {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

std::optional<int64_t> parse_int(const std::string& text, int64_t min, int64_t max) {
  const size_t digits_from = (min < 0 && !text.empty() && text[0] == '-') ? 1 : 0;
  if (text.size() <= digits_from || text.size() > 19 + digits_from ||
      text.find_first_not_of("0123456789", digits_from) != std::string::npos) {
    return std::nullopt;
  }
  // One spelling per number: "00", "007" and "-0" are not 0 and 7 (a route's campaign "00" would
  // otherwise be campaign 0 under a second name).
  if (text[digits_from] == '0' && (text.size() > digits_from + 1 || digits_from == 1)) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < min || v > max) return std::nullopt;
  return v;
}

Result<std::optional<std::string>> single_param(const QueryParams& params, const std::string& name) {
  auto [first, last] = params.equal_range(name);
  if (first == last) return std::optional<std::string>{};
  if (std::next(first) != last) return err(Errc::kInvalidArgument, name + ": given more than once");
  return std::optional<std::string>{first->second};
}

Result<int64_t> int_param(const QueryParams& params, const std::string& name, int64_t fallback, int64_t min,
                          int64_t max) {
  HPCTUNE_ASSIGN(auto text, single_param(params, name));
  if (!text) return fallback;
  auto v = parse_int(*text, min, max);
  if (!v) {
    return err(Errc::kInvalidArgument, name + ": '" + *text + "' is not an integer in " + std::to_string(min) + ".." +
                                           std::to_string(max));
  }
  return *v;
}

std::optional<ApiResponse> control_byte_param(const QueryParams& params) {
  for (const auto& [name, value] : params) {
    for (const std::string* text : {&name, &value}) {
      const auto at = std::find_if(text->begin(), text->end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      });
      if (at == text->end()) continue;
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(*at));
      return api_error(400, report::terminal_safe(name, true) + ": the " + (text == &name ? "name" : "value") +
                                " holds a control byte (" + hex + " at offset " + std::to_string(at - text->begin()) +
                                "); no parameter takes one");
    }
  }
  return std::nullopt;
}

std::optional<ApiResponse> unknown_param(const QueryParams& params, std::initializer_list<const char*> allowed) {
  for (const auto& param : params) {
    const std::string& name = param.first;  // a named variable: clang 14 cannot capture a structured binding
    if (name == "token") continue;
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return name == a; })) {
      std::vector<std::string> names(allowed.begin(), allowed.end());
      return api_error(400, name + ": unknown parameter (expected " + (names.empty() ? "none" : join(names, ", ")) + ")");
    }
  }
  return std::nullopt;
}

Result<Selection> select_trials(const Snapshot& snap, const QueryParams& params, bool all_by_default) {
  HPCTUNE_ASSIGN(auto stage, single_param(params, "stage"));
  Selection out;
  if (!stage) {
    out.trials = all_by_default ? snap.all_trials() : snap.main_trials();
    return out;
  }
  const store::StageRow* row = snap.stage(*stage);
  if (row == nullptr) {
    std::vector<std::string> names;
    for (const auto& s : snap.stages) names.push_back(s.name);
    return err(Errc::kInvalidArgument, "stage: no stage '" + *stage + "' (the stages: " +
                                           (names.empty() ? std::string("none") : join(names, ", ")) + ")");
  }
  out.stage = *stage;
  out.trials = snap.stage_trials(row->id);
  return out;
}

nlohmann::json objectives_json(const Snapshot& snap) {
  nlohmann::json out = nlohmann::json::array();
  const auto& cj = snap.campaign.config_json;
  if (cj.is_object() && cj.contains("objectives") && cj["objectives"].is_array()) {
    for (const auto& o : cj["objectives"]) {
      if (o.is_object()) out.push_back({{"metric", o.value("metric", "")}, {"mode", o.value("mode", "")}});
    }
  }
  if (out.empty()) {
    out.push_back({{"metric", snap.objectives.metric}, {"mode", snap.objectives.maximize ? "max" : "min"}});
  }
  return out;
}

const store::TrialRow* best_of(const std::vector<const store::TrialRow*>& trials, bool maximize) {
  const store::TrialRow* best = nullptr;
  for (const auto* t : trials) {
    if (!t->objective || std::isnan(*t->objective) || t->state == store::TrialState::kFailed) continue;
    if (!best || (maximize ? *t->objective > *best->objective : *t->objective < *best->objective)) best = t;
  }
  return best;
}

nlohmann::json stage_name(const Snapshot& snap, const store::TrialRow& t) {
  if (snap.stages.empty()) return nullptr;
  const int64_t id = t.stage_id == 0 ? snap.stages.front().id : t.stage_id;
  for (const auto& s : snap.stages) {
    if (s.id == id) return s.name;
  }
  return nullptr;
}

ApiResponse from_error(const Error& e) {
  const int status = e.code() == Errc::kNotFound ? 404 : e.code() == Errc::kInvalidArgument ? 400 : 500;
  return api_error(status, e.message());
}

static_assert(std::size(store::kTrialStates) == static_cast<size_t>(store::TrialState::kPaused) + 1,
              "counts are indexed by state");

nlohmann::json counts_by_state(const std::vector<const store::TrialRow*>& trials) {
  int64_t n[std::size(store::kTrialStates)] = {};
  for (const auto* t : trials) ++n[static_cast<size_t>(t->state)];
  nlohmann::json by_state = nlohmann::json::object();
  for (auto s : store::kTrialStates) by_state[store::to_string(s)] = n[static_cast<size_t>(s)];
  return by_state;
}

}  // namespace detail

namespace {

using json = nlohmann::json;
using namespace detail;

json config_value(const json& config, const char* section, const char* key) {
  if (!config.is_object() || !config.contains(section) || !config[section].is_object()) return nullptr;
  const auto& s = config[section];
  return s.contains(key) ? s[key] : json(nullptr);
}

// One database's entry of /api/campaigns.
json campaign_summary(size_t index, CampaignSource& source) {
  json out = {{"index", index}, {"file", std::filesystem::path(source.path()).filename().string()}};
  auto snap = source.snapshot();
  if (!snap.ok()) {
    out["error"] = snap.error().message();
    return out;
  }
  const Snapshot& s = **snap;
  const auto& c = s.campaign;
  const auto elapsed = report::campaign_elapsed(c, unix_now());
  out["name"] = c.name;
  // A campaign recorded running whose master is gone shows as interrupted, and so do its running
  // stages (report/status.h, report/stages.h).
  const report::MasterLiveness master = report::master_liveness(c, source.path(), unix_now());
  out["state"] = master.gone ? std::string("interrupted") : c.state;
  out["state_text"] = master.text;
  out["master"] = report::master_json(c, master);
  out["algorithm"] = config_value(c.config_json, "search", "algorithm");
  out["objectives"] = objectives_json(s);
  out["created_at"] = report::time_or_null(c.created_at);
  out["elapsed_s"] = opt_num(elapsed);
  out["max_trials"] = config_value(c.config_json, "search", "max_trials");
  const auto all = s.all_trials();
  out["trials"] = {{"total", all.size()}, {"by_state", counts_by_state(all)}};
  const auto* best = best_of(s.main_trials(), s.objectives.maximize);
  out["best"] = best ? json{{"trial", best->id}, {"objective", num(*best->objective)}} : json();
  out["version"] = s.version;
  out["simulated"] = s.simulated.is_null() ? json() : json(report::simulated_mark(s.simulated));
  json stages = json::array();
  for (const auto& st : s.stages)
    stages.push_back({{"name", st.name}, {"kind", st.kind}, {"state", report::shown_stage_state(st.state, master.gone)}});
  out["stages"] = std::move(stages);
  return out;
}

// `hpctune status --format json` from the snapshot (computed once per snapshot), its elapsed time
// as of now.
ApiResponse status(const Snapshot& s) {
  json out = s.status_json();
  const auto elapsed = report::campaign_elapsed(s.campaign, unix_now());
  if (out.contains("campaign") && out["campaign"].is_object()) {
    out["campaign"]["elapsed_s"] = opt_num(elapsed);
    // The master's liveness as of now: the snapshot does not change when a master dies.
    const report::MasterLiveness master = report::master_liveness(s.campaign, s.db_path, unix_now());
    out["campaign"]["state"] = master.gone ? std::string("interrupted") : s.campaign.state;
    out["campaign"]["master"] = report::master_json(s.campaign, master);
    if (out.contains("stages") && out["stages"].is_array()) {
      for (json& stage : out["stages"])
        if (stage.is_object() && stage.value("state", "") == "running")
          stage["state"] = report::shown_stage_state("running", master.gone);
    }
  }
  return {200, std::move(out)};
}

// A trial's value for a sort key: a number, a text, or none (missing). Built once per trial
// before sorting (no JSON per comparison: a sort of 10,000 trials stays a few milliseconds).
struct SortKey {
  enum Kind { kNumber, kText, kNone } kind = kNone;
  double number = 0;
  std::string text;
};

SortKey number_key(double v) { return std::isnan(v) ? SortKey{} : SortKey{SortKey::kNumber, v, {}}; }
SortKey time_key(double t) { return t > 0 ? number_key(t) : SortKey{}; }

SortKey sort_key(const store::TrialRow& t, const std::string& key) {
  if (key == "trial") return number_key(static_cast<double>(t.id));
  if (key == "seq") return number_key(static_cast<double>(t.seq));
  if (key == "state") return {SortKey::kText, 0, store::to_string(t.state)};
  if (key == "attempt") return number_key(static_cast<double>(t.attempt));
  if (key == "generation") return number_key(static_cast<double>(t.generation));
  if (key == "group") return number_key(static_cast<double>(t.group_id));
  if (key == "created_at") return time_key(t.created_at);
  if (key == "started_at") return time_key(t.started_at);
  if (key == "finished_at") return time_key(t.finished_at);
  if (key == "seconds") return t.finished_at > 0 ? number_key(report::trial_seconds(t)) : SortKey{};
  if (key == "objective") return t.objective ? number_key(*t.objective) : SortKey{};
  auto member = [&](const json& object, const std::string& name) -> SortKey {
    if (!object.is_object()) return {};
    auto it = object.find(name);
    if (it == object.end()) return {};
    if (it->is_boolean()) return number_key(it->get<bool>() ? 1.0 : 0.0);
    if (it->is_number()) return number_key(it->get<double>());
    if (it->is_string()) return {SortKey::kText, 0, it->get<std::string>()};
    return {};
  };
  if (key.rfind("params.", 0) == 0) return member(t.params, key.substr(7));
  if (key.rfind("metrics.", 0) == 0) return member(t.metrics, key.substr(8));
  return {};
}

bool known_sort(const std::string& key) {
  static const std::set<std::string> plain = {"trial",      "seq",         "state",   "attempt",   "created_at",
                                              "started_at", "finished_at", "seconds", "objective", "rank",
                                              "generation", "group"};
  if (plain.count(key)) return true;
  return (key.rfind("params.", 0) == 0 && key.size() > 7) || (key.rfind("metrics.", 0) == 0 && key.size() > 8);
}

// Sorts by `key`; values missing go last in either order; numbers before texts; ties keep id
// order (stable).
void sort_trials(std::vector<const store::TrialRow*>& trials, const std::string& key, bool descending) {
  std::vector<std::pair<SortKey, const store::TrialRow*>> keyed;
  keyed.reserve(trials.size());
  for (const auto* t : trials) keyed.emplace_back(sort_key(*t, key), t);
  std::stable_sort(keyed.begin(), keyed.end(), [descending](const auto& a, const auto& b) {
    const SortKey &x = a.first, &y = b.first;
    if (x.kind != y.kind) return x.kind < y.kind;  // numbers, then texts, then none
    if (x.kind == SortKey::kNumber) return descending ? x.number > y.number : x.number < y.number;
    if (x.kind == SortKey::kText) return descending ? x.text > y.text : x.text < y.text;
    return false;
  });
  for (size_t i = 0; i < keyed.size(); ++i) trials[i] = keyed[i].second;
}

// Best first by the objective (report/ranking.h's order): trials with an objective that did not
// fail, then the others in id order.
void rank(std::vector<const store::TrialRow*>& trials, bool maximize) {
  std::stable_sort(trials.begin(), trials.end(), [maximize](const auto* a, const auto* b) {
    const bool ha = a->objective.has_value() && !std::isnan(*a->objective) && a->state != store::TrialState::kFailed;
    const bool hb = b->objective.has_value() && !std::isnan(*b->objective) && b->state != store::TrialState::kFailed;
    if (ha != hb) return ha;
    if (!ha) return a->id < b->id;
    return maximize ? *a->objective > *b->objective : *a->objective < *b->objective;
  });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The parents of a trial (ids, lineage rows first, then the parent_trial column).
std::vector<int64_t> parents_of(const Snapshot& s, const store::TrialRow& t) {
  std::vector<int64_t> out;
  auto it = std::lower_bound(s.lineage.begin(), s.lineage.end(), t.id,
                             [](const store::LineageRow& l, int64_t id) { return l.child_trial_id < id; });
  for (; it != s.lineage.end() && it->child_trial_id == t.id; ++it) {
    if (std::find(out.begin(), out.end(), it->parent_trial_id) == out.end()) out.push_back(it->parent_trial_id);
  }
  if (t.parent_trial_id && std::find(out.begin(), out.end(), *t.parent_trial_id) == out.end()) {
    out.push_back(*t.parent_trial_id);
  }
  return out;
}

// A trial as the list shows it: report::trials_json's object plus stage and parents.
json trial_json(const Snapshot& s, const store::TrialRow& t) {
  json j = report::trials_json({t}, s.front())[0];
  j["stage"] = stage_name(s, t);
  j["parents"] = parents_of(s, t);
  if (j["objective"].is_number() && std::isnan(j["objective"].get<double>())) j["objective"] = nullptr;
  return j;
}

// The rows as CSV: the CLI's writer (report/csv.h), the same columns as `hpctune trials --format csv`.
ApiResponse trials_csv(const Snapshot& s, const std::vector<const store::TrialRow*>& rows) {
  report::TrialsCsvOptions options;
  options.pareto = s.front();
  options.stages = &s.stages;
  ApiResponse r;
  r.content_type = "text/csv; charset=utf-8";
  r.text = report::trials_csv(rows, options);
  // The file name is the campaign's name with anything but [A-Za-z0-9._-] replaced: it goes in a
  // header, quoted.
  std::string name = s.campaign.name.empty() ? "campaign" : s.campaign.name;
  for (char& c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  }
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + name + "-trials.csv\"");
  return r;
}

ApiResponse trials(const Snapshot& s, const QueryParams& params) {
  if (auto bad = unknown_param(params, {"offset", "limit", "sort", "order", "state", "stage", "generation", "q", "format"})) {
    return *bad;
  }
  auto offset = int_param(params, "offset", 0, 0, std::numeric_limits<int64_t>::max() / 2);
  if (!offset.ok()) return api_error(400, offset.error().message());
  auto limit = int_param(params, "limit", kDefaultPageLimit, 1, kMaxPageLimit);
  if (!limit.ok()) return api_error(400, limit.error().message());
  auto sort = single_param(params, "sort");
  if (!sort.ok()) return api_error(400, sort.error().message());
  const std::string key = sort->value_or("trial");
  if (!known_sort(key)) {
    return api_error(400, "sort: '" + key + "' is not one of trial, seq, state, attempt, generation, group, created_at, "
                                            "started_at, finished_at, seconds, objective, rank, params.<name>, metrics.<name>");
  }
  auto order = single_param(params, "order");
  if (!order.ok()) return api_error(400, order.error().message());
  const std::string dir = order->value_or("asc");
  if (dir != "asc" && dir != "desc") return api_error(400, "order: '" + dir + "' is not one of asc, desc");
  auto state = single_param(params, "state");
  if (!state.ok()) return api_error(400, state.error().message());
  std::set<store::TrialState> states;
  if (*state) {
    for (const auto& name : split(**state, ',')) {
      auto st = store::trial_state_from_string(name);
      if (!st) {
        std::vector<std::string> names;
        for (auto k : store::kTrialStates) names.push_back(store::to_string(k));
        return api_error(400, "state: '" + name + "' is not one of " + join(names, ", "));
      }
      states.insert(*st);
    }
  }
  auto generation = single_param(params, "generation");
  if (!generation.ok()) return api_error(400, generation.error().message());
  std::optional<int64_t> gen;
  if (*generation) {
    gen = parse_int(**generation, 0, std::numeric_limits<int64_t>::max());
    if (!gen) return api_error(400, "generation: '" + **generation + "' is not an integer >= 0");
  }
  auto q = single_param(params, "q");
  if (!q.ok()) return api_error(400, q.error().message());
  if (*q && (*q)->size() > 200) return api_error(400, "q: at most 200 characters");
  const std::string needle = lower(q->value_or(""));
  auto format = single_param(params, "format");
  if (!format.ok()) return api_error(400, format.error().message());
  const std::string fmt = format->value_or("json");
  if (fmt != "json" && fmt != "csv") return api_error(400, "format: '" + fmt + "' is not one of json, csv");
  auto sel = select_trials(s, params, /*all_by_default=*/true);
  if (!sel.ok()) return from_error(sel.error());

  std::vector<const store::TrialRow*> rows;
  for (const auto* t : sel->trials) {
    if (!states.empty() && !states.count(t->state)) continue;
    if (gen && t->generation != *gen) continue;
    if (!needle.empty()) {
      if (s.search_text(*t).find(needle) == std::string::npos) continue;
    }
    rows.push_back(t);
  }
  if (key == "rank") {
    rank(rows, s.objectives.maximize);
    if (dir == "desc") std::reverse(rows.begin(), rows.end());
  } else {
    sort_trials(rows, key, dir == "desc");
  }
  if (fmt == "csv") return trials_csv(s, rows);
  const int64_t total = static_cast<int64_t>(rows.size());
  const int64_t first = std::min(*offset, total);
  const int64_t last = std::min(first + *limit, total);
  json page = json::array();
  for (int64_t i = first; i < last; ++i) page.push_back(trial_json(s, *rows[static_cast<size_t>(i)]));
  json stage_names = json::array();  // what the stage filter offers
  for (const auto& st : s.stages) stage_names.push_back(st.name);
  return {200, {{"total", total},
                {"stages", std::move(stage_names)},
                {"offset", *offset},
                {"limit", *limit},
                {"sort", key},
                {"order", dir},
                {"trials", std::move(page)}}};
}

ApiResponse trial(const Snapshot& s, CampaignSource& source, const std::string& id_text, const QueryParams& params) {
  auto id = parse_int(id_text, 1, std::numeric_limits<int64_t>::max());
  if (!id) return api_error(404, "no trial '" + id_text + "' (trial ids are integers from 1)");
  if (auto bad = unknown_param(params, {"lines"})) return *bad;
  auto lines = int_param(params, "lines", 20, 0, 1000);
  if (!lines.ok()) return api_error(400, lines.error().message());
  const store::TrialRow* row = s.find(*id);
  if (row == nullptr) {
    return api_error(404, "campaign '" + s.campaign.name + "' has no trial " + std::to_string(*id) + " (its trials: " +
                              (s.trials.empty() ? std::string("none")
                                                : std::to_string(s.trials.front()->id) + ".." +
                                                      std::to_string(s.trials.back()->id)) + ")");
  }
  report::TrialDetail d;
  d.trial = *row;
  std::vector<store::LineageRow> children;
  auto read = source.with_store([&](store::Store& db) -> Status {
    // One read transaction: the trial's rows as of one commit.
    HPCTUNE_TRY(db.begin_read());
    struct End {
      store::Store& db;
      ~End() { (void)db.rollback(); }
    } end{db};
    HPCTUNE_ASSIGN(d.metrics, db.metrics(d.trial.id));
    HPCTUNE_ASSIGN(d.attempts, db.attempts(d.trial.id));
    HPCTUNE_ASSIGN(d.artifacts, db.artifacts(d.trial.id));
    HPCTUNE_ASSIGN(d.events, db.trial_events(d.trial.id));
    HPCTUNE_ASSIGN(d.sync_mode, db.sync_mode(d.trial.id));
    HPCTUNE_ASSIGN(children, db.lineage_children(d.trial.id));
    return Status::Ok();
  });
  if (!read.ok()) return from_error(read.error());
  d.logs = report::trial_logs(s.db_path, d.trial.id, d.artifacts);
  report::CampaignView view;  // trial_detail_json reads only the objectives, the front and db_path (logs)
  view.db_path = s.db_path;
  view.objectives = s.objectives;
  view.pareto = s.pareto;
  json j = report::trial_detail_json(d, view, *lines);
  if (j["objective"].is_number() && std::isnan(j["objective"].get<double>())) j["objective"] = nullptr;
  j["stage"] = stage_name(s, *row);
  j["parents"] = parents_of(s, *row);
  json parents = json::array(), kids = json::array();
  auto it = std::lower_bound(s.lineage.begin(), s.lineage.end(), row->id,
                             [](const store::LineageRow& l, int64_t v) { return l.child_trial_id < v; });
  bool column_listed = false;
  for (; it != s.lineage.end() && it->child_trial_id == row->id; ++it) {
    parents.push_back({{"trial", it->parent_trial_id}, {"relation", it->relation}});
    column_listed = column_listed || (row->parent_trial_id && *row->parent_trial_id == it->parent_trial_id);
  }
  if (row->parent_trial_id && !column_listed) parents.push_back({{"trial", *row->parent_trial_id}, {"relation", "parent"}});
  for (const auto& c : children) kids.push_back({{"trial", c.child_trial_id}, {"relation", c.relation}});
  // Children recorded only in the parent_trial column (a pbt member continued from another).
  for (const auto& t : s.trials) {
    if (t->parent_trial_id && *t->parent_trial_id == row->id &&
        std::none_of(children.begin(), children.end(), [&](const auto& c) { return c.child_trial_id == t->id; })) {
      kids.push_back({{"trial", t->id}, {"relation", "parent"}});
    }
  }
  // Beside trials_json's lineage from the params (source_trial, source_checkpoint).
  j["lineage"]["parents"] = std::move(parents);
  j["lineage"]["children"] = std::move(kids);
  return {200, std::move(j)};
}

}  // namespace

ApiResponse api_error(int status, const std::string& message) { return {status, {{"error", message}}}; }

Api::Api(std::vector<std::string> databases, std::chrono::milliseconds check_every) {
  for (auto& db : databases) sources_.push_back(std::make_unique<CampaignSource>(std::move(db), &counter_, check_every));
}

Api::~Api() = default;

Status Api::load() {
  for (auto& source : sources_) {
    auto snap = source->snapshot();
    if (!snap.ok()) return err(snap.error().code(), "'" + source->path() + "': " + snap.error().message());
  }
  return Status::Ok();
}

ApiResponse Api::get(const std::string& path, const QueryParams& params) {
  if (path.empty() || path[0] != '/') return api_error(404, "not found");
  if (auto bad = control_byte_param(params)) return *bad;
  const auto parts = split(path.substr(1), '/');
  for (const auto& p : parts) {
    // Nothing is served by file name, but a path that tries to climb is never a route.
    if (p == ".." || p == ".") return api_error(404, "not found: the path may not contain '.' or '..' segments");
  }
  auto not_found = [&] { return api_error(404, "not found: " + path); };
  if (parts.size() == 2 && parts[0] == "api" && parts[1] == "changes") {
    if (auto bad = unknown_param(params, {"since"})) return *bad;
    auto since = int_param(params, "since", 0, 0, std::numeric_limits<int64_t>::max());
    if (!since.ok()) return api_error(400, since.error().message());
    json list = json::array();
    for (size_t i = 0; i < sources_.size(); ++i) {
      json c = {{"index", i}};
      auto snap = sources_[i]->snapshot();  // checks for changes (cheap when none)
      if (snap.ok()) {
        c["version"] = (*snap)->version;
        c["state"] = (*snap)->campaign.state;
      } else {
        c["version"] = sources_[i]->version();
        c["state"] = nullptr;
        c["error"] = snap.error().message();
      }
      list.push_back(std::move(c));
    }
    return {200, {{"version", counter_.load()}, {"since", *since}, {"campaigns", std::move(list)}}};
  }
  if (parts.size() < 2 || parts[0] != "api" || parts[1] != "campaigns") return not_found();
  if (parts.size() == 2) {
    if (auto bad = unknown_param(params, {})) return *bad;
    json list = json::array();
    for (size_t i = 0; i < sources_.size(); ++i) list.push_back(campaign_summary(i, *sources_[i]));
    return {200, {{"campaigns", std::move(list)}}};
  }
  auto index = parse_int(parts[2], 0, static_cast<int64_t>(sources_.size()) - 1);
  if (sources_.empty() || !index) {
    return api_error(404, "no campaign '" + parts[2] + "' (" + std::to_string(sources_.size()) + " served, from 0)");
  }
  if (parts.size() < 4 || parts.size() > 5 || (parts.size() == 5 && parts[3] != "trials")) return not_found();
  static const std::set<std::string> routes = {"status",     "overview", "trials", "history", "generations", "params",
                                               "importance", "curves",   "pareto", "timeline", "stages"};
  if (!routes.count(parts[3])) return not_found();
  CampaignSource& source = *sources_[static_cast<size_t>(*index)];
  auto snap = source.snapshot();
  // A served database that cannot be read (deleted, corrupt, no campaign any more): 500, not 404.
  if (!snap.ok()) return api_error(500, source.path() + ": " + snap.error().message());
  const Snapshot& s = **snap;
  const std::string& route = parts[3];
  if (parts.size() == 5) return trial(s, source, parts[4], params);
  if (route == "status") {
    if (auto bad = unknown_param(params, {})) return *bad;
    return status(s);
  }
  if (route == "trials") return trials(s, params);
  if (route == "overview") return overview(s, params);
  if (route == "history") return history(s, params);
  if (route == "generations") return generations(s, params);
  if (route == "params") return params_view(s, params);
  if (route == "importance") return importance(s, params);
  if (route == "curves") return curves(s, source, params);
  if (route == "pareto") return pareto(s, params);
  if (route == "timeline") return timeline(s, params);
  return stages(s, params);
}

ApiResponse handle_get(const std::vector<std::string>& databases, const std::string& path, const QueryParams& params) {
  Api api(databases, std::chrono::milliseconds(0));
  return api.get(path, params);
}

Result<std::vector<std::string>> expand_databases(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& arg : args) {
    std::error_code ec;
    const auto st = fs::status(arg, ec);
    if (ec || !fs::exists(st)) return err(Errc::kUsage, "'" + arg + "': no such file or directory");
    if (!fs::is_directory(st)) {
      out.push_back(arg);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(arg, ec)) {
      if (entry.path().extension() == ".db" && entry.is_regular_file(ec)) found.push_back(entry.path().string());
    }
    if (ec) return err(Errc::kUsage, "'" + arg + "': cannot list the directory: " + ec.message());
    if (found.empty()) return err(Errc::kUsage, "'" + arg + "': the directory holds no *.db file");
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  if (out.empty()) return err(Errc::kUsage, "no database given");
  return out;
}

Result<ServedDatabases> databases_to_serve(const std::vector<std::string>& args, bool allow_other_owners) {
  namespace fs = std::filesystem;
  ServedDatabases out;
  for (const auto& arg : args) {
    std::error_code ec;
    const bool directory = fs::is_directory(arg, ec);
    HPCTUNE_ASSIGN(std::vector<std::string> found, expand_databases({arg}));
    if (!directory) {
      out.databases.insert(out.databases.end(), found.begin(), found.end());
      continue;
    }
    for (const std::string& db : found) {
      struct stat st {};
      if (::stat(db.c_str(), &st) != 0) {
        out.skipped.emplace_back(db, std::string("cannot stat: ") + std::strerror(errno));
        continue;
      }
      if (!allow_other_owners && st.st_uid != ::geteuid()) {
        out.skipped.emplace_back(db, "owned by user " + std::to_string(st.st_uid) + " (--allow-other-owners serves it)");
        continue;
      }
      Api probe({db});
      if (auto loaded = probe.load(); !loaded.ok()) {
        out.skipped.emplace_back(db, loaded.error().message());
        continue;
      }
      out.databases.push_back(db);
    }
  }
  if (out.databases.empty()) {
    std::string why;
    for (const auto& [db, reason] : out.skipped) why += "\n  " + db + ": " + reason;
    return err(Errc::kUsage, "no database to serve" + (why.empty() ? std::string() : ":" + why));
  }
  return out;
}

}  // namespace hpctune::dashboard
