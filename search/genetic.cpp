#include "search/genetic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "search/encoding.h"
#include "search/initial_design.h"
#include "search/model_data.h"
#include "search/pareto.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

std::vector<SettingDecl> genetic_settings() {
  return {
      {"population", SettingType::kInt, 10, 2, 1000000, {}, "members per island and generation"},
      {"generations", SettingType::kInt, 0, 0, 1000000, {}, "generations to run (0: until the budget ends)"},
      {"tournament_size", SettingType::kInt, 3, 1, 1000, {}, "tournament selection size"},
      {"crossover", SettingType::kString, "uniform", -kInf, kInf, {"uniform", "one_point"}, "crossover operator"},
      {"crossover_rate", SettingType::kFloat, 0.9, 0.0, 1.0, {}, "probability that a child is a crossover"},
      {"mutation_rate", SettingType::kFloat, nullptr, 0.0, 1.0, {}, "per-parameter mutation probability (default 1/d)"},
      {"mutation_sigma", SettingType::kFloat, 0.1, 1e-6, 1.0, {}, "Gaussian step for numbers, in unit space (levels: sigma x levels, at least 1)"},
      {"elitism", SettingType::kInt, 1, 0, 1000000, {}, "best members carried unchanged into the next generation"},
      {"islands", SettingType::kInt, 1, 1, 1000, {}, "number of islands (demes)"},
      {"migration_interval", SettingType::kInt, 5, 0, 1000000, {}, "generations between migrations (0: never)"},
      {"migration_size", SettingType::kInt, 1, 0, 1000000, {}, "migrants per migration"},
      {"min_complete_fraction", SettingType::kFloat, 1.0, 0.01, 1.0, {}, "finished fraction needed to breed"},
      {"init", SettingType::kString, "lhs", -kInf, kInf, {"uniform", "sobol", "lhs"}, "design of generation 0"},
  };
}

std::optional<GenerationSize> genetic_generation_size(const nlohmann::json& settings, std::size_t objectives) {
  auto integer = [&](const char* key, int64_t fallback) {
    return settings.is_object() && settings.contains(key) && settings[key].is_number_integer() ? settings[key].get<int64_t>()
                                                                                                : fallback;
  };
  const bool fraction_given = settings.is_object() && settings.contains("min_complete_fraction") &&
                              settings["min_complete_fraction"].is_number();
  GenerationSize g;
  g.population_setting = "population";
  g.per_unit = std::max<int64_t>(1, integer("islands", 1));
  const int64_t population = std::max<int64_t>(1, integer("population", 10));
  g.trials = population * g.per_unit;
  if (objectives <= 1) g.carried = std::clamp<int64_t>(integer("elitism", 1), 0, population - 1) * g.per_unit;
  g.in_step = !fraction_given || settings["min_complete_fraction"].get<double>() >= 1.0;
  return g;
}

namespace {

struct GaConfig {
  int64_t population, generations, tournament, elitism, islands, migration_interval, migration_size;
  bool one_point;
  double crossover_rate, mutation_rate, mutation_sigma, min_complete_fraction;
  DesignKind init;
};

// An evaluated (or to-be-evaluated) individual.
struct Individual {
  int64_t seq = std::numeric_limits<int64_t>::min();  // min(): not suggested yet
  std::vector<double> u;
  std::vector<double> losses;  // empty: failed (when finished)
  bool finished = false;
  std::vector<int64_t> parents;
};

struct Generation {
  int64_t index = 0;
  std::vector<Individual> children;  // the members run in this generation, in breeding order
  std::vector<Individual> carried;   // elites, already evaluated
  std::vector<int64_t> migrants;     // seqs of the migrants in the pool this generation was bred from
  std::size_t issued = 0;            // children suggested so far
};

struct Island {
  std::vector<Generation> generations;
  std::vector<Individual> survivors;  // the pool of the last breeding (NSGA-II: its survivors), best first
  std::vector<Individual> late;       // stragglers finished after their generation was bred from
  bool done = false;                  // the generation limit was reached
};

class Genetic final : public SearcherBase {
 public:
  Genetic(const SearchSpec& spec, const GaConfig& cfg)
      : SearcherBase(spec), cfg_(cfg), enc_(space()), design_(space(), cfg.init, spec.seed, cfg.population * cfg.islands) {
    islands_.resize(static_cast<std::size_t>(cfg_.islands));
    // Generation 0: the best warm-start trials (dealt round-robin to the islands), then the design.
    std::vector<DataPoint> warm = warm_start_points(space(), enc_, this->spec());
    std::vector<Individual> warm_ind;
    for (auto& p : warm) {
      if (p.losses.empty()) continue;
      Individual ind;
      ind.seq = p.seq;
      ind.u = p.u;
      Rng r(derive_seed(spec.seed, 0x3A94));
      enc_.repair(ind.u, r);
      ind.losses = p.losses;
      ind.finished = true;
      warm_ind.push_back(std::move(ind));
    }
    rank_in_place(warm_ind);
    int64_t design_k = 0;
    for (std::size_t i = 0; i < islands_.size(); ++i) {
      Generation g;
      g.index = 0;
      for (std::size_t j = i; j < warm_ind.size() && static_cast<int64_t>(g.carried.size()) < cfg_.population; j += islands_.size())
        g.carried.push_back(warm_ind[j]);
      while (static_cast<int64_t>(g.carried.size() + g.children.size()) < cfg_.population) {
        Individual ind;
        ind.u = enc_.encode(design_.point(design_k++));
        g.children.push_back(std::move(ind));
      }
      islands_[i].generations.push_back(std::move(g));
    }
  }

  std::string name() const override { return "genetic"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    while (out.size() < n) {
      auto next = next_child();
      if (!next) break;
      auto [island, gen_pos] = *next;
      Generation& g = islands_[island].generations[gen_pos];
      Individual& ind = g.children[g.issued++];
      Suggestion s = issue(enc_.decode(ind.u), meta(island, g.index, ind));
      // A repeat moved by issue(): the genome is what was evaluated, as restore() would see it.
      if (s.meta.contains("deduplicated")) ind.u = enc_.encode(s.params);
      ind.seq = s.seq;
      where_[s.seq] = {island, gen_pos, g.issued - 1};
      out.push_back(std::move(s));
    }
    return out;
  }

  bool exhausted() const override {
    for (const auto& isl : islands_) {
      if (!isl.done) return false;
      const Generation& g = isl.generations.back();
      if (g.issued < g.children.size()) return false;
    }
    return true;
  }

 private:
  struct Where {
    std::size_t island, gen_pos, child;
  };

  nlohmann::json meta(std::size_t island, int64_t generation, const Individual& ind) const {
    return {{"generation", generation}, {"island", island}, {"parents", ind.parents}};
  }

  // The island and generation of the next child to suggest, breeding when a generation is ready.
  std::optional<std::pair<std::size_t, std::size_t>> next_child(bool force_breed = false) {
    for (std::size_t t = 0; t < islands_.size(); ++t) {
      const std::size_t i = (rr_ + t) % islands_.size();
      Island& isl = islands_[i];
      Generation* g = &isl.generations.back();
      if (g->issued >= g->children.size() && !isl.done && (force_breed || ready(*g))) {
        breed(i);
        g = &isl.generations.back();
      }
      if (g->issued < g->children.size()) {
        rr_ = (i + 1) % islands_.size();
        return std::make_pair(i, isl.generations.size() - 1);
      }
    }
    return std::nullopt;
  }

  bool ready(const Generation& g) const {
    std::size_t finished = 0;
    for (const auto& c : g.children) finished += c.finished ? 1 : 0;
    const double need = std::ceil(cfg_.min_complete_fraction * static_cast<double>(g.children.size()) - 1e-9);
    return static_cast<double>(finished) >= need;
  }

  static double loss0(const Individual& ind) { return ind.losses.empty() ? kInf : ind.losses[0]; }

  // Sorts best first: by loss, or NSGA-II (rank, then crowding) with several objectives.
  // Returns the rank and crowding of each (after sorting) for tournaments.
  void rank_in_place(std::vector<Individual>& v, std::vector<double>* key = nullptr) const {
    std::vector<std::size_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<double> k(v.size());
    if (num_objectives() == 1) {
      for (std::size_t i = 0; i < v.size(); ++i) k[i] = loss0(v[i]);
    } else {
      std::vector<std::vector<double>> losses;
      for (const auto& ind : v) losses.push_back(ind.losses.empty() ? std::vector<double>(num_objectives(), kInf) : ind.losses);
      const auto fronts = nondominated_sort(losses);
      for (std::size_t r = 0; r < fronts.size(); ++r) {
        const auto cd = crowding_distance(losses, fronts[r]);
        // Key: rank, then larger crowding first (mapped into (0, 1)).
        for (std::size_t j = 0; j < fronts[r].size(); ++j)
          k[fronts[r][j]] = static_cast<double>(r) + (std::isinf(cd[j]) ? 0.0 : 1.0 / (2.0 + cd[j]));
      }
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (k[a] != k[b]) return k[a] < k[b];
      return v[a].seq < v[b].seq;
    });
    std::vector<Individual> sorted;
    std::vector<double> sorted_k;
    for (std::size_t i : order) {
      sorted.push_back(std::move(v[i]));
      sorted_k.push_back(k[i]);
    }
    v = std::move(sorted);
    if (key) *key = std::move(sorted_k);
  }

  std::size_t tournament(const std::vector<double>& key, Rng& rng) const {
    std::size_t best = rng.below(key.size());
    for (int64_t t = 1; t < cfg_.tournament; ++t) {
      const std::size_t c = rng.below(key.size());
      if (key[c] < key[best]) best = c;
    }
    return best;
  }

  void breed(std::size_t island) {
    Island& isl = islands_[island];
    const Generation& cur = isl.generations.back();
    const int64_t next_index = cur.index + 1;
    if (cfg_.generations > 0 && next_index >= cfg_.generations) {
      isl.done = true;
      return;
    }
    Rng rng(derive_seed(derive_seed(spec().seed, 0x6A + island), static_cast<uint64_t>(next_index)));
    // The pool: finished children, carried members, stragglers; migrants every migration_interval.
    std::vector<Individual> pool;
    std::vector<int64_t> migrants;
    for (const auto& c : cur.children)
      if (c.finished) pool.push_back(c);
    for (const auto& c : cur.carried) pool.push_back(c);
    for (auto& c : isl.late) pool.push_back(std::move(c));
    isl.late.clear();
    if (islands_.size() > 1 && cfg_.migration_interval > 0 && next_index % cfg_.migration_interval == 0) {
      // Copies of the best trials run on the previous island so far (not those it received, so a
      // migrant travels one hop per migration).
      const Island& from = islands_[(island + islands_.size() - 1) % islands_.size()];
      std::vector<Individual> own;
      for (const auto& g : from.generations)
        for (const auto& c : g.children)
          if (c.finished && !c.losses.empty()) own.push_back(c);
      rank_in_place(own);
      for (int64_t m = 0; m < cfg_.migration_size && m < static_cast<int64_t>(own.size()); ++m) {
        pool.push_back(own[static_cast<std::size_t>(m)]);
        migrants.push_back(pool.back().seq);
      }
    }
    if (num_objectives() > 1)
      for (const auto& s : isl.survivors) pool.push_back(s);
    // Duplicates (a migrant that is also a survivor) would double their chances.
    std::sort(pool.begin(), pool.end(), [](const Individual& a, const Individual& b) { return a.seq < b.seq; });
    pool.erase(std::unique(pool.begin(), pool.end(), [](const Individual& a, const Individual& b) { return a.seq == b.seq; }),
               pool.end());
    std::vector<double> key;
    rank_in_place(pool, &key);

    Generation next;
    next.index = next_index;
    next.migrants = std::move(migrants);
    std::size_t n_children = static_cast<std::size_t>(cfg_.population);
    if (num_objectives() == 1) {
      isl.survivors = pool;
      const auto e = std::min<std::size_t>(static_cast<std::size_t>(cfg_.elitism), pool.size());
      for (std::size_t k = 0; k < e && !pool[k].losses.empty(); ++k) next.carried.push_back(pool[k]);
      n_children -= std::min(n_children, next.carried.size());
    } else {
      if (pool.size() > static_cast<std::size_t>(cfg_.population)) {
        pool.resize(static_cast<std::size_t>(cfg_.population));
        key.resize(pool.size());
        rank_in_place(pool, &key);  // rank and crowding among the survivors only
      }
      isl.survivors = pool;
    }
    const double rate = cfg_.mutation_rate >= 0 ? cfg_.mutation_rate : 1.0 / static_cast<double>(std::max<std::size_t>(1, enc_.dims()));
    for (std::size_t c = 0; c < n_children; ++c) {
      Individual child;
      if (pool.empty()) {
        child.u = enc_.encode(space().sample(rng));
        next.children.push_back(std::move(child));
        continue;
      }
      const Individual& a = pool[tournament(key, rng)];
      const Individual& b = pool[tournament(key, rng)];
      child.u = a.u;
      child.parents = {a.seq};
      if (rng.bernoulli(cfg_.crossover_rate) && a.seq != b.seq) {
        child.parents.push_back(b.seq);
        const std::size_t d = enc_.dims();
        if (cfg_.one_point) {
          const std::size_t cut = d > 1 ? 1 + rng.below(d - 1) : 0;
          for (std::size_t i = cut; i < d; ++i) child.u[i] = b.u[i];
        } else {
          for (std::size_t i = 0; i < d; ++i)
            if (rng.bernoulli(0.5)) child.u[i] = b.u[i];
        }
      }
      enc_.repair(child.u, rng);
      enc_.mutate(child.u, rate, cfg_.mutation_sigma, rng, false);
      auto same = [&](const std::vector<double>& x) {
        for (std::size_t i = 0; i < x.size(); ++i)
          if (!(x[i] == child.u[i] || (std::isnan(x[i]) && std::isnan(child.u[i])))) return false;
        return true;
      };
      if (same(a.u) || same(b.u)) enc_.mutate(child.u, rate, cfg_.mutation_sigma, rng, true);
      next.children.push_back(std::move(child));
    }
    isl.generations.push_back(std::move(next));
  }

  void on_tell(const Observation& obs) override {
    auto it = where_.find(obs.seq);
    if (it == where_.end()) return;
    const Where w = it->second;
    Island& isl = islands_[w.island];
    Individual& ind = isl.generations[w.gen_pos].children[w.child];
    ind.finished = true;
    ind.losses = observation_losses(obs, objectives());
    // A straggler: its generation was already bred from, so it joins the next pool.
    if (w.gen_pos + 1 < isl.generations.size()) isl.late.push_back(ind);
  }

  void on_restore_suggestion(const Suggestion& s) override {
    // Re-issue through the live path, breeding regardless of stragglers (the recorded suggestion
    // proves the generation existed), and keep the recorded parameters.
    auto next = next_child(/*force_breed=*/true);
    if (!next) return;
    auto [island, gen_pos] = *next;
    Generation& g = islands_[island].generations[gen_pos];
    Individual& ind = g.children[g.issued++];
    ind.seq = s.seq;
    ind.u = enc_.encode(s.params);
    where_[s.seq] = {island, gen_pos, g.issued - 1};
  }

  void add_state(nlohmann::json& s) const override {
    nlohmann::json islands = nlohmann::json::array();
    for (const auto& isl : islands_) {
      nlohmann::json gens = nlohmann::json::array();
      for (const auto& g : isl.generations) {
        nlohmann::json members = nlohmann::json::array(), carried = nlohmann::json::array();
        for (const auto& c : g.children)
          if (c.seq != std::numeric_limits<int64_t>::min()) members.push_back(c.seq);
        for (const auto& c : g.carried) carried.push_back(c.seq);
        gens.push_back({{"generation", g.index},
                        {"members", members},
                        {"carried", carried},
                        {"migrants", g.migrants},
                        {"size", g.children.size()}});
      }
      nlohmann::json survivors = nlohmann::json::array();
      for (const auto& c : isl.survivors) survivors.push_back(c.seq);
      islands.push_back({{"generations", gens}, {"survivors", survivors}, {"done", isl.done}});
    }
    s["islands"] = islands;
  }

  GaConfig cfg_;
  Encoder enc_;
  InitialDesign design_;
  std::vector<Island> islands_;
  std::map<int64_t, Where> where_;
  std::size_t rr_ = 0;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_genetic(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto s, resolve_settings("genetic", genetic_settings(), spec.settings));
  GaConfig c;
  c.population = s["population"].get<int64_t>();
  c.generations = s["generations"].get<int64_t>();
  c.tournament = s["tournament_size"].get<int64_t>();
  c.one_point = s["crossover"] == "one_point";
  c.crossover_rate = s["crossover_rate"].get<double>();
  c.mutation_rate = s["mutation_rate"].is_null() ? -1.0 : s["mutation_rate"].get<double>();
  c.mutation_sigma = s["mutation_sigma"].get<double>();
  c.elitism = s["elitism"].get<int64_t>();
  c.islands = s["islands"].get<int64_t>();
  c.migration_interval = s["migration_interval"].get<int64_t>();
  c.migration_size = s["migration_size"].get<int64_t>();
  c.min_complete_fraction = s["min_complete_fraction"].get<double>();
  (void)parse_design_kind(s["init"].get<std::string>(), c.init);
  if (c.elitism >= c.population)
    return err(Errc::kConfig, "elitism: must be below population (" + std::to_string(c.population) + ")");
  return std::unique_ptr<Searcher>(std::make_unique<Genetic>(spec, c));
}

}  // namespace hpctune::search
