// The `function` trainer: values against independent computations, the learning curve, noise,
// stop requests, timing, and its errors.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <numbers>
#include <vector>

#include "search/test_functions.h"
#include "trainers/trainer_factory.h"
#include "trainers/function_trainer.h"
#include "trainers/trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::collectives;

namespace {

struct Run {
  Result<TrialResult> result = err(Errc::kInternal, "not run");
  std::vector<std::pair<int64_t, double>> reports;  // (step, value)
};

Run run(nlohmann::json trainer, nlohmann::json params, uint64_t seed = 7,
        std::function<bool(const Run&)> stop = {}) {
  Run out;
  TrialContext ctx;
  ctx.seed = seed;
  trainer["kind"] = "function";
  ctx.trainer = std::move(trainer);
  ctx.params = std::move(params);
  ctx.report = [&out](int64_t step, const protocol::Metrics& m) {
    REQUIRE(m.size() == 1);
    out.reports.emplace_back(step, m.at("value"));
  };
  if (stop) ctx.stop_requested = [&out, stop] { return stop(out); };
  auto trainer_r = make_trainer("function");
  REQUIRE(trainer_r.ok());
  CHECK(trainer_r.value()->kind() == "function");
  out.result = trainer_r.value()->run(ctx);
  return out;
}

// "x<i>", built so that GCC 12 does not warn falsely on "x" + to_string(i) (-Wrestrict, PR 105329).
std::string x(int i) {
  std::string name = "x";
  name += std::to_string(i);
  return name;
}

nlohmann::json ones(int d, double v) {
  nlohmann::json p = nlohmann::json::object();
  for (int i = 1; i <= d; ++i) p[x(i)] = v;
  return p;
}

}  // namespace

TEST_CASE("function is a trainer kind") {
  bool found = false;
  for (const auto& k : trainer_kinds()) found |= k == "function";
  CHECK(found);
  auto specs = trainer_setting_specs("function");
  REQUIRE(specs.ok());
  CHECK(specs.value()->size() == 8);  // + parameters, layers, batches_per_step: read by hpctune simulate's cost model
}

TEST_CASE("values and regrets match independent computations") {
  SUBCASE("branin at (0, 0): (0 - 6)^2 + 10 (1 - 1/(8 pi)) + 10") {
    const double expected = 36.0 + 10.0 * (1.0 - 1.0 / (8.0 * std::numbers::pi)) + 10.0;
    auto r = run({{"name", "branin"}}, {{"x1", 0.0}, {"x2", 0.0}});
    REQUIRE(r.result.ok());
    CHECK(r.result->step == 1);
    CHECK_FALSE(r.result->stopped);
    CHECK(r.result->metrics.at("value") == doctest::Approx(expected).epsilon(1e-12));
    CHECK(r.result->metrics.at("regret") == doctest::Approx(expected - 0.39788735772973816).epsilon(1e-12));
    REQUIRE(r.reports.size() == 1);
    CHECK(r.reports[0].second == r.result->metrics.at("value"));
  }
  SUBCASE("branin at its three minimizers: regret 0") {
    for (auto [a, b] : {std::pair{-std::numbers::pi, 12.275}, {std::numbers::pi, 2.275}, {9.42478, 2.475}}) {
      auto r = run({{"name", "branin"}}, {{"x1", a}, {"x2", b}});
      REQUIRE(r.result.ok());
      CHECK(std::fabs(r.result->metrics.at("regret")) < 1e-5);
    }
  }
  SUBCASE("hartmann6 at its minimizer") {
    const std::vector<double> xs = {0.20168952, 0.15001069, 0.47687398, 0.27533243, 0.31165162, 0.65730054};
    nlohmann::json p;
    for (int i = 0; i < 6; ++i) p[x(i + 1)] = xs[static_cast<std::size_t>(i)];
    auto r = run({{"name", "hartmann6"}}, p);
    REQUIRE(r.result.ok());
    CHECK(r.result->metrics.at("value") == doctest::Approx(-3.32237).epsilon(1e-5));
    CHECK(std::fabs(r.result->metrics.at("regret")) < 1e-6);
  }
  SUBCASE("10-d levy: 0 at (1, ..., 1); at (0, ..., 0) by the formula with w = 3/4") {
    auto r = run({{"name", "levy"}, {"dim", 10}}, ones(10, 1.0));
    REQUIRE(r.result.ok());
    CHECK(std::fabs(r.result->metrics.at("regret")) < 1e-12);
    const double pi = std::numbers::pi, w = 0.75;
    const double mid = (w - 1) * (w - 1) * (1 + 10 * std::pow(std::sin(pi * w + 1), 2));
    const double expected = std::pow(std::sin(pi * w), 2) + 9 * mid + (w - 1) * (w - 1) * (1 + std::pow(std::sin(2 * pi * w), 2));
    auto z = run({{"name", "levy"}, {"dim", 10}}, ones(10, 0.0));
    REQUIRE(z.result.ok());
    CHECK(z.result->metrics.at("value") == doctest::Approx(expected).epsilon(1e-12));
  }
  SUBCASE("ackley in 3-d at 0 and rosenbrock in 4-d at (0, ..., 0) = 3") {
    auto a = run({{"name", "ackley"}, {"dim", 3}}, ones(3, 0.0));
    REQUIRE(a.result.ok());
    CHECK(std::fabs(a.result->metrics.at("value")) < 1e-12);
    auto b = run({{"name", "rosenbrock"}, {"dim", 4}}, ones(4, 0.0));
    REQUIRE(b.result.ok());
    CHECK(b.result->metrics.at("value") == doctest::Approx(3.0));
  }
}

TEST_CASE("reports follow the learning curve to the final value, in the order of the final values") {
  const int64_t steps = 8;
  auto good = run({{"name", "branin"}, {"steps", steps}}, {{"x1", 3.0}, {"x2", 2.0}});
  auto bad = run({{"name", "branin"}, {"steps", steps}}, {{"x1", -4.0}, {"x2", 1.0}});
  REQUIRE(good.result.ok());
  REQUIRE(bad.result.ok());
  REQUIRE(good.reports.size() == static_cast<std::size_t>(steps));
  REQUIRE(bad.reports.size() == static_cast<std::size_t>(steps));
  const double f_good = search::branin({3.0, 2.0}), f_bad = search::branin({-4.0, 1.0});
  REQUIRE(f_good < f_bad);
  CHECK(good.result->step == steps);
  CHECK(good.result->metrics.at("value") == doctest::Approx(f_good).epsilon(1e-12));
  CHECK(good.reports.back().second == doctest::Approx(f_good).epsilon(1e-12));
  for (int64_t s = 1; s <= steps; ++s) {
    CAPTURE(s);
    CHECK(good.reports[static_cast<std::size_t>(s - 1)].first == s);
    CHECK(good.reports[static_cast<std::size_t>(s - 1)].second < bad.reports[static_cast<std::size_t>(s - 1)].second);
    if (s > 1) {  // the shared start lies above both: the curves decrease
      CHECK(good.reports[static_cast<std::size_t>(s - 1)].second < good.reports[static_cast<std::size_t>(s - 2)].second);
    }
  }
  // The curve itself: both runs start from the same initial value, recovered from step 1.
  const auto curve = [&](double final_value, int64_t s, double initial) {
    return search::learning_curve(final_value, initial, s, steps);
  };
  // Solve step 1 of the good run for `initial` (learning_curve is affine in it), check the bad run.
  const double a = curve(f_good, 1, 0.0), b = curve(f_good, 1, 1.0) - a;
  const double initial = (good.reports[0].second - a) / b;
  CHECK(initial > f_bad);
  for (int64_t s = 1; s <= steps; ++s)
    CHECK(bad.reports[static_cast<std::size_t>(s - 1)].second == doctest::Approx(curve(f_bad, s, initial)).epsilon(1e-9));
}

TEST_CASE("noise: Gaussian with the given deviation, reproducible from the trial seed") {
  const int64_t steps = 4000;
  const nlohmann::json p = {{"x1", 1.0}, {"x2", 1.0}, {"x3", 1.0}};
  // rosenbrock at (1, 1, 1) is 0 and the curve's step >= 1 values are known: subtract them.
  auto a = run({{"name", "rosenbrock"}, {"dim", 3}, {"noise", 0.5}, {"steps", steps}}, p, 11);
  auto clean = run({{"name", "rosenbrock"}, {"dim", 3}, {"steps", steps}}, p, 11);
  REQUIRE(a.result.ok());
  REQUIRE(clean.result.ok());
  double sum = 0, sq = 0;
  for (std::size_t i = 0; i < a.reports.size(); ++i) {
    const double e = a.reports[i].second - clean.reports[i].second;
    sum += e;
    sq += e * e;
  }
  const double n = static_cast<double>(steps), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  CHECK(std::fabs(mean) < 4 * 0.5 / std::sqrt(n));
  CHECK(sd == doctest::Approx(0.5).epsilon(0.05));
  CHECK(a.result->metrics.at("value") == a.reports.back().second);
  CHECK(a.result->metrics.at("regret") == a.reports.back().second);  // optimum 0

  auto again = run({{"name", "rosenbrock"}, {"dim", 3}, {"noise", 0.5}, {"steps", steps}}, p, 11);
  auto other = run({{"name", "rosenbrock"}, {"dim", 3}, {"noise", 0.5}, {"steps", steps}}, p, 12);
  REQUIRE(again.result.ok());
  REQUIRE(other.result.ok());
  CHECK(again.reports == a.reports);
  CHECK(other.reports != a.reports);
}

TEST_CASE("a stop request ends the run with the last reported metrics") {
  auto r = run({{"name", "branin"}, {"steps", 10}}, {{"x1", 0.0}, {"x2", 0.0}}, 7,
               [](const Run& so_far) { return so_far.reports.size() >= 3; });
  REQUIRE(r.result.ok());
  CHECK(r.result->stopped);
  CHECK(r.result->step == 3);
  REQUIRE(r.reports.size() == 3);
  CHECK(r.result->metrics.at("value") == r.reports.back().second);
  CHECK(r.result->metrics.at("regret") == doctest::Approx(r.reports.back().second - 0.39788735772973816));

  auto first = run({{"name", "branin"}, {"steps", 10}}, {{"x1", 0.0}, {"x2", 0.0}}, 7, [](const Run&) { return true; });
  REQUIRE(first.result.ok());
  CHECK(first.result->stopped);
  CHECK(first.result->step == 0);
  CHECK(first.reports.empty());
}

TEST_CASE("seconds_per_step paces the reports, and a stop interrupts the wait") {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto r = run({{"name", "branin"}, {"steps", 3}, {"seconds_per_step", 0.03}}, {{"x1", 0.0}, {"x2", 0.0}});
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  REQUIRE(r.result.ok());
  CHECK(r.reports.size() == 3);
  CHECK(took >= 0.09);
  CHECK(took < 2.0);

  const auto t1 = Clock::now();
  auto s = run({{"name", "branin"}, {"steps", 2}, {"seconds_per_step", 30.0}}, {{"x1", 0.0}, {"x2", 0.0}}, 7,
               [t1](const Run&) { return Clock::now() - t1 > std::chrono::milliseconds(50); });
  const double took_stop = std::chrono::duration<double>(Clock::now() - t1).count();
  REQUIRE(s.result.ok());
  CHECK(s.result->stopped);
  CHECK(s.reports.empty());
  CHECK(took_stop < 2.0);
}

TEST_CASE("bad settings and parameters are kInvalidArgument") {
  const nlohmann::json xy = {{"x1", 0.0}, {"x2", 0.0}};
  struct Case {
    const char* what;
    nlohmann::json trainer, params;
  };
  const std::vector<Case> cases = {
      {"unknown function", {{"name", "sphere"}}, xy},
      {"branin in 3-d", {{"name", "branin"}, {"dim", 3}}, xy},
      {"hartmann6 in 2-d", {{"name", "hartmann6"}, {"dim", 2}}, xy},
      {"rosenbrock in 1-d", {{"name", "rosenbrock"}, {"dim", 1}}, {{"x1", 0.0}}},
      {"negative dim", {{"name", "levy"}, {"dim", -1}}, xy},
      {"missing x2", {{"name", "branin"}}, {{"x1", 0.0}}},
      {"missing x10 of 10-d levy", {{"name", "levy"}, {"dim", 10}}, ones(9, 0.0)},
      {"x3 for branin", {{"name", "branin"}}, {{"x1", 0.0}, {"x2", 0.0}, {"x3", 0.0}}},
      {"x1 not a number", {{"name", "branin"}}, {{"x1", "a"}, {"x2", 0.0}}},
      {"x1 outside the box", {{"name", "branin"}}, {{"x1", 11.0}, {"x2", 0.0}}},
      {"misspelled setting", {{"name", "branin"}, {"nosie", 0.1}}, xy},
      {"unknown parameter", {{"name", "branin"}}, {{"x1", 0.0}, {"x2", 0.0}, {"lr", 0.1}}},
      {"negative noise", {{"name", "branin"}, {"noise", -1.0}}, xy},
      {"zero steps", {{"name", "branin"}, {"steps", 0}}, xy},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto r = run(c.trainer, c.params);
    REQUIRE_FALSE(r.result.ok());
    CHECK(r.result.error().code() == Errc::kInvalidArgument);
    CHECK(r.reports.empty());
  }
  // The messages name what is wrong.
  auto missing = run({{"name", "branin"}}, {{"x1", 0.0}});
  CHECK(missing.result.error().message().find("'x2'") != std::string::npos);
  auto unknown = run({{"name", "sphere"}}, xy);
  CHECK(unknown.result.error().message().find("hartmann6") != std::string::npos);  // lists the valid names
  auto spelled = run({{"name", "branin"}, {"nosie", 0.1}}, xy);
  CHECK(spelled.result.error().message().find("did you mean 'noise'") != std::string::npos);
}
