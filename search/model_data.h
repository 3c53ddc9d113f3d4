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

}  // namespace hpctune::search
