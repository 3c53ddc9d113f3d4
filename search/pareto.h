// Pareto dominance for multi-objective search, on "losses": every objective in minimize form
// (maximized objectives negated), so that smaller is better everywhere.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/searcher.h"

namespace hpctune::search {

// True when a is no worse than b in every objective and better in at least one.
bool dominates(const std::vector<double>& a, const std::vector<double>& b) noexcept;

// Indices of the non-dominated points, in input order.
std::vector<std::size_t> pareto_front(const std::vector<std::vector<double>>& losses);

// Fast non-dominated sort (Deb et al. 2002): fronts[0] is the Pareto front, fronts[1] the front
// of what remains, and so on; each front in input order.
std::vector<std::vector<std::size_t>> nondominated_sort(const std::vector<std::vector<double>>& losses);

// NSGA-II crowding distance of each member of `front` (same order); extremes get +infinity.
std::vector<double> crowding_distance(const std::vector<std::vector<double>>& losses,
                                      const std::vector<std::size_t>& front);

// The losses of an observation: one per objective, or empty when it cannot be ranked (failed, a
// missing or non-finite value).
std::vector<double> observation_losses(const Observation& obs, const std::vector<Objective>& objectives);

// The Pareto front of the completed observations as
// [{"seq": s, "params": {...}, "values": [raw values]}], ordered by seq.
nlohmann::json pareto_front_json(const std::vector<Observation>& observations,
                                 const std::vector<Objective>& objectives);

}  // namespace hpctune::search
