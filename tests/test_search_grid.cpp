// Grid search: complete coverage (conditions included), size errors, resolution errors.
#include <doctest/doctest.h>

#include <set>

#include "search/grid_search.h"
#include "search/searcher.h"

using namespace hpctune;
using namespace hpctune::search;
using nlohmann::json;

namespace {

Space grid_space(int64_t lr_resolution) {
  std::vector<ParamSpec> s(5);
  s[0].name = "lr";
  s[0].low = 1e-4;
  s[0].high = 1e-1;
  s[0].log = true;
  s[0].resolution = lr_resolution;
  s[1].name = "opt";
  s[1].type = ParamType::kChoice;
  s[1].choices = {"sgd", "adam"};
  s[2].name = "momentum";
  s[2].low = 0.0;
  s[2].high = 0.9;
  s[2].resolution = 4;
  s[2].when = Condition{"opt", {"sgd"}};
  s[3].name = "layers";
  s[3].type = ParamType::kInt;
  s[3].low = 1;
  s[3].high = 7;
  s[3].step = 2;  // 1, 3, 5, 7
  s[4].name = "act";
  s[4].type = ParamType::kFixed;
  s[4].value = "relu";
  auto space = Space::create(s);
  REQUIRE(space.ok());
  return *space;
}

SearchSpec spec_for(Space space, int64_t max_trials) {
  SearchSpec spec;
  spec.algorithm = "grid";
  spec.space = std::move(space);
  spec.objectives = {{"acc", true}};
  spec.max_trials = max_trials;
  return spec;
}

}  // namespace

TEST_CASE("grid values per parameter type") {
  ParamSpec lr;
  lr.name = "lr";
  lr.low = 1e-4;
  lr.high = 1e-1;
  lr.log = true;
  lr.resolution = 4;
  auto v = grid_values(lr);
  REQUIRE(v.ok());
  REQUIRE(v->size() == 4);
  CHECK((*v)[0].get<double>() == 1e-4);
  CHECK((*v)[1].get<double>() == doctest::Approx(1e-3));
  CHECK((*v)[2].get<double>() == doctest::Approx(1e-2));
  CHECK((*v)[3].get<double>() == 1e-1);

  ParamSpec units;
  units.name = "units";
  units.type = ParamType::kInt;
  units.low = 16;
  units.high = 256;
  units.step = 16;
  CHECK(grid_values(units)->size() == 16);
  units.log = true;
  units.resolution = 5;  // 16, 32, 64, 128, 256
  auto u = grid_values(units);
  REQUIRE(u.ok());
  CHECK(*u == std::vector<json>{16, 32, 64, 128, 256});

  ParamSpec x;
  x.name = "x";
  x.low = 0;
  x.high = 1;
  auto e = grid_values(x);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code() == Errc::kConfig);
  CHECK(e.error().message().rfind("x: ", 0) == 0);
}

TEST_CASE("the grid covers every valid configuration exactly once") {
  // lr 3 x layers 4 x (adam 1 + sgd 4 momenta) = 60.
  auto space = grid_space(3);
  CHECK(grid_size(space).value() == 60);
  auto s = make_searcher(spec_for(space, 60));
  REQUIRE(s.ok());
  std::set<std::string> seen;
  std::vector<Suggestion> all;
  while (!(*s)->exhausted()) {
    auto batch = (*s)->ask(7).value();
    REQUIRE(!batch.empty());
    for (const auto& x : batch) {
      CHECK(space.contains(x.params).ok());
      seen.insert(x.params.dump());
      all.push_back(x);
    }
  }
  CHECK(all.size() == 60);
  CHECK(seen.size() == 60);
  CHECK((*s)->ask(5).value().empty());
  // Independent enumeration of the expected set.
  std::set<std::string> expected;
  for (double lr : {1e-4, 1e-1}) (void)lr;
  auto lrs = grid_values(*space.find("lr")).value();
  for (const auto& lr : lrs)
    for (int layers : {1, 3, 5, 7}) {
      expected.insert(json({{"lr", lr}, {"opt", "adam"}, {"layers", layers}, {"act", "relu"}}).dump());
      for (double m : {0.0, 0.3, 0.6, 0.9})
        expected.insert(json({{"lr", lr}, {"opt", "sgd"}, {"momentum", m}, {"layers", layers}, {"act", "relu"}}).dump());
    }
  // Momentum grid values are computed, so compare through the parameter values' grid.
  std::set<std::string> expected_exact;
  auto moms = grid_values(*space.find("momentum")).value();
  for (const auto& lr : lrs)
    for (int layers : {1, 3, 5, 7}) {
      expected_exact.insert(json({{"lr", lr}, {"opt", "adam"}, {"layers", layers}, {"act", "relu"}}).dump());
      for (const auto& m : moms)
        expected_exact.insert(json({{"lr", lr}, {"opt", "sgd"}, {"momentum", m}, {"layers", layers}, {"act", "relu"}}).dump());
    }
  CHECK(seen == expected_exact);
  CHECK(moms[1].get<double>() == doctest::Approx(0.3));
}

TEST_CASE("a grid larger than the budget is a config error stating its size") {
  auto s = make_searcher(spec_for(grid_space(3), 59));
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kConfig);
  CHECK(s.error().message().find("60 points") != std::string::npos);
  CHECK(s.error().message().find("59") != std::string::npos);
  // A float without a resolution.
  auto s2 = make_searcher(spec_for(grid_space(0), 1000));
  REQUIRE_FALSE(s2.ok());
  CHECK(s2.error().code() == Errc::kConfig);
  CHECK(s2.error().message().rfind("lr: ", 0) == 0);
}

TEST_CASE("huge grids are sized without being enumerated") {
  std::vector<ParamSpec> specs;
  for (int i = 0; i < 30; ++i) {
    ParamSpec p;
    p.name = "p";
    p.name += std::to_string(i);
    p.type = ParamType::kChoice;
    p.choices = {1, 2, 3, 4};
    specs.push_back(p);
  }
  auto space = Space::create(specs).value();
  CHECK(grid_size(space).value() == (int64_t{1} << 60));
  auto s = make_searcher(spec_for(space, 1000));
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message().find(std::to_string(int64_t{1} << 60)) != std::string::npos);
}

TEST_CASE("a parameter with more grid values than the limit is refused before they are listed") {
  // issue 9, item 15: int 0..9e15 and a float resolution of 9.2e18 were enumerated (bad_alloc).
  ParamSpec wide;
  wide.name = "n";
  wide.type = ParamType::kInt;
  wide.low = 0;
  wide.high = 9e15;
  ParamSpec fine;
  fine.name = "x";
  fine.low = 0;
  fine.high = 1;
  fine.resolution = 9'200'000'000'000'000'000;
  CHECK(grid_value_count(wide) == 9'000'000'000'000'001);
  CHECK(grid_value_count(fine) == 9'200'000'000'000'000'000);
  for (const auto& p : {wide, fine}) {
    auto space = Space::create({p}).value();
    auto size = grid_size(space, 1000);
    REQUIRE_FALSE(size.ok());
    CHECK(size.error().code() == Errc::kConfig);
    CHECK(size.error().message().rfind(p.name + ": " + std::to_string(grid_value_count(p)) + " grid values", 0) == 0);
    auto s = make_searcher(spec_for(space, 1000));
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message().find("more than the 1000 points the grid may have") != std::string::npos);
    // Without max_trials, kMaxGridPoints bounds it.
    CHECK_FALSE(make_searcher(spec_for(space, 0)).ok());
  }
}

TEST_CASE("shuffled grid: same coverage, seeded order; restore continues") {
  auto spec = spec_for(grid_space(3), 100);
  spec.settings = {{"shuffle", true}};
  spec.seed = 4;
  auto a = make_searcher(spec).value();
  auto first = a->ask(60).value();
  std::set<std::string> seen;
  for (const auto& x : first) seen.insert(x.params.dump());
  CHECK(seen.size() == 60);
  auto b = make_searcher(spec).value();
  auto part = b->ask(10).value();
  std::vector<Record> history;
  for (const auto& x : part) history.push_back({x, std::nullopt});
  auto c = make_searcher(spec).value();
  c->restore(history);
  auto rest = c->ask(50).value();
  REQUIRE(rest.size() == 50);
  for (std::size_t i = 0; i < rest.size(); ++i) CHECK(rest[i].params == first[10 + i].params);
  CHECK(c->exhausted());
}
