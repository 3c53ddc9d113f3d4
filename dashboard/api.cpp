// The dashboard's routes (api.h): parse the path and parameters, open the campaign read-only
// through report/, and build the JSON the CLI's views build.
#include "dashboard/api.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>

#include "common/clock.h"
#include "common/text.h"
#include "report/campaign.h"
#include "report/ranking.h"
#include "report/status.h"
#include "report/trial_detail.h"
#include "report/trial_json.h"

namespace hpctune::dashboard {

namespace {

using json = nlohmann::json;

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

// A decimal integer in [min, max] (digits only), else nullopt.
std::optional<int64_t> parse_int(const std::string& text, int64_t min, int64_t max) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < min || v > max) return std::nullopt;
  return v;
}

// The one value of parameter `name` ("" when absent); a 400 when it is given more than once.
Result<std::optional<std::string>> single_param(const std::multimap<std::string, std::string>& params,
                                                const std::string& name) {
  auto [first, last] = params.equal_range(name);
  if (first == last) return std::optional<std::string>{};
  if (std::next(first) != last) return err(Errc::kInvalidArgument, name + ": given more than once");
  return std::optional<std::string>{first->second};
}

Result<int64_t> int_param(const std::multimap<std::string, std::string>& params, const std::string& name,
                          int64_t fallback, int64_t min, int64_t max) {
  HPCTUNE_ASSIGN(auto text, single_param(params, name));
  if (!text) return fallback;
  auto v = parse_int(*text, min, max);
  if (!v) {
    return err(Errc::kInvalidArgument, name + ": '" + *text + "' is not an integer in " + std::to_string(min) + ".." +
                                           std::to_string(max));
  }
  return *v;
}

// The HTTP status of an error of report/: a missing campaign or trial is 404, the rest 500.
ApiResponse from_error(const Error& e) {
  return api_error(e.code() == Errc::kNotFound ? 404 : 500, e.message());
}

// A trial's value for a sort key: a number, a string, or null when it has none.
json sort_value(const store::TrialRow& t, const std::string& key) {
  if (key == "trial") return t.id;
  if (key == "seq") return t.seq;
  if (key == "state") return store::to_string(t.state);
  if (key == "attempt") return t.attempt;
  if (key == "created_at") return report::time_or_null(t.created_at);
  if (key == "started_at") return report::time_or_null(t.started_at);
  if (key == "finished_at") return report::time_or_null(t.finished_at);
  if (key == "seconds") return t.finished_at > 0 ? json(report::trial_seconds(t)) : json();
  if (key == "objective") return t.objective ? json(*t.objective) : json();
  auto member = [&](const json& object, const std::string& name) -> json {
    if (!object.is_object()) return json();
    auto it = object.find(name);
    if (it == object.end() || !(it->is_number() || it->is_string() || it->is_boolean())) return json();
    return *it;
  };
  if (key.rfind("params.", 0) == 0) return member(t.params, key.substr(7));
  if (key.rfind("metrics.", 0) == 0) return member(t.metrics, key.substr(8));
  return json();
}

bool known_sort(const std::string& key) {
  static const std::set<std::string> plain = {"trial",       "seq",      "state",   "attempt",  "created_at",
                                              "started_at",  "finished_at", "seconds", "objective", "rank"};
  if (plain.count(key)) return true;
  return (key.rfind("params.", 0) == 0 && key.size() > 7) || (key.rfind("metrics.", 0) == 0 && key.size() > 8);
}

// Sorts by `key`; values missing (null) go last in either order; numbers before strings; ties keep
// id order (stable).
void sort_trials(std::vector<store::TrialRow>& trials, const std::string& key, bool descending) {
  std::vector<std::pair<json, store::TrialRow>> keyed;
  keyed.reserve(trials.size());
  for (auto& t : trials) keyed.emplace_back(sort_value(t, key), std::move(t));
  std::stable_sort(keyed.begin(), keyed.end(), [descending](const auto& a, const auto& b) {
    const json &x = a.first, &y = b.first;
    if (x.is_null() || y.is_null()) return !x.is_null() && y.is_null();
    const bool xn = x.is_number() || x.is_boolean(), yn = y.is_number() || y.is_boolean();
    if (xn != yn) return xn;  // numbers first
    if (xn) {
      const double dx = x.is_boolean() ? double(x.get<bool>()) : x.get<double>();
      const double dy = y.is_boolean() ? double(y.get<bool>()) : y.get<double>();
      return descending ? dx > dy : dx < dy;
    }
    return descending ? x.get<std::string>() > y.get<std::string>() : x.get<std::string>() < y.get<std::string>();
  });
  trials.clear();
  for (auto& [k, t] : keyed) trials.push_back(std::move(t));
}

// One database's entry of /api/campaigns: the summary of its status, or its error.
json campaign_summary(size_t index, const std::string& db) {
  json out = {{"index", index}, {"file", std::filesystem::path(db).filename().string()}};
  auto view = report::open_campaign(db);
  if (!view.ok()) {
    out["error"] = view.error().message();
    return out;
  }
  auto st = report::campaign_status(*view, unix_now());
  if (!st.ok()) {
    out["error"] = st.error().message();
    return out;
  }
  const json s = report::status_json(*st);
  const json& c = s["campaign"];
  out["name"] = c["name"];
  out["state"] = c["state"];
  out["algorithm"] = c.value("algorithm", json());
  out["objectives"] = c.value("objectives", json());
  out["created_at"] = c.value("created_at", json());
  out["elapsed_s"] = c.value("elapsed_s", json());
  out["max_trials"] = c.value("max_trials", json());
  out["trials"] = s["trials"];
  const json& best = s["best"];
  out["best"] = best.is_null() ? json() : json{{"trial", best["trial"]}, {"objective", best["objective"]}};
  return out;
}

ApiResponse campaigns(const std::vector<std::string>& databases) {
  json list = json::array();
  for (size_t i = 0; i < databases.size(); ++i) list.push_back(campaign_summary(i, databases[i]));
  return {200, {{"campaigns", std::move(list)}}};
}

ApiResponse status(const std::string& db) {
  auto view = report::open_campaign(db);
  if (!view.ok()) return from_error(view.error());
  auto st = report::campaign_status(*view, unix_now());
  if (!st.ok()) return from_error(st.error());
  return {200, report::status_json(*st)};
}

ApiResponse trials(const std::string& db, const std::multimap<std::string, std::string>& params) {
  static const std::set<std::string> known = {"offset", "limit", "sort", "order", "state", "token"};
  for (const auto& [name, value] : params) {
    if (!known.count(name)) return api_error(400, name + ": unknown parameter (expected offset, limit, sort, order, state)");
  }
  auto offset = int_param(params, "offset", 0, 0, std::numeric_limits<int64_t>::max() / 2);
  if (!offset.ok()) return api_error(400, offset.error().message());
  auto limit = int_param(params, "limit", kDefaultPageLimit, 1, kMaxPageLimit);
  if (!limit.ok()) return api_error(400, limit.error().message());
  auto sort = single_param(params, "sort");
  if (!sort.ok()) return api_error(400, sort.error().message());
  const std::string key = sort->value_or("trial");
  if (!known_sort(key)) {
    return api_error(400, "sort: '" + key + "' is not one of trial, seq, state, attempt, created_at, started_at, "
                                            "finished_at, seconds, objective, rank, params.<name>, metrics.<name>");
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
      auto s = store::trial_state_from_string(name);
      if (!s) {
        std::vector<std::string> names;
        for (auto k : store::kTrialStates) names.push_back(store::to_string(k));
        return api_error(400, "state: '" + name + "' is not one of " + join(names, ", "));
      }
      states.insert(*s);
    }
  }

  auto view = report::open_campaign(db);
  if (!view.ok()) return from_error(view.error());
  std::vector<store::TrialRow> rows;
  for (const auto& t : view->trials) {
    if (states.empty() || states.count(t.state)) rows.push_back(t);
  }
  if (key == "rank") {
    // Best first by the objective (report/ranking.h); desc = worst first.
    rows = report::rank_trials(std::move(rows), view->objectives.maximize);
    if (dir == "desc") std::reverse(rows.begin(), rows.end());
  } else {
    sort_trials(rows, key, dir == "desc");
  }
  const int64_t total = static_cast<int64_t>(rows.size());
  const int64_t first = std::min(*offset, total);
  const int64_t last = std::min(first + *limit, total);
  std::vector<store::TrialRow> page(rows.begin() + first, rows.begin() + last);
  return {200, {{"total", total},
                {"offset", *offset},
                {"limit", *limit},
                {"sort", key},
                {"order", dir},
                {"trials", report::trials_json(page, view->front())}}};
}

ApiResponse trial(const std::string& db, const std::string& id_text, const std::multimap<std::string, std::string>& params) {
  auto id = parse_int(id_text, 1, std::numeric_limits<int64_t>::max());
  if (!id) return api_error(404, "no trial '" + id_text + "' (trial ids are integers from 1)");
  for (const auto& [name, value] : params) {
    if (name != "lines" && name != "token") return api_error(400, name + ": unknown parameter (expected lines)");
  }
  auto lines = int_param(params, "lines", 20, 0, 1000);
  if (!lines.ok()) return api_error(400, lines.error().message());
  auto view = report::open_campaign(db);
  if (!view.ok()) return from_error(view.error());
  auto detail = report::load_trial(*view, *id);
  if (!detail.ok()) return from_error(detail.error());
  return {200, report::trial_detail_json(*detail, *view, *lines)};
}

}  // namespace

ApiResponse api_error(int status, const std::string& message) { return {status, {{"error", message}}}; }

ApiResponse handle_get(const std::vector<std::string>& databases, const std::string& path,
                       const std::multimap<std::string, std::string>& params) {
  if (path.empty() || path[0] != '/') return api_error(404, "not found");
  const auto parts = split(path.substr(1), '/');
  for (const auto& p : parts) {
    // Nothing is served by file name, but a path that tries to climb is never a route.
    if (p == ".." || p == ".") return api_error(404, "not found: the path may not contain '.' or '..' segments");
  }
  auto not_found = [&] { return api_error(404, "not found: " + path); };
  if (parts.size() < 2 || parts[0] != "api" || parts[1] != "campaigns") return not_found();
  if (parts.size() == 2) return campaigns(databases);
  auto index = parse_int(parts[2], 0, static_cast<int64_t>(databases.size()) - 1);
  if (databases.empty() || !index) {
    return api_error(404, "no campaign '" + parts[2] + "' (" + std::to_string(databases.size()) + " served, from 0)");
  }
  const std::string& db = databases[static_cast<size_t>(*index)];
  if (parts.size() == 4 && parts[3] == "status") return status(db);
  if (parts.size() == 4 && parts[3] == "trials") return trials(db, params);
  if (parts.size() == 5 && parts[3] == "trials") return trial(db, parts[4], params);
  return not_found();
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

}  // namespace hpctune::dashboard
