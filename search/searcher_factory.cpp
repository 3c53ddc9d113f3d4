// The one place that knows every search algorithm by name.
#include <algorithm>
#include <functional>

#include "search/auto_search.h"
#include "search/bayesian.h"
#include "search/cmaes.h"
#include "search/evolution.h"
#include "search/genetic.h"
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
  // Generation-based algorithms only (GenerationSize, searcher.h); nullptr for the others.
  std::optional<GenerationSize> (*generations)(const nlohmann::json&) = nullptr;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"random", &random_search_settings, &make_random_search},
      {"grid", &grid_search_settings, &make_grid_search},
      {"bayesian", &bayesian_settings, &make_bayesian},
      {"tpe", &tpe_settings, &make_tpe},
      {"genetic", &genetic_settings, &make_genetic, &genetic_generation_size},
      {"evolution", &evolution_settings, &make_evolution},
      {"cmaes", &cmaes_settings, &make_cmaes},
      {"rl", &rl_settings, &make_rl},
      {"auto", &auto_settings, &make_auto},
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

std::optional<GenerationSize> generation_size(const std::string& algorithm, const nlohmann::json& settings) {
  const Entry* e = lookup(algorithm);
  if (e == nullptr || e->generations == nullptr) return std::nullopt;
  return e->generations(settings);
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
