// TPE specifics: startup, concentration near the optimum, constant liar, categorical learning;
// benchmark functions and the learning-curve helper.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "search/searcher.h"
#include "search/test_functions.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;

namespace {

SearchSpec one_d(json settings, uint64_t seed = 1) {
  ParamSpec x, c;
  x.name = std::string("x");
  x.low = 0;
  x.high = 10;
  c.name = std::string("c");
  c.type = ParamType::kChoice;
  c.choices = {"a", "b", "c", "d"};
  std::vector<ParamSpec> specs{x, c};
  SearchSpec spec;
  spec.algorithm = "tpe";
  spec.settings = std::move(settings);
  spec.space = Space::create(specs).value();
  spec.objectives = {{"loss", false}};
  spec.seed = seed;
  return spec;
}

double loss(const Params& p) {
  const double x = p["x"].get<double>();
  return (x - 7.3) * (x - 7.3) + (p["c"] == "c" ? 0.0 : 3.0);
}

}  // namespace

TEST_CASE("tpe: random startup, then suggestions concentrate on the good region and choice") {
  auto s = make_searcher(one_d({{"n_startup", 10}})).value();
  int near = 0, right_choice = 0;
  for (int i = 0; i < 80; ++i) {
    auto x = s->ask(1).value().at(0);
    CHECK(x.meta["source"] == (i < 10 ? "startup" : "model"));
    if (i >= 50) {
      near += std::fabs(x.params["x"].get<double>() - 7.3) < 1.0 ? 1 : 0;
      right_choice += x.params["c"] == "c" ? 1 : 0;
    }
    s->tell({x.seq, x.params, Outcome::kCompleted, {loss(x.params)}, 1});
  }
  // Uniform sampling would put 10% near 7.3 and 25% on "c".
  CHECK(near >= 15);
  CHECK(right_choice >= 18);
}

TEST_CASE("tpe: a batch over running trials is spread out by the constant liar") {
  for (bool liar : {true, false}) {
    auto s = make_searcher(one_d({{"n_startup", 5}, {"constant_liar", liar}}, 3)).value();
    for (int i = 0; i < 20; ++i) {
      auto x = s->ask(1).value().at(0);
      s->tell({x.seq, x.params, Outcome::kCompleted, {loss(x.params)}, 1});
    }
    auto batch = s->ask(8).value();
    REQUIRE(batch.size() == 8);
    std::vector<double> xs;
    for (const auto& b : batch) xs.push_back(b.params["x"].get<double>());
    std::sort(xs.begin(), xs.end());
    // Without the liar all 8 come from the same model state and seed stream per seq; with it the
    // running ones count as bad, so the batch differs from the no-liar batch.
    MESSAGE("liar=" << liar << " spread=" << xs.back() - xs.front());
    CHECK(xs.back() - xs.front() > 0.0);
  }
}

TEST_CASE("tpe: pruned trials rank after completed ones; failed ones are ignored") {
  auto s = make_searcher(one_d({{"n_startup", 3}}, 5)).value();
  for (int i = 0; i < 30; ++i) {
    auto x = s->ask(1).value().at(0);
    if (i % 3 == 1) s->tell({x.seq, x.params, Outcome::kPruned, {-100.0}, 1});  // a misleadingly good partial value
    else if (i % 3 == 2) s->tell({x.seq, x.params, Outcome::kFailed, {}, 0});
    else s->tell({x.seq, x.params, Outcome::kCompleted, {loss(x.params)}, 1});
  }
  CHECK(s->state()["best"]["value"].get<double>() >= 0.0);  // pruned values are not "best"
}

TEST_CASE("benchmark functions reach their known optima") {
  for (const auto& name : test_function_names()) {
    CAPTURE(name);
    auto fn = make_test_function(name, name == "levy" || name == "ackley" || name == "rosenbrock" ? 5 : 0);
    REQUIRE(fn.ok());
    CHECK((*fn)(fn->argmin) == doctest::Approx(fn->optimum).epsilon(1e-5).scale(1.0));
    // A sample of the box never goes below the optimum.
    Space space = test_function_space(*fn);
    Rng rng(1);
    for (int i = 0; i < 2000; ++i) CHECK((*fn)(space.sample(rng)) >= fn->optimum - 1e-9);
  }
  CHECK(branin({-std::numbers::pi, 12.275}) == doctest::Approx(0.397887).epsilon(1e-5));
  CHECK(branin({9.42478, 2.475}) == doctest::Approx(0.397887).epsilon(1e-5));
  CHECK(make_test_function("branin", 3).error().code() == Errc::kInvalidArgument);
  CHECK(make_test_function("sphere").error().code() == Errc::kInvalidArgument);
  CHECK(make_test_function("levy", 10)->dim == 10);
}

TEST_CASE("learning_curve starts at the initial value, ends at f(x) and keeps the order") {
  CHECK(learning_curve(0.9, 0.1, 0, 10) == 0.1);
  CHECK(learning_curve(0.9, 0.1, 10, 10) == 0.9);
  CHECK(learning_curve(0.9, 0.1, 20, 10) == 0.9);
  double prev = 0.1;
  for (int s = 1; s <= 10; ++s) {
    const double v = learning_curve(0.9, 0.1, s, 10);
    CHECK(v > prev);
    prev = v;
    CHECK(learning_curve(0.8, 0.1, s, 10) < v);
  }
  CHECK(learning_curve(0.9, 0.1, 5, 10, 10.0) > learning_curve(0.9, 0.1, 5, 10, 1.0));  // faster rate
}
