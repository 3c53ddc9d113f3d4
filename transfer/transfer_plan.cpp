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
                   const json& data, const Start& start, const StartSettings& how) {
  json out = source_params.is_object() ? source_params : json::object();
  out.erase(how.init_setting);
  if (!how.source_trial_setting.empty()) out.erase(how.source_trial_setting);
  // The fine-tuning settings the stage states win over the values the source was searched with;
  // the rest (its architecture above all) it keeps.
  for (const std::string& key : pinned) out.erase(key);
  for (const json* over : {&nested, &data}) {
    if (!over->is_object()) continue;
    for (const auto& [key, value] : over->items()) out[key] = value;
  }
  out[how.init_setting] = start.checkpoint;
  if (!how.source_trial_setting.empty() && start.source_trial > 0) out[how.source_trial_setting] = start.source_trial;
  if (!how.freeze_setting.empty() && !(nested.is_object() && nested.contains(how.freeze_setting)))
    out[how.freeze_setting] = start.freeze;
  return out;
}

json twin_params(const json& target, const json& trainer, const StartSettings& how) {
  json out = target.is_object() ? target : json::object();
  out.erase(how.init_setting);
  if (!how.source_trial_setting.empty()) out.erase(how.source_trial_setting);
  if (!how.freeze_setting.empty()) out[how.freeze_setting] = 0;
  // The target's transfer refinements (LP-FT's head-only epochs, a smaller rate for the loaded
  // layers) would only hold a from-scratch network back: the twin trains every layer at the full
  // rate in every epoch, as a plain run from scratch does.
  if (how.twin_resets.is_object()) {
    for (const auto& [key, plain] : how.twin_resets.items()) {
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
