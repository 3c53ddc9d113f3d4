// grid: every combination of the parameters' grid values, conditions respected.
//
// Grid values: a float takes `resolution` points from low to high inclusive (evenly spaced, in
// log space for log parameters) and has no grid without one; an int takes every value on its step,
// or `resolution` evenly spaced values (deduplicated) when it has one; a choice takes every choice;
// a fixed value itself. A conditional parameter only multiplies the branch where it is active, so
// the grid holds exactly the valid configurations, each once.
//
// A grid with more points than SearchSpec::max_trials (when that is > 0) is a config error that
// states its size. Suggestion k is grid point k; exhausted() once every point was suggested.
//
// Settings (SearchSpec::settings):
//   shuffle  bool  false  visit the points in a seeded random order instead of lexicographic
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> grid_search_settings();
Result<std::unique_ptr<Searcher>> make_grid_search(const SearchSpec& spec);

// The most points a grid may have, whatever max_trials says: the points are held in memory.
inline constexpr int64_t kMaxGridPoints = 10'000'000;

// The grid values of one parameter; kConfig (naming it) for a float without a resolution.
Result<std::vector<nlohmann::json>> grid_values(const ParamSpec& spec);
// How many grid values a parameter has, without listing them (an int with a resolution: at most).
int64_t grid_value_count(const ParamSpec& spec);
// The number of grid points of a space, saturating at INT64_MAX. kConfig, naming the parameter,
// when one parameter alone has more than `limit` values (they are never listed then).
Result<int64_t> grid_size(const Space& space, int64_t limit = kMaxGridPoints);

}  // namespace hpctune::search
