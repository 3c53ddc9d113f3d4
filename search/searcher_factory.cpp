// The one place that knows every search algorithm by name.
#include <algorithm>
#include <functional>

#include "search/algorithms.h"
#include "search/auto_search.h"
#include "search/bayesian.h"
#include "search/cmaes.h"
#include "search/evolution.h"
#include "search/genetic.h"
#include "search/initial_design.h"
#include "search/grid_search.h"
#include "search/random_search.h"
#include "search/rl_controller.h"
#include "search/tpe.h"
#include "search/searcher.h"
#include "search/searcher_base.h"

namespace hpctune::search {

namespace {

// Every algorithm as built by make_searcher: on a finite space it is never asked for more
// suggestions than there are points left (SearcherBase::unissued), so that issue() always finds a
// configuration not evaluated yet, and it is exhausted once every point was issued, whatever the
// algorithm would do next. Algorithms override ask(), so this cannot live in SearcherBase.
class FiniteSpaceGuard final : public Searcher {
 public:
  explicit FiniteSpaceGuard(std::unique_ptr<Searcher> inner)
      : inner_(std::move(inner)), base_(dynamic_cast<const SearcherBase*>(inner_.get())) {}
  std::string name() const override { return inner_->name(); }
  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    if (base_) {
      if (const auto left = base_->unissued()) n = static_cast<std::size_t>(std::min<uint64_t>(n, *left));
    }
    if (n == 0) return std::vector<Suggestion>{};
    return inner_->ask(n);
  }
  void tell(const Observation& observation) override { inner_->tell(observation); }
  void tell_report(int64_t seq, int64_t step, double value) override { inner_->tell_report(seq, step, value); }
  bool exhausted() const override { return inner_->exhausted() || (base_ && base_->space_exhausted()); }
  void restore(const std::vector<Record>& history) override { inner_->restore(history); }
  void adopt(const Suggestion& suggestion) override { inner_->adopt(suggestion); }
  nlohmann::json state() const override { return inner_->state(); }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 private:
  std::unique_ptr<Searcher> inner_;
  const SearcherBase* base_;
};

struct Entry {
  const char* name;
  std::vector<SettingDecl> (*settings)();
  Result<std::unique_ptr<Searcher>> (*make)(const SearchSpec&);
  AlgorithmTraits traits;
  // Generation-based algorithms only (GenerationSize, searcher.h); nullptr for the others.
  std::optional<GenerationSize> (*generations)(const nlohmann::json& settings, std::size_t objectives) = nullptr;
};

int64_t tpe_default_startup(const Space& space, int64_t max_trials) {
  int64_t searched = 0;
  for (const auto& p : space.params()) searched += p.type == ParamType::kFixed ? 0 : 1;
  return startup_trials(max_trials, searched);
}
int64_t bayesian_default_startup(const Space& space, int64_t max_trials) { return default_n_initial(space, max_trials); }

std::optional<SettingsProblem> evolution_check(const nlohmann::json& s) {
  const int64_t p = s["population"].get<int64_t>(), k = s["sample_size"].get<int64_t>();
  if (k <= p) return std::nullopt;
  return SettingsProblem{{"sample_size", "population"},
                         "sample_size (" + std::to_string(k) + ") must be at most population (" + std::to_string(p) + ")"};
}

// genetic: the elite carried unchanged must leave room for a child in each generation (make_genetic
// refuses it too; here validate says it where the settings are).
std::optional<SettingsProblem> genetic_check(const nlohmann::json& s) {
  const int64_t p = s["population"].get<int64_t>(), e = s["elitism"].get<int64_t>();
  if (e < p) return std::nullopt;
  return SettingsProblem{{"elitism", "population"}, "elitism (" + std::to_string(e) + ") must be below population (" +
                                                        std::to_string(p) + "): the elite would fill every generation"};
}

AlgorithmTraits model(const char* help, const char* startup, int64_t (*default_startup)(const Space&, int64_t)) {
  return {.help = help, .model_based = true, .startup_setting = startup, .default_startup = default_startup};
}

// What each algorithm is (search/algorithms.h), beside its settings and its factory; in the order
// the config lists them after the default (config/settings.cpp: search.algorithm's choices).
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"random", &random_search_settings, &make_random_search, {.help = "uniform random sampling"}},
      {"grid", &grid_search_settings, &make_grid_search, {.help = "every point of a grid", .enumerates = true}},
      {"genetic", &genetic_settings, &make_genetic,
       {.help = "a genetic algorithm (generations of islands)",
        .breeds = true,
        .population_setting = "population",
        .check_settings = &genetic_check},
       &genetic_generation_size},
      {"evolution", &evolution_settings, &make_evolution,
       {.help = "aging (regularized) evolution",
        .breeds = true,
        .population_setting = "population",
        .check_settings = &evolution_check}},
      {"bayesian", &bayesian_settings, &make_bayesian,
       model("Gaussian-process Bayesian optimisation", "n_initial", &bayesian_default_startup)},
      {"tpe", &tpe_settings, &make_tpe, model("a tree-structured Parzen estimator", "n_startup", &tpe_default_startup)},
      {"cmaes", &cmaes_settings, &make_cmaes,
       {.help = "CMA-ES (adapts one Gaussian to the ranking of one objective)", .multi_objective = false}},
      {"rl", &rl_settings, &make_rl,
       {.help = "a REINFORCE controller (its reward is one number)", .multi_objective = false}},
      {"auto", &auto_settings, &make_auto, {.help = "picks one of the others", .picks_another = true}},
  };
  return entries;
}

const Entry* lookup(const std::string& name) {
  for (const auto& e : registry())
    if (name == e.name) return &e;
  return nullptr;
}

Error unknown(const std::string& name) {
  std::string valid;
  for (const auto& e : registry()) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  return err(Errc::kConfig, "algorithm: unknown search algorithm '" + name + "' (valid: " + valid + ")");
}

}  // namespace

std::vector<std::string> searcher_names() {
  std::vector<std::string> out;
  for (const auto& e : registry()) out.emplace_back(e.name);
  return out;
}

Result<std::vector<SettingDecl>> searcher_settings(const std::string& algorithm) {
  const Entry* e = lookup(algorithm);
  if (!e) return unknown(algorithm);
  return e->settings();
}

std::optional<GenerationSize> generation_size(const std::string& algorithm, const nlohmann::json& settings,
                                              std::size_t objectives) {
  const Entry* e = lookup(algorithm);
  if (e == nullptr || e->generations == nullptr) return std::nullopt;
  return e->generations(settings, objectives);
}

const AlgorithmTraits* algorithm_traits(const std::string& algorithm) {
  const Entry* e = lookup(algorithm);
  return e ? &e->traits : nullptr;
}

std::string default_algorithm() { return "auto"; }

std::optional<ModelStartupInfo> model_startup_of(const SearchSpec& spec) {
  std::string name = spec.algorithm, algorithm = spec.algorithm;
  nlohmann::json settings = spec.settings.is_object() ? spec.settings : nlohmann::json::object();
  const AlgorithmTraits* traits = algorithm_traits(algorithm);
  if (traits && traits->picks_another) {  // what auto runs, with that algorithm's defaults
    auto picked = auto_choice(spec);
    if (!picked.ok()) return std::nullopt;
    name = algorithm = picked->algorithm;
    settings = nlohmann::json::object();
    if (!picked->members.empty()) {  // a portfolio starts with its first member's design (portfolio.h)
      const PortfolioMember first = portfolio_member(picked->members.front());
      name = first.name;
      algorithm = first.algorithm;
    }
    traits = algorithm_traits(algorithm);
  }
  if (traits == nullptr || !traits->model_based) return std::nullopt;
  ModelStartupInfo out{name, traits->startup_setting, 0};
  const nlohmann::json given = settings.contains(out.setting) ? settings[out.setting] : nlohmann::json();
  out.random_trials = given.is_number_integer() ? given.get<int64_t>() : traits->default_startup(spec.space, spec.max_trials);
  return out;
}

std::optional<int64_t> population_trials(const std::string& algorithm, const nlohmann::json& settings) {
  if (auto g = generation_size(algorithm, settings)) return g->trials;
  const AlgorithmTraits* traits = algorithm_traits(algorithm);
  if (traits == nullptr || *traits->population_setting == 0) return std::nullopt;
  const char* key = traits->population_setting;
  if (settings.is_object() && settings.contains(key) && settings[key].is_number_integer())
    return std::max<int64_t>(1, settings[key].get<int64_t>());
  auto decls = searcher_settings(algorithm);
  if (decls.ok())
    for (const auto& d : *decls)
      if (d.key == key && d.default_value.is_number_integer()) return d.default_value.get<int64_t>();
  return std::nullopt;
}

Result<std::unique_ptr<Searcher>> make_searcher(const SearchSpec& spec) {
  const Entry* e = lookup(spec.algorithm);
  if (!e) return unknown(spec.algorithm);
  for (std::size_t i = 0; i < spec.objectives.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (spec.objectives[i].metric == spec.objectives[j].metric)
        return err(Errc::kConfig, "objectives: the metric '" + spec.objectives[i].metric + "' is listed twice");
  auto made = e->make(spec);
  if (!made.ok()) return std::move(made).error().with_context("while setting up the '" + spec.algorithm + "' search");
  return std::unique_ptr<Searcher>(std::make_unique<FiniteSpaceGuard>(std::move(made).value()));
}

}  // namespace hpctune::search
