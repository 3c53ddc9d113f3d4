// Search quality: each algorithm in an ask/tell loop against benchmark functions over 10 seeds,
// compared with random search on median regret (best found - known optimum) at 50 and 100 trials.
// The same comparison through the real scheduler and the `function` trainer is
// test_search_campaign_quality.cpp; both take their problems, seeds and criteria from
// tests/search_quality.h. Also bayesian on a categorical architecture-cell space.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "search/searcher.h"
#include "param_specs.h"
#include "common/rng.h"
#include "search/space.h"
#include "search/test_functions.h"
#include "tests/search_quality.h"

using namespace hpctune;
using namespace hpctune::search;
using namespace hpctune::search_quality;

namespace {

Regrets run(const std::string& algo, const TestFunction& fn) {
  Regrets r;
  for (int seed = 0; seed < kSeeds; ++seed)
    add_run(r, ask_tell_values(algo, fn, kFirstSeed + static_cast<uint64_t>(seed)), fn.optimum);
  return r;
}

}  // namespace

TEST_CASE("bayesian and tpe beat random at 50 and 100 trials; genetic and evolution at 100") {
  for (const auto& [name, dim] : problems()) {
    const TestFunction fn = make_test_function(name, dim).value();
    std::map<std::string, Regrets> results;
    for (const auto& algo : algorithms()) {
      const auto t0 = std::chrono::steady_clock::now();
      results[algo] = run(algo, fn);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-10s %-10s median regret @50 %-10.4g @100 %-10.4g (%.1f s for %d runs)\n", name.c_str(), algo.c_str(),
                  median(results[algo].at50), median(results[algo].at100), secs, kSeeds);
    }
    check_against_random(name, results);
  }
}

namespace {

// An architecture-cell space (issue 12): 6 edges, each one of 5 operations, and a fixed random
// interaction model drawn from `seed` (a main effect per edge and operation, a pairwise term per
// pair of edges and operations), its optimum found by enumerating the 15625 cells.
struct CellProblem {
  double main[6][5];
  double pair[15][5][5];
  double optimum = INFINITY;

  explicit CellProblem(uint64_t seed) {
    Rng rng(seed);
    for (auto& e : main)
      for (double& v : e) v = rng.normal();
    for (auto& p : pair)
      for (auto& row : p)
        for (double& v : row) v = 0.5 * rng.normal();
    for (int code = 0; code < 15625; ++code) {
      int ops[6];
      for (int i = 0, c = code; i < 6; ++i, c /= 5) ops[i] = c % 5;
      optimum = std::min(optimum, value(ops));
    }
  }
  double value(const int* ops) const {
    double v = 0;
    for (int i = 0, k = 0; i < 6; ++i) {
      v += main[i][ops[i]];
      for (int j = i + 1; j < 6; ++j, ++k) v += pair[k][ops[i]][ops[j]];
    }
    return v;
  }
};

// Regret after 50 and after 100 trials of one run.
std::pair<double, double> cell_regret(const std::string& algo, uint64_t seed) {
  const int budget = 100;
  const CellProblem cell(77 + seed);
  std::vector<ParamSpec> params;
  for (int i = 0; i < 6; ++i) {
    params.push_back(hpctune::testing::choice("edge" + std::to_string(i), {"conv3", "conv5", "pool", "skip", "zero"}));
  }
  SearchSpec spec;
  spec.algorithm = algo;
  spec.space = Space::create(params).value();
  spec.objectives = {{"value", false}};
  spec.seed = seed;
  spec.max_trials = budget;
  auto searcher = make_searcher(spec).value();
  double best = INFINITY, at_50 = INFINITY;
  for (int t = 0; t < budget; ++t) {
    if (t == 50) at_50 = best;
    const auto sug = searcher->ask(1).value();
    REQUIRE(sug.size() == 1);
    int ops[6];
    for (int i = 0; i < 6; ++i) ops[i] = static_cast<int>(Space::choice_index(params[static_cast<std::size_t>(i)], sug[0].params.at("edge" + std::to_string(i))));
    const double v = cell.value(ops);
    best = std::min(best, v);
    searcher->tell({sug[0].seq, sug[0].params, Outcome::kCompleted, {v}, 1});
  }
  return {at_50 - cell.optimum, best - cell.optimum};
}

}  // namespace

TEST_CASE("bayesian beats random search on an architecture-cell space (6 edges x 5 operations)") {
  // 10 seeds: the median of 5 at 50 trials swings by a factor of 3 between sets of seeds.
  std::map<std::string, std::vector<double>> at_50, at_100;
  for (const std::string algo : {"bayesian", "random"})
    for (uint64_t seed = 1000; seed < 1010; ++seed) {
      const auto [r50, r100] = cell_regret(algo, seed);
      at_50[algo].push_back(r50);
      at_100[algo].push_back(r100);
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  std::printf("cell 6x5: median regret @50 bayesian %.4g, random %.4g; @100 bayesian %.4g, random %.4g\n",
              median(at_50["bayesian"]), median(at_50["random"]), median(at_100["bayesian"]), median(at_100["random"]));
  CHECK(median(at_50["bayesian"]) < 0.5 * median(at_50["random"]));
  // By 100 trials (0.6% of the 15625 cells) the GP has found the optimum in most runs.
  CHECK(median(at_100["bayesian"]) == 0.0);
  CHECK(median(at_100["random"]) > 1.0);
}
