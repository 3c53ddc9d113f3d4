// PED-ANOVA parameter importance (importance.h).
#include "search/importance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace hpctune::search {

namespace {

constexpr int kGrid = 200;  // evaluation points of the kernel densities on [0, 1]

// Scott's rule on [0, 1], bounded below so that a handful of equal values still gives a density
// (not a spike whose divergence explodes) and above so that a spread sample stays informative.
double bandwidth(const std::vector<double>& xs) {
  const double n = static_cast<double>(xs.size());
  const double mean = std::accumulate(xs.begin(), xs.end(), 0.0) / n;
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  const double sd = n > 1 ? std::sqrt(var / (n - 1)) : 0.0;
  return std::clamp(1.059 * sd * std::pow(n, -0.2), 0.02, 0.5);
}

// A Gaussian kernel density of `xs` evaluated at the grid's midpoints, as probabilities (sum 1).
// The values are binned on the grid first (counts), then the counts convolved with the kernel:
// O(n + grid²) whatever the number of trials. Kernels are reflected at 0 and 1 so that mass near
// a bound is not lost.
std::vector<double> kde(const std::vector<double>& xs) {
  std::vector<double> counts(kGrid, 0.0), p(kGrid, 0.0);
  for (double x : xs) counts[static_cast<size_t>(std::min<double>(kGrid - 1, std::floor(x * kGrid)))] += 1.0;
  const double h = bandwidth(xs);
  // Bin b's centre and grid point g are (b + 0.5) / kGrid and (g + 0.5) / kGrid apart by (g - b) /
  // kGrid, and from b's reflections at 0 and 1 by (g + b + 1) / kGrid and (g + b + 1 - 2 kGrid) /
  // kGrid: every distance is a whole number of grid steps, so the kernel is a table by offset.
  std::vector<double> kernel(4 * kGrid + 1);
  for (int d = -2 * kGrid; d <= 2 * kGrid; ++d) {
    const double z = static_cast<double>(d) / kGrid / h;
    kernel[static_cast<size_t>(d + 2 * kGrid)] = std::exp(-0.5 * z * z);
  }
  auto k = [&](int d) { return kernel[static_cast<size_t>(d + 2 * kGrid)]; };
  for (int b = 0; b < kGrid; ++b) {
    if (counts[b] == 0) continue;
    for (int g = 0; g < kGrid; ++g) p[g] += counts[b] * (k(g - b) + k(g + b + 1) + k(g + b + 1 - 2 * kGrid));
  }
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& v : p) v = sum > 0 ? v / sum : 1.0 / kGrid;
  return p;
}

double divergence(const std::vector<double>& p_all, const std::vector<double>& p_top) {
  double d = 0;
  for (size_t i = 0; i < p_all.size(); ++i) {
    if (p_all[i] > 0) d += p_top[i] * p_top[i] / p_all[i];
  }
  return std::max(0.0, d - 1.0);
}

}  // namespace

double pearson_divergence_numeric(const std::vector<double>& all, const std::vector<double>& top) {
  if (all.size() < 2 || top.empty()) return 0.0;
  auto clamp01 = [](std::vector<double> v) {
    for (double& x : v) x = std::isfinite(x) ? std::clamp(x, 0.0, 1.0) : 0.5;
    return v;
  };
  return divergence(kde(clamp01(all)), kde(clamp01(top)));
}

double pearson_divergence_categorical(const std::vector<int64_t>& all, const std::vector<int64_t>& top,
                                      int64_t categories) {
  if (categories < 2 || all.size() < 2 || top.empty()) return 0.0;
  // Histograms with one pseudo-count per category (a uniform prior): an empty category of the top
  // set is not "impossible", and few trials do not make wild ratios.
  auto histogram = [&](const std::vector<int64_t>& v) {
    std::vector<double> p(static_cast<size_t>(categories), 1.0);
    for (int64_t c : v) {
      if (c >= 0 && c < categories) p[static_cast<size_t>(c)] += 1.0;
    }
    const double sum = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& x : p) x /= sum;
    return p;
  };
  return divergence(histogram(all), histogram(top));
}

ImportanceResult ped_anova(const ImportanceInput& in) {
  ImportanceResult out;
  char method[320];
  std::snprintf(method, sizeof(method),
                "PED-ANOVA (γ = %g: Pearson divergence of the top %g%% trials' marginal densities from all "
                "trials', per parameter on its (log-)scaled unit interval)",
                in.gamma, in.gamma * 100);
  out.method = method;
  std::vector<size_t> rows;
  for (size_t i = 0; i < in.losses.size() && i < in.values.size(); ++i) {
    if (std::isfinite(in.losses[i])) rows.push_back(i);
  }
  out.n_trials = static_cast<int64_t>(rows.size());
  for (const auto& p : in.params) out.importances.emplace_back(p.name, 0.0);
  if (out.n_trials < in.min_trials || in.params.empty()) {
    out.note = "importance needs at least " + std::to_string(in.min_trials) + " finished trials with an objective (" +
               std::to_string(out.n_trials) + " so far)";
    return out;
  }
  // The top γ quantile by loss; ties at the boundary by trial order (stable), so it is deterministic.
  std::stable_sort(rows.begin(), rows.end(), [&](size_t a, size_t b) { return in.losses[a] < in.losses[b]; });
  const size_t n_top = std::max<size_t>(2, static_cast<size_t>(std::ceil(in.gamma * static_cast<double>(rows.size()))));
  std::vector<bool> is_top(in.losses.size(), false);
  for (size_t k = 0; k < std::min(n_top, rows.size()); ++k) is_top[rows[k]] = true;

  double total = 0;
  for (size_t j = 0; j < in.params.size(); ++j) {
    const auto& p = in.params[j];
    double d = 0;
    if (p.categorical) {
      std::vector<int64_t> all, top;
      for (size_t r : rows) {
        const auto& v = in.values[r];
        if (j >= v.size() || !v[j] || !std::isfinite(*v[j])) continue;
        all.push_back(static_cast<int64_t>(std::llround(*v[j])));
        if (is_top[r]) top.push_back(all.back());
      }
      d = pearson_divergence_categorical(all, top, p.categories);
    } else {
      std::vector<double> all, top;
      for (size_t r : rows) {
        const auto& v = in.values[r];
        if (j >= v.size() || !v[j]) continue;
        all.push_back(*v[j]);
        if (is_top[r]) top.push_back(*v[j]);
      }
      d = pearson_divergence_numeric(all, top);
    }
    out.importances[j].second = d;
    total += d;
  }
  if (total > 0) {
    for (auto& [name, v] : out.importances) v /= total;
  } else {
    out.note = "no parameter's distribution differs between the top trials and all trials";
  }
  std::stable_sort(out.importances.begin(), out.importances.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace hpctune::search
