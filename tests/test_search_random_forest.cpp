// search/random_forest.h: the regression forest behind `bayesian` with `surrogate: forest` (and
// auto's portfolio member "forest"): it fits what it saw, its variance grows away from the data
// and where the data disagree, it is deterministic for a seed, and splits on one-hot inputs
// separate unordered values.
#include <doctest/doctest.h>

#include <cmath>

#include "common/rng.h"
#include "search/random_forest.h"
#include "search/searcher.h"

using namespace hpctune;
using namespace hpctune::search;

TEST_CASE("random forest: fits a step and a slope, variance where the data disagree, same seed same model") {
  // 60 points on [0, 1]: y = 0 left of 0.5, 1 + x right of it, and a noisy patch at [0.8, 0.9].
  Rng draw(7);
  Eigen::MatrixXd X(60, 1);
  Eigen::VectorXd y(60);
  for (int i = 0; i < 60; ++i) {
    const double x = (i + 0.5) / 60.0;
    X(i, 0) = x;
    y(i) = x < 0.5 ? 0.0 : 1.0 + x;
    if (x >= 0.8 && x <= 0.9) y(i) += draw.normal() * 0.5;
  }
  RandomForest forest;
  Rng rng(1);
  forest.fit(X, y, rng);
  CHECK(forest.size() == 60);
  Eigen::MatrixXd Q(4, 1);
  Q << 0.2, 0.4, 0.65, 0.85;
  Eigen::VectorXd mean, var;
  forest.predict(Q, mean, var);
  CHECK(std::fabs(mean(0)) < 0.05);
  CHECK(std::fabs(mean(1)) < 0.1);
  CHECK(mean(2) == doctest::Approx(1.65).epsilon(0.1));
  CHECK(var(3) > 5 * var(0));  // the noisy patch

  RandomForest again;
  Rng rng2(1);
  again.fit(X, y, rng2);
  Eigen::VectorXd mean2, var2;
  again.predict(Q, mean2, var2);
  CHECK(mean2 == mean);
  CHECK(var2 == var);
}

TEST_CASE("random forest: one-hot inputs, the value that matters is found") {
  // 3 one-hot groups of 4 values (12 inputs); y = 2 when group 1 is value 2, plus 0.5 per group 0 value 0.
  Rng draw(3);
  const int n = 80;
  Eigen::MatrixXd X = Eigen::MatrixXd::Zero(n, 12);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) {
    int v[3];
    for (int g = 0; g < 3; ++g) {
      v[g] = static_cast<int>(draw.below(4));
      X(i, 4 * g + v[g]) = 1;
    }
    y(i) = (v[1] == 2 ? 2.0 : 0.0) + (v[0] == 0 ? 0.5 : 0.0);
  }
  RandomForest forest;
  Rng rng(5);
  forest.fit(X, y, rng);
  Eigen::MatrixXd Q = Eigen::MatrixXd::Zero(2, 12);
  Q(0, 0) = 1, Q(0, 4 + 2) = 1, Q(0, 8 + 1) = 1;  // the best: 2.5
  Q(1, 1) = 1, Q(1, 4 + 0) = 1, Q(1, 8 + 3) = 1;  // 0
  Eigen::VectorXd mean, var;
  forest.predict(Q, mean, var);
  CHECK(mean(0) > 2.0);
  CHECK(mean(1) < 0.5);
}

TEST_CASE("bayesian with surrogate: forest finds the peak of a categorical cell better than random") {
  // 6^4 unordered cells, one peak with an interaction; 40 trials, 5 seeds.
  std::vector<ParamSpec> specs;
  for (const char* name : {"e1", "e2", "e3", "e4"}) {
    ParamSpec p;
    p.name = name;
    p.type = ParamType::kChoice;
    p.choices = {"a", "b", "c", "d", "e", "f"};
    specs.push_back(p);
  }
  const Space space = Space::create(specs).value();
  auto value = [](const Params& p) {
    const char* best[] = {"c", "d", "a", "f"};
    const char* names[] = {"e1", "e2", "e3", "e4"};
    double s = 0;
    for (int i = 0; i < 4; ++i) s += p.at(names[i]) == best[i] ? 1.0 + 0.3 * i : 0.0;
    if (p.at("e1") == "c" && p.at("e2") == "d") s += 1;
    return s;  // larger is better; the peak 6.8
  };
  int forest_peaks = 0, random_peaks = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    for (const std::string algo : {"forest", "random"}) {
      SearchSpec spec;
      spec.algorithm = algo == "forest" ? "bayesian" : "random";
      if (algo == "forest") spec.settings = {{"surrogate", "forest"}};
      spec.space = space;
      spec.objectives = {{"score", true}};
      spec.seed = seed;
      spec.max_trials = 40;
      auto s = make_searcher(spec);
      REQUIRE_MESSAGE(s.ok(), s.error().to_string());
      double best = -1;
      for (int t = 0; t < 40; ++t) {
        auto sug = (*s)->ask(1).value();
        const double v = value(sug[0].params);
        best = std::max(best, v);
        (*s)->tell({sug[0].seq, sug[0].params, Outcome::kCompleted, {v}, 1});
      }
      (algo == "forest" ? forest_peaks : random_peaks) += best > 6.7 ? 1 : 0;
    }
  }
  MESSAGE("the peak in 40 trials: forest " << forest_peaks << " of 5 seeds, random " << random_peaks);
  CHECK(forest_peaks >= 4);
  CHECK(forest_peaks > random_peaks);
}
