// Shared by the search-quality tests: test_search_quality.cpp (each algorithm in an ask/tell loop)
// and test_search_campaign_quality.cpp (whole campaigns through the scheduler and the `function`
// trainer). Both run the same problems, algorithms, seeds and budgets and check the same criteria
// of issue 3 against random search, on the median over the seeds of the regret (the best value
// found - the function's known optimum).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "search/searcher.h"
#include "search/test_functions.h"

namespace hpctune::search_quality {

constexpr int kSeeds = 10;
constexpr uint64_t kFirstSeed = 1000;  // seeds kFirstSeed .. kFirstSeed + kSeeds - 1
constexpr int kBudget = 100;           // trials per run; the regret at kHalfBudget is read from the same run
constexpr int kHalfBudget = 50;

struct Problem {
  std::string name;
  int dim;
};
inline std::vector<Problem> problems() { return {{"branin", 2}, {"hartmann6", 6}, {"levy", 10}}; }
inline std::vector<std::string> algorithms() { return {"random", "bayesian", "tpe", "genetic", "evolution"}; }

// Regrets of one algorithm on one problem, one entry per seed.
struct Regrets {
  std::vector<double> at50, at100;
};

inline double median(std::vector<double> v) {
  REQUIRE(!v.empty());
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The regrets after kHalfBudget and kBudget trials of one sequential run, from its values in
// suggestion order.
inline void add_run(Regrets& r, const std::vector<double>& values, double optimum) {
  REQUIRE(values.size() == static_cast<std::size_t>(kBudget));
  const double best50 = *std::min_element(values.begin(), values.begin() + kHalfBudget);
  const double best100 = *std::min_element(values.begin(), values.end());
  r.at50.push_back(best50 - optimum);
  r.at100.push_back(best100 - optimum);
}

// The values of one sequential run of kBudget trials of `algo` on `fn` driven directly by ask(1) /
// tell, in suggestion order.
inline std::vector<double> ask_tell_values(const std::string& algo, const search::TestFunction& fn, uint64_t seed) {
  search::SearchSpec spec;
  spec.algorithm = algo;
  spec.space = search::test_function_space(fn);
  spec.objectives = {{"f", false}};
  spec.seed = seed;
  spec.max_trials = kBudget;
  auto s = search::make_searcher(spec);
  REQUIRE(s.ok());
  std::vector<double> values;
  while (values.size() < static_cast<std::size_t>(kBudget)) {
    auto sug = (*s)->ask(1).value();
    REQUIRE(sug.size() == 1);
    const double v = fn(sug[0].params);
    values.push_back(v);
    (*s)->tell({sug[0].seq, sug[0].params, search::Outcome::kCompleted, {v}, 1});
  }
  return values;
}

// The criteria of issue 3 for one problem: bayesian and tpe beat random on median regret at 50 and
// at 100 trials; genetic and evolution beat it at 100.
inline void check_against_random(const std::string& problem, const std::map<std::string, Regrets>& results) {
  CAPTURE(problem);
  REQUIRE(results.count("random") == 1);
  const double r50 = median(results.at("random").at50), r100 = median(results.at("random").at100);
  for (std::string algo : {"bayesian", "tpe"}) {
    CAPTURE(algo);
    REQUIRE(results.count(algo) == 1);
    CHECK(median(results.at(algo).at50) < r50);
    CHECK(median(results.at(algo).at100) < r100);
  }
  for (std::string algo : {"genetic", "evolution"}) {
    CAPTURE(algo);
    REQUIRE(results.count(algo) == 1);
    CHECK(median(results.at(algo).at100) < r100);
  }
}

// A small table of the medians: one line per algorithm.
inline std::string median_table(const std::string& problem, const std::map<std::string, Regrets>& results) {
  std::string out = problem + ": median regret over " + std::to_string(kSeeds) + " seeds\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-10s %12s %12s\n", "algorithm", "@50", "@100");
  out += line;
  for (const auto& algo : algorithms()) {
    auto it = results.find(algo);
    if (it == results.end()) continue;
    std::snprintf(line, sizeof line, "  %-10s %12.5g %12.5g\n", algo.c_str(), median(it->second.at50),
                  median(it->second.at100));
    out += line;
  }
  return out;
}

}  // namespace hpctune::search_quality
