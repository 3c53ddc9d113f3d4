#include "search/model_data.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace hpctune::search
