// Where a campaign's group time went (group_time.h).
#include "report/group_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/format.h"

namespace hpctune::report {

namespace {

// The attempt states by what their time bought: kept (its reports and checkpoints count), thrown
// away (a failed trial), or cut short and run again (a lost group, a master that stopped).
struct Use {
  const char* name;
  std::vector<const char*> states;
};
const std::vector<Use>& uses() {
  static const std::vector<Use> u = {{"trained (done, pruned, paused)", {"done", "pruned", "paused"}},
                                     {"running now", {"running"}},
                                     {"failed", {"failed"}},
                                     {"lost or interrupted (run again)", {"lost", "interrupted"}}};
  return u;
}

std::string percent(double part, double whole) {
  if (!(whole > 0) || !std::isfinite(part)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", 100.0 * part / whole);
  return buf;
}

}  // namespace

double GroupTime::busy_s() const {
  double s = 0;
  for (const auto& [state, t] : by_state) s += t.seconds;
  return s;
}

double GroupTime::idle_s() const { return std::max(0.0, group_s() - busy_s()); }

double group_time_until(const store::CampaignRow& c, double now) {
  if (c.finished_at > 0) return c.finished_at;
  return c.heartbeat_at > 0 ? std::min(now, c.heartbeat_at) : now;
}

Result<GroupTime> group_time(store::Store& db, const store::CampaignRow& c, int64_t steps, double until) {
  GroupTime g;
  g.steps = steps;
  const nlohmann::json& cfg = c.config_json;
  // Never trusted: a value of another type or out of range reads as none.
  auto integer = [&](const char* section, const char* key) -> std::optional<int64_t> {
    if (!cfg.is_object() || !cfg.contains(section) || !cfg[section].is_object()) return std::nullopt;
    const auto& v = cfg[section].value(key, nlohmann::json());
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) return std::nullopt;
    return v.get<int64_t>();
  };
  g.groups = integer("resources", "groups").value_or(0);
  g.max_steps = integer("search", "max_steps");
  if (c.created_at > 0 && until > c.created_at) g.span_s = until - c.created_at;
  HPCTUNE_ASSIGN(g.by_state, db.attempt_time(c.id, until));
  HPCTUNE_ASSIGN(auto resumed, db.events_of_kind(c.id, "campaign_resumed", 1));
  g.resumed = !resumed.empty();
  return g;
}

nlohmann::json group_time_json(const GroupTime& g) {
  nlohmann::json attempts = nlohmann::json::object();
  for (const auto& [state, t] : g.by_state) attempts[state] = {{"attempts", t.attempts}, {"seconds", t.seconds}};
  return {{"groups", g.groups},
          {"span_s", g.span_s},
          {"group_seconds", g.group_s()},
          {"busy_seconds", g.busy_s()},
          {"idle_seconds", g.idle_s()},
          {"resumed", g.resumed},
          {"attempts", std::move(attempts)},
          {"steps", g.steps},
          {"max_steps", g.max_steps ? nlohmann::json(*g.max_steps) : nlohmann::json(nullptr)}};
}

std::string group_time_text(const GroupTime& g) {
  if (g.groups <= 0 || !(g.span_s > 0)) return "";
  const double whole = g.group_s();
  std::string out = "Group time: " + std::to_string(g.groups) + (g.groups == 1 ? " group x " : " groups x ") +
                    format_duration(g.span_s) + " = " + format_duration(whole) +
                    (g.resumed ? " (resumed: the time between runs counts as idle)" : "") + "\n";
  std::vector<std::vector<std::string>> rows;
  for (const Use& use : uses()) {
    store::AttemptTime sum;
    for (const char* state : use.states) {
      if (auto it = g.by_state.find(state); it != g.by_state.end()) {
        sum.attempts += it->second.attempts;
        sum.seconds += it->second.seconds;
      }
    }
    if (sum.attempts == 0) continue;
    rows.push_back({use.name, format_duration(sum.seconds), percent(sum.seconds, whole), std::to_string(sum.attempts)});
  }
  rows.push_back({"idle", format_duration(g.idle_s()), percent(g.idle_s(), whole), ""});
  out += format_table({"use", "time", "% of it", "attempts"}, rows);
  if (g.max_steps) out += "steps: " + std::to_string(g.steps) + " of search.max_steps " + std::to_string(*g.max_steps) + "\n";
  return out;
}

}  // namespace hpctune::report
