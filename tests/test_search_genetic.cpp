// Genetic algorithm: generations and their meta, elitism, min_complete_fraction, islands and
// migration, NSGA-II on a known two-objective problem; aging evolution's population.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "search/encoding.h"
#include "search/pareto.h"
#include "search/searcher.h"
#include "param_specs.h"
#include "search/test_functions.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;

namespace {

Space box(int d, double lo, double hi) {
  std::vector<ParamSpec> specs;
  for (int i = 0; i < d; ++i) {
    ParamSpec p;
    p.name = "x";
    p.name += std::to_string(i + 1);
    p.low = lo;
    p.high = hi;
    specs.push_back(p);
  }
  return Space::create(specs).value();
}

SearchSpec ga_spec(json settings, Space space, std::vector<Objective> obj = {{"f", false}}, uint64_t seed = 1) {
  SearchSpec spec;
  spec.algorithm = "genetic";
  spec.settings = std::move(settings);
  spec.space = std::move(space);
  spec.objectives = std::move(obj);
  spec.seed = seed;
  return spec;
}

double sphere(const Params& p) {
  double s = 0;
  for (auto it = p.begin(); it != p.end(); ++it) s += it.value().get<double>() * it.value().get<double>();
  return s;
}

}  // namespace

TEST_CASE("generations: bred from completed members, recorded in meta and state; elitism keeps the best") {
  auto s = make_searcher(ga_spec({{"population", 8}, {"elitism", 2}, {"generations", 6}}, box(3, -5, 5))).value();
  std::map<int64_t, double> value;
  std::map<int64_t, int64_t> generation_of;
  double best_so_far = 1e300;
  for (int64_t g = 0; g < 6; ++g) {
    auto sug = s->ask(100).value();  // a generation at a time: the barrier stops at its end
    REQUIRE(sug.size() == (g == 0 ? 8u : 6u));  // 2 elites are carried, not run again
    CHECK(s->ask(1).value().empty());                    // waits for the generation to finish
    for (const auto& x : sug) {
      CHECK(x.meta["generation"] == g);
      CHECK(x.meta["island"] == 0);
      if (g == 0) CHECK(x.meta["parents"].empty());
      for (const auto& p : x.meta["parents"]) {
        REQUIRE(generation_of.count(p.get<int64_t>()));
        CHECK(generation_of[p.get<int64_t>()] < g);  // parents come from earlier generations
      }
      generation_of[x.seq] = g;
    }
    // The elites of generation g are the best two seen so far.
    auto st = s->state();
    auto gens = st["islands"][0]["generations"];
    REQUIRE(gens.size() == static_cast<std::size_t>(g + 1));
    if (g > 0) {
      std::vector<std::pair<double, int64_t>> ranked;
      for (const auto& [seq, v] : value) ranked.push_back({v, seq});
      std::sort(ranked.begin(), ranked.end());
      auto carried = gens[g]["carried"];
      REQUIRE(carried.size() == 2);
      CHECK(carried[0] == ranked[0].second);  // elitism keeps the best
      CHECK(carried[1] == ranked[1].second);
    }
    for (const auto& x : sug) {
      value[x.seq] = sphere(x.params);
      best_so_far = std::min(best_so_far, value[x.seq]);
      s->tell({x.seq, x.params, Outcome::kCompleted, {value[x.seq]}, 1});
    }
  }
  CHECK(s->ask(1).value().empty());
  CHECK(s->exhausted());
  CHECK(s->state()["best"]["value"].get<double>() == best_so_far);
}

TEST_CASE("min_complete_fraction lets a generation advance without its stragglers") {
  auto s = make_searcher(ga_spec({{"population", 8}, {"min_complete_fraction", 0.75}}, box(2, -1, 1))).value();
  auto g0 = s->ask(8).value();
  REQUIRE(g0.size() == 8);
  for (int i = 0; i < 5; ++i) s->tell({g0[i].seq, g0[i].params, Outcome::kCompleted, {sphere(g0[i].params)}, 1});
  CHECK(s->ask(1).value().empty());  // 5 of 8 < 75%
  s->tell({g0[5].seq, g0[5].params, Outcome::kFailed, {}, 0});  // failed trials count as finished
  auto g1 = s->ask(2).value();
  REQUIRE(g1.size() == 2);
  CHECK(g1[0].meta["generation"] == 1);
  // The stragglers, told later, join the next pool and do not crash anything.
  s->tell({g0[6].seq, g0[6].params, Outcome::kCompleted, {0.0}, 1});
  s->tell({g0[7].seq, g0[7].params, Outcome::kPruned, {0.5}, 1});
  auto rest = s->ask(20).value();
  CHECK(rest.size() == 5);  // 8 - 1 elite - 2 already asked
}

TEST_CASE("islands alternate, breed separately and migrate their best") {
  auto s = make_searcher(ga_spec({{"population", 4}, {"islands", 3}, {"migration_interval", 2}, {"elitism", 1}},
                                 box(2, -3, 3)))
               .value();
  std::map<int64_t, int64_t> island_of;
  std::map<int64_t, double> value;
  for (int round = 0; round < 3; ++round) {
    auto sug = s->ask(100).value();
    std::map<int64_t, int> per_island;
    for (const auto& x : sug) {
      per_island[x.meta["island"].get<int64_t>()]++;
      island_of[x.seq] = x.meta["island"].get<int64_t>();
    }
    CHECK(per_island == std::map<int64_t, int>{{0, round == 0 ? 4 : 3}, {1, round == 0 ? 4 : 3}, {2, round == 0 ? 4 : 3}});
    CHECK(sug[0].meta["island"] == 0);  // round-robin
    CHECK(sug[1].meta["island"] == 1);
    CHECK(sug[2].meta["island"] == 2);
    for (const auto& x : sug) {
      value[x.seq] = sphere(x.params);
      s->tell({x.seq, x.params, Outcome::kCompleted, {value[x.seq]}, 1});
    }
  }
  // Generation 2 (2 % migration_interval == 0) of island i was bred with the best of island i-1
  // as of generation 1; generation 1 had no migrants.
  auto st = s->state();
  REQUIRE(st["islands"].size() == 3);
  for (int i = 0; i < 3; ++i) {
    auto gens = st["islands"][i]["generations"];
    CHECK(gens[1]["migrants"].empty());
    REQUIRE(gens[2]["migrants"].size() == 1);
    const int64_t migrant = gens[2]["migrants"][0].get<int64_t>();
    const int64_t from = (i + 2) % 3;
    CHECK(island_of.at(migrant) == from);
    double best = 1e300;
    int64_t best_seq = -1;
    for (const auto& [seq, v] : value)
      if (island_of[seq] == from && v < best && seq < 21) {  // seqs 0..20: generations 0 and 1
        best = v;
        best_seq = seq;
      }
    CHECK(migrant == best_seq);
  }
}

TEST_CASE("non-dominated sorting and crowding distance on a hand-made set") {
  // Minimize both. Fronts: {0,1,2}, {3,4}, {5}.
  std::vector<std::vector<double>> pts = {{1, 5}, {2, 3}, {4, 1}, {3, 4}, {5, 2}, {6, 6}};
  auto fronts = nondominated_sort(pts);
  REQUIRE(fronts.size() == 3);
  CHECK(fronts[0] == std::vector<std::size_t>{0, 1, 2});
  CHECK(fronts[1] == std::vector<std::size_t>{3, 4});
  CHECK(fronts[2] == std::vector<std::size_t>{5});
  auto cd = crowding_distance(pts, fronts[0]);
  CHECK(std::isinf(cd[0]));
  CHECK(std::isinf(cd[2]));
  CHECK(cd[1] == doctest::Approx((4.0 - 1.0) / 3.0 + (5.0 - 1.0) / 4.0));
  CHECK(pareto_front(pts) == std::vector<std::size_t>{0, 1, 2});
}

TEST_CASE("NSGA-II finds the Pareto front of Schaffer's problem") {
  // f1 = x^2, f2 = (x - 2)^2 on [-10, 10]: the Pareto set is x in [0, 2].
  std::vector<ParamSpec> specs(1);
  specs[0].name = "x";
  specs[0].low = -10;
  specs[0].high = 10;
  auto s = make_searcher(ga_spec({{"population", 20}, {"generations", 15}, {"mutation_sigma", 0.02}},
                                 Space::create(specs).value(), {{"f1", false}, {"f2", false}}, 7))
               .value();
  std::map<int64_t, double> x_of;
  while (!s->exhausted()) {
    auto sug = s->ask(100).value();
    if (sug.empty()) break;
    for (const auto& x : sug) {
      const double v = x.params["x"].get<double>();
      x_of[x.seq] = v;
      s->tell({x.seq, x.params, Outcome::kCompleted, {v * v, (v - 2) * (v - 2)}, 1});
    }
  }
  CHECK(s->exhausted());
  // The final survivors all lie on (or next to) the Pareto set, spread over it.
  auto st = s->state();
  auto survivors = st["islands"][0]["survivors"];
  REQUIRE(survivors.size() == 20);
  double lo = 1e9, hi = -1e9;
  for (const auto& seq : survivors) {
    const double v = x_of.at(seq.get<int64_t>());
    CHECK(v >= -0.05);
    CHECK(v <= 2.05);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  CHECK(lo < 0.1);
  CHECK(hi > 1.9);
  // The recorded front is the non-dominated set of everything observed (checked by brute force).
  std::vector<double> front_x;
  for (const auto& f : st["pareto_front"]) front_x.push_back(f["params"]["x"].get<double>());
  int expected = 0;
  for (const auto& [seq, v] : x_of) {
    bool dominated = false;
    for (const auto& [seq2, w] : x_of)
      dominated = dominated || (w * w <= v * v && (w - 2) * (w - 2) <= (v - 2) * (v - 2) &&
                                (w * w < v * v || (w - 2) * (w - 2) < (v - 2) * (v - 2)));
    if (!dominated) {
      ++expected;
      CHECK(std::find(front_x.begin(), front_x.end(), v) != front_x.end());
    }
  }
  CHECK(front_x.size() == static_cast<std::size_t>(expected));
  CHECK(expected >= 20);
}

TEST_CASE("aging evolution: the parent is the best of a sample of the youngest members") {
  SearchSpec spec;
  spec.algorithm = "evolution";
  spec.settings = {{"population", 5}, {"sample_size", 5}};
  spec.space = box(2, -1, 1);
  spec.objectives = {{"f", false}};
  spec.seed = 3;
  auto s = make_searcher(spec).value();
  std::map<int64_t, double> value;
  auto init = s->ask(5).value();
  for (const auto& x : init) {
    CHECK(x.meta["source"] == "initial");
    value[x.seq] = sphere(x.params);
    s->tell({x.seq, x.params, Outcome::kCompleted, {value[x.seq]}, 1});
  }
  for (int i = 0; i < 30; ++i) {
    auto x = s->ask(1).value().at(0);
    // With S = P the parent is the best of the 5 youngest finished.
    std::vector<std::pair<int64_t, double>> all(value.begin(), value.end());
    std::vector<std::pair<int64_t, double>> last5(all.end() - 5, all.end());
    auto best = *std::min_element(last5.begin(), last5.end(), [](auto a, auto b) { return a.second < b.second; });
    CHECK(x.meta["parents"] == nlohmann::json::array({best.first}));  // lineage: the scheduler links "parents"
    auto pop = s->state()["population"];
    REQUIRE(pop.size() == 5);
    CHECK(pop[0] == last5[0].first);
    value[x.seq] = sphere(x.params);
    s->tell({x.seq, x.params, Outcome::kCompleted, {value[x.seq]}, 1});
  }
}

TEST_CASE("mutation: an ordinal parameter moves to a neighbouring level, an unordered choice anywhere else") {
  const ParamSpec ord = testing::choice("width", {16, 32, 64, 128, 256, 512}, /*ordered=*/true);
  const ParamSpec num = testing::integer("layers", 1, 6);
  const ParamSpec cat = testing::choice("act", {16, 32, 64, 128, 256, 512});
  const Space space = Space::create({ord, num, cat}).value();
  const Encoder enc(space);
  for (double sigma : {0.1, 0.15}) {  // genetic's and evolution's default mutation_sigma
    CAPTURE(sigma);
    Rng rng(7);
    std::map<int64_t, int> moved[3];  // level after - level before, per parameter
    const int n = 2000;
    for (int t = 0; t < n; ++t) {
      std::vector<double> u = enc.encode({{"width", 64}, {"layers", 3}, {"act", 64}});  // level 2 of each
      enc.mutate(u, 1.0, sigma, rng, true);
      const Params p = enc.decode(u);
      moved[0][Space::choice_index(ord, p["width"])]++;
      moved[1][p["layers"].get<int64_t>() - 1]++;
      moved[2][Space::choice_index(cat, p["act"])]++;
    }
    for (int j = 0; j < 2; ++j) {
      CAPTURE(j);
      CHECK(moved[j].count(2) == 0);                       // never the same level
      CHECK(moved[j][1] + moved[j][3] >= 0.85 * n);        // a neighbour most of the time
      CHECK(moved[j][1] >= 0.4 * n);                       // up and down alike
      CHECK(moved[j][3] >= 0.4 * n);
      CHECK(moved[j][5] <= 0.02 * n);                      // a jump of 3 levels is rare
    }
    // Unordered: a different value, each of the other 5 about equally often.
    CHECK(moved[2].count(2) == 0);
    for (int level : {0, 1, 3, 4, 5}) CHECK(moved[2][level] >= 0.15 * n);
  }
}
