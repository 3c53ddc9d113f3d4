// The objective and the recorded Pareto front of a campaign (objective.h).
#include "report/objective.h"

namespace hpctune::report {

Objectives objectives_of(const nlohmann::json& cj) {
  Objectives o;
  if (!cj.is_object()) return o;
  if (cj.contains("objectives") && cj["objectives"].is_array() && !cj["objectives"].empty() &&
      cj["objectives"][0].is_object()) {
    o.metric = cj["objectives"][0].value("metric", o.metric);
    o.maximize = cj["objectives"][0].value("mode", std::string("max")) == "max";
  } else if (cj.contains("objective") && cj["objective"].is_object()) {
    o.metric = cj["objective"].value("metric", o.metric);
    o.maximize = cj["objective"].value("mode", std::string("max")) == "max";
  }
  if (cj.contains("objectives") && cj["objectives"].is_array()) {
    for (const auto& obj : cj["objectives"]) {
      if (obj.is_object()) o.metrics.push_back(obj.value("metric", std::string("objective")));
    }
  }
  return o;
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

}  // namespace hpctune::report
