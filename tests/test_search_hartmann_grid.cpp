// Hartmann-6 on a 6-level grid with 60 trials (issue 25, acceptance 3), the problems
// hartmann6-int6 and hartmann6-cat6 of bench_search rebuilt here: each dimension's 6 points evenly
// spaced over [0, 1], as an int 0..5 (ordered levels) or as an unordered choice of the points.
// Seeds 1000..1006 as the 7 seeds, a sequential ask(1)/tell loop as bench_search's, so
// the medians are bench/results/search-hartmann-grid.md's.
//
// Checked: no algorithm repeats a configuration (60 distinct of 46,656), and evolution's redraw of
// a repeated child (another mutation of the same parent) keeps its gain on both grids; on the
// ordered grid, auto's median regret over 100 seeds is <= 0.02 (the target; seeds
// 1000..1099) thanks to bayesian's escapes to other basins (escape_after). NOT checked, because
// not reached on these 7 seeds; the medians of every algorithm are printed so that the gap is
// visible in the log. On unordered levels auto's median over 100 seeds is <= 0.67 too (forest+tpe).
// Issue 38, item 3: on the ordered grid the seeds whose best point is the optimum itself, >= 53 of
// 100 with bayesian's polish of the last third (56; 48 without it). The targets (90 ordered,
// 50 unordered) are not reached: the unordered grid's share is 13 (9 before), printed, not checked;
// bayesian with acquisition mes (max-value entropy search) reaches it in >= 16 of 100 (21; ei 11).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "search/searcher.h"
#include "search/test_functions.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;

namespace {

constexpr int kLevels = 6, kDim = 6, kBudget = 60, kSeeds = 7;
constexpr uint64_t kFirstSeed = 1000;

std::string name(int i) {
  std::string n = "x";
  n += std::to_string(i + 1);
  return n;
}

struct Grid {
  Space space;
  bool ordered;
  TestFunction fn;
  double optimum = INFINITY;

  double point(int k) const { return static_cast<double>(k) / (kLevels - 1); }  // Hartmann-6's box is [0, 1]^6
  double operator()(const Params& p) const {
    std::vector<double> x(kDim);
    for (int i = 0; i < kDim; ++i) {
      const json& v = p.at(name(i));
      x[static_cast<std::size_t>(i)] = ordered ? point(v.get<int>()) : v.get<double>();
    }
    return fn(x);
  }
};

Grid make_grid(bool ordered) {
  Grid g{Space{}, ordered, make_test_function("hartmann6", kDim).value()};
  std::vector<ParamSpec> specs;
  for (int i = 0; i < kDim; ++i) {
    ParamSpec p;
    p.name = name(i);
    if (ordered) {
      p.type = ParamType::kInt;
      p.low = 0;
      p.high = kLevels - 1;
      p.step = 1;
    } else {
      p.type = ParamType::kChoice;
      for (int k = 0; k < kLevels; ++k) p.choices.push_back(g.point(k));
      p.ordered = false;
    }
    specs.push_back(p);
  }
  g.space = Space::create(specs).value();
  std::vector<double> x(kDim);
  for (int code = 0; code < 46656; ++code) {
    int c = code;
    for (int i = 0; i < kDim; ++i, c /= kLevels) x[static_cast<std::size_t>(i)] = g.point(c % kLevels);
    g.optimum = std::min(g.optimum, g.fn(x));
  }
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Every seed's regret; every run's configurations are checked distinct.
std::vector<double> regrets(const std::string& algo, const Grid& g, uint64_t first_seed, int seeds,
                            const json& settings = json::object()) {
  std::vector<double> regrets;
  for (uint64_t seed = first_seed; seed < first_seed + static_cast<uint64_t>(seeds); ++seed) {
    SearchSpec spec;
    spec.algorithm = algo;
    spec.settings = settings;
    spec.space = g.space;
    spec.objectives = {{"value", false}};
    spec.seed = seed;
    spec.max_trials = kBudget;
    auto s = make_searcher(spec);
    REQUIRE(s.ok());
    std::set<std::string> seen;
    double best = INFINITY;
    for (int t = 0; t < kBudget; ++t) {
      auto sug = (*s)->ask(1);
      REQUIRE(sug.ok());
      REQUIRE(sug->size() == 1);
      const auto& x = (*sug)[0];
      CHECK_MESSAGE(seen.insert(g.space.config_key(x.params)).second, algo << " repeated " << x.params.dump());
      const double v = g(x.params);
      best = std::min(best, v);
      (*s)->tell({x.seq, x.params, Outcome::kCompleted, {v}, 1});
    }
    regrets.push_back(best - g.optimum);
  }
  return regrets;
}

// The seeds whose best point is the grid's optimum itself (regret 0 up to rounding).
std::ptrdiff_t exact(const std::vector<double>& r) {
  return std::count_if(r.begin(), r.end(), [](double x) { return x < 1e-9; });
}

double median_regret(const std::string& algo, const Grid& g) { return median(regrets(algo, g, kFirstSeed, kSeeds)); }

}  // namespace

TEST_CASE("Hartmann-6 on a 6-level grid, 60 trials, 7 seeds: no repeats; evolution's medians with its redraw") {
  for (const bool ordered : {true, false}) {
    const Grid g = make_grid(ordered);
    CAPTURE(ordered);
    CHECK(g.optimum == doctest::Approx(-2.94892).epsilon(1e-5));  // bench/results/search.md's hartmann6-int6
    std::string table;
    for (const std::string algo : {"auto", "bayesian", "tpe", "genetic", "evolution", "rl", "random", "cmaes"}) {
      const double m = median_regret(algo, g);
      table += "  ";
      table += algo;
      table += " ";
      table += std::to_string(m);
      table += "\n";
      // Before the redraw: 0.779 ordered, 1.126 unordered (seen failing with it off).
      if (algo == "evolution") CHECK(m <= (ordered ? 0.63 : 0.97));
    }
    MESSAGE(std::string(ordered ? "ordered" : "unordered") << " levels, median regret:\n" << table);
  }
}

// The grid has two local minima under one-level moves: the optimum and a point at regret 0.285
// (the grid point of the continuous optimum's basin). Without escapes the Gaussian process
// descends the basin its design hits best and then spends what is left on the corners; with them,
// every other suggestion after 6 trials without a better loss descends another basin of its model.
TEST_CASE("Hartmann-6, ordered 6-level grid, 100 seeds: auto's median regret <= 0.02; escapes reach the optimum more often") {
  const Grid g = make_grid(true);
  constexpr uint64_t kFirst = 1000;
  constexpr int kMany = 100;
  const auto with = regrets("auto", g, kFirst, kMany);
  const auto without = regrets("bayesian", g, kFirst, kMany, {{"escape_after", 0}});
  auto reached = [](const std::vector<double>& r) { return std::count_if(r.begin(), r.end(), [](double x) { return x <= 0.02; }); };
  MESSAGE("auto: median " << median(with) << ", within 0.02 in " << reached(with) << ", the optimum itself in " << exact(with) << " of "
                          << kMany << "; bayesian without escapes: median " << median(without) << ", within 0.02 in "
                          << reached(without) << ", the optimum in " << exact(without));
  // Issue 38, item 3: the share of seeds whose best point IS the grid's optimum. 48 with escapes
  // and no polish (polish_last 0), 56 with the polish of the last third (bench/results/search-hartmann-grid.md).
  CHECK(exact(with) >= 53);
  CHECK(median(with) <= 0.02);            // 0.003; without escapes 0.285
  CHECK(reached(with) >= reached(without) + 8);  // 55 against 41
  CHECK(median(without) > 0.2);           // the test's premise: the grid is hard without them
}

// Unordered levels: auto runs its portfolio of forest (a random-forest surrogate) and tpe. The
// earlier portfolio of the Gaussian process and tpe had 0.752 over these seeds (0.791 over 0..99).
TEST_CASE("Hartmann-6, unordered 6-level grid, 100 seeds: auto's median regret <= 0.67") {
  const Grid g = make_grid(false);
  for (const uint64_t first : {uint64_t{1000}, uint64_t{0}}) {
    const auto r = regrets("auto", g, first, 100);
    MESSAGE("seeds " << first << "..: auto's median " << median(r) << ", the optimum itself in " << exact(r) << " of 100");
    CHECK(median(r) <= 0.67);  // 0.653 and 0.638 with the polish (0.638 and 0.646 before it); the GP+tpe portfolio 0.752 and 0.791, tpe 0.638 and 0.741
  }
}

// Issue 38, item 3, fifth look: max-value entropy search instead of expected improvement, the GP
// alone on unordered levels. 21 of 100 seeds end on the optimum itself (13 of seeds 0..99), ei 11
// (8); auto's forest+tpe portfolio 13 (7). Not auto's pick: on the ordered grid mes had 53 / 40
// against ei's 56 / 51 (bench/results/search-hartmann-grid.md).
TEST_CASE("Hartmann-6, unordered 6-level grid, 100 seeds: bayesian with max-value entropy search reaches the optimum more often") {
  const Grid g = make_grid(false);
  const auto mes = regrets("bayesian", g, 1000, 100, {{"acquisition", "mes"}});
  MESSAGE("bayesian, acquisition mes: the optimum itself in " << exact(mes) << " of 100, median " << median(mes));
  CHECK(exact(mes) >= 16);  // 21; acquisition ei 11
}
