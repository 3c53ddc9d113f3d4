// Search quality: each algorithm in an ask/tell loop against benchmark functions over 10 seeds,
// compared with random search on median regret (best found - known optimum) at 50 and 100 trials.
// The same comparison through the real scheduler and the `function` trainer is
// test_search_campaign_quality.cpp; both take their problems, seeds and criteria from
// tests/search_quality.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "search/searcher.h"
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
