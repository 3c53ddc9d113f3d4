// Shared by the model-based searchers: observations (and warm-start trials) turned into unit
// coordinates and losses, and scalarization for multi-objective search.
#pragma once

#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "search/encoding.h"
#include "search/searcher.h"

namespace hpctune::search {

struct DataPoint {
  int64_t seq = -1;             // < 0: a warm-start trial
  std::vector<double> u;        // unit coordinates (NaN for inactive)
  std::vector<double> losses;   // one per objective, minimize form; empty when failed
  Outcome outcome = Outcome::kCompleted;
  int64_t step = 0;
};

// An observation as a data point (params encoded, values turned into losses).
DataPoint make_data_point(const Encoder& encoder, const Observation& obs, const std::vector<Objective>& objectives);

// Warm-start observations, repaired into the space (a seeded draw fills parameters that the
// earlier campaign did not have), as data points with seq -1, -2, ...
std::vector<DataPoint> warm_start_points(const Space& space, const Encoder& encoder, const SearchSpec& spec);

// Random weights on the simplex (uniform), for ParEGO-style scalarization.
std::vector<double> random_simplex_weights(std::size_t m, Rng& rng);

// Augmented Chebyshev scalarization of losses normalized to [0, 1] over the data:
// max_i w_i f_i + 0.05 sum_i w_i f_i. Points without losses get NaN.
std::vector<double> scalarize(const std::vector<DataPoint>& data, const std::vector<double>& weights);

// Output transforms of the targets (as HEBO), for a GP whose noise is Gaussian while losses
// rarely are: a heavy upper tail makes the standardized best points all look alike.
//
// Yeo-Johnson power transform of one value (defined for every real y; lambda = 1 is the identity).
double yeo_johnson(double y, double lambda) noexcept;
// Its lambda fitted by maximum likelihood (a normal after the transform), searched in [-2, 4].
double fit_yeo_johnson_lambda(const std::vector<double>& y);
// Copula transform: the normal quantile of each value's mid-rank (rank + 0.5) / n; ties share the
// mean of their ranks. Keeps only the order of the values.
std::vector<double> copula_transform(const std::vector<double>& y);

}  // namespace hpctune::search
