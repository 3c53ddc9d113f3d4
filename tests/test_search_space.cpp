// Search space: validation errors, ordering, membership, transforms, sampling and repair.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>

#include "common/rng.h"
#include "search/grid_search.h"
#include "search/importance.h"
#include "search/space.h"
#include "param_specs.h"

using namespace hpctune;
using namespace hpctune::search;
using namespace hpctune::testing;
using nlohmann::json;

namespace {

Space conditional_space() {
  auto s = Space::create({
      when(flt("momentum", 0.0, 0.99), "optimizer", {"sgd"}),
      flt("lr", 1e-5, 1e-1, true),
      choice("optimizer", {"sgd", "adam"}),
      when(integer("nesterov_warmup", 0, 10, 2), "momentum_kind", {"nesterov"}),
      when(choice("momentum_kind", {"classic", "nesterov"}), "optimizer", {"sgd"}),
      integer("batch", 16, 512, 1, true),
      [] {
        ParamSpec p;
        p.name = "epochs";
        p.type = ParamType::kFixed;
        p.value = 3;
        return p;
      }(),
  });
  REQUIRE(s.ok());
  return *s;
}

Error create_error(std::vector<ParamSpec> specs) {
  auto s = Space::create(std::move(specs));
  REQUIRE_FALSE(s.ok());
  return s.error();
}

}  // namespace

TEST_CASE("bad spaces are config errors whose message starts with the parameter") {
  auto e = create_error({flt("lr", 0.5, 0.1)});
  CHECK(e.code() == Errc::kConfig);
  CHECK(e.message() == "lr: low (0.5) must be below high (0.1)");

  e = create_error({flt("lr", 0.1, 0.1)});
  CHECK(e.code() == Errc::kConfig);

  e = create_error({flt("lr", 0.0, 1.0, true)});
  CHECK(e.code() == Errc::kConfig);
  CHECK(e.message().rfind("lr: ", 0) == 0);
  CHECK(e.message().find("log") != std::string::npos);

  e = create_error({flt("w", -1.0, 1.0, true)});
  CHECK(e.code() == Errc::kConfig);

  e = create_error({choice("act", {})});
  CHECK(e.code() == Errc::kConfig);
  CHECK(e.message().rfind("act: ", 0) == 0);

  e = create_error({flt("momentum", 0, 1), when(flt("m2", 0, 1), "optimzer", {"sgd"})});
  CHECK(e.code() == Errc::kConfig);
  CHECK(e.message() == "m2: the condition is on an unknown parameter 'optimzer'");

  e = create_error({when(flt("a", 0, 1), "a", {0.5})});
  CHECK(e.code() == Errc::kConfig);

  e = create_error({when(choice("a", {1, 2}), "b", {1}), when(choice("b", {1, 2}), "a", {1})});
  CHECK(e.code() == Errc::kConfig);
  CHECK(e.message().find("cycle") != std::string::npos);

  e = create_error({flt("x", 0, 1), flt("x", 0, 2)});
  CHECK(e.code() == Errc::kConfig);

  e = create_error({integer("n", 1, 10, 0)});
  CHECK(e.code() == Errc::kConfig);

  e = create_error({integer("n", 1.5, 10)});
  CHECK(e.code() == Errc::kConfig);

  e = create_error({choice("opt", {"sgd", "adam"}), when(flt("m", 0, 1), "opt", {"sgdd"})});
  CHECK(e.code() == Errc::kConfig);
  CHECK(e.message().rfind("m: ", 0) == 0);

  e = create_error({choice("opt", {"sgd", "sgd"})});
  CHECK(e.code() == Errc::kConfig);
}

TEST_CASE("parameters are ordered parents first, declaration order otherwise") {
  Space s = conditional_space();
  std::vector<std::string> names;
  for (const auto& p : s.params()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"lr", "optimizer", "momentum", "momentum_kind", "nesterov_warmup", "batch",
                                          "epochs"});
  CHECK(s.index_of("momentum_kind") == 3);
  CHECK(s.index_of("nope") == -1);
}

TEST_CASE("contains accepts exactly the active parameters inside their ranges") {
  Space s = conditional_space();
  json ok = {{"lr", 0.01}, {"optimizer", "adam"}, {"batch", 64}, {"epochs", 3}};
  CHECK(s.contains(ok).ok());
  json sgd = {{"lr", 0.01}, {"optimizer", "sgd"}, {"momentum", 0.9}, {"momentum_kind", "nesterov"},
              {"nesterov_warmup", 4}, {"batch", 64}, {"epochs", 3}};
  CHECK(s.contains(sgd).ok());

  auto bad = [&](json p, const std::string& name) {
    Status st = s.contains(p);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == Errc::kInvalidArgument);
    CHECK(st.error().message().rfind(name + ":", 0) == 0);
  };
  json p = ok;
  p["momentum"] = 0.5;  // inactive under adam
  bad(p, "momentum");
  p = sgd;
  p.erase("momentum");
  bad(p, "momentum");
  p = sgd;
  p["nesterov_warmup"] = 3;  // off the step of 2
  bad(p, "nesterov_warmup");
  p = ok;
  p["lr"] = 0.5;
  bad(p, "lr");
  p = ok;
  p["optimizer"] = "rmsprop";
  bad(p, "optimizer");
  p = ok;
  p["epochs"] = 4;
  bad(p, "epochs");
  p = ok;
  p["extra"] = 1;
  bad(p, "extra");
  p = ok;
  p["batch"] = 64.5;
  bad(p, "batch");
}

TEST_CASE("unit transforms round-trip and stay inside the bounds") {
  auto lr = flt("lr", 1e-4, 1e-1, true);
  CHECK(Space::to_unit(lr, 1e-4) == doctest::Approx(0.0));
  CHECK(Space::to_unit(lr, 1e-1) == doctest::Approx(1.0));
  CHECK(Space::to_unit(lr, std::sqrt(1e-4 * 1e-1)) == doctest::Approx(0.5));
  CHECK(Space::from_unit(lr, 0.5).get<double>() == doctest::Approx(std::sqrt(1e-5)));
  CHECK(Space::from_unit(lr, 1.0).get<double>() <= 1e-1);
  CHECK(Space::from_unit(lr, 2.0).get<double>() <= 1e-1);  // clamped

  auto n = integer("n", 1, 10, 4);  // 1, 5, 9
  CHECK(Space::int_levels(n) == 3);
  for (int v : {1, 5, 9}) CHECK(Space::from_unit(n, Space::to_unit(n, v)).get<int64_t>() == v);
  CHECK(Space::from_unit(n, 0.0).get<int64_t>() == 1);
  CHECK(Space::from_unit(n, 0.999).get<int64_t>() == 9);

  auto ln = integer("units", 16, 1024, 16, true);
  for (int64_t v = 16; v <= 1024; v += 16) CHECK(Space::from_unit(ln, Space::to_unit(ln, v)).get<int64_t>() == v);
  CHECK(Space::from_unit(ln, 1.0).get<int64_t>() == 1024);
  CHECK(Space::from_unit(ln, 0.0).get<int64_t>() == 16);

  auto c = choice("act", {"relu", "tanh", "gelu"});
  CHECK(Space::to_unit(c, "tanh") == doctest::Approx(0.5));
  for (const auto& v : c.choices) CHECK(Space::from_unit(c, Space::to_unit(c, v)) == v);
}

TEST_CASE("sampling respects conditions, log scales and int steps") {
  Space s = conditional_space();
  Rng rng(7);
  int sgd = 0, below_geo_mean = 0;
  std::map<int64_t, int> warmups;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    Params p = s.sample(rng);
    REQUIRE(s.contains(p).ok());
    if (p["optimizer"] == "sgd") ++sgd;
    if (p["lr"].get<double>() < std::sqrt(1e-5 * 1e-1)) ++below_geo_mean;
    if (p.contains("nesterov_warmup")) ++warmups[p["nesterov_warmup"].get<int64_t>()];
  }
  CHECK(sgd == doctest::Approx(n / 2).epsilon(0.08));
  CHECK(below_geo_mean == doctest::Approx(n / 2).epsilon(0.08));  // log-uniform: half below the geometric mean
  CHECK(warmups.size() == 6);                                     // 0, 2, ..., 10
  for (const auto& [v, count] : warmups) CHECK(v % 2 == 0);
}

TEST_CASE("repair drops inactive parameters and fills missing ones") {
  Space s = conditional_space();
  Rng rng(3);
  Params p = {{"lr", 0.01}, {"optimizer", "adam"}, {"momentum", 0.3}, {"batch", 7}, {"epochs", 3}};
  s.repair(p, rng);
  CHECK(s.contains(p).ok());
  CHECK_FALSE(p.contains("momentum"));
  CHECK(p["lr"] == 0.01);  // valid values are kept
  p["optimizer"] = "sgd";
  s.repair(p, rng);
  CHECK(s.contains(p).ok());
  CHECK(p.contains("momentum"));
  CHECK(p.contains("momentum_kind"));
}

TEST_CASE("cardinality counts the configurations, conditions per branch; point() lists each once") {
  // 4 ints x 3 choices x 2 ordered choices.
  auto plain = Space::create({integer("a", 1, 4), choice("act", {"relu", "tanh", "gelu"}), choice("w", {32, 64})});
  REQUIRE(plain.ok());
  CHECK(plain->cardinality() == uint64_t{24});

  // a: 3; opt=sgd brings mom (3 values) and, for mom 0.9 only, nesterov (2): 1 + 1 + 2 = 4 for sgd,
  // 1 for adam; w: 2. 3 x (4 + 1) x 2 = 30.
  auto cond = Space::create({
      integer("a", 1, 3),
      choice("opt", {"sgd", "adam"}),
      when(choice("mom", {0.0, 0.5, 0.9}), "opt", {"sgd"}),
      when(choice("nesterov", {true, false}), "mom", {0.9}),
      choice("w", {32, 64}),
  });
  REQUIRE(cond.ok());
  REQUIRE(cond->cardinality() == uint64_t{30});
  std::set<std::string> keys;
  for (uint64_t k = 0; k < 30; ++k) {
    auto p = cond->point(k);
    REQUIRE(p);
    CHECK_MESSAGE(cond->contains(*p).ok(), p->dump());
    keys.insert(cond->config_key(*p));
  }
  CHECK(keys.size() == 30);
  CHECK_FALSE(cond->point(30));
  CHECK(cond->enumerate(30)->size() == 30);
  CHECK_FALSE(cond->enumerate(29));
  // The grid search counts the same space the same way.
  CHECK(grid_size(*cond).value() == 30);

  // A float anywhere, even in one branch, makes the space infinite; so does an overflow.
  CHECK_FALSE(conditional_space().cardinality());
  auto huge = Space::create({integer("a", 0, 4e9), integer("b", 0, 4e9), integer("c", 0, 4e9)});
  REQUIRE(huge.ok());
  CHECK_FALSE(huge->cardinality());
  auto big = Space::create({integer("a", 0, 4e9 - 1), integer("b", 0, 1)});
  REQUIRE(big.ok());
  CHECK(big->cardinality() == uint64_t{8'000'000'000});
  CHECK(big->point(7'999'999'999) == json{{"a", 3'999'999'999LL}, {"b", 1}});
}

TEST_CASE("config_key: numbers by value, inactive parameters ignored, order irrelevant") {
  auto s = Space::create({integer("a", 1, 4), flt("x", 0, 2), choice("opt", {"sgd", "adam"}),
                          when(integer("k", 1, 3), "opt", {"sgd"})});
  REQUIRE(s.ok());
  CHECK(s->config_key(json{{"a", 1}, {"x", 1.0}, {"opt", "adam"}}) ==
        s->config_key(json{{"opt", "adam"}, {"x", 1}, {"a", 1.0}}));
  CHECK(s->config_key(json{{"a", 1}, {"x", 1.0}, {"opt", "adam"}, {"k", 2}}) ==
        s->config_key(json{{"a", 1}, {"x", 1.0}, {"opt", "adam"}}));
  CHECK(s->config_key(json{{"a", 1}, {"x", 1.0}, {"opt", "sgd"}, {"k", 2}}) !=
        s->config_key(json{{"a", 1}, {"x", 1.0}, {"opt", "sgd"}, {"k", 3}}));
  CHECK(s->config_key(json{{"a", 1}, {"x", 0.5}, {"opt", "adam"}}) !=
        s->config_key(json{{"a", 1}, {"x", 0.50000001}, {"opt", "adam"}}));
}

// ---------------------------------------------------------------------------------------------
// search/importance.h: PED-ANOVA

namespace {

// `n` trials of three numeric parameters and a categorical one; the loss depends on x0 strongly,
// on the category a little, and not at all on x1 and x2.
search::ImportanceInput importance_input(int n, uint64_t seed) {
  search::ImportanceInput in;
  in.params = {{"x0", false, 0}, {"x1", false, 0}, {"x2", false, 0}, {"cat", true, 3}};
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    const double x0 = rng.uniform(), x1 = rng.uniform(), x2 = rng.uniform();
    const int64_t cat = static_cast<int64_t>(rng.uniform() * 3) % 3;
    in.values.push_back({x0, x1, x2, static_cast<double>(cat)});
    in.losses.push_back(std::abs(x0 - 0.7) + 0.05 * static_cast<double>(cat));
  }
  return in;
}

}  // namespace

TEST_CASE("PED-ANOVA: the parameter that drives the objective gets the largest importance, an irrelevant one near 0") {
  const auto r = search::ped_anova(importance_input(400, 1));
  CHECK(r.n_trials == 400);
  CHECK(r.method.find("PED-ANOVA") != std::string::npos);
  CHECK(r.method.find("0.1") != std::string::npos);
  CHECK(r.note.empty());
  REQUIRE(r.importances.size() == 4);
  double sum = 0;
  std::map<std::string, double> by;
  for (const auto& [name, v] : r.importances) {
    sum += v;
    by[name] = v;
  }
  CHECK(sum == doctest::Approx(1.0));
  CHECK(r.importances[0].first == "x0");
  CHECK(by["x0"] > 0.8);
  CHECK(by["x1"] < 0.05);
  CHECK(by["x2"] < 0.05);
  CHECK(by["cat"] > by["x1"]);  // a little
  for (size_t i = 1; i < r.importances.size(); ++i) CHECK(r.importances[i - 1].second >= r.importances[i].second);
  // Deterministic.
  CHECK(search::ped_anova(importance_input(400, 1)).importances == r.importances);
}

TEST_CASE("PED-ANOVA: too few trials give zeros and a note; inactive values and bad losses are skipped") {
  auto few = search::ped_anova(importance_input(9, 2));
  CHECK(few.n_trials == 9);
  CHECK_FALSE(few.note.empty());
  for (const auto& [name, v] : few.importances) CHECK(v == 0);

  auto in = importance_input(200, 3);
  in.losses[0] = std::nan("");
  in.losses[1] = INFINITY;
  for (size_t i = 0; i < in.values.size(); i += 2) in.values[i][1].reset();  // x1 inactive in half
  const auto r = search::ped_anova(in);
  CHECK(r.n_trials == 198);
  CHECK(r.importances[0].first == "x0");

  // Identical distributions: no divergence.
  CHECK(search::pearson_divergence_numeric({0.1, 0.5, 0.9, 0.3}, {0.1, 0.5, 0.9, 0.3}) == doctest::Approx(0.0).epsilon(1e-9));
  CHECK(search::pearson_divergence_categorical({0, 1, 2, 0, 1, 2}, {0, 1, 2}, 3) == doctest::Approx(0.0).epsilon(1e-12));
  CHECK(search::pearson_divergence_categorical({0, 1, 2, 0, 1, 2}, {0, 0, 0}, 3) > 0.1);
  CHECK(search::pearson_divergence_numeric({0.05, 0.95}, {0.05, 0.05}) > search::pearson_divergence_numeric({0.05, 0.95}, {0.05, 0.95}));
}
