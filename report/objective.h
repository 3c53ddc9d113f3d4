// The objective of a campaign, as its stored config says: the metric that ranks the trials, its
// direction, and with several objectives each one's metric. And the Pareto front the master
// recorded for several objectives.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace hpctune::report {

struct Objectives {
  std::string metric = "objective";  // the first objective's metric: what `objective` holds
  bool maximize = true;              // the first objective's direction
  std::vector<std::string> metrics;  // with `objectives:` every one's metric, in order; else empty
  bool several() const { return metrics.size() > 1; }
  // The objectives' metrics for the tables: every objective, or the one.
  std::vector<std::string> columns() const { return several() ? metrics : std::vector<std::string>{metric}; }
};

// From a campaign's normalized config (CampaignRow::config_json): `objectives` (a list) or
// `objective`; "objective", max when it holds neither.
Objectives objectives_of(const nlohmann::json& config);

// The Pareto front a multi-objective campaign recorded (search_state.pareto_front_trials, trial
// ids); empty for a single objective or before the master first saved its search state.
std::set<int64_t> recorded_pareto_front(const store::CampaignRow& campaign);

}  // namespace hpctune::report
