// A pbt stage's schedule, read and checked (pbt_schedule.h).
#include "config/pbt_schedule.h"

#include <cmath>
#include <optional>

#include "common/text.h"

namespace hpctune::config {

namespace {

// The path (relative to `at`) of the first number in `v` that is not finite; nullopt when none.
// The schedule is a parsed config value, so its depth is bounded already.
std::optional<std::string> non_finite_in(const nlohmann::json& v, const std::string& at) {
  if (v.is_number_float()) return std::isfinite(v.get<double>()) ? std::nullopt : std::optional<std::string>(at);
  if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i)
      if (auto bad = non_finite_in(v[i], at + '[' + std::to_string(i) + ']')) return bad;
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (auto bad = non_finite_in(it.value(), at + "." + it.key())) return bad;
  }
  return std::nullopt;
}

// A value as a message shows it: a scalar as written, anything larger by its kind only.
std::string shown(const nlohmann::json& v) {
  if (v.is_structured()) return std::string("a ") + (v.is_array() ? "list" : "map");
  const std::string text = v.dump();
  if (text.size() <= 40) return text;
  std::size_t cut = 37;  // not inside a UTF-8 sequence
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

}  // namespace

PbtSchedule read_pbt_schedule(const nlohmann::json& schedule, const std::string& step_key) {
  PbtSchedule out;
  auto problem = [&](std::string at, std::string what) {
    out.replay.clear();
    out.problem_at = std::move(at);
    out.problem = std::move(what);
    return out;
  };
  if (!schedule.is_array())
    return problem("", "expected a list of intervals {from_step, to_step, params}, as `hpctune schedule DB --format "
                       "yaml` prints them");
  if (schedule.empty()) return problem("", "the list is empty; give at least one interval");
  int64_t at = 0;
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    const nlohmann::json& e = schedule[i];
    // Not "[" + std::to_string(i) + "]": GCC 12 warns falsely there (-Wrestrict, PR 105329).
    std::string item = "[";
    item += std::to_string(i);
    item += ']';
    if (!e.is_object()) return problem(item, "expected an interval {from_step, to_step, params}, got " + shown(e));
    for (auto it = e.begin(); it != e.end(); ++it) {
      const std::string& key = it.key();
      if (key != "from_step" && key != "to_step" && key != "params" && key != "trial") {
        const std::vector<Candidate> keys = {
            {"from_step", "from_step"}, {"to_step", "to_step"}, {"params", "params"}, {"trial", "trial"}};
        if (auto near = did_you_mean(key, keys)) return problem(item + "." + key, "unknown key; did you mean '" + *near + "'?");
        return problem(item + "." + key, "unknown key (an interval has from_step, to_step, params and trial)");
      }
    }
    for (const char* key : {"from_step", "to_step", "params"})
      if (!e.contains(key)) return problem(item, std::string("missing required key '") + key + "'");
    for (const char* key : {"from_step", "to_step"}) {
      const nlohmann::json& v = e[key];
      if (!v.is_number_integer())
        return problem(item + "." + key, "expected a whole number of steps, got " + shown(v));
      if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMaxPbtSteps)
                                 : v.get<int64_t>() > kMaxPbtSteps)
        return problem(item + "." + key, v.dump() + " is above the maximum " + std::to_string(kMaxPbtSteps) +
                                             " (the most steps a pbt member trains)");
    }
    if (e.contains("trial") && !e["trial"].is_number_integer())
      return problem(item + ".trial", "expected a trial number, got " + shown(e["trial"]));
    const int64_t from = e["from_step"].get<int64_t>(), to = e["to_step"].get<int64_t>();
    if (from != at)
      return problem(item + ".from_step",
                     std::to_string(from) + (from > at ? " leaves a gap" : " overlaps the interval before") +
                         ": the interval must start at step " + std::to_string(at) +
                         (i == 0 ? " (the schedule starts at 0)" : ", where the one before ends"));
    if (to <= from)
      return problem(item + ".to_step", std::to_string(to) + " is not after from_step (" + std::to_string(from) + ")");
    const nlohmann::json& params = e["params"];
    if (!params.is_object())
      return problem(item + ".params", "expected a map of hyperparameters, got " + shown(params));
    if (!step_key.empty() && params.contains(step_key))
      return problem(item + ".params." + step_key,
                     "the interval's to_step is its " + step_key + "; leave " + step_key + " out of params");
    if (auto bad = non_finite_in(params, item + ".params"))
      return problem(*bad, "not a finite number (a trial's parameters are finite)");
    search::Params p = params;
    if (!step_key.empty()) p[step_key] = to;
    out.replay.push_back(std::move(p));
    at = to;
  }
  return out;
}

}  // namespace hpctune::config
