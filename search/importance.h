// Parameter importance by PED-ANOVA (Watanabe et al., "PED-ANOVA: Efficiently Quantifying
// Hyperparameter Importance in Arbitrary Subspaces", IJCAI 2023): a parameter matters as much as
// the marginal density of its values among the top-γ quantile of trials differs from its density
// among all trials, measured by the Pearson χ² divergence
//     D = ∫ p_all(x) (p_top(x) / p_all(x) − 1)² dx = ∫ p_top² / p_all dx − 1,
// with the densities estimated per parameter on its unit interval (search::Space::to_unit: log
// parameters on their log scale): a Gaussian kernel density on a fine grid for numbers, a smoothed
// histogram for categories. No surrogate model is fitted, so it costs O(trials × grid) per parameter
// and is deterministic. A pure computation: the dashboard (report/plots.h) feeds it trials.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hpctune::search {

struct ImportanceParam {
  std::string name;
  bool categorical = false;  // values are category indices 0..categories-1; else unit values in [0, 1]
  int64_t categories = 0;
};

struct ImportanceInput {
  std::vector<ImportanceParam> params;
  // One row per trial: its loss (smaller is better: a maximized objective negated) and one value
  // per parameter (nullopt when the parameter is inactive in that trial). Non-finite losses are
  // ignored.
  std::vector<double> losses;
  std::vector<std::vector<std::optional<double>>> values;
  double gamma = 0.1;       // the top quantile
  int64_t min_trials = 10;  // below this every importance is 0 (and a note says why)
};

struct ImportanceResult {
  std::string method;                               // names the method and its settings
  int64_t n_trials = 0;                             // the trials used (finite loss)
  std::vector<std::pair<std::string, double>> importances;  // sorted descending; sum 1 (or all 0)
  std::string note;                                 // why every importance is 0, when they are
};

ImportanceResult ped_anova(const ImportanceInput& input);

// The Pearson divergence of the top-γ density from the all-trials density of one parameter (the
// unnormalised importance); exposed for tests.
double pearson_divergence_numeric(const std::vector<double>& all, const std::vector<double>& top);
double pearson_divergence_categorical(const std::vector<int64_t>& all, const std::vector<int64_t>& top,
                                      int64_t categories);

}  // namespace hpctune::search
