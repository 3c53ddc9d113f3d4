// The state of a campaign at a glance (status.h).
#include "report/status.h"

#include "report/campaign.h"
#include "report/ranking.h"
#include "report/trial_json.h"

namespace hpctune::report {

std::optional<double> campaign_elapsed(const store::CampaignRow& campaign, double now) {
  if (campaign.created_at <= 0) return std::nullopt;
  return (campaign.finished_at > 0 ? campaign.finished_at : now) - campaign.created_at;
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

Result<CampaignStatus> campaign_status(CampaignView& v, double now) {
  CampaignStatus st;
  st.campaign = v.campaign;
  HPCTUNE_ASSIGN(st.counts, v.store->count_by_state(v.campaign.id));
  HPCTUNE_ASSIGN(st.stages, v.store->stages(v.campaign.id));
  HPCTUNE_ASSIGN(st.attempts_lost, count_lost_attempts(*v.store, v.trials));
  st.trials = v.trials;
  st.objectives = v.objectives.columns();
  st.maximize = v.objectives.maximize;
  if (v.front()) st.front = v.pareto;
  st.now = now;
  return st;
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

}  // namespace hpctune::report
