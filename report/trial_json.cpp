// Trials, events and curves as JSON (trial_json.h).
#include "report/trial_json.h"

#include <cmath>
#include <map>
#include <set>

#include "config/trainer_kinds.h"
#include "report/campaign.h"

namespace hpctune::report {

nlohmann::json time_or_null(double t) { return t > 0 ? nlohmann::json(t) : nlohmann::json(nullptr); }

double trial_seconds(const store::TrialRow& t) {
  if (t.finished_at <= 0) return 0.0;
  if (t.run_seconds > 0) return t.run_seconds;
  return t.started_at > 0 ? t.finished_at - t.started_at : 0.0;  // a row without attempts' times
}

ShownParams shown_params(const nlohmann::json& params, const nlohmann::json& meta) {
  ShownParams out;
  if (!params.is_object()) return out;
  // Never trusted beyond its type: a meta that names no string names nothing.
  const auto step = meta.is_object() ? meta.find(trainers::kStageStepMeta) : meta.end();
  const std::string stage_step = meta.is_object() && step != meta.end() && step->is_string() ? step->get<std::string>() : "";
  std::set<std::string> stage_set;  // the keys a stage set from its settings (strings only)
  if (const auto set = meta.is_object() ? meta.find(trainers::kStageSettingsMeta) : meta.end();
      meta.is_object() && set != meta.end() && set->is_array()) {
    for (const auto& key : *set)
      if (key.is_string()) stage_set.insert(key.get<std::string>());
  }
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (!stage_step.empty() && it.key() == stage_step) {
      out.run_settings[trainers::kMaxStepParam] = it.value();
      continue;
    }
    if (stage_set.count(it.key()) > 0 && config::internal_param(it.key()) == nullptr) {
      out.run_settings[it.key()] = it.value();
      continue;
    }
    const trainers::InternalParam* internal = config::internal_param(it.key());
    if (internal == nullptr) {
      out.params[it.key()] = it.value();
      continue;
    }
    auto& into = internal->role == trainers::InternalParamRole::kLineage ? out.lineage : out.run_settings;
    into[std::string(internal->name)] = it.value();
  }
  return out;
}

std::string stage_name(const store::TrialRow& t, const std::vector<store::StageRow>& stages) {
  if (stages.empty()) return "";
  const int64_t id = t.stage_id == 0 ? stages.front().id : t.stage_id;  // 0: the campaign's first stage
  for (const auto& s : stages) {
    if (s.id == id) return s.name;
  }
  return "";
}

nlohmann::json trials_json(const std::vector<store::TrialRow>& trials, const std::set<int64_t>* pareto,
                           const std::vector<store::StageRow>* stages) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : trials) {
    ShownParams shown = shown_params(t.params, t.meta);
    nlohmann::json j = {{"trial", t.id},          {"seq", t.seq},          {"state", store::to_string(t.state)},
                        {"attempt", t.attempt},   {"group", t.group_id},   {"params", std::move(shown.params)},
                        {"lineage", std::move(shown.lineage)}, {"run_settings", std::move(shown.run_settings)},
                        {"metrics", t.metrics},   {"step", t.step},        {"created_at", t.created_at},
                        {"started_at", time_or_null(t.started_at)}, {"finished_at", time_or_null(t.finished_at)},
                        {"generation", t.generation}};
    j["seconds"] = trial_seconds(t) > 0 ? nlohmann::json(trial_seconds(t)) : nlohmann::json(nullptr);
    j["objective"] = t.objective ? nlohmann::json(*t.objective) : nlohmann::json(nullptr);
    if (!t.error.empty()) j["error"] = t.error;
    if (t.parent_trial_id) j["parent_trial"] = *t.parent_trial_id;
    if (pareto) j["pareto"] = pareto->count(t.id) > 0;
    if (stages) j["stage"] = stage_name(t, *stages);
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json event_json(const store::EventRow& e) {
  nlohmann::json j = {{"t", e.t}, {"kind", e.kind}, {"detail", e.detail}};
  if (e.trial_id > 0) j["trial"] = e.trial_id;
  if (e.attempt > 0) j["attempt"] = e.attempt;
  if (e.group_id >= 0) j["group"] = e.group_id;
  return j;
}

nlohmann::json metrics_by_step_json(const std::vector<store::MetricRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  int64_t attempt = -1, step = -1;
  for (const auto& r : rows) {  // ordered by attempt, step, name
    if (r.attempt != attempt || r.step != step) {
      attempt = r.attempt, step = r.step;
      out.push_back({{"attempt", attempt}, {"step", step}, {"t", r.t}, {"metrics", nlohmann::json::object()}});
    }
    out.back()["metrics"][r.name] = std::isfinite(r.value) ? nlohmann::json(r.value) : nlohmann::json(nullptr);
  }
  return out;
}

Result<nlohmann::json> export_json(CampaignView& v) {
  // Everything a trial recorded: its metrics at every step and its events, besides the summary.
  HPCTUNE_ASSIGN(const auto stages, v.store->stages(v.campaign.id));
  nlohmann::json trials = trials_json(v.trials, v.front(), &stages);
  HPCTUNE_ASSIGN(auto events, v.store->events(v.campaign.id, 0));
  std::map<int64_t, nlohmann::json> events_of;
  nlohmann::json campaign_events = nlohmann::json::array();
  for (const auto& e : events) (e.trial_id > 0 ? events_of[e.trial_id] : campaign_events).push_back(event_json(e));
  for (auto& j : trials) {
    const int64_t id = j["trial"].get<int64_t>();
    HPCTUNE_ASSIGN(auto metrics, v.store->metrics(id));
    j["metrics_by_step"] = metrics_by_step_json(metrics);
    j["events"] = events_of.count(id) ? events_of[id] : nlohmann::json::array();
  }
  nlohmann::json doc = {{"campaign", {{"name", v.campaign.name},
                                      {"state", v.campaign.state},
                                      {"seed", v.campaign.seed},
                                      {"config", v.campaign.config_json},
                                      {"created_at", time_or_null(v.campaign.created_at)},
                                      {"finished_at", time_or_null(v.campaign.finished_at)}}},
                        {"trials", std::move(trials)},
                        {"events", std::move(campaign_events)}};
  if (v.front()) doc["pareto_front"] = v.pareto;
  return doc;
}

}  // namespace hpctune::report
