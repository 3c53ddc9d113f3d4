// auto (auto_search.h): the rules, and the searcher that delegates to the algorithm they pick.
#include "search/auto_search.h"

#include <cmath>

#include "search/bayesian.h"
#include "search/model_data.h"
#include "search/portfolio.h"

namespace hpctune::search {

std::vector<SettingDecl> auto_settings() {
  return {
      {"gp_max_trials", SettingType::kInt, 2000, 1, 1e9, {},
       "above this budget auto runs tpe instead of the Gaussian process, whose cost grows with the trials"},
      {"forest_below_trials", SettingType::kInt, 100, 0, 1e9, {},
       "on spaces mostly of unordered choices, below this budget auto's portfolio pairs tpe with a random forest, from "
       "it on with the Gaussian process"},
  };
}

Result<AutoChoice> auto_choice(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto s, resolve_settings("auto", auto_settings(), spec.settings));
  const int64_t gp_max = s["gp_max_trials"].get<int64_t>();
  const int64_t forest_below = s["forest_below_trials"].get<int64_t>();
  int64_t searched = 0, floats = 0, ordinal = 0, categorical = 0, conditional = 0;
  for (const auto& p : spec.space.params()) {
    if (p.type == ParamType::kFixed) continue;
    ++searched;
    if (p.when) ++conditional;
    if (p.type == ParamType::kFloat) ++floats;
    else if (p.type == ParamType::kInt || (p.type == ParamType::kChoice && p.ordered)) ++ordinal;
    else ++categorical;
  }
  if (searched == 0) return AutoChoice{"random", "nothing to search: every parameter is fixed"};
  std::string space = std::to_string(searched) + " searched parameter(s): " + std::to_string(floats) + " float, " +
                      std::to_string(ordinal) + " ordinal, " + std::to_string(categorical) + " categorical" +
                      (conditional > 0 ? ", " + std::to_string(conditional) + " conditional" : "");
  if (spec.max_trials > gp_max) {
    return AutoChoice{"tpe", space + "; a budget of " + std::to_string(spec.max_trials) +
                                 " trials, above gp_max_trials " + std::to_string(gp_max) +
                                 ", where the Gaussian process would slow every ask"};
  }
  if (spec.objectives.size() <= 1 && 2 * categorical >= searched) {
    // Below 100 trials a random forest (splits "this value or not") beats the GP's overlap kernel on
    // such spaces; from 100 on the GP, with data enough for its pairwise structure, is better.
    const bool small = spec.max_trials > 0 && spec.max_trials < forest_below;
    return AutoChoice{"portfolio",
                      space + ", at least half of them unordered choices; a budget of " +
                          std::to_string(spec.max_trials) + " trials" +
                          (small ? " (below " + std::to_string(forest_below) +
                                       ": a random forest's splits need no distance between values; with tpe sharing "
                                       "the trials it had the best median on such spaces up to 60 trials, "
                                       "bench/results/search-hartmann-grid.md)"
                                 : " (from " + std::to_string(forest_below) +
                                       " on, the Gaussian process with tpe: the better portfolio at 100 and 200 trials "
                                       "on the NAS-like cells of bench/results/search.md)"),
                      {small ? "forest" : "bayesian", "tpe"}};
  }
  return AutoChoice{"bayesian", space + "; a budget of " + std::to_string(spec.max_trials) +
                                    " trials (the Gaussian process had the best median regret on most of "
                                    "bench/results/search.md's cases)"};
}

namespace {

class AutoSearch final : public Searcher {
 public:
  AutoSearch(AutoChoice choice, std::unique_ptr<Searcher> inner, std::string fidelity_note)
      : choice_(std::move(choice)), inner_(std::move(inner)), fidelity_note_(std::move(fidelity_note)) {}

  std::string name() const override { return "auto"; }
  Result<std::vector<Suggestion>> ask(std::size_t n) override { return inner_->ask(n); }
  void tell(const Observation& observation) override { inner_->tell(observation); }
  void tell_report(int64_t seq, int64_t step, double value) override { inner_->tell_report(seq, step, value); }
  bool exhausted() const override { return inner_->exhausted(); }
  void restore(const std::vector<Record>& history) override { inner_->restore(history); }
  void adopt(const Suggestion& suggestion) override { inner_->adopt(suggestion); }
  nlohmann::json state() const override {
    nlohmann::json s = inner_->state();
    if (!s.is_object()) s = nlohmann::json::object();
    s["algorithm"] = "auto";
    s["auto"] = {{"algorithm", choice_.algorithm}, {"reason", choice_.reason}};
    return s;
  }
  std::vector<std::string> notes() const override {
    std::vector<std::string> out{"auto: runs " + choice_.algorithm + " for " + choice_.reason};
    if (!fidelity_note_.empty()) out.push_back(fidelity_note_);
    for (auto& line : inner_->notes()) out.push_back(std::move(line));
    return out;
  }

 private:
  AutoChoice choice_;
  std::unique_ptr<Searcher> inner_;
  std::string fidelity_note_;  // under early stopping: how the picked algorithm models the partial values
};

// auto's line under early stopping (issue 34): which of the two ways of keeping partial values apart
// from final ones it chose. Models per level, as BOHB, rather than the step as an input of the model:
// every picked algorithm (the GP, the forest, tpe) can, and a level's values are one problem for the
// output transforms and TPE's split, where values of all steps together mix two scales.
std::string auto_fidelity_note(const SearchSpec& spec, const AutoChoice& choice) {
  if (spec.fidelity.max_step <= 0 || choice.algorithm == "random") return {};
  const std::string n = std::to_string(fidelity_min_points(spec.space));
  return "auto: under early stopping, " + choice.algorithm +
         " models per rung (the values at the highest rung, or the final step, with at least " + n +
         " values), as BOHB; partial values of pruned trials never stand for final ones";
}

}  // namespace

PortfolioMember portfolio_member(const std::string& name) {
  if (name == "forest") return PortfolioMember{name, "bayesian", {{"surrogate", "forest"}}};
  return PortfolioMember{name, name, nlohmann::json::object()};
}

Result<std::unique_ptr<Searcher>> make_auto(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(AutoChoice choice, auto_choice(spec));
  if (choice.algorithm == "portfolio") {
    PortfolioOptions options;
    for (const auto& name : choice.members) options.members.push_back(portfolio_member(name));
    options.design = default_n_initial(spec.space, spec.max_trials);
    HPCTUNE_ASSIGN(auto searcher, make_portfolio(spec, options));
    std::string note = auto_fidelity_note(spec, choice);
    return std::unique_ptr<Searcher>(std::make_unique<AutoSearch>(std::move(choice), std::move(searcher), std::move(note)));
  }
  SearchSpec inner = spec;
  inner.algorithm = choice.algorithm;
  inner.settings = nlohmann::json::object();  // the picked algorithm's defaults
  HPCTUNE_ASSIGN(auto searcher, make_searcher(inner));
  std::string note = auto_fidelity_note(spec, choice);
  return std::unique_ptr<Searcher>(std::make_unique<AutoSearch>(std::move(choice), std::move(searcher), std::move(note)));
}

}  // namespace hpctune::search
