#include "search/model_data.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "search/gaussian_process.h"
#include "search/pareto.h"

namespace hpctune::search {

DataPoint make_data_point(const Encoder& encoder, const Observation& obs, const std::vector<Objective>& objectives) {
  DataPoint p;
  p.seq = obs.seq;
  p.u = encoder.encode(obs.params);
  p.outcome = obs.outcome;
  p.step = obs.step;
  if (obs.outcome != Outcome::kFailed) p.losses = observation_losses(obs, objectives);
  if (p.losses.empty()) p.outcome = Outcome::kFailed;
  return p;
}

std::vector<DataPoint> warm_start_points(const Space& space, const Encoder& encoder, const SearchSpec& spec) {
  std::vector<DataPoint> out;
  Rng rng(derive_seed(spec.seed, 0x3A93));
  int64_t k = 0;
  for (const auto& w : spec.warm_start) {
    Observation obs = w;
    space.repair(obs.params, rng);
    obs.seq = -1 - k++;
    out.push_back(make_data_point(encoder, obs, spec.objectives));
  }
  return out;
}

std::vector<double> random_simplex_weights(std::size_t m, Rng& rng) {
  std::vector<double> w(m);
  double sum = 0;
  for (auto& x : w) {
    x = -std::log(1.0 - rng.uniform());  // Exp(1): normalized, uniform on the simplex
    sum += x;
  }
  for (auto& x : w) x /= sum;
  return w;
}

std::vector<double> scalarize(const std::vector<DataPoint>& data, const std::vector<double>& weights) {
  const std::size_t m = weights.size();
  std::vector<double> lo(m, std::numeric_limits<double>::infinity()), hi(m, -std::numeric_limits<double>::infinity());
  for (const auto& p : data) {
    if (p.losses.size() != m) continue;
    for (std::size_t i = 0; i < m; ++i) {
      lo[i] = std::min(lo[i], p.losses[i]);
      hi[i] = std::max(hi[i], p.losses[i]);
    }
  }
  std::vector<double> out;
  out.reserve(data.size());
  for (const auto& p : data) {
    if (p.losses.size() != m) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const double f = hi[i] > lo[i] ? (p.losses[i] - lo[i]) / (hi[i] - lo[i]) : 0.0;
      mx = std::max(mx, weights[i] * f);
      sum += weights[i] * f;
    }
    out.push_back(mx + 0.05 * sum);
  }
  return out;
}

double yeo_johnson(double y, double lambda) noexcept {
  if (y >= 0) return std::fabs(lambda) < 1e-9 ? std::log1p(y) : (std::pow(y + 1.0, lambda) - 1.0) / lambda;
  const double l2 = 2.0 - lambda;
  return std::fabs(l2) < 1e-9 ? -std::log1p(-y) : -(std::pow(1.0 - y, l2) - 1.0) / l2;
}

namespace {

// The profile log likelihood of lambda: -n/2 log var(psi(y)) + (lambda - 1) sum sign(y) log(|y| + 1).
double yeo_johnson_llf(const std::vector<double>& y, double lambda) {
  const auto n = static_cast<double>(y.size());
  double mean = 0, jac = 0;
  std::vector<double> t(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    t[i] = yeo_johnson(y[i], lambda);
    mean += t[i];
    jac += std::copysign(std::log1p(std::fabs(y[i])), y[i]);
  }
  mean /= n;
  double var = 0;
  for (double v : t) var += (v - mean) * (v - mean);
  var /= n;
  if (!(var > 0) || !std::isfinite(var)) return -std::numeric_limits<double>::infinity();
  return -0.5 * n * std::log(var) + (lambda - 1.0) * jac;
}

}  // namespace

double fit_yeo_johnson_lambda(const std::vector<double>& y) {
  if (y.size() < 3) return 1.0;
  // A grid, then golden-section search around its best point: the likelihood is smooth and, on
  // [-2, 4], has one maximum for the data seen here, but a grid start costs little and is safe.
  constexpr double kLo = -2.0, kHi = 4.0;
  constexpr int kGrid = 24;
  double best = 1.0, best_f = yeo_johnson_llf(y, 1.0);
  for (int i = 0; i <= kGrid; ++i) {
    const double l = kLo + (kHi - kLo) * i / kGrid;
    const double f = yeo_johnson_llf(y, l);
    if (f > best_f) best_f = f, best = l;
  }
  const double step = (kHi - kLo) / kGrid;
  double a = std::max(kLo, best - step), b = std::min(kHi, best + step);
  const double g = 0.5 * (std::sqrt(5.0) - 1.0);
  double c = b - g * (b - a), d = a + g * (b - a);
  double fc = yeo_johnson_llf(y, c), fd = yeo_johnson_llf(y, d);
  for (int it = 0; it < 40 && b - a > 1e-6; ++it) {
    if (fc > fd) {
      b = d, d = c, fd = fc;
      c = b - g * (b - a);
      fc = yeo_johnson_llf(y, c);
    } else {
      a = c, c = d, fc = fd;
      d = a + g * (b - a);
      fd = yeo_johnson_llf(y, d);
    }
  }
  const double l = 0.5 * (a + b);
  return yeo_johnson_llf(y, l) >= best_f ? l : best;
}

std::vector<double> copula_transform(const std::vector<double>& y) {
  const std::size_t n = y.size();
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return y[a] < y[b]; });
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && y[order[j + 1]] == y[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + j);  // mean rank of the tie
    const double q = normal_quantile((rank + 0.5) / static_cast<double>(n));
    for (std::size_t k = i; k <= j; ++k) out[order[k]] = q;
    i = j + 1;
  }
  return out;
}

}  // namespace hpctune::search
