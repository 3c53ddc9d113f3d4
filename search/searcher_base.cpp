#include "search/searcher_base.h"

#include <algorithm>
#include <cmath>

#include "search/pareto.h"

namespace hpctune::search {

SearcherBase::SearcherBase(const SearchSpec& spec) : spec_(spec) {
  if (spec_.objectives.empty()) spec_.objectives.push_back(Objective{"objective", true});
}

Suggestion SearcherBase::issue(Params params, nlohmann::json meta) {
  Suggestion s;
  s.seq = next_seq_++;
  s.params = std::move(params);
  s.meta = std::move(meta);
  pending_[s.seq] = s.params;
  return s;
}

Rng SearcherBase::rng_for(int64_t seq, uint64_t salt) const noexcept {
  return Rng(derive_seed(derive_seed(spec_.seed, static_cast<uint64_t>(seq)), salt));
}

void SearcherBase::tell(const Observation& observation) {
  if (told_.count(observation.seq)) return;
  told_.insert(observation.seq);
  Observation obs = observation;
  if (obs.params.is_null() || obs.params.empty()) {
    auto it = pending_.find(obs.seq);
    if (it != pending_.end()) obs.params = it->second;
  }
  pending_.erase(obs.seq);
  if (obs.outcome != Outcome::kFailed && observation_losses(obs, spec_.objectives).empty()) {
    obs.outcome = Outcome::kFailed;  // no usable value: treat as failed rather than crash a model
    obs.values.clear();
  }
  next_seq_ = std::max(next_seq_, obs.seq + 1);
  observations_.push_back(obs);
  on_tell(observations_.back());
}

void SearcherBase::restore(const std::vector<Record>& history) {
  std::vector<const Record*> ordered;
  for (const auto& r : history) ordered.push_back(&r);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Record* a, const Record* b) { return a->suggestion.seq < b->suggestion.seq; });
  for (const Record* r : ordered) {
    next_seq_ = std::max(next_seq_, r->suggestion.seq + 1);
    if (!told_.count(r->suggestion.seq)) pending_[r->suggestion.seq] = r->suggestion.params;
    on_restore_suggestion(r->suggestion);
    if (r->observation) {
      Observation obs = *r->observation;
      obs.seq = r->suggestion.seq;
      if (obs.params.is_null() || obs.params.empty()) obs.params = r->suggestion.params;
      tell(obs);
    }
  }
}

nlohmann::json SearcherBase::state() const {
  nlohmann::json s = nlohmann::json::object();
  s["algorithm"] = name();
  s["suggested"] = next_seq_;
  s["observed"] = observations_.size();
  if (spec_.objectives.size() > 1) {
    s["pareto_front"] = pareto_front_json(observations_, spec_.objectives);
  } else {
    const Observation* best = nullptr;
    for (const auto& o : observations_) {
      if (o.outcome != Outcome::kCompleted || o.values.empty()) continue;
      const double v = spec_.objectives[0].maximize ? -o.values[0] : o.values[0];
      if (!best || v < (spec_.objectives[0].maximize ? -best->values[0] : best->values[0])) best = &o;
    }
    if (best) s["best"] = {{"seq", best->seq}, {"params", best->params}, {"value", best->values[0]}};
  }
  add_state(s);
  return s;
}

}  // namespace hpctune::search
