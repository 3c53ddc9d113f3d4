// Search quality: each algorithm in an ask/tell loop against benchmark functions over 10 seeds,
// compared with random search on median regret (best found - known optimum) at 50 and 100 trials.
// (The same comparison through the real scheduler and the `function` trainer lives with the
// scheduler tests.)
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "search/searcher.h"
#include "search/test_functions.h"

using namespace hpctune;
using namespace hpctune::search;

namespace {

constexpr int kSeeds = 10;

struct Regrets {
  std::vector<double> at50, at100;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One run of 100 trials, sequential; the regret after 50 is read from the same run.
Regrets run(const std::string& algo, const TestFunction& fn) {
  Regrets r;
  for (int seed = 0; seed < kSeeds; ++seed) {
    SearchSpec spec;
    spec.algorithm = algo;
    spec.space = test_function_space(fn);
    spec.objectives = {{"f", false}};
    spec.seed = 1000 + static_cast<uint64_t>(seed);
    spec.max_trials = 100;
    auto s = make_searcher(spec);
    REQUIRE(s.ok());
    double best = 1e300;
    for (int t = 0; t < 100;) {
      auto sug = (*s)->ask(1);
      REQUIRE(sug.size() == 1);
      const double v = fn(sug[0].params);
      best = std::min(best, v);
      (*s)->tell({sug[0].seq, sug[0].params, Outcome::kCompleted, {v}, 1});
      ++t;
      if (t == 50) r.at50.push_back(best - fn.optimum);
    }
    r.at100.push_back(best - fn.optimum);
  }
  return r;
}

}  // namespace

TEST_CASE("bayesian and tpe beat random at 50 and 100 trials; genetic and evolution at 100") {
  const std::vector<std::pair<std::string, int>> functions = {{"branin", 2}, {"hartmann6", 6}, {"levy", 10}};
  for (const auto& [name, dim] : functions) {
    const TestFunction fn = make_test_function(name, dim).value();
    std::map<std::string, Regrets> results;
    for (std::string algo : {"random", "bayesian", "tpe", "genetic", "evolution"}) {
      const auto t0 = std::chrono::steady_clock::now();
      results[algo] = run(algo, fn);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-10s %-10s median regret @50 %-10.4g @100 %-10.4g (%.1f s for %d runs)\n", name.c_str(), algo.c_str(),
                  median(results[algo].at50), median(results[algo].at100), secs, kSeeds);
    }
    CAPTURE(name);
    const double r50 = median(results["random"].at50), r100 = median(results["random"].at100);
    for (std::string algo : {"bayesian", "tpe"}) {
      CAPTURE(algo);
      CHECK(median(results[algo].at50) < r50);
      CHECK(median(results[algo].at100) < r100);
    }
    for (std::string algo : {"genetic", "evolution"}) {
      CAPTURE(algo);
      CHECK(median(results[algo].at100) < r100);
    }
  }
}
