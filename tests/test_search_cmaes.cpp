// cmaes (search/cmaes.h): convergence on a sphere and an ellipsoid, Rosenbrock-4 against random
// search, the first generation's update checked by hand, the generation barrier, restore, the
// margin on integer dimensions, and one objective only.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "search/searcher.h"
#include "param_specs.h"
#include "search/test_functions.h"

using namespace hpctune;
using namespace hpctune::search;
using namespace hpctune::testing;
using nlohmann::json;

namespace {

Space floats(int d, double lo, double hi) {
  std::vector<ParamSpec> s;
  for (int i = 1; i <= d; ++i) s.push_back(flt("x" + std::to_string(i), lo, hi));
  return Space::create(s).value();
}

std::unique_ptr<Searcher> make(const std::string& algo, const Space& space, uint64_t seed, json settings = json::object(),
                               bool maximize = false) {
  SearchSpec spec;
  spec.algorithm = algo;
  spec.space = space;
  spec.objectives = {{"f", maximize}};
  spec.seed = seed;
  spec.max_trials = 1000;
  spec.settings = std::move(settings);
  auto s = make_searcher(spec);
  REQUIRE_MESSAGE(s.ok(), s.error().to_string());
  return std::move(*s);
}

// Sequential ask(1)/tell runs of `budget` trials; the best value.
template <class F>
double best_of(Searcher& s, int budget, F&& f) {
  double best = INFINITY;
  for (int t = 0; t < budget; ++t) {
    auto sug = s.ask(1).value();
    REQUIRE(sug.size() == 1);
    const double v = f(sug[0].params);
    best = std::min(best, v);
    s.tell({sug[0].seq, sug[0].params, Outcome::kCompleted, {v}, 1});
  }
  return best;
}

std::vector<double> xs(const Params& p, int d) {
  std::vector<double> x;
  for (int i = 1; i <= d; ++i) {
    std::string name = "x";  // appended, not "x" + ...: GCC 12 warns falsely (-Wrestrict) on that
    name += std::to_string(i);
    x.push_back(p[name].get<double>());
  }
  return x;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

TEST_CASE("cmaes converges on a sphere and an ellipsoid in d = 4 (regret < 1e-3 in 300 and 400 trials)") {
  const Space space = floats(4, -1, 1);
  auto sphere = [](const Params& p) {
    double s = 0;
    for (double x : xs(p, 4)) s += (x - 0.3) * (x - 0.3);
    return s;
  };
  auto ellipsoid = [](const Params& p) {
    const auto x = xs(p, 4);
    double s = 0;
    for (int i = 0; i < 4; ++i) s += std::pow(100.0, i / 3.0) * (x[static_cast<std::size_t>(i)] + 0.4) * (x[static_cast<std::size_t>(i)] + 0.4);
    return s;
  };
  for (uint64_t seed : {1, 2, 3}) {
    CAPTURE(seed);
    auto a = make("cmaes", space, seed), b = make("cmaes", space, seed);
    CHECK(best_of(*a, 300, sphere) < 1e-3);
    CHECK(best_of(*b, 400, ellipsoid) < 1e-3);
  }
}

TEST_CASE("cmaes beats random search on Rosenbrock-4 at a budget of 100 (median of 5 seeds)") {
  const TestFunction fn = make_test_function("rosenbrock", 4).value();
  const Space space = test_function_space(fn);
  auto f = [&](const Params& p) { return fn(p); };
  std::vector<double> cma, rnd;
  for (uint64_t seed = 10; seed < 15; ++seed) {
    auto c = make("cmaes", space, seed), r = make("random", space, seed);
    cma.push_back(best_of(*c, 100, f));
    rnd.push_back(best_of(*r, 100, f));
  }
  MESSAGE("rosenbrock4 @100: cmaes median " << median(cma) << ", random median " << median(rnd));
  CHECK(median(cma) < 0.5 * median(rnd));
}

TEST_CASE("cmaes: the first generation's mean and step size follow the standard update") {
  // d = 4: lambda = 4 + floor(3 ln 4) = 8, mu = 4; the mean starts at the centre, sigma0 = 1/6, C = I.
  const int d = 4;
  const Space space = floats(d, 0, 1);  // unit coordinates are the values themselves
  const double lam = 8, mu = 4;
  std::vector<double> wp;
  for (int i = 0; i < 8; ++i) wp.push_back(std::log((lam + 1) / 2) - std::log(i + 1.0));
  double sw = 0, sw2 = 0;
  for (int i = 0; i < mu; ++i) {
    sw += wp[static_cast<std::size_t>(i)];
    sw2 += wp[static_cast<std::size_t>(i)] * wp[static_cast<std::size_t>(i)];
  }
  const double mu_eff = sw * sw / sw2;
  const double cs = (mu_eff + 2) / (d + mu_eff + 5);
  const double ds = 1 + 2 * std::max(0.0, std::sqrt((mu_eff - 1) / (d + 1)) - 1) + cs;
  const double chi_n = std::sqrt(d) * (1 - 1.0 / (4 * d) + 1.0 / (21.0 * d * d));
  const double sigma0 = 1.0 / 6;

  // Runs one generation with f, checks the state against the update computed here; the new sigma.
  auto one_generation = [&](auto f) {
    auto s = make("cmaes", space, 42);
    auto gen = s->ask(20).value();
    REQUIRE(gen.size() == 8);  // the generation barrier: no more than lambda
    CHECK(gen[0].meta["generation"] == 0);
    CHECK(s->ask(1).value().empty());
    std::vector<std::pair<double, std::vector<double>>> ranked;
    for (const auto& g : gen) {
      const auto x = xs(g.params, d);
      ranked.push_back({f(x), x});
    }
    // Tell in reverse order: the update must not depend on it.
    for (std::size_t i = gen.size(); i-- > 0;) {
      CHECK(s->state()["cmaes"]["generation"] == 0);
      s->tell({gen[i].seq, gen[i].params, Outcome::kCompleted, {ranked[i].first}, 1});
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<double> yw(d, 0.0);
    for (int i = 0; i < mu; ++i)
      for (int j = 0; j < d; ++j)
        yw[static_cast<std::size_t>(j)] += wp[static_cast<std::size_t>(i)] / sw * (ranked[static_cast<std::size_t>(i)].second[static_cast<std::size_t>(j)] - 0.5) / sigma0;
    double norm2 = 0;
    for (double v : yw) norm2 += v * v;
    const double ps_norm = std::sqrt(cs * (2 - cs) * mu_eff) * std::sqrt(norm2);  // p_sigma from 0, C = I
    const double sigma1 = sigma0 * std::exp(cs / ds * (ps_norm / chi_n - 1));
    const json st = s->state()["cmaes"];
    CHECK(st["generation"] == 1);
    for (int j = 0; j < d; ++j) CHECK(st["mean"][static_cast<std::size_t>(j)].get<double>() == doctest::Approx(0.5 + sigma0 * yw[static_cast<std::size_t>(j)]).epsilon(1e-9));
    CHECK(st["sigma"].get<double>() == doctest::Approx(sigma1).epsilon(1e-9));
    auto next = s->ask(1).value();
    REQUIRE(next.size() == 1);
    CHECK(next[0].meta["generation"] == 1);
    return st["sigma"].get<double>();
  };
  // All values equal: the ranking carries no information and the evolution path starts at 0, so
  // its length is below chi_n's and sigma shrinks.
  const double flat = one_generation([](const std::vector<double>&) { return 1.0; });
  CHECK(flat < sigma0);

  // A linear slope selects consistently along x1: the path lengthens and sigma grows, generation
  // after generation (a small sigma0 keeps the mean far from the bounds).
  auto s = make("cmaes", space, 7, {{"sigma0", 0.01}});
  for (int t = 0; t < 48; ++t) {
    auto sug = s->ask(1).value();
    REQUIRE(sug.size() == 1);
    s->tell({sug[0].seq, sug[0].params, Outcome::kCompleted, {sug[0].params["x1"].get<double>()}, 1});
  }
  CHECK(s->state()["cmaes"]["generation"] == 6);
  CHECK(s->state()["cmaes"]["sigma"].get<double>() > 3 * 0.01);
  CHECK(s->state()["cmaes"]["mean"][0].get<double>() < 0.45);
}

TEST_CASE("cmaes restarts with a doubled population when the values stop changing (IPOP)") {
  auto s = make("cmaes", floats(4, 0, 1), 3);
  for (int g = 0; g < 2; ++g) {
    CHECK(s->state()["cmaes"]["restarts"] == 0);
    auto gen = s->ask(100).value();
    REQUIRE(gen.size() == 8);
    for (const auto& x : gen) s->tell({x.seq, x.params, Outcome::kCompleted, {2.5}, 1});
  }
  CHECK(s->state()["cmaes"]["restarts"] == 1);
  CHECK(s->state()["cmaes"]["popsize"] == 16);
  CHECK(s->state()["cmaes"]["sigma"].get<double>() == doctest::Approx(1.0 / 6));
  // restore() replays the restart: the same state and the same next generation.
  std::vector<Record> history;
  auto replay = make("cmaes", floats(4, 0, 1), 3);
  {
    auto fresh = make("cmaes", floats(4, 0, 1), 3);
    for (int g = 0; g < 2; ++g) {
      const auto gen = fresh->ask(100).value();
      for (const auto& x : gen) {
        const Observation o{x.seq, x.params, Outcome::kCompleted, {2.5}, 1};
        fresh->tell(o);
        history.push_back({x, o});
      }
    }
  }
  replay->restore(history);
  CHECK(replay->state() == s->state());
  const auto next = s->ask(100).value(), next_replayed = replay->ask(100).value();
  REQUIRE(next.size() == 16);
  REQUIRE(next_replayed.size() == 16);
  for (std::size_t i = 0; i < next.size(); ++i) CHECK(next[i].params == next_replayed[i].params);
  // Without ipop the population stays.
  auto same = make("cmaes", floats(4, 0, 1), 3, {{"restart", "none"}});
  for (int g = 0; g < 2; ++g) {
    const auto gen = same->ask(100).value();
    for (const auto& x : gen) same->tell({x.seq, x.params, Outcome::kFailed, {}, 0});
  }
  CHECK(same->state()["cmaes"]["restarts"] == 1);
  CHECK(same->state()["cmaes"]["popsize"] == 8);
}

namespace {

// Ints (linear, log), ordered and unordered choices, a conditional float, a fixed value.
Space mixed_space() {
  std::vector<ParamSpec> s;
  s.push_back(flt("lr", 1e-4, 1e-1, true));
  s.push_back(integer("layers", 1, 6));
  ParamSpec units = integer("units", 8, 512, 1, true);
  units.step = 8;
  s.push_back(units);
  ParamSpec width;
  width.name = "width";
  width.type = ParamType::kChoice;
  width.choices = {16, 32, 64, 128};
  width.ordered = true;
  s.push_back(width);
  ParamSpec opt;
  opt.name = "optimizer";
  opt.type = ParamType::kChoice;
  opt.choices = {"sgd", "adam", "rmsprop"};
  s.push_back(opt);
  ParamSpec mom = flt("momentum", 0.0, 0.99);
  mom.when = Condition{"optimizer", {"sgd"}};
  s.push_back(mom);
  ParamSpec fixed;
  fixed.name = "epochs";
  fixed.type = ParamType::kFixed;
  fixed.value = 3;
  s.push_back(fixed);
  return Space::create(s).value();
}

double mixed_objective(const Params& p) {
  double v = std::pow(std::log10(p["lr"].get<double>()) + 2.2, 2) + 0.1 * std::fabs(p["layers"].get<double>() - 5);
  v += 0.05 * std::fabs(std::log2(p["units"].get<double>()) - 6) + (p["width"] == 128 ? 0.0 : 0.2);
  if (p["optimizer"] == "sgd") v -= 0.3 * p["momentum"].get<double>();
  return v;
}

}  // namespace

TEST_CASE("cmaes: suggestions stay inside a mixed space; restore continues exactly as the uninterrupted run") {
  const Space space = mixed_space();
  auto live = make("cmaes", space, 9);
  std::vector<Record> history;
  std::vector<Suggestion> pending;
  std::set<int64_t> layers;
  int64_t asked = 0;
  // Batches of 3 with trials left running across calls; every 6th fails, every 5th is pruned.
  for (int round = 0; round < 40; ++round) {
    const auto batch = live->ask(3).value();
    for (const auto& x : batch) {
      CHECK_MESSAGE(space.contains(x.params).ok(), x.params.dump());
      layers.insert(x.params["layers"].get<int64_t>());
      pending.push_back(x);
      ++asked;
    }
    if (pending.empty()) continue;
    // Tell the newest pending one first, then the oldest: out of seq order.
    for (std::size_t pick : {pending.size() - 1, std::size_t{0}}) {
      if (pick >= pending.size()) continue;
      const Suggestion x = pending[pick];
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(pick));
      Observation o{x.seq, x.params, Outcome::kCompleted, {mixed_objective(x.params)}, 3};
      if (x.seq % 6 == 5) o = Observation{x.seq, x.params, Outcome::kFailed, {}, 0};
      else if (x.seq % 5 == 4) o = Observation{x.seq, x.params, Outcome::kPruned, {mixed_objective(x.params) + 1}, 1};
      live->tell(o);
      history.push_back({x, o});
    }
  }
  CHECK(asked > 60);
  CHECK(live->state()["cmaes"]["generation"].get<int64_t>() >= 6);
  CHECK(layers.size() >= 3);
  for (const auto& x : pending) history.push_back({x, std::nullopt});
  std::sort(history.begin(), history.end(), [](const Record& a, const Record& b) { return a.suggestion.seq < b.suggestion.seq; });

  auto restored = make("cmaes", space, 9);
  restored->restore(history);
  CHECK(restored->state() == live->state());
  // Finish the running ones in both, then the next suggestions are the same.
  for (int r = 0; r < 3; ++r) {
    for (const auto& x : pending) {
      const Observation o{x.seq, x.params, Outcome::kCompleted, {mixed_objective(x.params)}, 3};
      live->tell(o);
      restored->tell(o);
    }
    auto a = live->ask(5).value(), b = restored->ask(5).value();
    REQUIRE(a.size() == b.size());
    CHECK(!a.empty());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].seq == b[i].seq);
      CHECK(a[i].params == b[i].params);
      CHECK(a[i].meta == b[i].meta);
    }
    pending = a;
  }
}

TEST_CASE("cmaes with margin keeps sampling other levels of converged binary dimensions") {
  // 4 binary ints and a float; the ints matter little, so the float's convergence shrinks sigma
  // and, without the margin, every sample rounds to one level per int (the distribution
  // collapses). With it, each int leaves its mean's level with probability >= 1 / (d lambda).
  std::vector<ParamSpec> specs;
  const std::string kNames[4] = {"k0", "k1", "k2", "k3"};
  for (std::size_t i = 0; i < 4; ++i) specs.push_back(integer(kNames[i], 0, 1));
  specs.push_back(flt("x", -1, 1));
  const Space space = Space::create(specs).value();
  const int target[4] = {1, 0, 0, 1};
  auto f = [&](const Params& p) {
    double v = std::pow(p["x"].get<double>() - 0.3, 2);
    for (std::size_t i = 0; i < 4; ++i) v += 0.01 * std::pow(p[kNames[i]].get<double>() - target[i], 2);
    return v;
  };
  // In the last 100 of 500 trials: the values other than each int's most frequent one.
  auto minority = [&](bool margin, uint64_t seed) {
    auto s = make("cmaes", space, seed, {{"margin", margin}, {"restart", "none"}});
    std::vector<std::array<int, 2>> count(4, {0, 0});
    for (int t = 0; t < 500; ++t) {
      auto sug = s->ask(1).value();
      REQUIRE(sug.size() == 1);
      if (t >= 400)
        for (std::size_t i = 0; i < 4; ++i) count[i][sug[0].params[kNames[i]].get<std::size_t>()]++;
      s->tell({sug[0].seq, sug[0].params, Outcome::kCompleted, {f(sug[0].params)}, 1});
    }
    int n = 0;
    for (const auto& c : count) n += std::min(c[0], c[1]);
    return n;
  };
  int with = 0, without = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    CAPTURE(seed);
    const int m = minority(true, seed);
    CHECK(m >= 4);  // about 100 * 4 / (5 * 8) = 10 expected
    with += m;
    without += minority(false, seed);
  }
  MESSAGE("minority int values in the last 100 trials, 6 seeds: margin " << with << ", no margin " << without);
  CHECK(without * 3 < with);
}

TEST_CASE("cmaes starts at the best warm-start trial; notes say what is outside the Gaussian") {
  const Space space = floats(3, -1, 1);
  SearchSpec spec;
  spec.algorithm = "cmaes";
  spec.space = space;
  spec.objectives = {{"f", false}};
  spec.seed = 4;
  for (double v : {0.5, -0.5, 0.0}) {
    const Params p = {{"x1", v}, {"x2", v}, {"x3", v}};
    spec.warm_start.push_back({-1, p, Outcome::kCompleted, {std::fabs(v - 0.6)}, 1});
  }
  auto s = make_searcher(spec).value();
  const json mean = s->state()["cmaes"]["mean"];
  for (int j = 0; j < 3; ++j) CHECK(mean[static_cast<std::size_t>(j)].get<double>() == doctest::Approx(0.75));  // x = 0.5
  CHECK(s->state()["cmaes"]["popsize"] == 7);  // 4 + floor(3 ln 3)

  spec.space = mixed_space();
  spec.warm_start.clear();
  spec.max_trials = 10;
  const auto notes = make_searcher(spec).value()->notes();
  std::string all;
  for (const auto& n : notes) all += n + "\n";
  CAPTURE(all);
  CHECK(all.find("a population of 8 per generation over 4 dimensions (lr, layers, units, width)") != std::string::npos);
  CHECK(all.find("optimizer, momentum (unordered or conditional) are drawn uniformly") != std::string::npos);
  CHECK(all.find("max_trials 10 allows fewer than 2 generations") != std::string::npos);
}

TEST_CASE("cmaes refuses several objectives with a config error") {
  SearchSpec spec;
  spec.algorithm = "cmaes";
  spec.space = floats(2, 0, 1);
  spec.objectives = {{"acc", true}, {"cost", false}};
  auto s = make_searcher(spec);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
}
