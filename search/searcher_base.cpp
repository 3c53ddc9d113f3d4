#include "search/searcher_base.h"

#include <algorithm>
#include <cmath>

#include "search/pareto.h"

namespace hpctune::search {

namespace {

constexpr uint64_t kDedupSalt = 0xDED0;
// A finite space with at most this many points may be listed to find the points left.
constexpr uint64_t kMaxListed = 200'000;
// A small step of a float parameter, in unit coordinates.
constexpr double kFloatStep = 0.01;

// Squared distance in unit coordinates; a different unordered choice, or a parameter present in
// only one of the two, counts 1.
double distance(const Space& space, const Params& a, const Params& b) {
  double d = 0;
  for (const auto& p : space.params()) {
    const bool in_a = a.contains(p.name), in_b = b.contains(p.name);
    if (!in_a && !in_b) continue;
    if (in_a != in_b) {
      d += 1;
      continue;
    }
    const auto& va = a.at(p.name);
    const auto& vb = b.at(p.name);
    if (p.type == ParamType::kChoice && !p.ordered) {
      d += va == vb ? 0.0 : 1.0;
      continue;
    }
    const double du = Space::to_unit(p, va) - Space::to_unit(p, vb);
    d += du * du;
  }
  return d;
}

// The values next to `value`: an int or ordered choice one level up and down, an unordered choice
// every other value, a float a small step either way.
std::vector<nlohmann::json> neighbours(const ParamSpec& p, const nlohmann::json& value) {
  std::vector<nlohmann::json> out;
  switch (p.type) {
    case ParamType::kFixed: break;
    case ParamType::kChoice: {
      const int64_t i = Space::choice_index(p, value);
      const auto k = static_cast<int64_t>(p.choices.size());
      for (int64_t j = 0; j < k; ++j) {
        if (j == i) continue;
        if (p.ordered && i >= 0 && std::abs(j - i) != 1) continue;
        out.push_back(p.choices[static_cast<std::size_t>(j)]);
      }
      break;
    }
    case ParamType::kInt: {
      if (!value.is_number()) break;
      const double x = value.get<double>();
      for (const double y : {x - static_cast<double>(p.step), x + static_cast<double>(p.step)})
        if (y >= p.low && y <= p.high) out.push_back(static_cast<int64_t>(y));
      break;
    }
    case ParamType::kFloat: {
      const double u = Space::to_unit(p, value);
      for (const double v : {u - kFloatStep, u + kFloatStep})
        if (v >= 0 && v <= 1) out.push_back(Space::from_unit(p, v));
      break;
    }
  }
  return out;
}

}  // namespace

SearcherBase::SearcherBase(const SearchSpec& spec) : spec_(spec) {
  if (spec_.objectives.empty()) spec_.objectives.push_back(Objective{"objective", true});
  if (!spec_.noisy) cardinality_ = spec_.space.cardinality();
  for (const auto& w : spec_.warm_start) remember(w.params);
}

void SearcherBase::remember(const Params& params) {
  // Only points of the space count, so that the points left are cardinality minus these.
  if (!spec_.noisy && space().contains(params).ok()) issued_.insert(space().config_key(params));
}

bool SearcherBase::issued(const Params& params) const { return issued_.count(space().config_key(params)) > 0; }

std::optional<uint64_t> SearcherBase::unissued() const noexcept {
  if (spec_.noisy || !cardinality_) return std::nullopt;
  return *cardinality_ > issued_.size() ? *cardinality_ - issued_.size() : 0;
}

std::vector<std::string> SearcherBase::notes() const {
  std::vector<std::string> out;
  if (!spec_.noisy && cardinality_ && spec_.max_trials > 0 && *cardinality_ < static_cast<uint64_t>(spec_.max_trials))
    out.push_back("the space has " + std::to_string(*cardinality_) + " points, fewer than max_trials " +
                  std::to_string(spec_.max_trials) + ": the search ends when every point has been evaluated");
  add_notes(out);
  return out;
}

Suggestion SearcherBase::issue(Params params, nlohmann::json meta) {
  Suggestion s;
  s.seq = next_seq_++;
  if (!spec_.noisy && issued(params)) {
    if (auto moved = replacement(params, s.seq)) {
      params = std::move(*moved);
      if (!meta.is_object()) meta = nlohmann::json::object();
      meta["deduplicated"] = true;
    }
  }
  remember(params);
  s.params = std::move(params);
  s.meta = std::move(meta);
  pending_[s.seq] = s.params;
  return s;
}

std::optional<Params> SearcherBase::replacement(const Params& params, int64_t seq) const {
  const Space& sp = space();
  Rng rng = rng_for(seq, kDedupSalt);
  if (unissued() == uint64_t{0}) return std::nullopt;
  // The nearest of the candidates not issued yet; ties drawn at random.
  auto nearest = [&](const std::vector<Params>& candidates) -> std::optional<Params> {
    std::vector<std::size_t> best;
    double best_d = INFINITY;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (issued(candidates[i])) continue;
      const double d = distance(sp, params, candidates[i]);
      if (d < best_d - 1e-12) {
        best_d = d;
        best.clear();
      }
      if (d <= best_d + 1e-12) best.push_back(i);
    }
    if (best.empty()) return std::nullopt;
    return candidates[best[rng.below(best.size())]];
  };
  // Moves `q` one step along parameter `p` (to a random neighbouring value), conditions repaired.
  auto move = [&](Params& q, const ParamSpec& p, const nlohmann::json& to) {
    q[p.name] = to;
    sp.repair(q, rng);  // a new parent value may bring in or drop children
  };
  if (params.is_object()) {
    // 1. Every configuration one move away.
    std::vector<Params> one;
    for (const auto& p : sp.params()) {
      auto it = params.find(p.name);
      if (it == params.end() || !Space::active(p, params)) continue;
      for (const auto& v : neighbours(p, *it)) {
        Params q = params;
        move(q, p, v);
        one.push_back(std::move(q));
      }
    }
    if (auto found = nearest(one)) return found;
    // 2. Random walks of a few moves, shortest first.
    for (int moves = 2; moves <= 6; ++moves) {
      std::vector<Params> walks;
      for (int t = 0; t < 16; ++t) {
        Params q = params;
        for (int m = 0; m < moves; ++m) {
          std::vector<const ParamSpec*> movable;
          for (const auto& p : sp.params())
            if (q.contains(p.name) && p.type != ParamType::kFixed) movable.push_back(&p);
          if (movable.empty()) break;
          const ParamSpec& p = *movable[rng.below(movable.size())];
          auto next = neighbours(p, q[p.name]);
          if (!next.empty()) move(q, p, next[rng.below(next.size())]);
        }
        walks.push_back(std::move(q));
      }
      if (auto found = nearest(walks)) return found;
    }
  }
  // 3. Uniform draws.
  for (int t = 0; t < 64; ++t) {
    Params q = sp.sample(rng);
    if (!issued(q)) return q;
  }
  // 4. A uniform pick among the points left of a finite space small enough to list (reservoir
  // sampling over the points in order: one pass, nothing held).
  if (cardinality_ && *cardinality_ <= kMaxListed) {
    std::optional<Params> pick;
    uint64_t seen = 0;
    for (uint64_t k = 0; k < *cardinality_; ++k) {
      auto q = sp.point(k);
      if (!q || issued(*q)) continue;
      if (rng.below(++seen) == 0) pick = std::move(q);
    }
    return pick;
  }
  return std::nullopt;
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
  remember(obs.params);
  if (obs.outcome != Outcome::kFailed && observation_losses(obs, spec_.objectives).empty()) {
    obs.outcome = Outcome::kFailed;  // no usable value: treat as failed rather than crash a model
    obs.values.clear();
  }
  next_seq_ = std::max(next_seq_, obs.seq + 1);
  observations_.push_back(obs);
  on_tell(observations_.back());
}

void SearcherBase::tell_report(int64_t seq, int64_t step, double value) {
  // Kept whatever the order of restore() and the replayed reports: models read them at ask time.
  if (!multi_fidelity()) return;
  reports_[seq][step] = value;
  if (told_.count(seq)) ++told_reports_;
}

void SearcherBase::adopt(const Suggestion& suggestion) {
  if (told_.count(suggestion.seq) || pending_.count(suggestion.seq)) return;
  remember(suggestion.params);
  pending_[suggestion.seq] = suggestion.params;
  next_seq_ = std::max(next_seq_, suggestion.seq + 1);
}

void SearcherBase::restore(const std::vector<Record>& history) {
  std::vector<const Record*> ordered;
  for (const auto& r : history) ordered.push_back(&r);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Record* a, const Record* b) { return a->suggestion.seq < b->suggestion.seq; });
  for (const Record* r : ordered) {
    next_seq_ = std::max(next_seq_, r->suggestion.seq + 1);
    remember(r->suggestion.params);
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
      if (!is_final(o, spec_.fidelity) || o.values.empty()) continue;
      const double v = spec_.objectives[0].maximize ? -o.values[0] : o.values[0];
      if (!best || v < (spec_.objectives[0].maximize ? -best->values[0] : best->values[0])) best = &o;
    }
    if (best) s["best"] = {{"seq", best->seq}, {"params", best->params}, {"value", best->values[0]}};
  }
  add_state(s);
  return s;
}

}  // namespace hpctune::search
