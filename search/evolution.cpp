#include "search/evolution.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "search/encoding.h"
#include "search/initial_design.h"
#include "search/model_data.h"
#include "search/pareto.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
// Mutations of one parent tried for a child not issued yet.
constexpr int kMutationTries = 32;
}

std::vector<SettingDecl> evolution_settings() {
  return {
      {"population", SettingType::kInt, 20, 2, 1000000, {}, "population size P"},
      {"sample_size", SettingType::kInt, 5, 1, 1000000, {}, "tournament sample size S (at most P)"},
      {"mutation_rate", SettingType::kFloat, nullptr, 0.0, 1.0, {}, "per-parameter mutation probability (default 1/d)"},
      {"mutation_sigma", SettingType::kFloat, 0.15, 1e-6, 1.0, {}, "Gaussian step for numbers, in unit space (levels: sigma x levels, at least 1)"},
      {"init", SettingType::kString, "lhs", -kInf, kInf, {"uniform", "sobol", "lhs"}, "initial design"},
  };
}

namespace {

class Evolution final : public SearcherBase {
 public:
  Evolution(const SearchSpec& spec, int64_t population, int64_t sample_size, double rate, double sigma, DesignKind init)
      : SearcherBase(spec),
        population_(population),
        sample_size_(std::min(sample_size, population)),
        rate_(rate),
        sigma_(sigma),
        enc_(space()),
        design_(space(), init, spec.seed, population) {
    // The best P warm-start trials form the initial population (failed ones are useless here).
    std::vector<DataPoint> warm;
    for (auto& p : warm_start_points(space(), enc_, this->spec()))
      if (!p.losses.empty()) warm.push_back(std::move(p));
    std::vector<std::vector<double>> losses;
    for (const auto& p : warm) losses.push_back(p.losses);
    std::vector<std::size_t> order;
    for (const auto& front : nondominated_sort(losses))
      for (std::size_t i : front) order.push_back(i);
    if (num_objectives() == 1)
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return losses[a][0] < losses[b][0]; });
    for (std::size_t r = 0; r < order.size() && r < static_cast<std::size_t>(population); ++r) {
      data_.push_back(warm[order[r]]);
      data_.back().seq = -1 - static_cast<int64_t>(r);
    }
  }

  std::string name() const override { return "evolution"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    for (std::size_t i = 0; i < n; ++i) {
      const int64_t seq = next_seq();
      const int64_t warm = static_cast<int64_t>(std::min<std::size_t>(data_warm(), static_cast<std::size_t>(population_)));
      std::vector<const DataPoint*> pop = population();
      bool any_usable = false;
      for (const auto* p : pop) any_usable = any_usable || !p->losses.empty();
      if (seq < population_ - warm || !any_usable) {
        out.push_back(issue(design_.point(seq), {{"source", "initial"}}));
        continue;
      }
      Rng rng = rng_for(seq, 0xE7);
      // Sample S members without replacement (partial Fisher-Yates), keep the best.
      std::vector<std::size_t> idx(pop.size());
      for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = k;
      const auto s = std::min<std::size_t>(static_cast<std::size_t>(sample_size_), idx.size());
      for (std::size_t k = 0; k < s; ++k) std::swap(idx[k], idx[k + rng.below(idx.size() - k)]);
      std::vector<std::size_t> sample(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(s));
      const DataPoint* parent = pick_best(pop, sample, rng);
      const double rate = rate_ >= 0 ? rate_ : 1.0 / static_cast<double>(std::max<std::size_t>(1, enc_.dims()));
      // A child already issued is drawn again from the same parent (the next mutation the algorithm
      // itself would make), up to kMutationTries times, before SearcherBase::issue moves it: on a
      // small discrete space, mutations of a good parent collide often, and a fresh mutation of it
      // is worth more than a point next to the repeat.
      Params child;
      for (int attempt = 0; attempt < kMutationTries; ++attempt) {
        std::vector<double> u = parent->u;
        enc_.repair(u, rng);
        enc_.mutate(u, rate, sigma_, rng, /*at_least_one=*/true);
        child = enc_.decode(u);
        if (!issued(child)) break;
      }
      out.push_back(issue(std::move(child), {{"source", "mutation"}, {"parents", nlohmann::json::array({parent->seq})}}));
    }
    return out;
  }

 private:
  void on_tell(const Observation& obs) override { data_.push_back(make_data_point(enc_, obs, objectives())); }

  void add_state(nlohmann::json& s) const override {
    nlohmann::json members = nlohmann::json::array();
    for (const auto* p : population()) members.push_back(p->seq);
    s["population"] = members;
  }

  std::size_t data_warm() const {
    std::size_t k = 0;
    for (const auto& p : data_) k += p.seq < 0 ? 1 : 0;
    return k;
  }

  // The P youngest finished members, by seq.
  std::vector<const DataPoint*> population() const {
    std::vector<const DataPoint*> all;
    for (const auto& p : data_) all.push_back(&p);
    std::stable_sort(all.begin(), all.end(), [](const DataPoint* a, const DataPoint* b) { return a->seq < b->seq; });
    if (all.size() > static_cast<std::size_t>(population_))
      all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(population_));
    return all;
  }

  const DataPoint* pick_best(const std::vector<const DataPoint*>& pop, const std::vector<std::size_t>& sample, Rng& rng) const {
    if (num_objectives() == 1) {
      const DataPoint* best = pop[sample[0]];
      auto loss = [](const DataPoint* p) { return p->losses.empty() ? kInf : p->losses[0]; };
      for (std::size_t k : sample)
        if (loss(pop[k]) < loss(best)) best = pop[k];
      return best;
    }
    std::vector<std::vector<double>> losses;
    for (std::size_t k : sample)
      losses.push_back(pop[k]->losses.empty() ? std::vector<double>(num_objectives(), kInf) : pop[k]->losses);
    const auto front = pareto_front(losses);
    return pop[sample[front[rng.below(front.size())]]];
  }

  int64_t population_, sample_size_;
  double rate_, sigma_;
  Encoder enc_;
  InitialDesign design_;
  std::vector<DataPoint> data_;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_evolution(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto s, resolve_settings("evolution", evolution_settings(), spec.settings));
  DesignKind init;
  if (!parse_design_kind(s["init"].get<std::string>(), init)) {
    return err(Errc::kConfig, "init: unknown initial design '" + s["init"].get<std::string>() + "'");
  }
  const int64_t p = s["population"].get<int64_t>(), k = s["sample_size"].get<int64_t>();
  if (k > p) {
    std::string msg = "sample_size: must be at most population (";
    msg += std::to_string(p);
    msg += "), got ";
    msg += std::to_string(k);
    return err(Errc::kConfig, msg);
  }
  return std::unique_ptr<Searcher>(std::make_unique<Evolution>(spec, p, k,
                                                                s["mutation_rate"].is_null() ? -1.0 : s["mutation_rate"].get<double>(),
                                                                s["mutation_sigma"].get<double>(), init));
}

}  // namespace hpctune::search
