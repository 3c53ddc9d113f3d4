// What the dashboard's route files (api.cpp, charts.cpp) share: parameter parsing that answers a
// 400 naming the parameter, the choice of trials by `stage`, and JSON numbers that are null when
// not finite. Internal to dashboard/.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "dashboard/api.h"
#include "dashboard/snapshot.h"

namespace hpctune::dashboard::detail {

std::vector<std::string> split(const std::string& text, char sep);

// A decimal integer in [min, max] (digits only, an optional leading '-' when min < 0, no leading
// zero and no "-0"), else nullopt.
std::optional<int64_t> parse_int(const std::string& text, int64_t min, int64_t max);

// The one value of parameter `name` (nullopt when absent); an error naming it when given twice.
Result<std::optional<std::string>> single_param(const QueryParams& params, const std::string& name);
Result<int64_t> int_param(const QueryParams& params, const std::string& name, int64_t fallback, int64_t min,
                          int64_t max);

// A 400 naming the first parameter whose name or value holds a control byte (U+0000..U+001F, DEL):
// no parameter takes one, and a NUL would cut the value short wherever it is read as a C string.
std::optional<ApiResponse> control_byte_param(const QueryParams& params);

// A 400 for the first parameter not in `allowed` ("token" is always allowed: the server checked it).
std::optional<ApiResponse> unknown_param(const QueryParams& params, std::initializer_list<const char*> allowed);

// The trials a view shows: with `stage=NAME` that stage's, else the main trials (or every trial
// when `all_by_default`). A 400 naming the stages for an unknown one.
struct Selection {
  std::vector<const store::TrialRow*> trials;  // in id order
  std::string stage;                           // the stage asked for, "" = none
};
Result<Selection> select_trials(const Snapshot& snap, const QueryParams& params, bool all_by_default);

// A number, or null when it is not finite.
inline nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
inline nlohmann::json opt_num(const std::optional<double>& v) { return v ? num(*v) : nlohmann::json(nullptr); }

// Every state name -> count among `trials`, zeros included.
nlohmann::json counts_by_state(const std::vector<const store::TrialRow*>& trials);

// [{metric, mode}] of the campaign's objectives, in order.
nlohmann::json objectives_json(const Snapshot& snap);

// The best trial among `trials` (objective set, not failed; ties: lowest id); nullptr when none.
const store::TrialRow* best_of(const std::vector<const store::TrialRow*>& trials, bool maximize);

// The name of the stage a trial belongs to (null without stages).
nlohmann::json stage_name(const Snapshot& snap, const store::TrialRow& t);

// The HTTP status of an error: a missing campaign or trial is 404, a bad parameter 400, the rest 500.
ApiResponse from_error(const Error& e);

// The chart routes (charts.cpp).
ApiResponse overview(const Snapshot& snap, const QueryParams& params);
ApiResponse history(const Snapshot& snap, const QueryParams& params);
ApiResponse generations(const Snapshot& snap, const QueryParams& params);
ApiResponse params_view(const Snapshot& snap, const QueryParams& params);
ApiResponse importance(const Snapshot& snap, const QueryParams& params);
ApiResponse curves(const Snapshot& snap, CampaignSource& source, const QueryParams& params);
ApiResponse pareto(const Snapshot& snap, const QueryParams& params);
ApiResponse timeline(const Snapshot& snap, const QueryParams& params);
ApiResponse stages(const Snapshot& snap, const QueryParams& params);

}  // namespace hpctune::dashboard::detail
