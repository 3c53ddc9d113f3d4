// Opening a campaign read-only for the views (campaign.h).
#include "report/campaign.h"

#include "config/config.h"

namespace hpctune::report {

Result<CampaignView> open_campaign(const std::string& db) {
  CampaignView v;
  v.db_path = db;
  HPCTUNE_ASSIGN(v.store, store::Store::open_readonly(db));
  HPCTUNE_ASSIGN(auto campaign, v.store->load_campaign());
  if (!campaign) return err(Errc::kNotFound, db + " holds no campaign");
  v.campaign = std::move(*campaign);
  HPCTUNE_ASSIGN(v.trials, v.store->trials(v.campaign.id));
  v.objectives = objectives_of(v.campaign.config_json);
  v.pareto = recorded_pareto_front(v.campaign);
  HPCTUNE_ASSIGN(auto simulated, v.store->first_event(v.campaign.id, "campaign_simulated"));
  if (simulated) v.simulated = simulated->detail.is_object() ? simulated->detail : nlohmann::json::object();
  v.main_trials = v.trials;
  const auto& cj = v.campaign.config_json;
  if (cj.is_object() && cj.contains("stages") && cj["stages"].is_array()) {
    v.main_stage = main_stage_name(cj);
    HPCTUNE_ASSIGN(auto stages, v.store->stages(v.campaign.id));
    for (const auto& row : stages) {
      if (row.name != v.main_stage) continue;
      v.main_trials.clear();
      for (const auto& t : v.trials) {
        if (t.stage_id == row.id) v.main_trials.push_back(t);
      }
    }
  }
  return v;
}

std::string main_stage_name(const nlohmann::json& cj) {
  if (!cj.is_object() || !cj.contains("stages") || !cj["stages"].is_array()) return "";
  for (const auto& st : cj["stages"]) {
    if (st.is_object() && st.contains("search") && st.value("name", "") != "") return st["name"].get<std::string>();
  }
  return "";
}

std::string campaign_bind(const store::CampaignRow& campaign) {
  const auto& cj = campaign.config_json;
  if (cj.is_object() && cj.contains("resources") && cj["resources"].is_object() &&
      cj["resources"].contains("bind") && cj["resources"]["bind"].is_string()) {
    return cj["resources"]["bind"].get<std::string>();
  }
  return config::Resources{}.bind;
}

}  // namespace hpctune::report
