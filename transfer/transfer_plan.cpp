// Transfer learning without the master (transfer_plan.h).
#include "transfer/transfer_plan.h"

#include <algorithm>

namespace hpctune::transfer {

using json = nlohmann::json;

std::vector<Candidate> rank_candidates(std::vector<Candidate> candidates, bool maximize) {
  std::stable_sort(candidates.begin(), candidates.end(), [maximize](const Candidate& a, const Candidate& b) {
    if (a.objective != b.objective) return maximize ? a.objective > b.objective : a.objective < b.objective;
    return a.trial < b.trial;
  });
  return candidates;
}

json target_params(const json& source_params, const std::set<std::string>& pinned, const json& nested,
                   const std::string& checkpoint, int64_t freeze, const StartSettings& start) {
  json out = source_params.is_object() ? source_params : json::object();
  out.erase(start.init_setting);
  // The fine-tuning settings the stage states win over the values the source was searched with.
  for (const std::string& key : pinned) out.erase(key);
  if (nested.is_object()) {
    for (const auto& [key, value] : nested.items()) out[key] = value;
  }
  out[start.init_setting] = checkpoint;
  if (!start.freeze_setting.empty() && !(nested.is_object() && nested.contains(start.freeze_setting)))
    out[start.freeze_setting] = freeze;
  return out;
}

json twin_params(const json& target, const json& trainer, const StartSettings& start) {
  json out = target.is_object() ? target : json::object();
  out.erase(start.init_setting);
  if (!start.freeze_setting.empty()) out[start.freeze_setting] = 0;
  if (start.twin_resets.is_object()) {
    for (const auto& [key, plain] : start.twin_resets.items()) {
      if (out.contains(key) || (trainer.is_object() && trainer.contains(key))) out[key] = plain;
    }
  }
  return out;
}

std::optional<PairSummary> summarize_pairs(const std::vector<Pair>& pairs, bool maximize) {
  if (pairs.empty()) return std::nullopt;
  PairSummary s;
  double target_sum = 0, baseline_sum = 0;
  for (const Pair& p : pairs) {
    ++s.pairs;
    target_sum += p.target;
    baseline_sum += p.baseline;
    s.wins += gain_of(p.target, p.baseline, maximize) > 0 ? 1 : 0;
  }
  const double n = static_cast<double>(s.pairs);
  s.target_mean = target_sum / n;
  s.baseline_mean = baseline_sum / n;
  s.gain = gain_of(target_sum, baseline_sum, maximize) / n;
  return s;
}

}  // namespace hpctune::transfer
