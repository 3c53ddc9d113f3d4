// The state of a campaign at a glance (status.h).
#include "report/status.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "common/system.h"

#include "report/campaign.h"
#include "report/format.h"
#include "report/ranking.h"
#include "report/stages.h"
#include "report/tables.h"
#include "report/trial_json.h"

namespace hpctune::report {

std::optional<double> campaign_elapsed(const store::CampaignRow& campaign, double now) {
  if (campaign.created_at <= 0) return std::nullopt;
  return (campaign.finished_at > 0 ? campaign.finished_at : now) - campaign.created_at;
}

namespace {

// An age as people say it: "45s", "3m 2s", "2h 5m".
std::string age_text(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h " + std::to_string((s / 60) % 60) + "m";
}

// Whether the heartbeat says the master may be gone: older than the stale window, or further
// ahead of this clock than that window (clock skew between hosts is seconds: no live master wrote
// such a heartbeat; a crafted 1e300 kept a campaign "running" forever).
bool heartbeat_stale(const store::CampaignRow& c, double now) {
  return c.heartbeat_at > 0 && std::abs(now - c.heartbeat_at) > store::kMasterHeartbeatStale_s;
}

}  // namespace

MasterLiveness judge_master(const store::CampaignRow& c, bool lock_held, bool process_gone, double now,
                            const std::string& db_path) {
  MasterLiveness m;
  m.text = c.state;
  if (c.heartbeat_at > 0) m.heartbeat_age_s = std::max(0.0, now - c.heartbeat_at);
  if (c.state != "running") return m;
  // Without a heartbeat (a database recorded before there were any) its age is unknown: only a
  // master process known to be gone says so.
  const bool stale = heartbeat_stale(c, now);
  const bool ahead = stale && c.heartbeat_at > now;
  const std::string last = m.heartbeat_age_s < 0 ? std::string("no heartbeat recorded")
                           : ahead               ? "its heartbeat is recorded in the future"
                                                 : "last heartbeat " + age_text(m.heartbeat_age_s) + " ago";
  if (!lock_held && (stale || process_gone)) {
    m.gone = true;
    m.resume = "hpctune resume " + db_path;
    m.text = "interrupted (the master is gone: " + last + "; resume with: " + m.resume + ")";
  } else if (stale && lock_held) {
    m.text = ahead ? "running (" + last + "; the master still holds its lock)"
                   : "running (no heartbeat for " + age_text(m.heartbeat_age_s) + "; the master still holds its lock)";
  }
  return m;
}

namespace {

// A process that exited and was not reaped yet (state Z in /proc/PID/stat): kill(pid, 0) still
// answers for it, but it holds no lock and writes no heartbeat. False when unknown.
bool is_zombie(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "re");
  if (f == nullptr) return false;
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  return close != nullptr && close[1] == ' ' && close[2] == 'Z';
}

}  // namespace

MasterLiveness master_liveness(const store::CampaignRow& c, const std::string& db_path, double now) {
  if (c.state != "running") return judge_master(c, false, false, now, db_path);
  bool process_gone = false;
  // A pid is 1..2^22 on Linux: a recorded 2^32 - 1 would be kill(-1, 0) (every process: "alive")
  // once cast to pid_t, and 2^32 kill(0, 0) (our own group). Such a pid names no process.
  if (c.master_pid > 0 && c.master_host == host_name()) {
    process_gone = c.master_pid > std::numeric_limits<int32_t>::max() ||
                   (::kill(static_cast<pid_t>(c.master_pid), 0) != 0 && errno == ESRCH) ||
                   is_zombie(static_cast<pid_t>(c.master_pid));
  }
  const bool stale = heartbeat_stale(c, now);
  // The lock is probed only when the master may be gone: a probe in the instant a master starts
  // would refuse it (store::master_lock_held).
  if (!stale && !process_gone) return judge_master(c, true, false, now, db_path);
  // A failed probe counts as held: a file system without flock must not make a live master "gone".
  auto held = store::master_lock_held(db_path);
  const bool lock_held = !held.ok() || *held;
  return judge_master(c, lock_held, process_gone, now, db_path);
}

nlohmann::json master_json(const store::CampaignRow& c, const MasterLiveness& m) {
  return {{"alive", c.state == "running" ? nlohmann::json(!m.gone) : nlohmann::json(nullptr)},
          {"heartbeat_at", time_or_null(c.heartbeat_at)},
          {"heartbeat_age_s", c.state == "running" && m.heartbeat_age_s >= 0 ? nlohmann::json(m.heartbeat_age_s)
                                                                              : nlohmann::json(nullptr)},
          {"host", c.master_host},
          {"pid", c.master_pid},
          {"resume", m.resume.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.resume)}};
}

Result<int64_t> count_lost_attempts(store::Store& db, const std::vector<store::TrialRow>& trials) {
  // Only a trial that was queued again (attempt > 1) or that failed (max_attempts lost attempts)
  // can have one, so the others are not read.
  int64_t lost = 0;
  for (const auto& t : trials) {
    if (t.attempt <= 1 && t.state != store::TrialState::kFailed) continue;
    HPCTUNE_ASSIGN(auto attempts, db.attempts(t.id));
    for (const auto& a : attempts) lost += a.value("state", std::string()) == "lost";
  }
  return lost;
}

namespace {

// CampaignStatus::gpus: the running trials' and the best trial's current attempt (one read each).
Result<std::map<int64_t, std::string>> attempt_gpus(CampaignView& v) {
  std::vector<const store::TrialRow*> wanted;
  for (const auto& t : v.trials)
    if (t.state == store::TrialState::kAssigned || t.state == store::TrialState::kRunning) wanted.push_back(&t);
  const auto best = best_trial(v.main_trials, v.objectives.maximize);
  if (best) wanted.push_back(&*best);
  std::map<int64_t, std::string> out;
  for (const auto* t : wanted) {
    HPCTUNE_ASSIGN(auto attempts, v.store->attempts(t->id));
    for (const auto& a : attempts) {
      const std::string devices = a.value("devices", std::string());
      if (a.value("attempt", int64_t{0}) == t->attempt && !devices.empty()) out[t->id] = devices;
    }
  }
  return out;
}

// A field of a recorded event's detail as text, checked: "?" where it is missing or of another
// type (the database is not trusted).
std::string text_field(const nlohmann::json& d, const char* key) {
  return d.is_object() && d.contains(key) && d[key].is_string() ? d[key].get<std::string>() : std::string("?");
}
std::string int_field(const nlohmann::json& d, const char* key) {
  return d.is_object() && d.contains(key) && d[key].is_number_integer() ? std::to_string(d[key].get<int64_t>())
                                                                         : std::string("?");
}
std::string number_field(const nlohmann::json& d, const char* key) {
  return d.is_object() && d.contains(key) && d[key].is_number() ? format_number(d[key].get<double>()) : std::string("?");
}

// The master's warnings of a trial's reports, an event kind each (scheduler.cpp: note_unjudged,
// note_restarted_steps, note_constant_objective, note_step_past_judge, note_bunched_reports,
// note_overhead), and the line each shows.
struct WarningEvent {
  const char* kind;
  std::string (*line)(const store::EventRow& e);
};
const WarningEvent kWarningEvents[] = {
    {"reports_unjudged",
     [](const store::EventRow& e) {
       return text_field(e.detail, "judge") + " never judged trial " + std::to_string(e.trial_id) + ": it reported '" +
              text_field(e.detail, "metric") + "' in no step before its last (report it with every step, or make a " +
              "metric reported every step the objective)";
     }},
    {"steps_restarted",
     [](const store::EventRow& e) {
       return "trial " + std::to_string(e.trial_id) + " resumed from its checkpoint at step " +
              int_field(e.detail, "resumed_at") + " but reported step " + int_field(e.detail, "reported_step") +
              ": its program counts steps from the start again (keep the step in the checkpoint and go on from it)";
     }},
    {"same_objective",
     [](const store::EventRow& e) {
       const nlohmann::json& d = e.detail;
       const std::string trials =
           d.is_object() && d.contains("trials") && d["trials"].is_array() ? std::to_string(d["trials"].size()) : "?";
       return "the first " + trials + " trials, each with other parameters, all reported " + text_field(d, "metric") +
              " = " + number_field(d, "value") +
              " exactly: their parameters may not reach the program, or none of them learned anything";
     }},
    {"steps_past_judge",
     [](const store::EventRow& e) {
       return "trial " + std::to_string(e.trial_id) + " reported step " + int_field(e.detail, "step") +
              ", past early_stopping.max_t " + int_field(e.detail, "last_step") +
              ": early stopping judges no report past max_t (report steps in max_t's unit, or set max_t to the " +
              "program's last step)";
     }},
    {"reports_bunched",
     [](const store::EventRow& e) {
       return "trial " + std::to_string(e.trial_id) + "'s " + int_field(e.detail, "reports") + " reports came together at " +
              "its end, so " + text_field(e.detail, "judge") + " could stop or pause it at none of its steps (where " +
              "its program buffers its standard output, print each report line with a flush)";
     }},
    {"attempt_overhead",
     [](const store::EventRow& e) {
       const nlohmann::json& d = e.detail;
       const bool persistent = d.is_object() && d.contains("persistent") && d["persistent"].is_boolean() &&
                               d["persistent"].get<bool>();
       const std::string setting = text_field(d, "setting");
       return "attempts spent a median " + number_field(d, "overhead_s") + " s of " + number_field(d, "attempt_s") +
              " s outside their steps, starting and ending the program" +
              (persistent ? " although trainer." + setting + " is on (loop over hp.trials(), load the data before it)"
                          : " (trainer." + setting + ": true with a loop over hp.trials() starts it once per group)");
     }},
};

}  // namespace

// The master's warnings recorded as events (master.cpp: a database on a network file system, said
// at every start and shown once; kWarningEvents: those of trials' reports), one line each; every
// field read from the database is checked for its type here (the CLI escapes what it prints).
Result<std::vector<std::string>> recorded_warnings(store::Store& db, int64_t campaign_id) {
  std::vector<std::string> out;
  HPCTUNE_ASSIGN(auto said, db.events_of_kind(campaign_id, "master_warning", 16));
  for (const auto& e : said) {
    if (!e.detail.is_object() || !e.detail.contains("text") || !e.detail["text"].is_string()) continue;
    std::string text = e.detail["text"].get<std::string>();
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
  }
  for (const WarningEvent& kind : kWarningEvents) {
    HPCTUNE_ASSIGN(auto events, db.events_of_kind(campaign_id, kind.kind, 16));
    for (const auto& e : events) out.push_back(kind.line(e));
  }
  return out;
}

Result<CampaignStatus> campaign_status(CampaignView& v, double now) {
  CampaignStatus st;
  st.campaign = v.campaign;
  HPCTUNE_ASSIGN(st.counts, v.store->count_by_state(v.campaign.id));
  HPCTUNE_ASSIGN(st.stages, v.store->stages(v.campaign.id));
  HPCTUNE_ASSIGN(st.attempts_lost, count_lost_attempts(*v.store, v.trials));
  st.trials = v.trials;
  st.main_trials = v.main_trials;
  st.main_stage = v.main_stage;
  st.simulated = v.simulated;
  st.objectives = v.objectives.columns();
  st.maximize = v.objectives.maximize;
  if (v.front()) st.front = v.pareto;
  st.now = now;
  st.master = master_liveness(v.campaign, v.db_path, now);
  HPCTUNE_ASSIGN(st.gpus, attempt_gpus(v));
  HPCTUNE_ASSIGN(st.warnings, recorded_warnings(*v.store, v.campaign.id));
  int64_t steps = 0;
  for (const auto& t : v.trials) steps += std::max<int64_t>(0, t.step);
  HPCTUNE_ASSIGN(st.group_time, group_time(*v.store, v.campaign, steps, group_time_until(v.campaign, now)));
  return st;
}

std::vector<std::string> stage_failures(const std::vector<store::StageRow>& stages) {
  std::vector<std::string> out;
  for (const auto& s : stages) {
    if (s.state == "failed" && !s.reason.empty()) out.push_back("stage '" + s.name + "' (" + s.kind + "): " + s.reason);
  }
  return out;
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
                             {"state", st.master.gone ? std::string("interrupted") : c.state},
                             {"recorded_state", c.state},
                             {"master", master_json(c, st.master)},
                             {"seed", c.seed},
                             {"algorithm", config_value(cj, "search", "algorithm")},
                             {"objectives", std::move(objectives)},
                             {"created_at", time_or_null(c.created_at)},
                             {"finished_at", time_or_null(c.finished_at)},
                             {"elapsed_s", elapsed ? nlohmann::json(*elapsed) : nlohmann::json(nullptr)},
                             {"max_trials", config_value(cj, "search", "max_trials")}};
  const std::vector<std::string> failures = stage_failures(st.stages);
  campaign["reason"] = failures.empty() ? nlohmann::json(nullptr) : nlohmann::json(failures);
  campaign["warnings"] = st.warnings;
  campaign["simulated"] = st.simulated.is_null() ? nlohmann::json(nullptr)
                                                 : nlohmann::json{{"mark", simulated_mark(st.simulated)}, {"detail", st.simulated}};
  nlohmann::json stages = nlohmann::json::array();
  const auto stage_counts = trials_by_stage(st.stages, st.trials);
  for (size_t i = 0; i < st.stages.size(); ++i) {
    const auto& s = st.stages[i];
    int64_t stage_total = 0;
    for (const auto& [state, n] : stage_counts[i]) stage_total += n;
    stages.push_back({{"id", s.id},
                      {"name", s.name},
                      {"kind", s.kind},
                      {"state", shown_stage_state(s.state, st.master.gone)},
                      {"recorded_state", s.state},
                      {"created_at", time_or_null(s.created_at)},
                      {"started_at", time_or_null(s.started_at)},
                      {"finished_at", time_or_null(s.finished_at)},
                      {"reason", s.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.reason)},
                      {"trials", {{"total", stage_total}, {"by_state", stage_counts[i]}}},
                      {"result", s.result.is_null() ? nlohmann::json::object() : s.result}});
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
                        {"attempts_lost", st.attempts_lost},
                        {"compute", group_time_json(st.group_time)}};
  const std::string metric = st.objectives.empty() ? "objective" : st.objectives.front();
  if (auto b = best_trial(st.main_trials, st.maximize)) {
    out["best"] = {{"trial", b->id},         {"metric", metric},     {"objective", *b->objective},
                   {"attempt", b->attempt},  {"params", shown_params(b->params, b->meta).params},  {"metrics", b->metrics}};
    if (auto g = st.gpus.find(b->id); g != st.gpus.end()) out["best"]["devices"] = g->second;
  } else {
    out["best"] = nullptr;
  }
  if (st.front) out["pareto_front"] = *st.front;  // a set: ids in increasing order
  nlohmann::json running = nlohmann::json::array();
  for (const auto& t : st.trials) {
    const bool live = t.state == store::TrialState::kAssigned || t.state == store::TrialState::kRunning;
    if (auto g = st.gpus.find(t.id); live && g != st.gpus.end())
      running.push_back({{"trial", t.id}, {"group", t.group_id}, {"devices", g->second}});
  }
  if (!running.empty()) out["running_gpus"] = std::move(running);
  return out;
}

namespace {

// printf into a std::string.
template <typename... Args>
std::string text(const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::snprintf(out.data(), out.size() + 1, format, args...);
  return out;
}

}  // namespace

std::string simulated_mark(const nlohmann::json& detail) {
  if (detail.is_null()) return "";
  auto text_of = [](const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  std::string machine = text_of(detail, "machine");
  if (machine.empty()) machine = "fixed step cost";
  const nlohmann::json none;
  const nlohmann::json& o = detail.is_object() && detail.contains("outcomes") ? detail["outcomes"] : none;
  const std::string kind = text_of(o, "outcomes"), from = text_of(o, "from");
  std::string outcomes = "function trainer";
  if ((kind == "replay" || kind == "surrogate") && !from.empty()) outcomes = kind + " of " + from;
  return "simulated (machine " + machine + ", outcomes " + outcomes + ")";
}

std::string status_text(const CampaignView& v, const CampaignStatus& st, size_t width) {
  const auto& c = v.campaign;
  const std::string state = st.master.text.empty() ? c.state : st.master.text;
  std::string out = text("campaign   %s\nstate      %s\ndatabase   %s\nseed       %llu\n", c.name.c_str(),
                         state.c_str(), v.db_path.c_str(), static_cast<unsigned long long>(c.seed));
  if (!v.simulated.is_null()) out += "mark       " + simulated_mark(v.simulated) + "\n";
  // Why it failed, one line per failed stage (the reason recorded with the stage's state).
  for (const std::string& why : stage_failures(st.stages)) out += "reason     " + why + "\n";
  for (const std::string& what : st.warnings) out += "warning    " + what + "\n";
  if (auto elapsed = campaign_elapsed(c, st.now)) out += "elapsed    " + format_duration(*elapsed) + "\n";
  if (show_stages(st.stages)) {
    std::vector<store::StageRow> shown = st.stages;
    show_stage_states(shown, st.master.gone);
    out += "\nStages:\n" + stages_table(shown, st.trials, width);
  }
  auto count = [&](const char* state) {
    auto it = st.counts.find(state);
    return it != st.counts.end() ? it->second : int64_t{0};
  };
  std::vector<std::vector<std::string>> rows;
  int64_t total = 0;
  for (const auto state : store::kTrialStates) {
    const char* s = store::to_string(state);
    const int64_t n = count(s);
    total += n;
    rows.push_back({s, std::to_string(n)});
  }
  rows.push_back({"total", std::to_string(total)});
  out += "\nTrials by state:\n" + format_table({"state", "trials"}, rows);
  // Under a master that is gone, no result of the trials recorded in flight can be recorded: the
  // resume queues them again, uncharged (Scheduler's restore).
  const int64_t in_flight = count("assigned") + count("running");
  if (st.master.gone && in_flight > 0) {
    out += text("(the %lld assigned or running were in flight when the master died; %s queues them again,\n"
                "not counted against max_attempts)\n", static_cast<long long>(in_flight), st.master.resume.c_str());
  }
  if (const std::string g = group_time_text(st.group_time); !g.empty()) out += "\n" + g;
  std::vector<std::vector<std::string>> on_gpus;
  for (const auto& t : st.trials) {
    const bool live = t.state == store::TrialState::kAssigned || t.state == store::TrialState::kRunning;
    if (auto g = st.gpus.find(t.id); live && g != st.gpus.end())
      on_gpus.push_back({std::to_string(t.id), std::to_string(t.group_id), g->second});
  }
  if (!on_gpus.empty()) out += "\nRunning on GPUs:\n" + format_table({"trial", "group", "GPUs"}, on_gpus);
  if (auto best = best_trial(v.main_trials, v.objectives.maximize)) {
    const auto& b = *best;
    const auto g = st.gpus.find(b.id);
    out += text("\nBest trial %lld (%s = %s, attempt %lld%s%s)\n", static_cast<long long>(b.id),
                v.objectives.metric.c_str(), format_number(*b.objective).c_str(), static_cast<long long>(b.attempt),
                v.main_stage.empty() ? "" : (", stage '" + v.main_stage + "'").c_str(),
                g == st.gpus.end() ? "" : (", GPUs " + g->second).c_str());
    std::vector<std::vector<std::string>> prow;
    const nlohmann::json searched = shown_params(b.params, b.meta).params;  // not the keys hpctune adds
    for (auto it = searched.begin(); it != searched.end(); ++it) {
      prow.push_back({it.key(), it->is_string() ? it->get<std::string>() : it->dump()});
    }
    out += format_table({"parameter", "value"}, prow);
    if (b.metrics.is_object() && !b.metrics.empty()) {
      std::vector<std::vector<std::string>> mrow;
      for (auto it = b.metrics.begin(); it != b.metrics.end(); ++it) {
        mrow.push_back({it.key(), it->is_number() ? format_number(it->get<double>()) : it->dump()});
      }
      out += format_table({"metric", "value"}, mrow);
    }
  } else {
    out += "\nNo finished trial yet.\n";
  }
  if (v.front()) {
    out += text("\nPareto front (%zu trials, as of the last saved search state):\n", v.pareto.size()) +
           pareto_table(v.trials, v.pareto, v.objectives.metrics);
  }
  return out;
}

}  // namespace hpctune::report
